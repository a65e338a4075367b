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
2. between neighbouring scan points whose outcomes differ, bisect down to adjacent float64s (the order of
   non-negative floats is the order of their bit patterns), probing float32 values first, where thresholds
   computed in float32 lie (``_bisect``); where a probe's outcome differs from both ends, both halves are
   searched, so every change visible from the scan is found;
3. split the box along the lowest coordinate that changed, at the breakpoints found; a box in which no
   coordinate changes along its anchor lines is probed at ``probes`` random points: if all agree it is a
   cell, otherwise it is reopened with the disagreeing point as its anchor.

What it assumes, and when it refuses: a piece narrower than the scan spacing whose neighbours on both sides
have the same outcome can be missed (monotone uses - threshold tests and inverse-CDF draws - are never
missed on a line, since their outcomes differ across every breakpoint). Off the anchor's lines, a uniform's
piece may choose between two paths that end in the same outcome on every scanned line but read the other
uniforms differently elsewhere in the box; only the random probes would see that. Where ``evaluate`` labels
each point with its path (RNG capture does: the draws made and their discrete results, see ``integrate``),
the label changes along that uniform and the box is split there; a function handed its uniforms shows no
path, and the assumption stands. The partition assumes that a breakpoint along
one uniform depends on the others only through which of their pieces they lie in, and every split checks it
(``_check_breakpoints_hold``): each breakpoint is read again with each other uniform moved by tiny amounts
either way; one that moves with them at every scale is a race or a sum of uniforms, refused in the first
rounds with both uniforms named. A rule that uses a uniform continuously (more than ``max_breaks`` changes
along one line) is refused too; and as a last bound, so are more than ``max_boxes`` boxes for one tree or
``max_total_boxes`` for the batch. Each refusal is a ``NotPiecewiseConstantError`` naming the uniform;
black-box mode handles such rules.

Savings. A split box's pieces inherit the breakpoints found along the other uniforms: one that still
explains a scan interval (outcome l just below it, r at it) is taken with two evaluations instead of a
bisection. An ``evaluate`` that reports which uniforms each run read (RNG capture hands them out in
order, so a run cannot change with one it never read) has no line scanned along the others, and where it
reports a draw's breakpoints they are scanned too, or alone (``AllBreaks``). A change between two adjacent
floats of a scan is its breakpoint, with no evaluation more.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from verispec.errors import VerifierError
from verispec.guard import budget


class NotPiecewiseConstantError(VerifierError):
    """The function is not of the threshold form exact mode integrates; the message says why."""


#: Largest number of points evaluated in one call of the function.
CHUNK = 1 << 16
#: Boxes (cells and open boxes, over every draft tree of a batch) past which integration stops.
MAX_TOTAL_BOXES = 1 << 17
#: Breakpoints per split box whose stability against the other uniforms is checked.
RACE_CHECKS = 2
#: Exponents k of the moves side * 2^-k of another uniform a breakpoint is checked against (see
#: ``_check_breakpoints_hold``).
BREAKPOINT_SCALES = (12, 20, 28, 36)


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

    def merge(self, other: IntegrationStats) -> None:
        """Add what ``other`` (another integration) saw: counts summed, each uniform's uses combined."""
        self.evaluations += other.evaluations
        self.cells += other.cells
        self.rounds += other.rounds
        self.uses.extend(UniformUse() for _ in range(len(other.uses) - len(self.uses)))
        for mine, theirs in zip(self.uses, other.uses):
            mine.most_pieces = max(mine.most_pieces, theirs.most_pieces)
            mine.categorical = mine.categorical or theirs.categorical
            mine.splits += theirs.splits


@dataclass(frozen=True)
class AllBreaks:
    """Every point where a run can change along one uniform (``evaluate``'s third part): one discrete draw read the
    uniform and its result is all the code learned of it (an inverse-CDF categorical or integer draw fed by RNG
    capture), so along that uniform's line the draws before it, its law and its pieces stay as they are. The line
    is scanned at these points, the floats below them and its ends alone: each piece holds one of them, and each
    change lies between two adjacent floats."""

    points: np.ndarray


def _next_down(values: np.ndarray) -> np.ndarray:
    return np.nextafter(values, -np.inf)


@dataclass
class _Boxes:
    """The open boxes of one round, over every draft tree of the batch."""

    rows: np.ndarray  # [B] int64: the draft tree of each box
    lo: np.ndarray  # [B, U]
    hi: np.ndarray  # [B, U]
    anchor: np.ndarray  # [B, U]: the point whose lines are scanned
    retries: np.ndarray  # [B] int64: times the box was reopened by a disagreeing probe
    hints: list[dict]  # [B]: breakpoints inherited from the box it was split from (``_find_breaks``)


@dataclass
class _NextBoxes:
    """The boxes of the next round, gathered one at a time: split pieces first, then reopened boxes."""

    rows: list = field(default_factory=list)
    lo: list = field(default_factory=list)
    hi: list = field(default_factory=list)
    anchor: list = field(default_factory=list)
    retries: list = field(default_factory=list)
    hints: list = field(default_factory=list)

    def add(self, row, lo, hi, anchor, retries, hints) -> None:
        for values, value in ((self.rows, row), (self.lo, lo), (self.hi, hi), (self.anchor, anchor),
                              (self.retries, retries), (self.hints, hints)):
            values.append(value)

    def boxes(self) -> _Boxes:
        return _Boxes(np.array(self.rows, dtype=np.int64), np.array(self.lo), np.array(self.hi),
                      np.array(self.anchor), np.array(self.retries, dtype=np.int64), self.hints)


def integrate(evaluate, num_rows: int, num_uniforms: int, num_codes: int, *, scan: int = 16, probes: int = 4,
              max_boxes: int = 4096, max_breaks: int = 512, max_total_boxes: int = MAX_TOTAL_BOXES,
              check_races: bool = True, seed: int = 0, name: str = "function",
              stats: IntegrationStats | None = None, bisect_depth: int = 1) -> np.ndarray:
    """The law [num_rows, num_codes] of ``evaluate(rows [M] int64, points [M, U] float64) -> codes [M] int64``
    over U = ``num_uniforms`` independent Uniform[0, 1) variables, row by row (see the module docstring).

    ``evaluate`` may also return ``(codes, used)`` with ``used`` [M, U] bool: the uniforms each point's run read
    (a function fed through RNG capture reads its uniforms in order, so its run, and outcome, cannot change with
    one it did not read); lines along unread uniforms are then not scanned. A code may carry a label in
    multiples of ``num_codes`` (code + num_codes * label: the run's path, ``runner.Runner.integrand``): the
    partition keeps different labels apart, and the law counts code % num_codes. A third part, [M] of {uniform:
    breakpoints}, names points where a run changes along a uniform: scanned beside the others, or alone where they
    are ``AllBreaks``. ``bisect_depth``: the cuts of a bisection step, made in one call (``_bisect``)."""
    stats = stats if stats is not None else IntegrationStats()
    stats.uses.extend(UniformUse() for _ in range(num_uniforms - len(stats.uses)))
    law = np.zeros((num_rows, num_codes))
    if num_uniforms == 0:
        codes = _evaluate(evaluate, np.arange(num_rows), np.zeros((num_rows, 0)), stats)[0]
        law[np.arange(num_rows), codes % num_codes] = 1.0
        return law
    rng = np.random.default_rng(seed)
    # the whole cube of each draft tree, anchored at its centre
    boxes = _Boxes(np.arange(num_rows, dtype=np.int64), np.zeros((num_rows, num_uniforms)),
                   np.ones((num_rows, num_uniforms)), np.full((num_rows, num_uniforms), 0.5),
                   np.zeros(num_rows, dtype=np.int64), [{} for _ in range(num_rows)])
    boxes_per_row = np.ones(num_rows, dtype=np.int64)
    while len(boxes.rows):
        budget.check("exact integration of an external function")
        stats.rounds += 1
        anchor_codes, used, known = _evaluate(evaluate, boxes.rows, boxes.anchor, stats)
        used = np.ones(boxes.lo.shape, dtype=bool) if used is None else used
        breaks = _find_breaks(evaluate, boxes.rows, boxes.lo, boxes.hi, boxes.anchor, used, scan, stats, max_breaks,
                              name, boxes.hints, known, bisect_depth)
        split_along = _split_coordinates(breaks, len(boxes.rows))
        if check_races:
            _check_breakpoints_hold(evaluate, boxes.rows, boxes.lo, boxes.hi, boxes.anchor, used, breaks, split_along,
                                    stats, name)
        following = _NextBoxes()
        _split(boxes, breaks, split_along, following, boxes_per_row, stats)
        _settle_or_reopen(evaluate, boxes, np.flatnonzero(split_along < 0), anchor_codes, probes, rng, law, stats,
                          following, name)
        _check_box_counts(boxes_per_row, max_boxes, max_total_boxes, stats.uses[:num_uniforms], name)
        if not following.rows:
            break
        boxes = following.boxes()
    return law


def _split_coordinates(breaks: list[dict[int, list]], count: int) -> np.ndarray:
    """[B] int64: the lowest coordinate along which each box's anchor line changed outcome (-1: none)."""
    split_along = np.full(count, -1, dtype=np.int64)
    for coordinate in range(len(breaks)):
        for box in breaks[coordinate]:
            if split_along[box] < 0:
                split_along[box] = coordinate
    return split_along


def _split(boxes: _Boxes, breaks, split_along: np.ndarray, following: _NextBoxes, boxes_per_row: np.ndarray,
           stats: IntegrationStats) -> None:
    """Split each box with a change along ``split_along`` at the breakpoints found there; the pieces go to
    ``following``, each anchored at its centre along that coordinate and inheriting the other breakpoints."""
    for coordinate in range(len(breaks)):
        split = np.flatnonzero(split_along == coordinate)
        if not len(split):
            continue
        stats.uses[coordinate].splits += len(split)
        for box in split:  # few boxes split per round, each into few pieces
            points = np.array(sorted({point for point, _, _ in breaks[coordinate][box]}))
            # the breakpoints found along the other uniforms, for the pieces' own lines (_find_breaks)
            inherited = {other: found[box] for other, found in enumerate(breaks)
                         if other != coordinate and box in found}
            edges = np.concatenate([[boxes.lo[box, coordinate]], points, [boxes.hi[box, coordinate]]])
            for start, end in zip(edges[:-1], edges[1:]):
                if not end > start:
                    continue
                box_lo, box_hi, box_anchor = boxes.lo[box].copy(), boxes.hi[box].copy(), boxes.anchor[box].copy()
                box_lo[coordinate], box_hi[coordinate] = start, end
                # inside the half-open [start, end): the rounded midpoint of adjacent floats may be end
                box_anchor[coordinate] = min(start + (end - start) / 2, np.nextafter(end, -np.inf))
                following.add(boxes.rows[box], box_lo, box_hi, box_anchor, 0, inherited)
            boxes_per_row[boxes.rows[box]] += len(edges) - 2


def _settle_or_reopen(evaluate, boxes: _Boxes, settled: np.ndarray, anchor_codes: np.ndarray, probes: int, rng,
                      law: np.ndarray, stats: IntegrationStats, following: _NextBoxes, name: str) -> None:
    """Probe the ``settled`` boxes (no change along their anchor lines): the constant ones are added to ``law`` as
    cells (``_settle``), the others go to ``following`` anchored at a disagreeing probe; refused past 3 retries."""
    if not len(settled):
        return
    reopened = _settle(evaluate, boxes.rows[settled], boxes.lo[settled], boxes.hi[settled], boxes.anchor[settled],
                       anchor_codes[settled], probes, rng, law, stats)
    for index in np.flatnonzero(reopened[:, 0] >= 0):
        box = settled[index]
        if boxes.retries[box] >= 3:
            raise NotPiecewiseConstantError(
                f"exact mode cannot integrate {name}: on draft tree #{int(boxes.rows[box])} its outcome changes "
                "inside a box where no single uniform changes it; the uniforms are combined (e.g. summed or "
                "raced against each other), not compared with thresholds: use --mode blackbox")
        following.add(boxes.rows[box], boxes.lo[box], boxes.hi[box], reopened[index], boxes.retries[box] + 1,
                      boxes.hints[box])


def _check_box_counts(boxes_per_row: np.ndarray, max_boxes: int, max_total_boxes: int, uses: list[UniformUse],
                      name: str) -> None:
    """Refuse a partition past ``max_boxes`` boxes for one draft tree or ``max_total_boxes`` for the batch (the
    message names the uniforms of ``uses`` split along most)."""
    if np.any(boxes_per_row > max_boxes) or boxes_per_row.sum() > max_total_boxes:
        row = int(np.argmax(boxes_per_row))
        busiest = sorted(range(len(uses)), key=lambda i: -uses[i].splits)[:3]
        where = (f"draft tree #{row} needed more than {max_boxes} boxes" if boxes_per_row[row] > max_boxes else
                 f"the {len(boxes_per_row)} draft trees needed more than {max_total_boxes} boxes together")
        raise NotPiecewiseConstantError(
            f"exact mode cannot integrate {name}: {where}, so its breakpoints move continuously with the "
            f"other uniforms (most splits along uniforms {', '.join(map(str, sorted(busiest)))}; an "
            "exponential or Gumbel race over several uniforms does this): use --mode blackbox")


def _evaluate(evaluate, rows: np.ndarray, points: np.ndarray, stats: IntegrationStats):
    """(codes [M] int64, used [M, U] bool or None, known [M] of {uniform: breakpoints} or None) at ``points``
    [M, U], in chunks of at most CHUNK rows."""
    out = np.empty(len(rows), dtype=np.int64)
    used = known = None
    for start in range(0, len(rows), CHUNK):
        result = evaluate(rows[start:start + CHUNK], points[start:start + CHUNK])
        if isinstance(result, tuple):
            result, read, *rest = result
            if used is None:
                used = np.ones(points.shape, dtype=bool)
            used[start:start + CHUNK] = read
            if rest:
                known = (known or []) + list(rest[0])
        out[start:start + CHUNK] = result
    stats.evaluations += len(rows)
    if known is not None and len(known) != len(rows):
        known = None  # a chunk that reported none: no points are known
    return out, used, known


def _codes(evaluate, rows, points, stats) -> np.ndarray:
    return _evaluate(evaluate, rows, points, stats)[0]


def _find_breaks(evaluate, rows, lo, hi, anchor, used, scan, stats, max_breaks, name,
                 hints: list[dict], known: list[dict] | None = None, depth: int = 1) -> list[dict[int, list]]:
    """breaks[coordinate][box] = [(breakpoint, outcome just below it, outcome at it), ...] found along
    ``coordinate`` on the box's anchor line (lines along uniforms the anchor's run did not read are skipped).

    The line is scanned (``_lines``: ``scan`` points, or a run's ``AllBreaks`` alone); a change between two
    adjacent floats of it is its breakpoint, read off the scan. ``hints[box][coordinate]``: breakpoints found on
    the line of the box it was split from. Between two scan points whose outcomes differ (l, then r), a hint b
    with outcome l just below b and r at b is taken without bisection (two evaluations instead of about fifty),
    and the two halves it leaves, whose ends have equal outcomes, are not searched. So a piece hidden inside one
    of them (l | x | l | r) is missed where bisection might have found it (when one of its midpoints lands in x).
    That is no new assumption: a piece narrower than the scan spacing between equal outcomes is what the module
    docstring already says can be missed, and bisection misses it too whenever no midpoint lands in it.
    Otherwise the interval is bisected (``_bisect``, ``depth`` cuts a step)."""
    breaks: list[dict[int, list]] = [dict() for _ in range(lo.shape[1])]
    groups = [(coordinate, group, line) for coordinate in range(lo.shape[1])
              for group, line in _lines(lo, hi, np.flatnonzero(used[:, coordinate]), coordinate, known, scan)]
    if not groups:
        return breaks
    tasks = []  # per line group: (box, coordinate, a, b, outcome at a, outcome at b) of each change between scan points
    for (coordinate, group, line), group_codes in zip(groups, _scanned(evaluate, rows, anchor, groups, stats)):
        changes = group_codes[:, 1:] != group_codes[:, :-1]  # [boxes, width - 1]
        _record_uses(stats.uses[coordinate], group_codes, changes)
        box, step = np.nonzero(changes)
        tasks.append((group[box], np.full(len(box), coordinate), line[box, step], line[box, step + 1],
                      group_codes[box, step], group_codes[box, step + 1]))
    box, coordinate, a, b, code_a, code_b = (np.concatenate(part) for part in zip(*tasks))
    adjacent = b.view(np.int64) - a.view(np.int64) <= 1  # non-negative floats: the order of their bits
    found_points = [(int(box[task]), int(coordinate[task]), float(b[task]), int(code_a[task]), int(code_b[task]))
                    for task in np.flatnonzero(adjacent)]
    box, coordinate, a, b, code_a, code_b = (part[~adjacent] for part in (box, coordinate, a, b, code_a, code_b))
    hinted = _take_hints(evaluate, rows, anchor, box, coordinate, a, b, code_a, code_b, hints, stats)
    bisected = np.ones(len(box), dtype=bool)
    for task, _, _, _ in hinted:
        bisected[task] = False
    found_points += [(int(box[task]), int(coordinate[task]), point, left, right) for task, point, left, right in hinted]
    for box_index, coordinate_index, point, left, right in itertools.chain(
            found_points, _bisect(evaluate, rows, anchor, box[bisected], coordinate[bisected], a[bisected],
                                  b[bisected], code_a[bisected], code_b[bisected], stats, depth)):
        found = breaks[coordinate_index].setdefault(box_index, [])
        found.append((point, left, right))
        if len(found) > max_breaks:
            raise NotPiecewiseConstantError(
                f"exact mode cannot integrate {name}: its outcome changes more than {max_breaks} times along uniform "
                f"{coordinate_index} on draft tree #{int(rows[box_index])}, a continuous use of that uniform "
                "rather than threshold tests or a categorical draw: use --mode blackbox")
    return breaks


def _check_breakpoints_hold(evaluate, rows, lo, hi, anchor, used, breaks, split_along, stats, name) -> None:
    """Refuse, at once, a box about to be split at a breakpoint that moves continuously with another uniform.

    The partition exact mode builds assumes that a breakpoint along uniform c depends on another uniform j only
    through which of j's pieces the anchor lies in. So for each breakpoint b (up to RACE_CHECKS per split box;
    outcomes l just below it and r at it) and each other uniform j the anchor's run read, the outcomes at
    b^- and b are read again with u_j moved by eps = side_j 2^-k, up and down: a threshold rule gives (l, r)
    back unless a breakpoint of j lies within eps of the anchor. Moved in both directions at k = 12, and then
    at k = 20, 28 and 36 too, the breakpoint is taken to move continuously (a threshold rule would need
    breakpoints of j on both sides of its anchor within side_j 2^-36); that is an exponential or Gumbel race or
    a sum of uniforms, refused with the uniforms named, in the first rounds rather than after thousands of
    boxes."""
    task_box, task_c, task_b, task_l, task_r = [], [], [], [], []
    for box in np.flatnonzero(split_along >= 0):
        coordinate = int(split_along[box])
        for point, left, right in sorted(breaks[coordinate][box])[:RACE_CHECKS]:
            task_box.append(box)
            task_c.append(coordinate)
            task_b.append(point)
            task_l.append(left)
            task_r.append(right)
    if not task_box:
        return
    dims = lo.shape[1]
    box = np.repeat(np.array(task_box), dims)
    c = np.repeat(np.array(task_c), dims)
    b = np.repeat(np.array(task_b), dims)
    left = np.repeat(np.array(task_l), dims)
    right = np.repeat(np.array(task_r), dims)
    j = np.tile(np.arange(dims), len(task_box))
    keep = (j != c) & used[box, j]
    box, c, b, left, right, j = box[keep], c[keep], b[keep], left[keep], right[keep], j[keep]
    for exponent in BREAKPOINT_SCALES:
        if not len(box):
            return
        count, parts, insides = len(box), [], []
        for direction in (1.0, -1.0):  # both moves read in one evaluation (one call of a batched function)
            value = anchor[box, j] + direction * (hi[box, j] - lo[box, j]) * 2.0 ** -exponent
            insides.append((value >= lo[box, j]) & (value < hi[box, j]) & (value != anchor[box, j]))
            points = anchor[box].copy()
            points[np.arange(count), j] = value
            below, at = points.copy(), points
            below[np.arange(count), c] = _next_down(b)
            at[np.arange(count), c] = b
            parts += [below, at]
        codes = _codes(evaluate, np.tile(rows[box], 4), np.concatenate(parts), stats).reshape(4, count)
        moved = np.ones(count, dtype=bool)
        for side, inside in enumerate(insides):
            moved &= inside & ((codes[2 * side] != left) | (codes[2 * side + 1] != right))
        box, c, b, left, right, j = box[moved], c[moved], b[moved], left[moved], right[moved], j[moved]
    if len(box):
        raise NotPiecewiseConstantError(
            f"exact mode cannot integrate {name}: on draft tree #{int(rows[box[0]])} the breakpoint of uniform "
            f"{int(c[0])} at {float(b[0]):.17g} moves when uniform {int(j[0])} moves by as little as "
            f"2^-{BREAKPOINT_SCALES[-1]} of its range, either way, so the uniforms are combined continuously (an "
            "exponential or Gumbel race between them, or a sum), not compared with thresholds: use --mode blackbox")


def _take_hints(evaluate, rows, anchor, box, coordinate, a, b, code_a, code_b, hints, stats) -> list[tuple]:
    """[(task, breakpoint, outcome below, outcome at)] for the scan intervals (a, b] that one inherited breakpoint
    explains (see ``_find_breaks``)."""
    task, point = [], []
    for index in range(len(box)):
        for candidate, _, _ in hints[box[index]].get(int(coordinate[index]), ()):
            if a[index] < candidate <= b[index]:
                task.append(index)
                point.append(candidate)
    if not task:
        return []
    task, point = np.array(task), np.array(point)
    points = anchor[box[task]].copy()
    below = points.copy()
    below[np.arange(len(task)), coordinate[task]] = _next_down(point)
    points[np.arange(len(task)), coordinate[task]] = point
    codes = _codes(evaluate, np.concatenate([rows[box[task]]] * 2), np.concatenate([below, points]), stats)
    explains = (codes[:len(task)] == code_a[task]) & (codes[len(task):] == code_b[task])
    taken: dict[int, tuple] = {}
    for index in np.flatnonzero(explains):
        taken.setdefault(int(task[index]), (int(task[index]), float(point[index]), int(code_a[task[index]]),
                                            int(code_b[task[index]])))
    return list(taken.values())


def _record_uses(use: UniformUse, codes: np.ndarray, changes: np.ndarray) -> None:
    pieces = changes.sum(axis=1) + 1
    use.most_pieces = max(use.most_pieces, int(pieces.max(initial=1)))
    distinct = np.array([len(set(row)) for row in codes[pieces >= 3][:64]])
    if len(distinct) and np.any(distinct == pieces[pieces >= 3][:64]):
        use.categorical = True


def _scanned(evaluate, rows, anchor, groups: list[tuple], stats) -> list[np.ndarray]:
    """The outcomes [boxes, W] at each line group's points ([(coordinate, boxes, line [boxes, W])]), evaluated
    together in calls of about ``CHUNK`` points: a batched function's round is one call, not one a uniform."""
    out, pending, size = [], [], 0
    for index, (coordinate, group, line) in enumerate(groups):
        pending.append((coordinate, group, line))
        size += line.size
        if size < CHUNK and index + 1 < len(groups):
            continue
        points = np.concatenate([np.repeat(anchor[group], line.shape[1], axis=0) for _, group, line in pending])
        start = 0
        for axis, _, line in pending:
            points[start:start + line.size, axis] = line.reshape(-1)
            start += line.size
        codes = _codes(evaluate, np.concatenate([np.repeat(rows[group], line.shape[1]) for _, group, line in pending]),
                       points, stats)
        start = 0
        for _, _, line in pending:
            out.append(codes[start:start + line.size].reshape(line.shape))
            start += line.size
        pending, size = [], 0
    return out


def _lines(lo, hi, active: np.ndarray, coordinate: int, known: list[dict] | None, scan: int) -> list[tuple]:
    """The lines along ``coordinate`` of the boxes ``active``, in groups [(boxes, points [boxes, W])], inside [lo,
    hi) and non-decreasing: a box whose anchor's run knows all its breakpoints (``AllBreaks``) gets the ends and each
    with the float below it; any other ``scan`` points, the ends and what its run knows (``_with_known``)."""
    entries = [None if known is None else known[box].get(coordinate) for box in active]
    complete = np.array([isinstance(entry, AllBreaks) for entry in entries], dtype=bool)
    groups = []
    if not complete.all():
        boxes = active[~complete]
        low, high = lo[boxes, coordinate], hi[boxes, coordinate]
        fractions = (np.arange(scan) + 0.5) / scan
        line = np.concatenate([low[:, None], low[:, None] + (high - low)[:, None] * fractions[None, :],
                               _next_down(high)[:, None]], axis=1)  # [boxes, scan + 2]
        line = np.maximum.accumulate(np.clip(line, low[:, None], _next_down(high)[:, None]), axis=1)
        groups.append((boxes, _with_known(line, [entry for entry, whole in zip(entries, complete) if not whole],
                                          low, high)))
    if complete.any():
        boxes = active[complete]
        low, high = lo[boxes, coordinate], hi[boxes, coordinate]
        ends = np.stack([low, np.maximum(_next_down(high), low)], axis=1)
        groups.append((boxes, _with_known(ends, [entry.points for entry, whole in zip(entries, complete) if whole],
                                          low, high)))
    return groups


def _with_known(line: np.ndarray, points: list, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``line`` [boxes, W] with each box's known breakpoints inside [low, high) and the floats just below them
    added, sorted (rows padded with their last point, which changes nothing) -> [boxes, W + extra]."""
    extra = []
    for index, at in enumerate(points):
        if at is None:
            extra.append(np.empty(0))
            continue
        inside = at[(at > low[index]) & (at < high[index])]
        extra.append(np.concatenate([np.maximum(_next_down(inside), low[index]), inside]))
    width = max((len(points) for points in extra), default=0)
    if width == 0:
        return line
    padded = np.repeat(line[:, -1:], width, axis=1)
    for index, points in enumerate(extra):
        padded[index, :len(points)] = points
    return np.sort(np.concatenate([line, padded], axis=1), axis=1)


def _bisect(evaluate, rows, anchor, box, coordinate, a, b, code_a, code_b, stats, depth: int = 1):
    """Every breakpoint between a and b along ``coordinate`` of each task's box (outcomes ``code_a`` and
    ``code_b`` at the ends differ): yields (box, coordinate, first float at which the outcome differs from the left
    end's, the outcome just below it, the outcome at it).

    Each step cuts each task's interval in two at one point strictly inside it, ``depth`` times over (2^depth - 1
    points, one call), and keeps the pieces whose ends differ, down to adjacent float64s, so the breakpoint found
    is exact whatever the points. Depth 1 is plain bisection; deeper, a step reads the points bisection would
    cut at, and more, in a third of the calls at depth 3 (for a batched function, whose calls cost more than its
    rows). The points go where thresholds usually are (``_probes``): on float32 values while one lies inside,
    then next to a float32 end, then at the float64 midpoint: a threshold computed in float32 (a ratio p/q of
    float32 probabilities, a draw on the float32 grid of 2^-24) takes about 25 steps of depth 1, not 55."""
    a_bits, b_bits = a.view(np.int64).copy(), b.view(np.int64).copy()
    while len(box):
        done = b_bits - a_bits <= 1
        for index in np.flatnonzero(done):
            yield (int(box[index]), int(coordinate[index]), float(b_bits[index:index + 1].view(np.float64)[0]),
                   int(code_a[index]), int(code_b[index]))
        keep = ~done
        box, coordinate = box[keep], coordinate[keep]
        a_bits, b_bits, code_a, code_b = a_bits[keep], b_bits[keep], code_a[keep], code_b[keep]
        if not len(box):
            return
        # pieces: (task, left end, right end, their outcomes' places in ``table``: the ends' outcomes, then the cuts')
        task, left, right = np.arange(len(box)), a_bits, b_bits
        left_at, right_at = np.arange(len(box)), np.arange(len(box), 2 * len(box))
        cuts, owners, made = [], [], 2 * len(box)
        for _ in range(depth):
            wide = right - left >= 2
            middle = _probes(left[wide], right[wide])
            at = np.arange(made, made + len(middle))
            made += len(middle)
            cuts.append(middle)
            owners.append(task[wide])
            task = np.concatenate([task[~wide], task[wide], task[wide]])
            left, right = np.concatenate([left[~wide], left[wide], middle]), np.concatenate([right[~wide], middle,
                                                                                             right[wide]])
            left_at, right_at = (np.concatenate([left_at[~wide], left_at[wide], at]),
                                 np.concatenate([right_at[~wide], at, right_at[wide]]))
        owner = np.concatenate(owners)
        table = np.concatenate([code_a, code_b, _codes_at(evaluate, rows, anchor, box[owner], coordinate[owner],
                                                          np.concatenate(cuts), stats)])
        differ = table[left_at] != table[right_at]  # a change inside the piece
        task = task[differ]
        box, coordinate, a_bits, b_bits = box[task], coordinate[task], left[differ], right[differ]
        code_a, code_b = table[left_at[differ]], table[right_at[differ]]


def _probes(a_bits: np.ndarray, b_bits: np.ndarray) -> np.ndarray:
    """A point strictly between a and b (non-negative float64s as bit patterns [T], at least two apart) for each
    task, as float64 bits: the float32 value halfway, by float32 bit pattern, between the least float32 above a
    and the greatest below b, where one lies strictly inside; else the float64 just above a where a is a float32
    value (a threshold t tested as u <= t changes at that float), else the float64 just below b where b is a
    float32 value (one tested as u < t changes at b); else the float64 midpoint."""
    a = a_bits.view(np.float64)
    b = b_bits.view(np.float64)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)  # nearest float32s
    above = np.where(a32.astype(np.float64) > a, a32, np.nextafter(a32, np.float32(np.inf)))
    below = np.where(b32.astype(np.float64) < b, b32, np.nextafter(b32, np.float32(-np.inf)))
    inside = above <= below  # a float32 value strictly between a and b
    bits32 = (above.view(np.int32).astype(np.int64) + below.view(np.int32).astype(np.int64)) // 2
    lattice = np.where(inside, bits32, 0).astype(np.int32).view(np.float32).astype(np.float64).view(np.int64)
    a_is32 = a32.astype(np.float64) == a
    b_is32 = b32.astype(np.float64) == b
    return np.where(inside, lattice, np.where(a_is32, a_bits + 1, np.where(b_is32, b_bits - 1,
                                                                           a_bits + (b_bits - a_bits) // 2)))


def _codes_at(evaluate, rows, anchor, box, coordinate, bits, stats):
    points = anchor[box].copy()
    points[np.arange(len(box)), coordinate] = bits.view(np.float64)
    return _codes(evaluate, rows[box], points, stats)


def _settle(evaluate, rows, lo, hi, anchor, codes, probes, rng, law, stats) -> np.ndarray:
    """Probe boxes with no change along their anchor lines (outcome ``codes`` at the anchors); add the constant
    ones to ``law`` as cells. Returns [boxes, U]: a disagreeing probe point for each box that is not constant
    (rows of -1 for the cells)."""
    count, dims = lo.shape
    points = lo[:, None, :] + (hi - lo)[:, None, :] * rng.random((count, probes, dims))  # [boxes, probes, U]
    points = np.minimum(points, _next_down(hi)[:, None, :])
    probed = _codes(evaluate, np.repeat(rows, probes), points.reshape(-1, dims), stats).reshape(count, probes)
    agree = (probed == codes[:, None]).all(axis=1)
    cells = np.flatnonzero(agree)
    volume = np.prod(hi[cells] - lo[cells], axis=1)
    np.add.at(law, (rows[cells], codes[cells] % law.shape[1]), volume)  # a code's label above num_codes dropped
    stats.cells += len(cells)
    reopened = np.full((count, dims), -1.0)
    for index in np.flatnonzero(~agree):
        reopened[index] = points[index, int(np.argmax(probed[index] != codes[index]))]
    return reopened
