"""What the lossy-by-design rules of 2025-26 share (issue 67, item 3): recursive rejection sampling with hooks a
lossy rule changes, truncation-based verification, the wrapper that makes a node rule with parameters a registered
verifier, and the checks of their parameters.

Recursive rejection sampling (SpecInfer, Miao et al. 2024, arXiv 2305.09781, Alg. 2; on one child the token-level
rule of Leviathan et al. 2023, arXiv 2211.17192, Alg. 1) tests drafts x_1..x_m in order: r_1 = p, accept x_j with
probability min(1, r_j(x_j) / q(x_j)), else r_(j+1) = norm((r_j - q)+); every draft rejected: emit Y ~ r_(m+1).
"Collaborative" lossy rules (the classification of arXiv 2607.26627) change it in one of three places, each a hook
of ``RelaxedRejectionSolver``:

- ``verified(p, q)``: the law the coins test instead of p (static ensemble verification: w p + (1 - w) q);
- ``scale``: the coins read min(1, r_j(x) / (l q(x))), the residuals unchanged (lenience l);
- ``overrides(p, children)``: a native rejection of draft j is overridden, the draft accepted, when a condition on
  the target's law holds (MARS's margin).

"Truncation-based" rules (``TruncationSolver``) test no coin: a draft is accepted iff it lies in an allowed set of
the target's law (min-p, eta), and when every draft is rejected the token comes from p restricted to that set.

Decisions that read p through logs, sorts or thresholds are taken on float64 host values in every mode (as
``typical`` does), so float and exact mode take the same decisions; the coins and laws are exact in exact mode.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.errors import UnknownVerifierError
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver
from verispec.verifiers.tree_walk import TopDownVerifier

#: The draft laws the node-local lossy rules run on (a chain and i.i.d. children); not a claim of losslessness.
RELAXED_DRAFTS = frozenset({DraftLaw.IID_CHILDREN, DraftLaw.SINGLE_PATH})


def host(values) -> np.ndarray:
    """A float64 host copy of ``values`` (Fractions rounded), on which every decision is taken."""
    copy = backend.to_numpy(values)
    return copy.astype(np.float64) if copy.dtype == object else np.asarray(copy, dtype=np.float64)


def mask_like(decided: np.ndarray, like):
    """A host boolean array as a mask on the backend (and device) of ``like``."""
    if isinstance(like, np.ndarray):
        return decided
    return backend.namespace(like).asarray(decided, device=backend.device(like))


def number_like(value: float, like):
    """``value`` as a Fraction for an exact array (its exact binary value), else as a float."""
    return Fraction(value) if backend.is_exact(like) else float(value)


def checked_number(rule: str, key: str, value, low: float, high: float, *, open_low: bool = True,
                   integer: bool = False) -> float:
    """``value`` as a float (an int when ``integer``) if it is a finite number in the range (low, high] (or
    [low, high] when not ``open_low``); else UnknownVerifierError on one line naming the value and the range."""
    bracket = "(" if open_low else "["
    shown = f"{bracket}{low:g}, {'inf' if math.isinf(high) else f'{high:g}'}]"
    wanted = f"a whole number in {shown}" if integer else f"a number in {shown}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not (low < value if open_low else low <= value) or value > high \
            or (integer and value != int(value)):
        raise UnknownVerifierError(f"{rule}'s {key} must be {wanted}, got {value!r}")
    return int(value) if integer else float(value)


def parametrised_name(base: str, values: dict, defaults: dict) -> str:
    """``base`` at its defaults, else ``base(key=value,...)`` (the form the registry reads back)."""
    if all(values[key] == defaults[key] for key in values):
        return base
    return f"{base}({','.join(f'{key}={value:g}' for key, value in values.items())})"


class RelaxedRejectionSolver(NodeSolver):
    """Recursive rejection sampling with the hooks of the module docstring; with none changed it is SpecInfer."""

    valid_for = RELAXED_DRAFTS
    #: The lenience l of the coins min(1, r(x) / (l q(x))); 1 is SpecInfer.
    scale: float = 1.0

    def verified(self, p, q):
        """The law the coins test, [N, V] (p by default)."""
        return p

    def overrides(self, p_host: np.ndarray, children: np.ndarray) -> np.ndarray:
        """Whether a native rejection of each draft is overridden, [N, m] host booleans (never, by default), from
        p [N, V] and the child lists [N, m] on the host."""
        return np.zeros(children.shape, dtype=bool)

    def _coin(self, r_value, q_value, like):
        return ratio_min_one(r_value, number_like(self.scale, like) * q_value)

    def output_laws(self, p, q, children):
        forced = mask_like(self.overrides(host(p), backend.to_numpy(children)), p)  # [N, m]
        r = self.verified(p, q)                                   # r_1, [N, V]
        scale = number_like(self.scale, p)
        live = backend.ones(p.shape[:-1], p)                      # P(drafts 1..j-1 all rejected), [N]
        law = backend.zeros(p.shape, p)                           # [N, V]
        for j in range(children.shape[1]):
            token = children[:, j]
            native = backend.minimum_one(backend.take(r, token) / (scale * backend.take(q, token)))  # [N]
            accept = backend.where(forced[:, j], backend.one(native), native)
            law = backend.add_to_tokens(law, token, live * accept)
            live = live * (1 - accept)
            r = residual(r, q)
        return law + live[:, None] * r

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        forced = self.overrides(host(p)[None], np.array([children]))[0]
        current = self.verified(p[None], q[None])[0]
        for j, token in enumerate(children):
            if chooser.bernoulli(self._coin(current[token], q[token], p)):
                return token
            if forced[j]:  # the native rejection overridden: the draft is accepted anyway
                return token
            current = residual(current[None], q[None])[0]
        return chooser.categorical(current)


class TruncationSolver(NodeSolver):
    """Truncation-based verification (arXiv 2607.26627's family of SpecCascade and Medusa's typical acceptance): the
    drafts x_1..x_m are read in order and the first in the allowed set A(p) is accepted, no coin; none is: Y from p
    restricted to A(p), renormalised. A subclass gives ``allowed``."""

    valid_for = RELAXED_DRAFTS

    def allowed(self, p_host: np.ndarray) -> np.ndarray:
        """The allowed set of each row of p [N, V] (float64 host), [N, V] booleans."""
        raise NotImplementedError

    def _allowed(self, p) -> np.ndarray:
        kept = self.allowed(host(p))
        return kept | ~kept.any(axis=-1, keepdims=True)  # never empty: then every token

    def output_laws(self, p, q, children):
        kept = self._allowed(p)                                                   # [N, V] host
        inside = mask_like(np.take_along_axis(kept, backend.to_numpy(children), axis=-1), p)  # [N, m]
        live = backend.ones(p.shape[:-1], p)                      # P(drafts 1..j-1 all outside A), [N]
        law = backend.zeros(p.shape, p)
        for j in range(children.shape[1]):
            accept = backend.where(inside[:, j], live, backend.zero(live))
            law = backend.add_to_tokens(law, children[:, j], accept)
            live = live - accept
        truncated = normalize(backend.where(mask_like(kept, p), p, backend.zero(p)))  # [N, V]
        return law + live[:, None] * truncated

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        kept = self._allowed(p[None])[0]
        for token in children:
            if kept[token]:
                return token
        return chooser.categorical(normalize(backend.where(kept, p, backend.zero(p))))


class RelaxedRule(TopDownVerifier):
    """A node-local lossy rule with parameters as a registered verifier: the top-down walk of its solver (a leaf
    emits its bonus token from p), reached by name and as ``name(key=value,...)`` (``parameters``), never in
    ``all`` (``lossy_by_design``). A subclass names ``base``, ``parameters``, ``defaults`` and ``solver_class``."""

    lossy_by_design = True
    base: str
    parameters: tuple[str, ...]
    defaults: dict
    solver_class: type

    def __init__(self, name: str | None = None, **values):
        values = {key: values.get(key, self.defaults[key]) for key in self.parameters}
        solver = self.solver_class(**values)
        super().__init__(solver)
        for key in self.parameters:
            setattr(self, key, getattr(solver, key))
        self.name = name or parametrised_name(self.base, {key: getattr(self, key) for key in self.parameters},
                                              self.defaults)


__all__ = ["RELAXED_DRAFTS", "RelaxedRejectionSolver", "RelaxedRule", "TruncationSolver", "checked_number", "host",
           "mask_like", "number_like", "parametrised_name"]
