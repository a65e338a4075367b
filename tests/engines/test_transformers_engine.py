"""``verispec check-engine transformers``: the installed release's assisted generation checked unmodified, a planted
raw-logits candidate generator caught, DIVERSE's ensemble read at its closed-form TV, refusals on one line, and the
drafting probe's arithmetic.

Every number asserted is derived here from the step's law, by hand:
- the ensemble (weight w) verifies against v = w p + (1 - w) q: a draft x ~ q is kept with min(1, v(x)/q(x)), so
  the first token's law is min(q, v) + (1 - sum min(q, v)) (p - q)+ / |(p - q)+| (the residual of
  ``_speculative_sampling``, which does not change with w), and every later token follows p;
- the planted generator drafts from q after top-k (q_k) but hands the raw q: a draft x is kept with
  min(1, p_k(x)/q(x)), the residual is (p_k - q)+ normalised, and every later token follows p_k.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verispec.engines import EngineError
from verispec.engines import transformers as transformers_adapter

ROOT = Path(__file__).resolve().parents[2]


def _verispec(*args, timeout=900):
    done = subprocess.run([sys.executable, "-m", "verispec", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return done.returncode, done.stdout, done.stderr


def _installed() -> str | None:
    try:
        return transformers_adapter.check_release()
    except EngineError:
        return None


needs_transformers = pytest.mark.skipif(_installed() is None,
                                        reason="no transformers release of the adapter's range is installed")


def _first_token_law(kept, residual):
    """The first token's law when a draft x ~ the drafting law is kept with ``kept`` [V] (the mass kept per token)
    and otherwise the token is drawn from ``residual`` [V] (normalised here)."""
    return kept + (1 - kept.sum()) * residual / residual.sum()


def test_releases_outside_the_range_are_refused_with_the_range():
    for release in ("4.45.2", "5.25.0", "6.0.0"):
        with pytest.raises(EngineError, match=r"transformers .* is not a release .* knows 4\.46\.0 to 5\.24\.0"):
            transformers_adapter.check_release(release)
    assert transformers_adapter.check_release("5.25.0", any_release=True) == "5.25.0"
    for release in ("4.46.1", "4.57.6", "5.24.0"):
        assert transformers_adapter.check_release(release) == release


@needs_transformers
def test_a_source_is_refused_on_one_line(tmp_path):
    copy = tmp_path / "utils.py"
    copy.write_text("# a mutant\n")
    status, out, err = _verispec("check-engine", "transformers", "--source", str(copy))
    assert status == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("verispec: error: transformers's adapter takes no --source")


@needs_transformers
def test_shipped_assisted_generation_is_lossless_and_the_ensemble_reads_its_closed_form():
    p, q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
    from transformers import GenerationConfig

    ensemble = "assistant_ensemble_weight" in GenerationConfig().to_dict()  # DIVERSE: 5.x releases only
    checks = "generate-sampled,generate-ensemble" if ensemble else "generate-sampled"
    status, out, err = _verispec("check-engine", "transformers", "--check", checks, "--target", "0.6,0.4",
                                 "--draft", "0.3,0.7", "--json")
    assert status == 0, err  # the ensemble's loss is documented: as expected
    rows = {row["check"]: row for row in json.loads(out)["checks"]}
    assert rows["generate-sampled"]["verdict"] == "LOSSLESS" and rows["generate-sampled"]["mode"] == "exact"
    assert rows["generate-sampled"]["tv_distance"] < 1e-6  # float32 rounding (the adapter's threshold)
    if not ensemble:
        return
    weight = 0.5  # the adapter's ENSEMBLE_WEIGHT, stated in the check's description
    assert "assistant_ensemble_weight 0.5" in rows["generate-ensemble"]["description"]
    v = weight * p + (1 - weight) * q
    law = _first_token_law(np.minimum(q, v), np.maximum(p - q, 0))
    row = rows["generate-ensemble"]
    assert row["verdict"] == "LOSSY" and row["as_expected"]
    assert abs(row["tv_distance"] - 0.5 * np.abs(law - p).sum()) < 1e-6


@needs_transformers
def test_a_planted_raw_logits_candidate_generator_is_caught():
    """transformers #47932's class on the shipped generate: drafts from top-2 of q, q handed raw."""
    p, q = np.array([0.2, 0.3, 0.5]), np.array([0.5, 0.3, 0.2])

    def top2(law):
        kept = np.where(law >= np.sort(law)[-2], law, 0.0)
        return kept / kept.sum()

    p_k, q_k = top2(p), top2(q)
    law = _first_token_law(q_k * np.minimum(1, p_k / q), np.maximum(p_k - q, 0))
    status, out, err = _verispec("check-external", "tests/engines/transformers_planted.py:raw_candidate_logits",
                                 "--layout", "step", "--tree", "chain:1", "--rng", "capture", "--sampling",
                                 "temperature=1,top_k=2", "--target", "0.2,0.3,0.5", "--draft", "0.5,0.3,0.2",
                                 "--mode", "exact", "--json")
    assert status == 1, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["verdict"] == "lossy" and abs(report["tv_distance"] - 0.5 * np.abs(law - p_k).sum()) < 1e-6


def test_the_drafting_probe_reads_the_temperature_applied_once_or_twice():
    """The probe's arithmetic on hand-made handed laws: q^(1/T) is the law asked for, q^(1/T^2) the temperature
    applied twice; a broken twin that reads the power without the temperature would call both 'other'."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import engine_releases

    q, t = engine_releases.DRAFT_PROBE["draft"], engine_releases.DRAFT_PROBE["temperature"]

    def powered(power):
        law = np.array(q) ** power
        return (law / law.sum()).tolist()

    def classify(handed):
        power = math.log(handed[1] / handed[0]) / math.log(q[1] / q[0])
        return engine_releases.drafting_applied(power * t, t)

    assert classify(powered(1 / t)) == "once"
    assert classify(powered(1 / t ** 2)) == "twice"
    assert classify(powered(1.0)) == "other"  # the raw q: no temperature at all


@needs_transformers
def test_a_check_out_of_time_is_an_inconclusive_row_and_the_others_still_run():
    """A check that runs past --time-budget gets its INCONCLUSIVE row (exit 3) in the JSON, and the checks after
    it still run (the second may finish in its own budget)."""
    status, out, err = _verispec("check-engine", "transformers", "--check", "generate-sampled,speculative-sampling",
                                 "--time-budget", "0.2", "--json")
    assert status == 3, err
    rows = json.loads(out)["checks"]
    assert [row["check"] for row in rows] == ["generate-sampled", "speculative-sampling"]
    assert rows[0]["verdict"] == "INCONCLUSIVE" and "time budget" in rows[0]["note"]
