"""Exact mode on code whose draws depend on the path (issue 31, class 9): loops that draw ``torch.rand(1)`` once per
candidate and stop at the first acceptance, early exits, a final ``torch.multinomial`` on a residual.

Each function is checked against its twin: the same procedure written against verispec's ``Chooser`` and
enumerated exactly (``verispec.simulator.chooser.enumerate_law``), on the same arguments. The twin never sees a
uniform: it makes each acceptance test a Bernoulli of its probability (min(1, ratio) for float64 draws; for
float32 draws the probability under the float32 generators' grid, ceil(t 2^24) 2^-24 for the float32 ratio t)
and each final draw a categorical. Laws are compared over the emitted sequences, to 1e-12.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from verispec.external.adapter import ExternalVerifier
from verispec.external.exact import integrate
from verispec.external.layouts import get_layout
from verispec.external.rng import Capture, Tape
from verispec.external.tree_arrays import TreeArrays
from verispec.simulator.chooser import enumerate_law
from verispec.simulator.generators import random_problem
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import DraftTree, TreeBatch

torch = pytest.importorskip("torch")

#: How the law of the next candidate changes after a rejection: SpecInfer's residual norm((r - q)+), EAGLE's r with
#: the rejected token zeroed, or not at all (every candidate tested against p: lossy, and the case where two
#: paths end in the same outcome, since a repeated token may be accepted on its second copy).
UPDATES = ("residual", "zero", "none")


def _acceptance(ratio: float, dtype) -> float:
    """P(u < ratio) for a uniform u of ``dtype`` as torch's CPU generator draws it (float32: k 2^-24; float64:
    continuous, the 2^-53 grid being below the test's tolerance), the ratio compared in that dtype."""
    if dtype == torch.float32:
        threshold = float(np.float32(ratio))
        return min(1.0, math.ceil(threshold * 2 ** 24) / 2 ** 24)
    return min(1.0, ratio)


def _depth(parents) -> int:
    depth = [0] * (len(parents) + 1)
    for index, parent in enumerate(parents):
        depth[index + 1] = depth[int(parent)] + 1
    return max(depth)


def walk_torch(update: str, max_level: int, dtype):
    """A tree-parent verifier for one tree a call (--per-row), drawing from torch's global generator: walk down
    from the root; at each node test the children in order, one ``torch.rand(1)`` each, and move to the first
    accepted (``break``); stop after ``max_level`` levels (an early exit) or when every child is rejected, and draw
    the last token with ``torch.multinomial`` on what is left of the target law."""

    def verify(draft_tokens, parents, draft_probs, target_probs):  # [1, N], [1, N], [1, N, V], [1, N+1, V]
        children: dict[int, list[int]] = {}
        for index in range(draft_tokens.shape[1]):
            children.setdefault(int(parents[0, index]), []).append(index + 1)
        node, path = 0, []
        while True:
            law = target_probs[0, node].clone()  # [V]
            moved = False
            for child in children.get(node, []) if len(path) < max_level else []:
                token = int(draft_tokens[0, child - 1])
                draft = draft_probs[0, child - 1]  # [V]
                if torch.rand(1, dtype=dtype) < (law[token] / draft[token]).to(dtype):
                    path.append(token)
                    node, moved = child, True
                    break
                if update == "residual":
                    law = (law - draft).clamp(min=0)
                elif update == "zero":
                    law = law.clone()
                    law[token] = 0.0
                law = law / law.sum()
            if not moved:
                out = torch.full((1, _depth(parents[0].tolist()) + 1), -1, dtype=torch.int64)
                out[0, :len(path) + 1] = torch.tensor(path + [int(torch.multinomial(law, 1)[0])])
                return out

    return verify


def walk_twin(arguments, update: str, max_level: int, dtype, chooser) -> tuple[int, ...]:
    """``walk_torch``'s procedure against a Chooser, on the same arguments (numpy, one tree)."""
    draft_tokens, parents, draft_probs, target_probs = (np.asarray(argument)[0] for argument in arguments)
    children: dict[int, list[int]] = {}
    for index, parent in enumerate(parents):
        children.setdefault(int(parent), []).append(index + 1)
    node, path = 0, []
    while True:
        law = target_probs[node].copy()
        moved = False
        for child in children.get(node, []) if len(path) < max_level else []:
            token = int(draft_tokens[child - 1])
            draft = draft_probs[child - 1]
            if chooser.bernoulli(_acceptance(law[token] / draft[token], dtype)):
                path.append(token)
                node, moved = child, True
                break
            if update == "residual":
                law = np.maximum(law - draft, 0.0)
            elif update == "zero":
                law = law.copy()
                law[token] = 0.0
            law = law / law.sum()
        if not moved:
            return tuple(path) + (chooser.categorical(law / law.sum()),)


def chain_torch(draft_tokens, draft_probs, target_probs):
    """A chain verifier for one chain a call: one ``torch.rand(1)`` per draft until the first rejection (so the
    number of draws depends on the outcomes), then ``torch.multinomial`` on the residual or the bonus row."""
    length = draft_tokens.shape[1]
    out = torch.full((1, length + 1), -1, dtype=torch.int64)
    for index in range(length):
        token = int(draft_tokens[0, index])
        target, draft = target_probs[0, index], draft_probs[0, index]  # [V]
        if torch.rand(1, dtype=torch.float64) < target[token] / draft[token]:
            out[0, index] = token
            continue
        out[0, index] = torch.multinomial((target - draft).clamp(min=0), 1)[0]
        return out
    out[0, length] = torch.multinomial(target_probs[0, length], 1)[0]
    return out


def chain_twin(arguments, chooser) -> tuple[int, ...]:
    draft_tokens, draft_probs, target_probs = (np.asarray(argument)[0] for argument in arguments)
    path = []
    for index, token in enumerate(draft_tokens):
        target, draft = target_probs[index], draft_probs[index]
        if chooser.bernoulli(min(1.0, target[token] / draft[token])):
            path.append(int(token))
            continue
        residual = np.maximum(target - draft, 0.0)
        return tuple(path) + (chooser.categorical(residual / residual.sum()),)
    return tuple(path) + (chooser.categorical(target_probs[len(draft_tokens)]),)


def _sequence_law(law: np.ndarray, tree: DraftTree) -> dict[tuple[int, ...], float]:
    """The emitted sequences' law of an emission law [nodes, V] on ``tree``."""
    out: dict[tuple[int, ...], float] = {}
    for node, token in zip(*np.nonzero(law)):
        key = tree.paths[node] + (int(token),)
        out[key] = out.get(key, 0.0) + float(law[node, token])
    return out


def _worst_difference(function, twin, layout: str, tree_spec: str, problem) -> float:
    """Largest difference, over the draft trees of ``tree_spec`` and their emitted sequences, between the exact
    law of ``function`` (RNG capture, one tree a call) and the enumerated law of ``twin``."""
    verifier = ExternalVerifier(function, layout, arrays="torch", rng="capture", per_row=True)
    trees = [tree for tree, probability in parse_tree(tree_spec).outcomes(problem) if probability > 0]
    worst = 0.0
    for batch, members in TreeBatch.of_trees(trees):
        laws = np.asarray(verifier.emission_laws(batch))
        arguments = get_layout(layout).capture_arguments(TreeArrays(batch), np.arange(batch.num_rows),
                                                         np.zeros((batch.num_rows, 0)))
        for row, member in enumerate(members):
            one = tuple(argument[row:row + 1] for argument in arguments)
            expected = enumerate_law(lambda chooser, one=one: twin(one, chooser))
            found = _sequence_law(laws[row], trees[member])
            for sequence in set(found) | set(expected):
                worst = max(worst, abs(found.get(sequence, 0.0) - float(expected.get(sequence, 0.0))))
    return worst


#: V = 2, the bonus row uniform, and a draft slightly off the target: the second copy of a repeated token is
#: accepted with probability t = (1/2) / 0.51 after the first is rejected, along other uniforms than the first.
NEAR = ContextFreeProblem([0.5, 0.5], [0.51, 0.49])


def test_two_sequences_the_code_makes_equally_likely_get_equal_mass():
    """The issue's symptom. Tree: the root's two candidates are both token 0; rule 'none' tests each against p
    (t = 0.5 / 0.51) and stops at the first acceptance, then draws the last token from the uniform row p(. | 0).
    So (0, 0) and (0, 1) each have mass (1 - (1 - t)^2) / 2, and the rest, (1 - t)^2, is the residual draw at the
    root, from p itself. Before the path labels exact mode gave (0, 0) and (0, 1) 0.49510 and 0.50490."""
    t = 0.5 / 0.51
    verifier = ExternalVerifier(walk_torch("none", 9, torch.float64), "tree-parent", arrays="torch", rng="capture",
                                per_row=True)
    tree = DraftTree.from_shape(NEAR, ((0, 0), ()))
    law = _sequence_law(np.asarray(verifier.emission_law(tree)), tree)
    accepted = (1 - (1 - t) ** 2) / 2
    assert abs(law[(0, 0)] - accepted) < 1e-12 and abs(law[(0, 1)] - accepted) < 1e-12
    assert abs(law[(0,)] - (1 - t) ** 2 / 2) < 1e-12 and abs(law[(1,)] - (1 - t) ** 2 / 2) < 1e-12


def test_without_the_path_labels_the_same_integration_misplaces_mass():
    """Negative control: the integrand with its path labels stripped (outcomes only, as before the fix) gives the
    probes alone the box where the two copies' paths meet, and they miss it: mass moves from (0, 0) to (0, 1)."""
    verifier = ExternalVerifier(walk_torch("none", 9, torch.float64), "tree-parent", arrays="torch", rng="capture",
                                per_row=True)
    tree = DraftTree.from_shape(NEAR, ((0, 0), ()))
    batch = tree.as_batch()
    verifier.emission_laws(batch)  # probes, and grows the tape to what the paths draw
    runner = verifier._runner(batch)

    def outcomes_only(rows, points):
        codes, used, _ = runner.integrand(rows, points)
        return codes % runner.code_count, used

    with runner.session():
        law = integrate(outcomes_only, 1, runner.width_uniforms, runner.code_count, name="f",
                        **verifier.options)[0].reshape(batch.num_nodes, batch.vocab_size)
    found = _sequence_law(law, tree)
    assert abs(found[(0, 0)] - found[(0, 1)]) > 1e-3


@pytest.mark.parametrize("update", UPDATES)
def test_a_walk_that_stops_at_the_first_acceptance_has_its_twins_law(update):
    problem = random_problem(3, 1, 11)
    worst = _worst_difference(walk_torch(update, 9, torch.float64),
                              lambda arguments, chooser: walk_twin(arguments, update, 9, torch.float64, chooser),
                              "tree-parent", "iid:2,1", problem)
    assert worst < 1e-12


def test_a_chain_that_draws_until_its_first_rejection_has_its_twins_law():
    assert _worst_difference(chain_torch, chain_twin, "chain", "chain:2", random_problem(3, 2, 5)) < 1e-12


def test_float32_draws_are_integrated_on_the_generators_grid():
    """float32 uniforms are k 2^-24 (torch's CPU generator and numpy's), so a test u < t accepts with probability
    ceil(t 2^24) 2^-24, which exceeds t where t < 1/2 is not a multiple of 2^-24 (here t = 0.3 / 0.7 in float32):
    the twin with that probability agrees to 1e-12, the twin with min(1, t) does not."""
    generator = torch.Generator().manual_seed(0)
    drawn = torch.rand(4096, generator=generator).double() * 2 ** 24
    assert bool((drawn == drawn.floor()).all())  # the grid the twin assumes
    problem = ContextFreeProblem([0.3, 0.7], [0.7, 0.3])
    function = walk_torch("residual", 9, torch.float32)
    on_grid = _worst_difference(function, lambda arguments, chooser: walk_twin(arguments, "residual", 9,
                                                                               torch.float32, chooser),
                                "tree-parent", "iid:2,1", problem)
    continuous = _worst_difference(function, lambda arguments, chooser: walk_twin(arguments, "residual", 9,
                                                                                  torch.float64, chooser),
                                   "tree-parent", "iid:2,1", problem)
    assert on_grid < 1e-12 and continuous > 1e-9


def test_a_float32_uniform_is_fed_on_the_grid_of_2_to_the_minus_24():
    """floor(u 2^24) 2^-24 for torch.rand, Tensor.uniform_ and numpy's Generator.random(dtype=float32); float64
    draws get u itself."""
    u = 0.3 + 2 ** -30  # not a multiple of 2^-24; the nearest float32 would round it up, not down
    grid = math.floor(u * 2 ** 24) / 2 ** 24
    capture = Capture("f")
    with capture:
        drawn = []
        for draw in (lambda: torch.rand(1).item(), lambda: torch.empty(1).uniform_().item(),
                     lambda: float(np.random.default_rng().random(dtype=np.float32)),
                     lambda: torch.rand(1, dtype=torch.float64).item()):
            capture.start(Tape(np.array([[u]])))
            drawn.append(draw())
            capture.start(None)
    assert drawn == [grid, grid, grid, u] and capture.float32_draws == 3


@pytest.mark.slow
@pytest.mark.parametrize("tree,problem", [("iid:2,2", NEAR),
                                          ("iid:3,1", ContextFreeProblem([1 / 3] * 3, [0.34, 0.33, 0.33]))])
def test_the_walk_whose_paths_meet_on_a_deeper_and_a_wider_tree(tree, problem):
    """Rule 'none' on trees where repeated tokens make paths meet at depth 2, or among three candidates."""
    worst = _worst_difference(walk_torch("none", 9, torch.float64),
                              lambda arguments, chooser: walk_twin(arguments, "none", 9, torch.float64, chooser),
                              "tree-parent", tree, problem)
    assert worst < 1e-12
