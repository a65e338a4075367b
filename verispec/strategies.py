"""Hypothesis strategies for testing verification code: problems whose laws hold exact zeros and ties, draft trees
as the command line writes them, and sampling settings as the step layouts take them.

Plain composable functions, each returning a ``SearchStrategy``::

    from hypothesis import given
    from verispec import strategies as vs
    from verispec.testing import assert_lossless

    @given(problem=vs.problems(zeros=True, ties=True), tree=vs.tree_specs(max_depth=2))
    def test_our_sampler(problem, tree):
        assert_lossless(our_module.verify, "tree-parent", tree, problems=[problem])

What they draw:

* ``laws(V)``: one probability vector over V tokens, made from small integer weights w (p = w / sum w), so that an
  exact zero is 0.0 and a tie is two bit-identical floats (or ``fractions.Fraction`` entries with ``exact=True``).
  ``zeros=True``: at least one entry exactly 0; ``False``: none; None: either. ``ties=True``: at least two positive
  entries equal, the all-equal row (uniform on its support) among them; ``False``: the positive entries distinct;
  None: either. A tie means two tokens of the same positive probability (tokens at 0 are zeros, not ties).
* ``problems()``: a ``verispec.simulator`` problem (context-free, order-1 Markov, or tabular: one law per prefix up
  to ``depth``) whose every target and draft row is a ``laws`` row with the requested zeros and ties.
* ``tree_specs()``: a tree specification string that ``verispec.simulator.parse_tree`` and every command's
  ``--tree`` accept (``chain:L``, ``iid:K,L``, ... ``verispec.guard.limits.TREE_FORMS``), of depth 1 to ``max_depth``;
  ``chain_trees`` and ``iid_trees`` draw the two commonest kinds.
* ``penalty_settings()``: a ``verispec.models.penalties.Penalties`` (repetition, frequency, presence) for the
  ``step-penalties`` layout, whose ``spec()`` is the text ``--penalties`` reads.
* ``sampling_settings()``: a ``SamplingSetting`` (temperature, top_k, top_p, min_p; None is off), whose ``spec`` is
  the text ``check_external(..., sampling=...)`` and ``--sampling`` read, and whose ``step_arguments`` are the values
  the step layouts hand the code (``verispec.external.step``: off is top_k 0, top_p 1.0, min_p 0.0).

Everything shrinks toward the smallest case: the smallest vocabulary in range, the context-free kind, the
shallowest and narrowest tree (``chain:1`` where chains are allowed), sampling at temperature 1 with every filter
off, and rows of few positive tokens with equal weights (a point mass where zeros are allowed, the uniform row where
they are not).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from verispec.errors import VerispecError
from verispec.guard.limits import TREE_FORMS

#: The problem kinds ``problems`` draws, in the order it shrinks toward.
PROBLEM_KINDS = ("context-free", "markov", "tabular")
#: The tree kinds the command line accepts (``verispec.guard.limits.TREE_FORMS``), in their order.
TREE_KIND_NAMES = tuple(form.partition(":")[0] for form in TREE_FORMS)
#: The most prefixes a tabular problem holds (its rows are drawn one by one).
MAX_TABULAR_PREFIXES = 200

__all__ = ["MAX_TABULAR_PREFIXES", "PROBLEM_KINDS", "TREE_KIND_NAMES", "SamplingSetting", "chain_trees",
           "iid_trees", "laws", "penalty_settings", "problems", "sampling_settings", "tree_specs"]


def _integer_range(value, name: str, minimum: int) -> tuple[int, int]:
    """``value`` (an int or a (low, high) pair) as a checked closed range."""
    low, high = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else (
        value if isinstance(value, tuple) and len(value) == 2 else (None, None))
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (low, high)) or not (
            minimum <= low <= high):
        raise VerispecError(f"{name} must be an integer >= {minimum} or a pair (low, high) with {minimum} <= low <= "
                            f"high, got {value!r}")
    return int(low), int(high)


def _flag(value, name: str) -> bool | None:
    if not (value is None or isinstance(value, bool)):
        raise VerispecError(f"{name} must be True, False or None (either), got {value!r}")
    return value


def _check_law_options(size: int, zeros, ties, max_weight) -> None:
    if isinstance(max_weight, bool) or not isinstance(max_weight, int) or max_weight < 1:
        raise VerispecError(f"max_weight must be a positive integer, got {max_weight!r}")
    if zeros and size < 2:
        raise VerispecError(f"zeros=True needs vocab_size >= 2 (one entry positive), got {size}")
    least = 3 if zeros else 2
    if ties and size < least:
        raise VerispecError(f"ties=True{' with zeros=True' if zeros else ''} needs vocab_size >= {least} (two "
                            f"positive entries{' beside a zero' if zeros else ''}), got {size}")


@st.composite
def _weights(draw, size: int, zeros: bool | None, ties: bool | None, max_weight: int) -> list[int]:
    """Integer weights [size], at least one positive, with the requested zeros and ties among positive entries."""
    most_zeros = 0 if zeros is False else size - (2 if ties else 1)
    count = draw(st.integers(1 if zeros else 0, most_zeros))
    zero_at = set(draw(st.permutations(range(size)))[:count])
    positive = size - count
    if ties:
        if draw(st.booleans()):  # a pair tie; otherwise the all-equal row (where it shrinks to)
            values = draw(st.lists(st.integers(1, max_weight), min_size=positive, max_size=positive))
            first, second = draw(st.permutations(range(positive)))[:2]
            values[second] = values[first]
        else:
            values = [1] * positive
    elif ties is False:  # distinct positive weights (enough of them whatever max_weight says)
        values = draw(st.lists(st.integers(1, max(max_weight, positive)), min_size=positive, max_size=positive,
                               unique=True))
    else:
        values = draw(st.lists(st.integers(1, max_weight), min_size=positive, max_size=positive))
    weights, rest = [], iter(values)
    for token in range(size):
        weights.append(0 if token in zero_at else next(rest))
    return weights


def _normalised(weights: list[int], exact: bool):
    total = sum(weights)
    if exact:
        return [Fraction(w, total) for w in weights]
    return np.asarray(weights, dtype=np.float64) / float(total)


def laws(vocab_size: int, *, zeros: bool | None = None, ties: bool | None = None, exact: bool = False,
         max_weight: int = 6) -> st.SearchStrategy:
    """One probability vector over ``vocab_size`` tokens: integer weights 0..``max_weight`` normalised (float64 [V],
    or a list of Fractions with ``exact``). ``zeros``/``ties``: see the module docstring. Shrinks toward few positive
    tokens with equal weights, the zeros on the first tokens."""
    size = _integer_range(vocab_size, "vocab_size", 1)[0]
    zeros, ties = _flag(zeros, "zeros"), _flag(ties, "ties")
    _check_law_options(size, zeros, ties, max_weight)
    return _weights(size, zeros, ties, max_weight).map(lambda weights: _normalised(weights, exact))


@st.composite
def _problem(draw, sizes, kinds, depth, target, draft, exact, max_weight):
    from verispec.simulator import ContextFreeProblem, MarkovProblem, TabularProblem

    size = draw(st.integers(*sizes))
    kind = draw(st.sampled_from(kinds))

    def row(which):
        zeros, ties = which
        return draw(laws(size, zeros=zeros, ties=ties, exact=exact, max_weight=max_weight))

    if kind == "context-free":
        return ContextFreeProblem(row(target), row(draft), exact=exact)
    if kind == "markov":
        return MarkovProblem(row(target), row(draft), [row(target) for _ in range(size)],
                             [row(draft) for _ in range(size)], exact=exact)
    import itertools

    prefixes = [prefix for length in range(depth + 1) for prefix in itertools.product(range(size), repeat=length)]
    target_table = {prefix: row(target) for prefix in prefixes}
    draft_table = {prefix: row(draft) for prefix in prefixes if len(prefix) < depth}
    return TabularProblem(size, target_table, draft_table, exact=exact, horizon=depth)


_SAME = object()


def problems(*, vocab_size: int | tuple[int, int] = (2, 4), kinds: tuple[str, ...] = PROBLEM_KINDS, depth: int = 2,
             zeros: bool | None = None, ties: bool | None = None, draft_zeros=_SAME, draft_ties=_SAME,
             exact: bool = False, max_weight: int = 6) -> st.SearchStrategy:
    """A problem (``verispec.simulator.Problem``) over V tokens, V in ``vocab_size`` (an int or a (low, high) range),
    of a kind in ``kinds`` (``PROBLEM_KINDS``: context-free, one (p, q) at every prefix; markov, a row per last token;
    tabular, a row per prefix of length 0..``depth``, so use trees no deeper than ``depth``). Every target row is a
    ``laws`` row with ``zeros`` and ``ties``, every draft row one with ``draft_zeros`` and ``draft_ties`` (the
    target's settings unless given). ``exact``: Fraction laws (``Problem.exact``). Shrinks toward the smallest V and
    the context-free kind."""
    sizes = _integer_range(vocab_size, "vocab_size", 1)
    kinds = tuple(kinds) if isinstance(kinds, (tuple, list)) else (kinds,)
    unknown = [kind for kind in kinds if kind not in PROBLEM_KINDS]
    if unknown or not kinds:
        raise VerispecError(f"unknown problem kinds {unknown or kinds!r}: choose from {', '.join(PROBLEM_KINDS)}")
    depth = _integer_range(depth, "depth", 0)[0]
    if "tabular" in kinds and sum(sizes[1] ** length for length in range(depth + 1)) > MAX_TABULAR_PREFIXES:
        raise VerispecError(f"a tabular problem at V = {sizes[1]}, depth {depth} holds more than "
                            f"{MAX_TABULAR_PREFIXES} prefixes, each drawn: lower depth or vocab_size, or leave "
                            "'tabular' out of kinds")
    target = (_flag(zeros, "zeros"), _flag(ties, "ties"))
    draft = (target[0] if draft_zeros is _SAME else _flag(draft_zeros, "draft_zeros"),
             target[1] if draft_ties is _SAME else _flag(draft_ties, "draft_ties"))
    for which in (target, draft):
        _check_law_options(sizes[0], *which, max_weight)
    return _problem(sizes, kinds, depth, target, draft, bool(exact), max_weight)


def _tree_parameters(kind: str, max_depth: int, max_paths: int) -> st.SearchStrategy:
    """The text after ``kind:`` (empty for ``hub``), every tree of depth 1..max_depth."""
    depth, paths = st.integers(1, max_depth), st.integers(1, max_paths)

    def joined(*parts):
        return st.tuples(*parts).map(lambda values: ",".join(map(str, values)))

    if kind in ("chain", "hub-tree", "argmax-chain", "dyspec"):
        return depth.map(str)
    if kind in ("iid", "greedy-tree", "topk-chain", "ddtree"):
        return joined(paths, depth)
    if kind == "greedy":
        return paths.map(str)
    if kind == "delayed":
        return st.tuples(paths, depth).flatmap(
            lambda pair: st.integers(0, pair[1] - 1).map(lambda trunk: f"{pair[0]},{trunk},{pair[1] - trunk}"))
    if kind in ("branch", "branch-iid"):
        return st.lists(paths, min_size=1, max_size=max_depth).map(lambda values: ",".join(map(str, values)))
    return st.just("")  # hub


def tree_specs(kinds: tuple[str, ...] = ("chain", "iid"), *, max_depth: int = 3,
               max_paths: int = 3) -> st.SearchStrategy:
    """A tree specification string of a kind in ``kinds`` (any of ``TREE_KIND_NAMES``: chain, iid, delayed, branch,
    branch-iid, hub, hub-tree, greedy, greedy-tree, dyspec, argmax-chain, topk-chain, ddtree), of depth 1 to
    ``max_depth`` (hub: 1) with branching factors, path counts, k and node budgets 1 to ``max_paths``. Parameters
    that depend on the problem (top-k's k against V) are not checked against one. Shrinks toward the shallowest,
    narrowest tree (the kind that draws the fewest parameters first: ``chain:1`` over ``iid:1,1``)."""
    kinds = tuple(kinds) if isinstance(kinds, (tuple, list)) else (kinds,)
    unknown = [kind for kind in kinds if kind not in TREE_KIND_NAMES]
    if unknown or not kinds:
        raise VerispecError(f"unknown tree kinds {unknown or kinds!r}: choose from {', '.join(TREE_KIND_NAMES)}")
    max_depth = _integer_range(max_depth, "max_depth", 1)[0]
    max_paths = _integer_range(max_paths, "max_paths", 1)[0]
    return st.sampled_from(kinds).flatmap(
        lambda kind: _tree_parameters(kind, max_depth, max_paths).map(
            lambda text: f"{kind}:{text}" if text else kind))


def chain_trees(max_depth: int = 3) -> st.SearchStrategy:
    """``chain:L`` with L in 1..``max_depth``: one drafted path."""
    return tree_specs(("chain",), max_depth=max_depth)


def iid_trees(max_paths: int = 3, max_depth: int = 3) -> st.SearchStrategy:
    """``iid:K,L``: K in 1..``max_paths`` i.i.d. paths from the root, each of length L in 1..``max_depth``."""
    return tree_specs(("iid",), max_depth=max_depth, max_paths=max_paths)


@dataclass(frozen=True)
class SamplingSetting:
    """A request's sampling setting; None is off. ``spec``: the text ``check_external(sampling=...)``, ``--sampling``
    and ``verispec.models.Sampling.parse`` read; ``step_arguments``: (temperature, top_k, top_p, min_p) as the step
    layouts hand them to the code, off as top_k 0, top_p 1.0, min_p 0.0."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    @property
    def spec(self) -> str:
        parts = [f"temperature={self.temperature!r}"]
        parts += [f"{name}={value!r}" for name, value in (("top_k", self.top_k), ("top_p", self.top_p),
                                                          ("min_p", self.min_p)) if value is not None]
        return ",".join(parts)

    @property
    def step_arguments(self) -> tuple[float, int, float, float]:
        return (float(self.temperature), int(self.top_k or 0), float(1.0 if self.top_p is None else self.top_p),
                float(self.min_p or 0.0))


def sampling_settings(*, temperature: tuple[float, float] = (0.25, 4.0), top_k: int | None = 4,
                      top_p: bool = True, min_p: bool = True) -> st.SearchStrategy:
    """A ``SamplingSetting``: temperature in the closed range ``temperature`` (> 0: the checked request samples),
    top-k off or 1..``top_k`` (None: always off), top-p off or in (0, 1], min-p off or in (0, 1] (``top_p`` /
    ``min_p`` False: always off). Each filter shrinks toward off and the temperature toward 1 where the range
    holds it."""
    if not (isinstance(temperature, tuple) and len(temperature) == 2
            and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in temperature)
            and 0 < temperature[0] <= temperature[1] < float("inf")):
        raise VerispecError(f"temperature must be a range (low, high) with 0 < low <= high, finite, got "
                            f"{temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise VerispecError(f"top_k must be a positive integer (the largest k drawn) or None (off), got {top_k!r}")
    low, high = float(temperature[0]), float(temperature[1])
    temperatures = st.floats(low, high, allow_nan=False, allow_infinity=False)
    if low <= 1.0 <= high:
        temperatures = st.just(1.0) | temperatures
    unit = st.floats(0.0, 1.0, exclude_min=True, allow_nan=False)
    return st.builds(SamplingSetting, temperature=temperatures,
                     top_k=st.none() | st.integers(1, top_k) if top_k is not None else st.none(),
                     top_p=st.none() | unit if top_p else st.none(),
                     min_p=st.none() | unit if min_p else st.none())


def penalty_settings(*, repetition: tuple[float, float] = (0.5, 2.0),
                     additive: tuple[float, float] = (-1.0, 1.0)) -> st.SearchStrategy:
    """A ``verispec.models.penalties.Penalties`` for the ``step-penalties`` layout: repetition in the closed range
    ``repetition`` (> 0), frequency and presence each in ``additive``. Each shrinks toward off (repetition 1,
    frequency and presence 0) where its range holds it; ``spec()`` is the text ``--penalties`` reads."""
    from verispec.models.penalties import Penalties

    for name, bounds, positive in (("repetition", repetition, True), ("additive", additive, False)):
        if not (isinstance(bounds, tuple) and len(bounds) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
                and -float("inf") < bounds[0] <= bounds[1] < float("inf") and (bounds[0] > 0 or not positive)):
            raise VerispecError(f"{name} must be a finite range (low, high) with low <= high"
                                f"{' and low > 0' if positive else ''}, got {bounds!r}")

    def ranged(bounds, off: float):
        values = st.floats(float(bounds[0]), float(bounds[1]), allow_nan=False, allow_infinity=False)
        return st.just(off) | values if bounds[0] <= off <= bounds[1] else values

    return st.builds(Penalties, repetition=ranged(repetition, 1.0), frequency=ranged(additive, 0.0),
                     presence=ranged(additive, 0.0))
