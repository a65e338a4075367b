"""Where the optimum of a grid of delayed trees lies (issue 78, item 2): the oracle's choices on nested grids.

A verdict taken on a grid whose edge holds the selectors' choices reports the best rule *on that grid*. Whether a
wider grid would hold the optimum, and what widening would gain, is read from labels on a wider *probe* grid at a
sample of roots (``experiments/label_cost.py`` keeps them; ``experiments/grid_reach.py`` reads them). For each rule
and each *candidate* grid inside the probe grid (its K, L1 and L2 values among the probe's):

* the oracle's choices among that rule's actions of the candidate (``verispec.selector.evaluate.oracle_choice``: the
  per-root actions of the largest total throughput sum E / sum T over the roots);
* their share on the candidate's edge (``verispec.selector.verdict.edge_shares``: its largest K, L1 or L2);
* the oracle's throughput there, and the probe grid's oracle's over it: what the candidate's edge leaves at those
  roots.

The oracle is the selectors' ceiling, not a selector: its share on an edge says where the best choices lie, which a
selector learns towards. Chosen and scored on the same noisy labels it fits their noise, the more the more actions
it is offered (the winner's curse: a wider grid would seem to gain by that alone). Given each root's labels over the
two halves of its sampled combs (``halves``), it is *cross-fitted* as the study's oracle is
(``verispec.selector.evaluate.crossfit_oracle_totals``): chosen on one half, scored on the other, and the two ways
averaged, so a candidate's throughput, and the probe's gain over it, are unbiased for a policy that chooses from half
the combs; the in-sample gain is kept beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from verispec.selector.actions import ActionGrid, SelectorError, axes_text


@dataclass(frozen=True)
class Candidate:
    """A grid inside the probe grid: the K, L1 and L2 values it offers (each rule's actions with those values)."""

    name: str
    ks: tuple[int, ...]
    l1s: tuple[int, ...]
    l2s: tuple[int, ...]

    def holds(self, action) -> bool:
        return action.k in self.ks and action.l1 in self.l1s and action.l2 in self.l2s

    def describe(self) -> str:
        return axes_text(self.ks, self.l1s, self.l2s)


def candidate_actions(grid: ActionGrid, verifier: str, candidate: Candidate) -> list[int]:
    """The indices of ``grid``'s actions of ``verifier`` that ``candidate`` offers; a one-line SelectorError where
    the candidate names a value the probe grid lacks (its labels cannot say anything there)."""
    for axis, values, offered in (("K", candidate.ks, grid.ks), ("L1", candidate.l1s, grid.l1s),
                                  ("L2", candidate.l2s, grid.l2s)):
        outside = sorted(set(values) - set(offered))
        if outside:
            raise SelectorError(f"the candidate grid {candidate.name!r} offers {axis} = {outside[0]}, which the probe "
                                f"grid {grid.describe()} does not label; give candidates inside it")
    found = [index for index, action in enumerate(grid.actions) if action.verifier == verifier and
             candidate.holds(action)]
    if not found:
        raise SelectorError(f"the candidate grid {candidate.name!r} holds no action of {verifier!r} in the probe grid")
    return found


def grid_reach(efficiency: np.ndarray, grid: ActionGrid, times: np.ndarray, candidates: Sequence[Candidate],
               verifiers: Sequence[str] | None = None, halves: np.ndarray | None = None) -> dict:
    """{verifier: {candidate name: {"edge": edge shares of the oracle's choices, "throughput": sum E / sum T of
    them, "probe_gain": the probe grid's oracle throughput over this one's, "in_sample_gain": the same of the oracles
    chosen and scored on ``efficiency``, "chosen": [{"k", "l1", "l2", "share"}] (where the choices lie, most frequent
    first)}}} from labels ``efficiency`` [N, A] of ``grid``'s actions at N roots and block times ``times`` [A] (one
    latency regime's, ``verispec.selector.actions.action_times``). With ``halves`` [2, N, A] (each root's labels over
    each half of its combs) the oracle is cross-fitted (module docstring): its choices are both halves' and its
    throughput the mean of the two scorings; without, it is the in-sample oracle of ``efficiency``."""
    from verispec.selector.verdict import edge_shares

    efficiency, times = np.asarray(efficiency, dtype=np.float64), np.asarray(times, dtype=np.float64)
    if efficiency.ndim != 2 or efficiency.shape[1] != len(grid.actions) or times.shape != (len(grid.actions),):
        raise SelectorError(f"labels [N, A] and times [A] of the grid's {len(grid.actions)} actions are needed, got "
                            f"{list(efficiency.shape)} and {list(times.shape)}")
    if efficiency.shape[0] == 0 or not np.isfinite(efficiency).all() or not (times > 0).all():
        raise SelectorError("the labels must be finite at one root at least, and every block time positive")
    if halves is not None:
        halves = np.asarray(halves, dtype=np.float64)
        if halves.shape != (2, *efficiency.shape) or not np.isfinite(halves).all():
            raise SelectorError(f"the halves' labels must be finite, [2, N, A] = {[2, *efficiency.shape]}, got "
                                f"{list(halves.shape)}")
    probe = Candidate("probe", grid.ks, grid.l1s, grid.l2s)
    out: dict[str, dict] = {}
    for verifier in verifiers if verifiers is not None else grid.verifiers:
        best = _oracle(efficiency, times, candidate_actions(grid, verifier, probe), halves)
        out[verifier] = {}
        for candidate in candidates:
            allowed = candidate_actions(grid, verifier, candidate)
            found = _oracle(efficiency, times, allowed, halves)
            out[verifier][candidate.name] = {"grid": candidate.describe(),
                                             "edge": edge_shares(grid.actions, found["chosen"], allowed),
                                             "throughput": found["rate"], "probe_gain": best["rate"] / found["rate"],
                                             "in_sample_gain": best["in_sample"] / found["in_sample"],
                                             "chosen": _where(grid, found["chosen"])}
    return out


def _oracle(efficiency: np.ndarray, times: np.ndarray, allowed: list[int], halves: np.ndarray | None) -> dict:
    """{"chosen": the oracle's choices [N] (in-sample) or [2N] (each half's), "rate": its throughput (cross-fitted
    where ``halves`` are given: ``verispec.selector.evaluate.crossfit_oracle``), "in_sample": the in-sample oracle's
    throughput}."""
    from verispec.selector.evaluate import crossfit_oracle, oracle_choice

    chosen = oracle_choice(efficiency, times, allowed)  # [N]
    in_sample = _oracle_rate(efficiency, times, chosen)
    if halves is None:
        return {"chosen": chosen, "rate": in_sample, "in_sample": in_sample}
    tokens, spent, picks = crossfit_oracle(halves, times, allowed)
    return {"chosen": picks.reshape(-1), "rate": float(tokens.sum() / spent.sum()), "in_sample": in_sample}


def _oracle_rate(efficiency: np.ndarray, times: np.ndarray, chosen: np.ndarray) -> float:
    rows = np.arange(efficiency.shape[0])
    return float(efficiency[rows, chosen].sum() / times[chosen].sum())


def _where(grid: ActionGrid, chosen: np.ndarray) -> list[dict]:
    values, counts = np.unique(np.asarray(chosen), return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return [{"k": grid.actions[int(values[i])].k, "l1": grid.actions[int(values[i])].l1,
             "l2": grid.actions[int(values[i])].l2, "share": float(counts[i] / counts.sum())} for i in order]


def candidates_from(spec: Mapping[str, Mapping[str, Sequence[int]]]) -> list[Candidate]:
    """Candidates from {name: {"ks": [...], "l1s": [...], "l2s": [...]}} (how a result file records them)."""
    return [Candidate(name, tuple(int(v) for v in axes["ks"]), tuple(int(v) for v in axes["l1s"]),
                      tuple(int(v) for v in axes["l2s"])) for name, axes in spec.items()]


__all__ = ["Candidate", "candidate_actions", "candidates_from", "grid_reach"]
