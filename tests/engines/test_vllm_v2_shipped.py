"""The installed vLLM's V2 runner, its own kernels, with its hashed Gumbel noise fed (release 0.31 on:
``murmur3_uniform32``; ``verispec.engines.vllm_v2._feed_hashed_noise``).

A planted #47386 in the shipped kernels: the draft's noise put under the resample's key (``_DRAFT_NOISE_SALT`` 0
and no step mixed into the draft's seed, both as module attributes of the installed ``gumbel.py`` in a child
process; the files are not changed). The resample then races the very noise that chose the rejected draft, and the
exact TV must be the one the zoo's 2,000,000-run simulation of that race gives at this problem
(examples/engine_bugs/vllm_47386.py: 0.0856, standard error about 0.0004), as it is for the simulated kernels of
tests/engines/test_rng_triton_keyed.py. Read wrongly (a key missed, a lane misplaced, the log1p series not read),
the law would differ or the check refuse. The unmodified release's verdict is the release table's
(``python experiments/engine_releases.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engines import vllm_release
from verispec.engines import version_key
from verispec.engines import vllm as vllm_adapter

ROOT = Path(__file__).resolve().parents[2]


RELEASE = vllm_release()
needs_murmur3 = pytest.mark.skipif(
    RELEASE not in vllm_adapter.SUPPORTED or version_key(RELEASE) < version_key("0.31.0"),
    reason=f"needs an installed vLLM from 0.31 on, whose V2 noise is murmur3 (here: {RELEASE})")

#: The child: plant the shared key in the installed module, then check the V2 step exactly at the check's problem.
CHILD = """
import json, sys
from verispec.engines import vllm_v2
import triton.language as tl
gumbel = sys.modules[vllm_v2.GUMBEL_MODULE]
gumbel._DRAFT_NOISE_SALT = tl.constexpr(0)
gumbel.spec_step_seed = lambda seed, step: seed
from verispec.external.check import check_external
from verispec.simulator import ContextFreeProblem
report = check_external(vllm_v2.v2_single, "step", "chain:1",
                        problem=ContextFreeProblem([0.59, 0.4, 0.01], [0.35, 0.01, 0.64]), mode="exact",
                        rng="capture", sampling="temperature=1", time_budget=900, threshold=1e-6)
print(json.dumps({"verdict": report.verdict.value, "tv": report.tv_distance, "mode": report.mode}))
"""


@needs_murmur3
def test_a_shared_key_planted_in_the_shipped_v2_kernels_is_lossy_at_the_simulated_tv():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-800:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mode"] == "exact" and result["verdict"] == "lossy", result
    assert abs(result["tv"] - 0.0856) < 0.003, result


def test_the_fly_checks_expected_tv_is_verispecs_own_rule_and_the_closed_form():
    """``v2-fly`` (FLy, window 1, threshold 0.3 over the top 3) at its problem: p's top-3 entropy is above the
    threshold, so a natively rejected first draft is kept exactly when the second draft is accepted natively; the law
    then moves by P(reject) P(accept) = (1 - sum min(p, q)) sum min(p, q), derived by hand, which verispec's own
    ``fly`` rule gives and the shipped kernel's exact check reads (docs/guides/check_engine.md)."""
    import numpy as np

    from verispec import analyze
    from verispec.simulator import ContextFreeProblem

    check = next(check for check in vllm_adapter.checks() if check.name == "v2-fly")
    p, q = np.array(check.target), np.array(check.draft)
    assert -(p * np.log(p)).sum() >= vllm_adapter.FLY["fly_entropy_threshold"] and check.expect == "lossy"
    accepted = np.minimum(p, q).sum()
    rule = f"fly(theta={vllm_adapter.FLY['fly_entropy_threshold']},window={vllm_adapter.FLY['fly_window_size']})"
    result = analyze(ContextFreeProblem(list(p), list(q)), check.tree, rule)
    assert abs(result.tv_distance - (1 - accepted) * accepted) < 1e-12
