"""What the report's studies share: how much to run (``Scale``), the latency model of throughput (its unit is
``verispec.latency.throughput_unit``), numbers as text (``fixed``, ``signed``), comparisons over the same cells
(``common_cells``, ``ranked``) and figures (``pyplot``, ``save_figure``)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path

from verispec.errors import VerispecError
from verispec.files.io import atomic_output, figure_metadata
from verispec.latency import LatencyModel
from verispec.study.grid import SweepGrid

#: The latency model of the report's throughput figures: a target forward costs 4 draft steps, a tree no more.
REPORT_LATENCY = LatencyModel.from_ratio(4.0)


def price_text(model: LatencyModel, depth: str, nodes: Iterable[int]) -> tuple[str, str]:
    """(the formula of T, a sentence with where t_p takes its values) for one block under ``model`` on trees of
    ``nodes`` nodes, computed from the model: T = ``depth`` t_q + t_p(n) (``LatencyModel.block_time``), with the
    values t_p takes on those trees, and whether it is the same for all of them."""
    nodes = sorted(set(nodes))
    values = sorted({model.target_time(n) / model.draft_step for n in nodes})
    sizes = f"{nodes[0]} to {nodes[-1]} nodes" if len(nodes) > 1 else f"{nodes[0]} nodes"
    if len(values) == 1:
        formula = f"T = {depth} t_q + t_p, t_p = {values[0]:g} t_q"
        return formula, f"{formula} for every tree here ({sizes})"
    formula = f"T = {depth} t_q + t_p(n)"
    return formula, f"{formula}, t_p(n) from {values[0]:g} t_q to {values[-1]:g} t_q on these trees ({sizes})"


@dataclass(frozen=True)
class Scale:
    """How much of each study to run: ``quick`` finishes in a few minutes on 2 cores."""

    seeds: int
    vocab: int
    divergences: tuple[float, ...]
    max_k: int
    max_trunk: int
    max_tail: int
    paths: tuple[int, ...]
    live_contexts: int


QUICK = Scale(seeds=2, vocab=3, divergences=(0.2, 0.5, 0.8), max_k=2, max_trunk=3, max_tail=3, paths=(1, 2, 3),
              live_contexts=1)
FULL = Scale(seeds=6, vocab=3, divergences=(0.1, 0.3, 0.5, 0.7, 0.9), max_k=3, max_trunk=4, max_tail=4,
             paths=(1, 2, 3, 4), live_contexts=3)

#: Means closer than this are tied: the sweep's numbers are exact to about 1e-12, so a smaller difference is
#: rounding, not an ordering.
TIE = 1e-9

#: Two rules coincide on a cell when their laws of tau agree to this (float64 sums of exact laws).
SAME_LAW = 1e-12

#: Divergence of the draft from the target in studies 1 and 2.
DIVERGENCE = 0.5

#: Markers of curves that may coincide (a point drawn over another of a larger marker stays visible).
MARKERS = ("o", "s", "^", "x", "D", "v")


def mean(values) -> float:
    """The mean of ``values``, NaN for none."""
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def ok_rows(rows):
    """The rows of ``rows`` whose cell was analysed (``status`` 'ok')."""
    return [row for row in rows if row["status"] == "ok"]


def fixed(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` decimals with no '-0.0000': a value that rounds to zero prints as zero (its sign
    below the shown precision is rounding, and the report says where such values come from)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def with_interval(value: float, interval, digits: int = 3) -> str:
    """``value [low, high]`` to ``digits`` decimals (``fixed``): how the report and the docs write an estimate and its
    95% interval."""
    return f"{fixed(value, digits)} [{fixed(interval[0], digits)}, {fixed(interval[1], digits)}]"


def signed(value: float, digits: int = 4) -> str:
    """``value`` with its sign to ``digits`` decimals; a value that rounds to zero prints as an unsigned zero."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text


#: The parameters of a row that rebuild its problem (``verispec.study.cells.build_problem``): the family, its knobs and
#: seed, and for a problem file the SHA-256 of its content.
PROBLEM_FIELDS = ("family", "vocab", "divergence", "temperature", "concentration", "seed", "file_sha256")


def problem_key(row: dict) -> tuple:
    """The problem of a row: the values of ``PROBLEM_FIELDS`` (``file_sha256`` is None for a seeded family)."""
    return tuple(row.get(name) for name in PROBLEM_FIELDS)


def common_cells(rows: Iterable[dict], item: Callable[[dict], Hashable], cell: Callable[[dict], Hashable]
                 ) -> tuple[dict, list]:
    """({item: its ok rows on the common cells, in one order}, the common cells): the cells where EVERY item has
    an ok row, so that each item's mean is over the same problems as the others'. Two ok rows of one item on
    one cell are refused (``ValueError``): the studies share one store, so a cell has one row, and two rows
    would weigh a cell twice."""
    table: dict = defaultdict(dict)
    for row in ok_rows(rows):
        cells = table[item(row)]
        if cell(row) in cells:
            raise ValueError(f"common_cells: two rows of {item(row)!r} on the cell {cell(row)!r}; give each cell "
                             "once")
        cells[cell(row)] = row
    if not table:
        return {}, []
    shared = sorted(set.intersection(*(set(cells) for cells in table.values())), key=repr)
    return {key: [cells[c] for c in shared] for key, cells in table.items()}, shared


def ranked(means: dict) -> list[tuple[float, list]]:
    """The items by mean, best first, in groups (each sorted): an item within ``TIE`` of a group's best joins
    that group.

    The tie is absolute and not chained, unlike ``verispec.simulator.ranking`` (relative, chained): that rule
    orders tokens and must decide every pair alike in float and exact arithmetic, whatever the scale of p/q;
    here the values are means of exact results of one scale (E[tau+1] between 1 and depth + 1, throughput
    E[tau+1]/T of order 0.1 to 1 under ``REPORT_LATENCY``) whose float error is about 1e-15, and a named tie
    must mean 'equal up to rounding': measured from the group's best, no chain of near-ties can join values
    further apart than ``TIE``."""
    groups: list[tuple[float, list]] = []
    for name, value in sorted(means.items(), key=lambda pair: (-pair[1], str(pair[0]))):
        if groups and groups[-1][0] - value <= TIE:
            groups[-1][1].append(name)
        else:
            groups.append((value, [name]))
    return [(value, sorted(names, key=str)) for value, names in groups]


def tied(names: Iterable) -> str:
    """Tied items in words: 'a = b = c'."""
    return " = ".join(str(name) for name in names)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or a one-line error naming the extra that installs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise VerispecError("the report's figures need matplotlib: pip install -e '.[plots]'") from None
    return plt


def save_figure(figure, path: Path) -> str:
    """Write ``figure`` as PNG atomically (with the permissions of any other file written here), into the output
    folder it is named in: a link at ``path`` is refused, not followed out of the folder (``within``)."""
    figure.tight_layout()
    with atomic_output(path, suffix=".png", within=Path(path).parent) as temporary:
        figure.savefig(temporary, dpi=110, format="png", metadata=figure_metadata("report"))  # its marker
    pyplot().close(figure)
    return path.name


def grid_text(grid: SweepGrid) -> str:
    """The problems of a study's grid in words, from the grid: seeds, families, V and divergence."""
    def values(axis) -> str:
        return ", ".join(f"{value:g}" for value in axis)

    return (f"{plural(len(grid.seeds), 'seed')} x {plural(len(grid.families), 'family', 'families')} "
            f"({', '.join(grid.families)}) at V = {values(grid.vocab_sizes)}, divergence {values(grid.divergences)}")


def plural(count: int, singular: str, plural: str | None = None) -> str:
    """'1 seed', '2 seeds' ('2 families' with ``plural``)."""
    return f"{count} {singular if count == 1 else plural or singular + 's'}"
