"""lv:<base>, Layer Verification (verispec.verifiers.layer): exactly lossless in rationals by an enumeration written
here (draft trees x the procedure's choice traces -> the law of the emitted sequence, checked against the target's
continuation law prefix by prefix, without the rule's batched law or the engine's TV); the batched law equal to the
procedure's law in rationals; the sampling procedure against the law by an exact binomial test; the chain and
single-layer identities; and the one-line refusals. Each check has a broken twin that it catches."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from verispec import backend
from verispec.cli import main
from verispec.errors import UnknownVerifierError
from verispec.simulator import TreeBatch, analyze, parse_tree, sun_toy_problem
from verispec.simulator.chooser import RandomChooser, enumerate_law
from verispec.simulator.problems import TabularProblem
from verispec.statistics import exact_binomial_test
from verispec.verifiers import get_verifier
from verispec.verifiers.layer import LayerVerifier


class UniformDescentTwin(LayerVerifier):
    """Broken: the sweep descends to every child with mass alike, instead of in proportion to its mass."""

    def descent_shares(self, masses, total):
        positive = masses > 0
        count = np.maximum(positive.sum(axis=-1, keepdims=True), 1)
        return np.where(positive, backend.one(masses) / count, backend.zero(masses))


class NoBottomTwin(LayerVerifier):
    """Broken: the base rule sees the plain target p at every node (no "not accepted" token, weights ignored)."""

    def node_output(self, p, q, children, weight):
        return super().node_output(p, q, children, weight * 0 + 1)


def _twin(kind, name: str) -> LayerVerifier:
    rule = get_verifier(name)
    return kind(rule.solver, rule.base)


def _problem(seed: int, size: int, depth: int) -> TabularProblem:
    """A context-dependent problem in exact rationals: every prefix its own p and q, small integer weights."""
    rng = np.random.default_rng(seed)

    def law():
        weights = rng.integers(1, 6, size=size)
        return [Fraction(int(w), int(weights.sum())) for w in weights]

    prefixes = [prefix for length in range(depth + 1) for prefix in itertools.product(range(size), repeat=length)]
    return TabularProblem(size, {prefix: law() for prefix in prefixes},
                          {prefix: law() for prefix in prefixes if len(prefix) < depth}, exact=True)


def _emitted_sequences(verifier, drafter, problem) -> Counter:
    """P(emitted sequence = s): every draft tree with its probability, times the law of the rule's procedure on it
    over every choice trace, keyed by the token path of the emitting node plus the emitted token."""
    law = Counter()
    for tree, weight in drafter.outcomes(problem):
        for (node, token), probability in enumerate_law(lambda chooser, tree=tree: verifier.procedure(tree, chooser),
                                                        exact=True).items():
            law[tree.paths[node] + (token,)] += weight * probability
    return law


def _continuation_defect(law: Counter, problem) -> Fraction:
    """max over prefixes t and tokens y of |P(Z starts with t y) - P(Z extends t strictly) p(y | t)|: zero exactly
    when the emitted Z is the target's sequence stopped by a rule that never looks ahead (lossless)."""
    def starting(prefix):
        return sum((mass for sequence, mass in law.items() if sequence[:len(prefix)] == prefix), Fraction(0))

    def extending(prefix):
        return starting(prefix) - law.get(prefix, Fraction(0))

    longest = max(len(sequence) for sequence in law)
    defects = [abs(starting(prefix + (token,)) - extending(prefix) * problem.target(prefix)[token])
               for length in range(longest) for prefix in itertools.product(range(problem.vocab_size), repeat=length)
               for token in range(problem.vocab_size)]
    return max(defects)


CASES = [("naive", "chain:3"), ("naive", "branch:2,2"), ("naive", "iid:2,2"), ("specinfer", "iid:2,2"),
         ("specinfer", "delayed:2,1,1"), ("globalres", "iid:2,2"), ("globalres", "delayed:2,1,1"),
         ("rrsw", "branch:2,2")]


@pytest.mark.parametrize("base,spec", CASES)
def test_lossless_in_rationals_by_an_independent_enumeration(base, spec):
    drafter = parse_tree(spec)
    problem = _problem(seed=1, size=3 if drafter.depth <= 2 else 2, depth=drafter.depth)
    law = _emitted_sequences(get_verifier(f"lv:{base}"), drafter, problem)
    assert sum(law.values()) == 1
    assert _continuation_defect(law, problem) == 0


@pytest.mark.parametrize("twin,base,spec", [(UniformDescentTwin, "specinfer", "iid:2,2"),
                                            (UniformDescentTwin, "naive", "branch:2,2"),
                                            (NoBottomTwin, "naive", "chain:3"), (NoBottomTwin, "globalres", "iid:2,2")])
def test_the_enumeration_catches_a_broken_twin(twin, base, spec):
    drafter = parse_tree(spec)
    problem = _problem(seed=1, size=3 if drafter.depth <= 2 else 2, depth=drafter.depth)
    law = _emitted_sequences(_twin(twin, f"lv:{base}"), drafter, problem)
    assert sum(law.values()) == 1 and _continuation_defect(law, problem) > Fraction(1, 1000)


def _law_matches_procedure(verifier, reference, trees) -> bool:
    """Whether ``verifier``'s batched law equals ``reference``'s enumerated procedure on every tree, exactly."""
    for batch, members in TreeBatch.of_trees(trees):
        laws = verifier.emission_laws(batch)
        for row, index in enumerate(members):
            if not np.array_equal(laws[row], reference.enumerated_emission_law(trees[index])):
                return False
    return True


@pytest.mark.parametrize("base,spec", [("specinfer", "iid:2,2"), ("globalres", "delayed:2,1,1"),
                                       ("rrsw", "branch:2,2")])
def test_the_batched_law_is_the_procedures_law_in_rationals(base, spec):
    drafter, rule = parse_tree(spec), get_verifier(f"lv:{base}")
    trees = [tree for tree, _ in drafter.outcomes(_problem(seed=3, size=3, depth=drafter.depth))]
    assert _law_matches_procedure(rule, rule, trees)
    assert not _law_matches_procedure(rule, _twin(UniformDescentTwin, f"lv:{base}"), trees)  # the check can fail


def _witness_tree(rule, twin):
    """The iid:2,2 tree of a float problem on which ``rule``'s and ``twin``'s laws differ most (L1)."""
    problem = _problem(seed=11, size=3, depth=2)
    float_problem = TabularProblem(3, {k: [float(x) for x in v] for k, v in problem.target_table.items()},
                                   {k: [float(x) for x in v] for k, v in problem.draft_table.items()})
    trees = [tree for tree, _ in parse_tree("iid:2,2").outcomes(float_problem)]
    return max(trees, key=lambda tree: np.abs(rule.emission_law(tree) - twin.emission_law(tree)).sum())


def _draws(verifier, tree, count: int) -> Counter:
    chooser = RandomChooser(np.random.default_rng(2026))
    return Counter(verifier.procedure(tree, chooser) for _ in range(count))


def test_the_sampling_twin_passes_an_exact_binomial_test_and_a_broken_one_fails():
    rule, twin = get_verifier("lv:specinfer"), _twin(UniformDescentTwin, "lv:specinfer")
    tree = _witness_tree(rule, twin)
    law = rule.emission_law(tree)                                             # [n, V]
    outcomes = {(node, token): float(law[node, token]) for node in range(tree.num_nodes)
                for token in range(tree.vocab_size) if law[node, token] > 0}
    assert not exact_binomial_test(_draws(rule, tree, 3000), outcomes).rejected
    assert exact_binomial_test(_draws(twin, tree, 3000), outcomes).rejected


def test_on_one_path_it_is_block_verification_and_on_one_layer_the_base_rule():
    # Sun et al. 2024 (arXiv 2403.10444), Sec. 2: the toy's optimum 11/9 is block verification's; token-level 10/9
    toy, chain = sun_toy_problem(exact=True), parse_tree("chain:2")
    assert analyze(toy, chain, get_verifier("lv:naive")).expected_accepted == Fraction(11, 9)
    assert analyze(toy, chain, _twin(NoBottomTwin, "lv:naive")).expected_accepted != Fraction(11, 9)
    problem = _problem(seed=5, size=3, depth=3)
    for name, other, spec in [("lv:naive", "bv", "chain:3"), ("lv:globalres", "globalres", "iid:3,1"),
                              ("lv:specinfer", "specinfer", "iid:2,1")]:
        mine, theirs = (analyze(problem, parse_tree(spec), get_verifier(n)) for n in (name, other))
        assert mine.tv_distance == 0 and mine.block_efficiency == theirs.block_efficiency, name
    twin = analyze(problem, parse_tree("iid:2,1"), _twin(UniformDescentTwin, "lv:specinfer"))
    assert twin.tv_distance > Fraction(1, 100)  # the same E[tau + 1] as specinfer there, but not its law


@pytest.mark.parametrize("name,says", [("lv:bv", "not a single step"), ("lv:traversal", "not a single step"),
                                       ("lv:lv:naive", "not a single step"), ("lv:nope", "unknown base")])
def test_a_base_that_is_not_single_step_or_unknown_is_refused_on_one_line(name, says, capsys):
    with pytest.raises(UnknownVerifierError, match=says) as error:
        get_verifier(name)
    assert "\n" not in str(error.value) and "lv:globalres" in str(error.value)
    code = main(["exact", "--target", "0.6,0.4", "--draft", "0.3,0.7", "--tree", "chain:2", "--verifier", name])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert main(["exact", "--target", "0.6,0.4", "--draft", "0.3,0.7", "--tree", "chain:2",
                 "--verifier", "lv:naive"]) == 0  # the same command with a single-step base runs, lossless
