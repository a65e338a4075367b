"""The exact law of decoding with a blockwise policy (verispec.policy), against the target's law.

For policies that choose each block's (tree, verifier) from the prefix before the block (the DDTE selector's
kind, arXiv 2602.16994: features of p and q at the previous token and of q at the root, here also the
verifier), the law of the first tokens, composed block by block from the exact engine, equals
``target_law(problem, length)``, the product of the target's conditionals (an independent computation), to
1e-12, and exactly (Fractions) on an exact problem. The negative control, ``PeekingVerifier`` (the tree cut
after seeing p at the drafted tokens), is lossy by the engine and by the composed law, with its TV stated;
with a threshold that never cuts it is its base rule (positive control), and its law as a procedure
(generic enumeration) equals its batched law (parity of the two entry points).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from verispec import analyze
from verispec.errors import InvalidProblemError, VerispecError
from verispec.policy import PeekingVerifier, ShiftedProblem, policy_output_law
from verispec.simulator import parse_tree
from verispec.simulator.generators import (
    random_context_free_problem,
    random_markov_problem,
    random_problem,
    sun_toy_problem,
)
from verispec.simulator.problems import target_law
from verispec.verifiers import get_verifier

LENGTH = 3
TOLERANCE = 1e-12


def _entropy(law) -> float:
    return -sum(float(x) * math.log(float(x)) for x in law if x > 0)


def fixed(prefix, problem):
    return "delayed:2,1,1", "specinfer"


def by_q_at_the_root(prefix, problem):
    """The selector's kind: reads q at the root (computed before the block's draws)."""
    q_root = problem.draft(prefix)
    if max(q_root) > 0.6:
        return "delayed:3,1,1", "specinfer"
    return ("iid:2,2", "traversal-iid") if _entropy(q_root) > 0.9 else ("chain:0", "specinfer")


def by_p_and_q_before_the_root(prefix, problem):
    """Reads p and q at the previous token (L1 distance) and switches verifiers and delays."""
    if not prefix:
        return "iid:2,1", "gbv"
    distance = float(np.abs(np.asarray(problem.target(prefix[:-1]), dtype=np.float64)
                            - np.asarray(problem.draft(prefix[:-1]), dtype=np.float64)).sum())
    if distance > 0.6:
        return "chain:0", "specinfer"
    return ("delayed:2,1,1", "specinfer") if prefix[-1] % 2 else ("iid:2,2", "gbv")


def switching(prefix, problem):
    """By length and last token: chain:0, delayed trees, and the verifiers specinfer, traversal-iid and gbv."""
    actions = [("chain:0", "specinfer"), ("delayed:2,1,1", "specinfer"), ("iid:2,2", "gbv"),
               ("delayed:1,1,1", "traversal-iid"), ("chain:0", "gbv"), ("iid:3,1", "traversal-iid")]
    return actions[(len(prefix) + 2 * (prefix[-1] if prefix else 0)) % len(actions)]


POLICIES = [fixed, by_q_at_the_root, by_p_and_q_before_the_root, switching]

PROBLEMS = {
    "random-V3": lambda: random_problem(3, LENGTH + 2, 11),
    "random-V3-sparse": lambda: random_problem(3, LENGTH + 2, 5, zero_fraction=0.3, divergence=0.8),
    "markov-V4": lambda: random_markov_problem(4, 2, concentration=0.5),
    "context-free-V3": lambda: random_context_free_problem(3, 8),
}


@pytest.mark.parametrize("policy", POLICIES, ids=lambda policy: policy.__name__)
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_policy_that_chooses_from_the_prefix_keeps_the_targets_law(name, policy):
    problem = PROBLEMS[name]()
    law = policy_output_law(problem, policy, LENGTH)
    expected = target_law(problem, LENGTH)
    assert law.shape == expected.shape == (problem.vocab_size,) * LENGTH
    assert np.abs(law - expected).sum() / 2 <= TOLERANCE


def test_the_policies_do_switch():
    """Each non-constant policy chooses more than one action over the prefixes it meets (else the law test above
    would only test one static action)."""
    problem = PROBLEMS["random-V3"]()
    prefixes = [()] + [(a,) for a in range(3)] + [(a, b) for a in range(3) for b in range(3)]
    for policy in POLICIES[1:]:
        assert len({policy(prefix, problem) for prefix in prefixes}) >= 2, policy.__name__


def test_on_an_exact_problem_the_law_is_exactly_the_targets():
    problem = sun_toy_problem(exact=True)

    def policy(prefix, _):
        return ("chain:0", "specinfer") if len(prefix) % 2 else ("iid:2,2", "gbv")

    law = policy_output_law(problem, policy, LENGTH)
    assert law.dtype == object and all(isinstance(value, Fraction) for value in law.ravel())
    third = Fraction(1, 3)
    p = [third, 2 * third]  # Sun's toy: p = (1/3, 2/3) at every prefix
    for index in np.ndindex(law.shape):
        assert law[index] == math.prod(p[token] for token in index)


def test_the_shifted_problem_is_the_problem_after_the_prefix():
    problem = random_problem(3, 4, 2)
    shifted = ShiftedProblem(problem, (2, 0))
    assert shifted.horizon == 2 and shifted.vocab_size == 3
    for suffix in [(), (1,), (0, 2)]:
        assert np.array_equal(shifted.target(suffix), problem.target((2, 0) + suffix))
    assert np.array_equal(shifted.draft((1,)), problem.draft((2, 0, 1)))
    with pytest.raises(InvalidProblemError, match="horizon"):
        ShiftedProblem(problem, (0,) * 5)


@pytest.mark.parametrize("spec,base", [("delayed:2,1,1", "specinfer"), ("iid:2,2", "traversal-iid"),
                                       ("iid:2,2", "gbv"), ("chain:2", "naive")])
def test_choosing_after_seeing_p_is_lossy(spec, base):
    """PeekingVerifier cuts the tree above a drafted token whose target probability is below 0.3, then verifies
    the cut tree by the base rule: the engine reports it lossy (TV stated), and so does the composed law."""
    problem = random_problem(3, LENGTH + 2, 11)
    peeking = PeekingVerifier(get_verifier(base), 0.3)
    block = analyze(problem, spec, peeking)
    assert block.lossless is False and block.tv_distance > 1e-3, block
    law = policy_output_law(problem, lambda prefix, _: (spec, peeking), LENGTH)
    tv = float(np.abs(law - target_law(problem, LENGTH)).sum() / 2)
    assert tv > 1e-3, f"{base} on {spec}: the peeking policy's TV is only {tv:.2e}"
    # its base rule, on the same problem, trees and engine, is lossless: the difference is the peeking
    assert analyze(problem, spec, base).lossless is True


def test_peeking_that_never_cuts_is_its_base_rule():
    problem = random_problem(3, 3, 4)
    base = get_verifier("specinfer")
    never = PeekingVerifier(base, 0.0)  # no probability is below 0
    for tree, _ in parse_tree("delayed:2,1,1").outcomes(problem)[:40]:
        assert np.array_equal(never.emission_law(tree), base.emission_law(tree))
    assert analyze(problem, "delayed:2,1,1", never).lossless is True


@pytest.mark.parametrize("spec,base", [("delayed:2,1,1", "specinfer"), ("iid:2,2", "gbv")])
def test_the_peeking_verifiers_procedure_and_law_agree(spec, base):
    """Two entry points: the batched law (cut rows grouped, base law on each cut topology) and the sampling
    procedure enumerated by the generic chooser."""
    problem = random_problem(3, 3, 9, zero_fraction=0.2)
    peeking = PeekingVerifier(get_verifier(base), 0.35)
    batched = analyze(problem, spec, peeking, method="closed-form")
    enumerated = analyze(problem, spec, peeking, method="enumerate")
    for by_length, other in zip(batched.output_law.by_length, enumerated.output_law.by_length):
        assert np.abs(by_length - other).max() <= TOLERANCE


def test_bad_arguments_are_one_line_errors():
    problem = random_problem(3, 3, 0)
    with pytest.raises(VerispecError, match="length"):
        policy_output_law(problem, fixed, 0)
    with pytest.raises(VerispecError, match=r"\(tree, verifier\) pair"):
        policy_output_law(problem, lambda prefix, _: "chain:1", 2)
    with pytest.raises(VerispecError, match="must be a function"):
        policy_output_law(problem, "chain:1", 2)
    with pytest.raises(InvalidProblemError, match="depth"):  # blocks past the horizon
        policy_output_law(problem, lambda prefix, _: ("chain:3", "naive"), 2)
    with pytest.raises(VerispecError, match="threshold"):
        PeekingVerifier(get_verifier("naive"), 1.5)
