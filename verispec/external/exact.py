"""Exact integration of a verification function over its uniforms, for rules that compare uniforms with thresholds.

A production verifier maps a vector of uniforms u in [0, 1)^U (and its fixed draft/target data) to one
outcome (node, token). Threshold tests (accept iff u_i < p/q) and inverse-CDF draws (the first token whose
cumulative mass exceeds u) make that map piecewise constant in each uniform, with breakpoints that depend on
the other uniforms only through which piece they lie in. Such a map is constant on the cells of a finite
partition of the cube into boxes, and its law is the sum of the cells' volumes by outcome: exact, up to the
float64 position of each breakpoint (which is the function's own, found to the last bit).

The partition is found adaptively, batched over every draft tree and every open box at once:

1. through an anchor point of each open box (its centre at first), scan every coordinate on ``scan`` points
   plus both ends of the box's side;
2. between neighbouring scan points whose outcomes differ, bisect on the float64 bit pattern (the order of
   non-negative floats is the order of their bit patterns) down to adjacent floats; where the midpoint's
   outcome differs from both ends, both halves are searched, so every change visible from the scan is found;
3. split the box along the lowest coordinate that changed, at the breakpoints found; a box in which no
   coordinate changes along its anchor lines is probed at ``probes`` random points: if all agree it is a
   cell, otherwise it is reopened with the disagreeing point as its anchor.

What it assumes, and when it refuses: a piece narrower than the scan spacing whose neighbours on both sides
have the same outcome can be missed (monotone uses - threshold tests and inverse-CDF draws - are never
missed, since their outcomes differ across every breakpoint). A rule that uses a uniform continuously (more
than ``max_breaks`` changes along one line) or whose breakpoints move continuously with other uniforms (an
exponential or Gumbel race between several uniforms: boxes keep splitting past ``max_boxes`` per tree) is
refused with ``NotPiecewiseConstantError`` naming the uniform; black-box mode handles such rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from verispec import budget
from verispec.errors import VerifierError


class NotPiecewiseConstantError(VerifierError):
    """The function is not of the threshold form exact mode integrates; the message says why."""


#: Largest number of points evaluated in one call of the function.
CHUNK = 1 << 16


@dataclass
class UniformUse:
    """What exact integration saw of one uniform: the most pieces on one line, and whether some line crossed
    three or more outcomes in one monotone sweep (an inverse-CDF categorical draw)."""

    most_pieces: int = 1
    categorical: bool = False
    #: Boxes split along this uniform (a race between uniforms keeps splitting along the same ones).
    splits: int = 0

    def describe(self) -> str:
        if self.most_pieces == 1:
            return "unused"
        if self.categorical:
            return f"categorical draw (inverse CDF), up to {self.most_pieces} pieces on a line"
        return f"threshold test, up to {self.most_pieces} pieces on a line"


@dataclass
class IntegrationStats:
    evaluations: int = 0
    cells: int = 0
    rounds: int = 0
    uses: list[UniformUse] = field(default_factory=list)


def _next_down(values: np.ndarray) -> np.ndarray:
    return np.nextafter(values, -np.inf)


def integrate(evaluate, num_rows: int, num_uniforms: int, num_codes: int, *, scan: int = 16, probes: int = 4,
              max_boxes: int = 4096, max_breaks: int = 512, seed: int = 0, name: str = "function",
              stats: IntegrationStats | None = None) -> np.ndarray:
    """The law [num_rows, num_codes] of ``evaluate(rows [M] int64, points [M, U] float64) -> codes [M] int64``
    over U = ``num_uniforms`` independent Uniform[0, 1) variables, row by row (see the module docstring)."""
    stats = stats if stats is not None else IntegrationStats()
    if not stats.uses:
        stats.uses = [UniformUse() for _ in range(num_uniforms)]
    law = np.zeros((num_rows, num_codes))
    if num_uniforms == 0:
        codes = _evaluate(evaluate, np.arange(num_rows), np.zeros((num_rows, 0)), stats)
        law[np.arange(num_rows), codes] = 1.0
        return law
    rng = np.random.default_rng(seed)
    rows = np.arange(num_rows, dtype=np.int64)
    lo = np.zeros((num_rows, num_uniforms))
    hi = np.ones((num_rows, num_uniforms))
    anchor = np.full((num_rows, num_uniforms), 0.5)
    retries = np.zeros(num_rows, dtype=np.int64)
    boxes_per_row = np.ones(num_rows, dtype=np.int64)
    while len(rows):
        budget.check("exact integration of an external function")
        stats.rounds += 1
        breaks = _find_breaks(evaluate, rows, lo, hi, anchor, scan, stats, max_breaks, name)
        split = np.zeros(len(rows), dtype=bool)
        new_rows, new_lo, new_hi, new_anchor, new_retries = [], [], [], [], []
        for coordinate in range(num_uniforms):
            found = breaks[coordinate]
            boxes = np.array(sorted(set(found)), dtype=np.int64)
            boxes = boxes[~split[boxes]] if len(boxes) else boxes
            if not len(boxes):
                continue
            split[boxes] = True
            stats.uses[coordinate].splits += len(boxes)
            for box in boxes:  # few boxes split per round, each into few pieces
                points = np.array(sorted(set(found[box])))
                edges = np.concatenate([[lo[box, coordinate]], points, [hi[box, coordinate]]])
                for start, end in zip(edges[:-1], edges[1:]):
                    if not end > start:
                        continue
                    box_lo, box_hi, box_anchor = lo[box].copy(), hi[box].copy(), anchor[box].copy()
                    box_lo[coordinate], box_hi[coordinate] = start, end
                    # inside the half-open [start, end): the rounded midpoint of adjacent floats may be end
                    box_anchor[coordinate] = min(start + (end - start) / 2, np.nextafter(end, -np.inf))
                    new_rows.append(rows[box])
                    new_lo.append(box_lo)
                    new_hi.append(box_hi)
                    new_anchor.append(box_anchor)
                    new_retries.append(0)
                boxes_per_row[rows[box]] += len(edges) - 2
        settled = np.flatnonzero(~split)
        if len(settled):
            reopened = _settle(evaluate, rows[settled], lo[settled], hi[settled], anchor[settled], probes, rng, law,
                               stats)
            for index in np.flatnonzero(reopened[:, 0] >= 0):
                box = settled[index]
                if retries[box] >= 3:
                    raise NotPiecewiseConstantError(
                        f"exact mode cannot integrate {name}: on draft tree #{int(rows[box])} its outcome changes "
                        "inside a box where no single uniform changes it; the uniforms are combined (e.g. summed or "
                        "raced against each other), not compared with thresholds: use --mode blackbox")
                new_rows.append(rows[box])
                new_lo.append(lo[box])
                new_hi.append(hi[box])
                new_anchor.append(reopened[index])
                new_retries.append(retries[box] + 1)
        if np.any(boxes_per_row > max_boxes):
            row = int(np.argmax(boxes_per_row))
            busiest = sorted(range(num_uniforms), key=lambda i: -stats.uses[i].splits)[:3]
            raise NotPiecewiseConstantError(
                f"exact mode cannot integrate {name}: draft tree #{row} needed more than {max_boxes} boxes, so its "
                f"breakpoints move continuously with the other uniforms (most splits along uniforms "
                f"{', '.join(map(str, sorted(busiest)))}; an exponential or Gumbel race over several uniforms does "
                "this): use --mode blackbox")
        if not new_rows:
            break
        rows = np.array(new_rows, dtype=np.int64)
        lo, hi, anchor = np.array(new_lo), np.array(new_hi), np.array(new_anchor)
        retries = np.array(new_retries, dtype=np.int64)
    return law


def _evaluate(evaluate, rows: np.ndarray, points: np.ndarray, stats: IntegrationStats) -> np.ndarray:
    out = np.empty(len(rows), dtype=np.int64)
    for start in range(0, len(rows), CHUNK):
        out[start:start + CHUNK] = evaluate(rows[start:start + CHUNK], points[start:start + CHUNK])
    stats.evaluations += len(rows)
    return out


def _find_breaks(evaluate, rows, lo, hi, anchor, scan, stats, max_breaks, name) -> list[dict[int, list[float]]]:
    """breaks[coordinate][box] = the breakpoints found along ``coordinate`` on the box's anchor line."""
    count, dims = lo.shape
    fractions = (np.arange(scan) + 0.5) / scan
    breaks: list[dict[int, list[float]]] = [dict() for _ in range(dims)]
    task_box, task_coordinate, task_a, task_b = [], [], [], []
    for coordinate in range(dims):
        low, high = lo[:, coordinate], hi[:, coordinate]
        line = np.concatenate([low[:, None], low[:, None] + (high - low)[:, None] * fractions[None, :],
                               _next_down(high)[:, None]], axis=1)  # [boxes, scan + 2]
        line = np.maximum.accumulate(np.clip(line, low[:, None], _next_down(high)[:, None]), axis=1)
        width = line.shape[1]
        points = np.repeat(anchor, width, axis=0)  # [boxes * width, U]
        points[:, coordinate] = line.reshape(-1)
        codes = _evaluate(evaluate, np.repeat(rows, width), points, stats).reshape(count, width)
        changes = codes[:, 1:] != codes[:, :-1]  # [boxes, width - 1]
        _record_uses(stats.uses[coordinate], codes, changes)
        box, step = np.nonzero(changes)
        task_box.append(box)
        task_coordinate.append(np.full(len(box), coordinate))
        task_a.append(line[box, step])
        task_b.append(line[box, step + 1])
    box = np.concatenate(task_box)
    coordinate = np.concatenate(task_coordinate)
    a, b = np.concatenate(task_a), np.concatenate(task_b)
    for box_index, coordinate_index, point in _bisect(evaluate, rows, anchor, box, coordinate, a, b, stats):
        found = breaks[coordinate_index].setdefault(box_index, [])
        found.append(point)
        if len(found) > max_breaks:
            raise NotPiecewiseConstantError(
                f"exact mode cannot integrate {name}: its outcome changes more than {max_breaks} times along uniform "
                f"{coordinate_index} on draft tree #{int(rows[box_index])}, a continuous use of that uniform "
                "rather than threshold tests or a categorical draw: use --mode blackbox")
    return breaks


def _record_uses(use: UniformUse, codes: np.ndarray, changes: np.ndarray) -> None:
    pieces = changes.sum(axis=1) + 1
    use.most_pieces = max(use.most_pieces, int(pieces.max(initial=1)))
    distinct = np.array([len(set(row)) for row in codes[pieces >= 3][:64]])
    if len(distinct) and np.any(distinct == pieces[pieces >= 3][:64]):
        use.categorical = True


def _bisect(evaluate, rows, anchor, box, coordinate, a, b, stats):
    """Every breakpoint between a and b along ``coordinate`` of each task's box (outcomes differ at the ends):
    yields (box, coordinate, first float at which the outcome differs from the left end's)."""
    a_bits, b_bits = a.view(np.int64).copy(), b.view(np.int64).copy()
    code_a = code_b = None
    while len(box):
        if code_a is None:
            code_a = _codes_at(evaluate, rows, anchor, box, coordinate, a_bits, stats)
            code_b = _codes_at(evaluate, rows, anchor, box, coordinate, b_bits, stats)
        done = b_bits - a_bits <= 1
        for index in np.flatnonzero(done):
            yield int(box[index]), int(coordinate[index]), float(b_bits[index:index + 1].view(np.float64)[0])
        keep = ~done
        box, coordinate = box[keep], coordinate[keep]
        a_bits, b_bits, code_a, code_b = a_bits[keep], b_bits[keep], code_a[keep], code_b[keep]
        if not len(box):
            return
        middle = a_bits + (b_bits - a_bits) // 2
        code_m = _codes_at(evaluate, rows, anchor, box, coordinate, middle, stats)
        left = code_m != code_a  # a change between a and the middle
        right = code_m != code_b  # a change between the middle and b
        box = np.concatenate([box[left], box[right]])
        coordinate = np.concatenate([coordinate[left], coordinate[right]])
        a_bits, b_bits = (np.concatenate([a_bits[left], middle[right]]),
                          np.concatenate([middle[left], b_bits[right]]))
        code_a, code_b = (np.concatenate([code_a[left], code_m[right]]),
                          np.concatenate([code_m[left], code_b[right]]))


def _codes_at(evaluate, rows, anchor, box, coordinate, bits, stats):
    points = anchor[box].copy()
    points[np.arange(len(box)), coordinate] = bits.view(np.float64)
    return _evaluate(evaluate, rows[box], points, stats)


def _settle(evaluate, rows, lo, hi, anchor, probes, rng, law, stats) -> np.ndarray:
    """Probe boxes with no change along their anchor lines; add the constant ones to ``law`` as cells. Returns
    [boxes, U]: a disagreeing probe point for each box that is not constant (rows of -1 for the cells)."""
    count, dims = lo.shape
    codes = _evaluate(evaluate, rows, anchor, stats)
    points = lo[:, None, :] + (hi - lo)[:, None, :] * rng.random((count, probes, dims))  # [boxes, probes, U]
    points = np.minimum(points, _next_down(hi)[:, None, :])
    probed = _evaluate(evaluate, np.repeat(rows, probes), points.reshape(-1, dims), stats).reshape(count, probes)
    agree = (probed == codes[:, None]).all(axis=1)
    cells = np.flatnonzero(agree)
    volume = np.prod(hi[cells] - lo[cells], axis=1)
    np.add.at(law, (rows[cells], codes[cells]), volume)
    stats.cells += len(cells)
    reopened = np.full((count, dims), -1.0)
    for index in np.flatnonzero(~agree):
        reopened[index] = points[index, int(np.argmax(probed[index] != codes[index]))]
    return reopened
