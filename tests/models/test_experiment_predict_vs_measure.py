"""experiments/predict_vs_measure.py on a tiny pair: the certified prediction at a context agrees with the
first blocks real decoding draws from it, a broken drafter is caught by the same comparison, the measured
interval covers as it claims, and the run resumes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.scripts import load_script

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: First blocks per decoder. The control below (chain:2, the draft's argmax handed the full q) has E[tau + 1] = 2.349
#: at this context (1 + a1 + a1 a2 with a_i = min(1, p/q) at each argmax, from the pair's own laws) against the
#: prediction's 1.910; measured intervals at confidence 1 - 1e-6 of 2,000 samples of 300 drawn from that tau law all
#: excluded the prediction (119 of 2,000 did not at 100 runs). The honest side's false-failure rate is 1e-6 at any size.
RUNS, CONFIDENCE = 400, 1 - 1e-6


def _load_script():
    return load_script("experiments/predict_vs_measure.py")


def test_the_measured_interval_covers_the_mean_at_least_as_often_as_it_claims():
    """Replications from a known tau law (depth 3): the conservative 95% interval must hold the true mean in
    at least 95% of them. With coverage 0.95 the hits of 2000 replications fall below the binomial's 1e-6
    quantile with probability at most 1e-6, so that quantile is the bound (the construction's true coverage
    is higher still)."""
    from scipy import stats

    script = _load_script()
    law = np.array([0.5, 0.2, 0.2, 0.1])
    mean = 1 + float(np.arange(4) @ law)
    rng = np.random.default_rng(0)
    replications = 2000
    hits = sum(low <= mean <= high for low, high in
               (script.measured_interval(rng.choice(4, size=120, p=law), 3)[1:] for _ in range(replications)))
    assert hits >= stats.binom.ppf(1e-6, replications, 0.95)
    # negative control: the same construction at a 50% level covers far too rarely and is caught by the bound
    rng = np.random.default_rng(0)
    narrow = sum(low <= mean <= high for low, high in
                 (script.measured_interval(rng.choice(4, size=120, p=law), 3, 0.5)[1:] for _ in range(replications)))
    assert narrow < stats.binom.ppf(1e-6, replications, 0.95)
    # every run alike: a Student-t interval would be a point; this one is not
    _, low, high = script.measured_interval(np.zeros(300, dtype=int), 3)
    assert low == 1.0 and high > 1.0


@pytest.mark.slow  # a few seconds: the experiment end to end
def test_prediction_and_measurement_agree_and_a_broken_drafter_is_caught(pair_seed2):
    """The comparison at a false-failure rate of 1e-6 (the measured interval at confidence 1 - 1e-6), over RUNS
    first blocks: the honest decoder agrees with the certified interval, the broken one does not."""
    from tests.support.tiny_models import forwards_memoised, laws_memoised
    from verispec import certify
    from verispec.models import Sampling, SpeculativeDecoder
    from verispec.models.problem import ModelProblem

    script = _load_script()
    pair, sampling, context, spec = pair_seed2, Sampling(1.0), [4, 1, 7], "chain:2"
    predicted = certify(ModelProblem(pair, context, sampling, horizon=2), spec, "specinfer", 1e-4)
    honest = SpeculativeDecoder(pair, spec, "specinfer", sampling, 0, stop_at_eos=False)
    # each seed's block as without the memos (tests/models/test_model_problem.py holds first_block_taus so)
    with forwards_memoised(pair.target, pair.draft), laws_memoised(honest.verifier):
        _, low, high = script.measured_interval(honest.first_block_taus(context, range(RUNS)), 2, CONFIDENCE)
    assert low <= predicted.upper and high >= predicted.lower
    # negative control: the drafter drafts the argmax of q (a greedy assistant) while the verifier is handed q
    broken = SpeculativeDecoder(pair, spec, "specinfer", sampling, 0, stop_at_eos=False,
                                law_for_drafting=Sampling(1.0, top_k=1).probabilities)
    with forwards_memoised(pair.target, pair.draft), laws_memoised(broken.verifier):
        _, low, high = script.measured_interval(broken.first_block_taus(context, range(RUNS)), 2, CONFIDENCE)
    assert not (low <= predicted.upper and high >= predicted.lower), (low, high, predicted.lower, predicted.upper)


def test_the_experiment_runs_and_resumes(tmp_path, capsys):
    script = _load_script()
    output = tmp_path / "rows.json"
    arguments = ["--tiny", "--contexts", "1", "--cut", "2", "--runs", "60", "--cases",
                 "specinfer=iid:2,1;spectr=chain:2", "--epsilon", "1e-3", "--derived-vocab", "4", "--output",
                 str(output)]
    assert script.main(arguments) == 0
    rows = json.loads(output.read_text())["rows"]
    assert len(rows) == 2
    for row in rows:
        value = row["value"] if "value" in row else row
        assert value["width"] <= 1e-3 and value["runs"] == 60 and "derived" in value
    assert "| tiny/0 | specinfer | iid:2,1 |" in output.with_suffix(".md").read_text()
    before = output.read_text()
    assert script.main(arguments) == 0 and output.read_text() == before  # resumed: nothing recomputed
    assert script.main(["--tiny", "--runs", "1"]) == 2


def test_derived_vocab_keeps_the_prefix_count_within_the_limit():
    from experiments.predict_vs_measure import derived_vocab

    # 1 + V + .. + V^L: depth 8 gives 511 prefixes at V = 2 and 9841 at V = 3; depth 3 gives 585 at V = 8
    assert derived_vocab(8, 8, 2000) == 2 and derived_vocab(8, 8, 9841) == 3
    assert derived_vocab(8, 3, 585) == 8 and derived_vocab(8, 3, 584) == 7
    assert derived_vocab(8, 8, 510) == 0 and derived_vocab(0, 3, 10**6) == 0
