"""``step-ragged`` with sampled neighbours (``verispec.external.step_neighbours``): every request samples with its own
settings and seed, and the three requests' joint law is checked against the product of their own targets. A batch
whose requests all draw from the first request's seed keeps each request's own law, so with greedy fillers (which
draw nothing) it reads LOSSLESS; with sampled neighbours the requests draw the same numbers and the joint law shows
it. The correct batch is LOSSLESS with sampled neighbours. The joint codes and the product target are checked
against hand-made blocks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import step_rules
from verispec.cli import main
from verispec.errors import VerispecError
from verispec.external.check import check_external
from verispec.external.step_neighbours import JointCodes, joint_target
from verispec.simulator.laws import OutputLaw
from verispec.simulator.problems import ContextFreeProblem, target_law
from verispec.verdict import Verdict

pytest.importorskip("torch")

P, Q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
PROBLEM = ContextFreeProblem(P, Q)


def _check(function, neighbours):
    return check_external(function, "step-ragged", "chain:1", problem=PROBLEM, rng="capture",
                          sampling="temperature=1", mode="exact", neighbours=neighbours, time_budget=300)


def test_joint_codes_number_each_requests_block_and_keep_the_impossible_apart():
    codes = JointCodes(2, (1, 1, 0))  # blocks of 1-2 tokens, 1-2 tokens, 1 token: 6 * 6 * 2 codes
    assert codes.radix == (6, 6, 2) and codes.impossible == 72 and codes.count == 73
    # request 0's block (1,) is its code 1, request 1's (0, 1) is 2 + 1 = 3, request 2's (1,) is 1
    assert codes.code([(1,), (0, 1), (1,)]) == 1 + 6 * (3 + 6 * 1)
    assert codes.code([(2,), (0,), (0,)]) == codes.impossible  # a token outside the vocabulary
    assert codes.code([(0, 0, 0), (0,), (0,)]) == codes.impossible  # three tokens from one draft
    law = np.zeros(codes.count)
    law[codes.code([(1,), (0, 1), (1,)])] = 1.0
    assert codes.joint(law)[1, 3, 1] == 1.0 and codes.tables(law, 1)[1][0, 1] == 1.0


def test_the_joint_continuation_is_each_requests_own_and_the_target_their_product():
    codes = JointCodes(2, (1, 1, 0))
    wanted = [ContextFreeProblem(P, Q), ContextFreeProblem(Q, P), ContextFreeProblem([0.5, 0.5], [0.5, 0.5])]
    law = np.zeros(codes.count)
    law[codes.code([(1,), (0, 1), (1,)])] = 1.0  # one outcome: each block continued on its own
    continued = codes.continued(law, wanted)
    by_hand = [OutputLaw(2, 1, (np.zeros(2), np.eye(2)[0][:, None] * np.eye(2)[1])).continued_with_target(wanted[1])]
    first = OutputLaw(2, 1, (np.eye(2)[1], np.zeros((2, 2)))).continued_with_target(wanted[0])  # (1,) then p
    last = np.eye(2)[1]
    assert np.allclose(continued, np.multiply.outer(np.multiply.outer(first, by_hand[0]), last), atol=1e-15)
    product = joint_target(wanted, (1, 1, 0), 2)
    assert np.allclose(product, np.multiply.outer(np.multiply.outer(target_law(wanted[0], 2), target_law(
        wanted[1], 2)), target_law(wanted[2], 1)), atol=1e-15) and abs(product.sum() - 1) < 1e-12


def test_a_batch_sharing_one_seed_is_blind_to_greedy_fillers_and_caught_by_sampled_neighbours():
    blind = _check(step_rules.ragged_step_one_seed, "greedy")
    assert blind.verdict is Verdict.LOSSLESS
    caught = _check(step_rules.ragged_step_one_seed, "sampled")
    assert caught.verdict is Verdict.LOSSY and caught.tv_distance > 0.1 and caught.discrepancies
    assert "joint law" in caught.note


def test_the_correct_batch_keeps_the_joint_law():
    """Exactly where p = q (every draft accepted, each request's E[tau + 1] = K + 1 = 2, but every request's drafts and
    bonus tokens drawn); by the black-box test where they differ, at a stated power (false-failure rate 1e-6, a joint
    TV of 0.2 caught with probability 0.99: the shared seed's is above 0.5, and the same test catches it)."""
    equal = ContextFreeProblem(P, P)
    report = check_external(step_rules.ragged_step, "step-ragged", "chain:1", problem=equal, rng="capture",
                            sampling="temperature=1", mode="exact", neighbours="sampled", time_budget=300)
    assert report.verdict is Verdict.LOSSLESS and report.tv_distance < 1e-12
    assert abs(report.block_efficiency - 2) < 1e-12
    for function, verdict in ((step_rules.ragged_step, Verdict.LOSSLESS), (step_rules.ragged_step_one_seed,
                                                                           Verdict.LOSSY)):
        tested = check_external(function, "step-ragged", "chain:1", problem=PROBLEM, rng="capture",
                                sampling="temperature=1", mode="blackbox", neighbours="sampled", detect_tv=0.2,
                                time_budget=300)
        assert tested.verdict is verdict and tested.blackbox.detectable_tv <= 0.2 and tested.blackbox.alpha == 1e-6


def test_sampled_neighbours_are_refused_off_the_batch_layout(capsys):
    with pytest.raises(VerispecError, match="needs the step-ragged layout"):
        check_external(step_rules.step, "step", "chain:1", problem=PROBLEM, rng="capture", neighbours="sampled")
    with pytest.raises(VerispecError, match="neighbours must be one of"):
        _check(step_rules.ragged_step, "some")
    with pytest.raises(VerispecError, match="joint outcomes of the three requests at V = 10"):
        JointCodes(10, (1, 3, 0))  # 110 * 11,110 * 10 codes: refused before any array
    code = main(["check-external", "tests/support/step_rules.py:step", "--layout", "step", "--tree", "chain:1",
                 "--rng", "capture", "--target", "0.6,0.4", "--draft", "0.3,0.7", "--neighbours", "sampled"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "step-ragged" in lines[0]
