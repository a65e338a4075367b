"""The installed vLLM's V2 runner, its own kernels, with two bugs planted as module attributes of the installed
modules in a child process (the files are not changed), each then read LOSSY at a TV derived outside the checker.
One child plants and checks both in turn, each restored before the next, so vLLM and its kernels' warm-up are
imported once (some 10 s of CPU a child).

A shared key (vLLM #47386), from release 0.31, whose V2 noise is ``murmur3_uniform32``
(``verispec.engines.vllm_v2._feed_hashed_noise``): the draft's noise put under the resample's key
(``_DRAFT_NOISE_SALT`` 0 and no step mixed into the draft's seed). The resample then races the very noise that chose
the rejected draft, and the exact TV must be the one the zoo's 2,000,000-run simulation of that race gives at this
problem (examples/engine_bugs/vllm_47386.py: 0.0856, standard error about 0.0004), as it is for the simulated kernels
of tests/engines/test_rng_triton_keyed.py. Read wrongly (a key missed, a lane misplaced, the log1p series not read),
the law would differ or the check refuse. The unmodified release's verdict is the release table's
(``python experiments/engine_releases.py``).

Adaptive verification (``enable_adaptive_verification``, release 0.28 on), its own admission function and kernels,
with a confidence that reads the slot's own draft. The runner verifies only the draft slots its budget admits: the
globally best by survival, the running product of per-slot confidences (``_assign_draft_token_budget``). DSpark's
confidence head reads the token *before* a slot, so whether slot i is verified depends on the drafts before it,
never on draft i itself, and a later slot never outranks an earlier one of its request: the law holds
(``v2-adaptive``, chain:2, reads LOSSLESS; the check is too long for the suite, docs/guides/check_engine.md gives its
time). A confidence that reads the slot's own draft breaks that: here, one draft each, a budget of one slot, the
neighbour's survival 0.7 and the checked request's 0.9 for token 0 and 0.3 for token 1, the checked draft is
verified exactly when it is token 0, and the bonus token is drawn from p otherwise. The first token's law is then
q_0 min(1, p_0 / q_0) at 0, the residual's share where the draft was token 0 and rejected, plus (1 - q_0) p; with
p_0 >= q_0 it is q_0 delta_0 + (1 - q_0) p, so the TV is q_0 (1 - p_0), derived by hand here. The second token is
p's whatever came first, so the block's TV is the first token's.

The candidate walk of DFlash2 and LiLiCorr (release 0.28 on), its own two kernels, with the walk storing the scores
of candidate 0's row, not the row it drew from, as the realized scores its cache kernel hands the verifier as q
(the question the issue asks of LiLiCorr: is the q handed to the sampler the law the draft was drawn from?). At
chain:2 the first draft is drawn from the unary law q and verified against it, so the first token is p's. The second
draft d_1 is drawn from r(. | d_0), r(t | a) proportional to q(t) exp(W[a][t]) (W the stand-in coupling), and
verified against h = r(. | c_0), c_0 the first candidate (the token of largest q). Where d_0 = a was accepted
(probability min(q(a), p(a))) the second token's law is L_a(t) = r(t | a) min(1, p(t) / h(t)) + (1 - sum_y r(y | a)
min(1, p(y) / h(y))) (p - h)+(t) / sum (p - h)+, which is p for a = c_0; a rejected first draft, a rejected second one
and the third token leave p's law. So the block's TV is sum_a min(q(a), p(a)) TV(L_a, p), computed here from that
formula alone.
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
#: Which planted bug the installed release can carry: the shared key where its V2 noise is murmur3 (0.31 on), the
#: confidence that reads its own draft where it has adaptive verification (0.28 on).
PLANTED = {"shared_key": "0.31.0", "own_token": "0.28.0", "first_row": "0.28.0"}
PLANTABLE = [name for name, since in PLANTED.items()
             if RELEASE in vllm_adapter.SUPPORTED and version_key(RELEASE) >= version_key(since)]
#: The adaptive check's problem.
P, Q = (0.6, 0.4), (0.3, 0.7)

#: The child: each bug planted in the installed modules, the V2 step checked exactly at its problem, the bug removed.
CHILD = f"""
import json, sys
from verispec.engines import vllm_v2
import triton.language as tl
from verispec.external.check import check_external
from verispec.simulator import ContextFreeProblem


def check(function, target, draft, tree="chain:1"):
    report = check_external(function, "step", tree, problem=ContextFreeProblem(target, draft), mode="exact",
                            rng="capture", sampling="temperature=1", time_budget=900, threshold=1e-6)
    return {{"verdict": report.verdict.value, "tv": report.tv_distance, "mode": report.mode}}


found = {{}}
if "shared_key" in sys.argv[1:]:  # the draft's noise under the resample's key: no salt, no step in its seed
    gumbel = sys.modules[vllm_v2.GUMBEL_MODULE]
    shipped = gumbel._DRAFT_NOISE_SALT, gumbel.spec_step_seed
    gumbel._DRAFT_NOISE_SALT, gumbel.spec_step_seed = tl.constexpr(0), lambda seed, step: seed
    try:
        found["shared_key"] = check(vllm_v2.v2_single, [0.59, 0.4, 0.01], [0.35, 0.01, 0.64])
    finally:
        gumbel._DRAFT_NOISE_SALT, gumbel.spec_step_seed = shipped
if "own_token" in sys.argv[1:]:  # the admission reads each slot's own draft (the planted confidence)
    kernels = vllm_v2._adaptive_kernels
    vllm_v2._adaptive_kernels = lambda *args, own_token: kernels(*args, own_token=True)
    try:
        found["own_token"] = check(vllm_v2.v2_adaptive, {list(P)}, {list(Q)})
    finally:
        vllm_v2._adaptive_kernels = kernels
if "first_row" in sys.argv[1:]:  # the walk stores candidate 0's row as the realized scores, not the row it drew from
    import importlib.util, inspect, pathlib, tempfile
    walk = sys.modules[vllm_v2.CANDIDATE_MODULE]
    source = inspect.getsource(walk)
    drawn_row = "realized_scores_ptr + candidate_base + offsets,\\n            scores,"
    first_row = ("realized_scores_ptr + candidate_base + offsets,\\n            "
                 "tl.load(scores_ptr + flat * top_k * top_k + offsets, mask=mask & valid, other=float('-inf')),")
    assert source.count(drawn_row) == 1
    folder = tempfile.mkdtemp()
    path = pathlib.Path(folder) / "planted_walk.py"
    path.write_text(source.replace(drawn_row, first_row))
    spec = importlib.util.spec_from_file_location("planted_walk", path)
    planted = importlib.util.module_from_spec(spec)
    sys.modules["planted_walk"] = planted
    spec.loader.exec_module(planted)
    shipped = walk._selector_walk_kernel
    walk._selector_walk_kernel = planted._selector_walk_kernel
    try:
        found["first_row"] = check(vllm_v2.v2_lilicorr, {list(P)}, {list(Q)}, "chain:2")
    finally:
        walk._selector_walk_kernel = shipped
print(json.dumps(found))
"""


@pytest.mark.skipif(not PLANTABLE, reason=f"needs an installed vLLM from 0.28 on (here: {RELEASE})")
def test_bugs_planted_in_the_shipped_v2_kernels_are_lossy_at_their_derived_tvs():
    done = subprocess.run([sys.executable, "-c", CHILD, *PLANTABLE], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-800:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(found) == sorted(PLANTABLE), found
    if "shared_key" in found:  # vLLM #47386 at the zoo's simulated TV
        result = found["shared_key"]
        assert result["mode"] == "exact" and result["verdict"] == "lossy", result
        assert abs(result["tv"] - 0.0856) < 0.003, result
    if "own_token" in found:  # a confidence that reads its own draft, at the hand-derived q_0 (1 - p_0)
        result = found["own_token"]
        assert result["mode"] == "exact" and result["verdict"] == "lossy", result
        assert P[0] >= Q[0]
        assert abs(result["tv"] - Q[0] * (1 - P[0])) < 1e-6, result
    if "first_row" in found:  # q read from candidate 0's row, at the TV derived in the module docstring
        result = found["first_row"]
        assert result["mode"] == "exact" and result["verdict"] == "lossy", result
        assert abs(result["tv"] - first_row_tv(P, Q, vllm_adapter.LILICORR_COUPLING)) < 1e-6, result


def first_row_tv(p, q, coupling) -> float:
    """The block TV of the planted first-row walk at chain:2 (module docstring), from its formula alone."""
    import numpy as np

    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    size = len(coupling)
    weights = np.array([[q[t] * np.exp(coupling[a % size][t % size]) for t in range(len(q))] for a in range(len(q))])
    r = weights / weights.sum(axis=1, keepdims=True)  # r[a] = the second draft's law after a
    first = int(np.argmax(q))  # c_0: the first candidate, the token of largest unary logit (no ties here)
    h = r[first]
    accept = np.minimum(1.0, p / h)
    residual = np.maximum(p - h, 0.0)
    total = 0.0
    for a in range(len(q)):
        law = r[a] * accept + (1.0 - (r[a] * accept).sum()) * residual / residual.sum()
        total += min(q[a], p[a]) * 0.5 * np.abs(law - p).sum()
    return float(total)


def test_the_first_row_tv_is_the_hand_computation_and_zero_without_coupling():
    """The formula above at the check's problem: about 0.064 by hand (r(. | 0) = (0.587, 0.413), h = r(. | 1) =
    (0.114, 0.886), L_0 = (0.813, 0.187), times min(q_0, p_0) = 0.3), and 0 where the coupling is flat (every row the
    same: no wrong row to read)."""
    assert abs(first_row_tv(P, Q, vllm_adapter.LILICORR_COUPLING) - 0.3 * 0.2135) < 5e-4
    assert first_row_tv(P, Q, ((0.5, 0.5), (0.5, 0.5))) < 1e-15


def test_the_stand_in_confidences_make_the_draft_length_depend_on_the_draft():
    """The setting the module docstring derives from: token 0's confidence above the neighbour's, token 1's below,
    and in the chain:2 check the second slot dropped exactly when the first draft is token 1."""
    table, neighbour = vllm_adapter.ADAPTIVE_CONFIDENCE, vllm_adapter.NEIGHBOUR_CONFIDENCE  # read without vLLM
    assert table[0] > neighbour > table[1]
    second = {token: table[0] * table[token] for token in range(len(table))}  # prompt of zeros: slot 1 reads 0
    assert [token for token, value in second.items() if value < neighbour * neighbour] == [1]


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
