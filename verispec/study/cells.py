"""One cell of a sweep: its problem, its cost before it runs, and its row.

Every cell is a pure function of its parameters (``run_cell``): the seeded problem is rebuilt in the worker,
so cells run in any order, on any process or machine, and give identical rows. A row holds every parameter,
then ``block_efficiency`` (E[tau+1]), ``expected_accepted``, ``tau_law`` and ``acceptance_by_depth`` (lists),
``tv_distance`` and ``lossless`` (None where the method keeps no output law), the method used, the LP optimum
and the ``gap`` to it where asked (``gap=True``), and the wall time. A cell that cannot be analysed (too large,
or past ``cell_timeout``) gives a row with ``status`` 'refused' and the one-line reason instead of stopping
the sweep; a cell too costly for a build of many cells is refused before the first one runs
(``check_cell_costs``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from verispec.errors import VerispecError
from verispec.latency import LatencyModel
from verispec.study.grid import MAX_RANDOM_PREFIXES, SweepError, SweepGrid, cell_key, file_sha256

#: The largest cell a build of many cells runs, by the engine's estimate (``estimate_analysis``), checked for every
#: distinct cell before the first one runs: a cell estimated above MAX_CELL_SECONDS of one core needs a time limit
#: per cell (``cell_timeout``, --cell-timeout), and one estimated above MAX_CELL_BYTES is refused whatever the
#: limit (a time limit does not bound memory, and every local worker may hold such a cell at once). A sweep of
#: quick cells that met one slow cell would otherwise run on for hours, or swap, without a word.
MAX_CELL_SECONDS = 60.0
MAX_CELL_BYTES = 4 << 30


def build_problem(cell: dict, depth: int):
    """The problem of one cell (seeded families are rebuilt identically in every process; a problem file is
    refused where its content is no longer the one the cell's ``file_sha256`` names)."""
    from verispec.simulator import random_context_free_problem, random_markov_problem, random_problem
    from verispec.simulator.problem_files import load_problem

    family = cell["family"]
    if family.startswith("file:"):
        problem = load_problem(family[5:])
        if "file_sha256" in cell and file_sha256(family[5:]) != cell["file_sha256"]:
            raise SweepError(f"problem file {family[5:]!r} changed after the sweep read it (its SHA-256 is not "
                             "the one its cells are keyed on); run the sweep again")
        return problem
    knobs = {"divergence": cell["divergence"], "temperature": cell["temperature"],
             "concentration": cell["concentration"]}
    if family == "context-free":
        return random_context_free_problem(cell["vocab"], cell["seed"], **knobs)
    if family == "markov":
        return random_markov_problem(cell["vocab"], cell["seed"], **knobs)
    prefixes = sum(cell["vocab"] ** length for length in range(depth + 1))
    if prefixes > MAX_RANDOM_PREFIXES:
        raise SweepError(f"a random per-prefix problem at V={cell['vocab']} to depth {depth} tabulates {prefixes:,} "
                         f"prefixes, above {MAX_RANDOM_PREFIXES:,}; use the markov or context-free family, or a "
                         "smaller V or tree")
    return random_problem(cell["vocab"], depth, cell["seed"], **knobs)


def family_shape(family: str, vocab_size: int):
    """The size of a seeded family's problem at V = ``vocab_size`` (``ProblemShape``: what the engine's estimates
    read), without drawing its tables (a Markov problem at V = 20,000 holds 6.4 GB, a random one takes up to a
    minute to generate): one state for context-free, V for Markov (the last token), every prefix for random."""
    from verispec.simulator.engine import ProblemShape

    log_size = math.log(vocab_size)
    states = {"context-free": lambda length: 0.0, "markov": lambda length: min(length, 1) * log_size}
    return ProblemShape(vocab_size, states.get(family, lambda length: length * log_size))


def cell_estimate(cell: dict, problem=None):
    """The engine's estimate of one cell (``estimate_analysis``: method, seconds, bytes) on ``problem`` (by default
    the cell's family shape, or its problem file), or the ProblemTooLargeError, IncompatibleDraftError or other
    VerispecError by which the cell refuses itself at once when it runs."""
    from verispec.simulator.engine import estimate_analysis
    from verispec.simulator.problem_files import load_problem
    from verispec.verifiers import get_verifier

    if problem is None:
        family = cell["family"]
        problem = load_problem(family[5:]) if family.startswith("file:") else family_shape(family, cell["vocab"])
    return estimate_analysis(problem, cell["tree"], get_verifier(cell["verifier"]), cell["method"])


def check_cell_costs(cells: list[dict]) -> None:
    """Refuse on one line, before the first cell runs, a grid whose largest cell would not finish in reasonable
    time or memory by the engine's estimate (``cell_estimate``): estimated above ``MAX_CELL_BYTES``, or above
    ``MAX_CELL_SECONDS`` without a ``cell_timeout``. Each distinct shape (family, V, tree, verifier, method) is
    estimated once; a cell the engine refuses outright is left to refuse itself at once on its own row."""
    shapes: dict[tuple, dict] = {}
    for cell in cells:
        shapes.setdefault((cell["family"], cell.get("vocab"), cell["tree"], cell["verifier"], cell["method"]), cell)
    from verispec.simulator.problem_files import load_problem

    costly = []
    problems: dict[str, object] = {}  # each problem file, loaded once (None: it refuses its cells itself)
    for cell in shapes.values():
        family = cell["family"]
        if family.startswith("file:") and family not in problems:
            try:
                problems[family] = load_problem(family[5:])
            except VerispecError:
                problems[family] = None
        if family.startswith("file:") and problems[family] is None:
            continue
        try:
            estimate = cell_estimate(cell, problems.get(family))
        except VerispecError:
            continue
        limit = cell["cell_timeout"] is None and estimate.seconds > MAX_CELL_SECONDS
        if estimate.bytes > MAX_CELL_BYTES or limit:
            costly.append((estimate.bytes > MAX_CELL_BYTES, estimate.bytes, estimate.seconds, cell, estimate))
    if not costly:
        return
    memory, _, _, cell, estimate = max(costly, key=lambda item: item[:3])
    where = cell["family"] if cell["family"].startswith("file:") else f"V={cell['vocab']} ({cell['family']})"
    named = f"the cell {cell['verifier']} on {cell['tree']} at {where} is estimated at {estimate.describe()}"
    others = f" ({len(costly) - 1} other cell shape{'s' if len(costly) > 2 else ''} too)" if len(costly) > 1 else ""
    if memory:
        raise SweepError(f"{named}{others}, above the {MAX_CELL_BYTES / 2**30:g} GiB a cell of a sweep may hold; "
                         "sweep a smaller tree or --vocab (or analyse that cell alone with 'verispec exact')")
    raise SweepError(f"{named}{others}, above the {MAX_CELL_SECONDS:g} s a cell may take without a time limit; "
                     "sweep a smaller tree or --vocab, or give --cell-timeout SECONDS (a cell past it is a refused "
                     "row)")


def problem_file_name(setting: dict) -> str:
    """The file name ``write_problems`` gives a seeded problem: its family and every knob, e.g.
    'random-V3-div0.5-temp1-conc1-seed0.npz'."""
    return (f"{setting['family']}-V{setting['vocab']}-div{setting['divergence']:g}-temp{setting['temperature']:g}"
            f"-conc{setting['concentration']:g}-seed{setting['seed']}.npz")


def write_problems(grid: SweepGrid, directory: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Write every seeded problem of ``grid`` to ``directory`` in the binary .npz form (``problem_to_npz``), to
    the depth of the grid's deepest tree, one file per problem (``problem_file_name``), atomically; problem files
    of the grid (``file:PATH``) are already files and are skipped. ``verispec exact --problem FILE`` then reproduces
    any cell. Returns the paths written. Before anything is written, a table beyond verispec's limits is refused,
    and so is a folder that cannot be written or a file of one of those names that is not a problem file
    (``verispec.files.io.check_output``: one without verispec's ``written_by`` marker), unless ``overwrite``; a link in
    the folder is refused even then (``verispec.files.io.check_inside``: no output leaves its folder)."""
    from verispec.files.io import check_inside, check_output, check_output_dir
    from verispec.files.provenance import PROBLEM, written_by
    from verispec.simulator import parse_tree
    from verispec.simulator.problem_files import PROBLEM_FILE, problem_to_npz
    from verispec.sizes import check_table_size

    directory = Path(directory)
    depth = max(parse_tree(spec).depth for spec in grid.trees)
    settings = [setting for setting in grid.problem_settings() if not setting["family"].startswith("file:")]
    for setting in settings:
        check_table_size(setting["vocab"], depth, f"--save-problems ({problem_file_name(setting)})")
    if settings:
        check_output_dir(directory, "--save-problems")
    for setting in settings:
        check_inside(directory, directory / problem_file_name(setting), "--save-problems")
        check_output(directory / problem_file_name(setting), PROBLEM_FILE, what="--save-problems", overwrite=overwrite)
    written = []
    marker = written_by(PROBLEM, "sweep --save-problems")
    for setting in settings:
        path = directory / problem_file_name(setting)
        problem_to_npz(build_problem(setting, depth), depth, path, within=directory, written_by=marker,
                       metadata={"description": f"verispec sweep problem {setting}"})
        written.append(path)
    return written


def _number(value):
    return None if value is None else float(value)


#: LP optima already solved in this process, by (problem, tree): every verifier of a problem and tree shares one.
_OPTIMA: dict[str, float] = {}


def _optimum(cell: dict, problem, drafter) -> float:
    from verispec.bounds.multistep import optimal_block_efficiency

    key = cell_key({name: cell.get(name) for name in ("family", "vocab", "divergence", "temperature",
                                                      "concentration", "seed", "file_sha256", "tree")})
    if key not in _OPTIMA:
        if len(_OPTIMA) > 4096:
            _OPTIMA.clear()
        _OPTIMA[key] = float(optimal_block_efficiency(problem, drafter).block_efficiency)
    return _OPTIMA[key]


def run_cell(cell: dict) -> dict:
    """The row of one cell: its parameters and exact metrics, or ``status`` 'refused' with the reason."""
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier

    start = time.perf_counter()
    row = dict(cell)
    try:
        drafter, verifier = parse_tree(cell["tree"]), get_verifier(cell["verifier"])
        problem = build_problem(cell, drafter.depth)
        deadline = None if cell["cell_timeout"] is None else time.monotonic() + cell["cell_timeout"]
        result = analyze(problem, drafter, verifier, method=cell["method"], deadline=deadline)
        row.update({"status": "ok", "reason": None, "vocab_size": problem.vocab_size, "depth": drafter.depth,
                    "method_used": result.method, "block_efficiency": float(result.block_efficiency),
                    "expected_accepted": float(result.expected_accepted),
                    "tau_law": [float(x) for x in result.tau_law],
                    "acceptance_by_depth": [float(x) for x in result.acceptance_by_depth],
                    "tv_distance": _number(result.tv_distance), "lossless": result.lossless})
        latency = LatencyModel.from_dict(cell["latency"])
        block_time = latency.drafter_time(drafter)
        row.update({"nodes": drafter.max_nodes, "block_time": block_time,
                    "throughput": row["block_efficiency"] / block_time,
                    "speedup": row["block_efficiency"] / block_time / latency.plain_throughput()})
        if cell["lp_optimum"]:
            optimum = _optimum(cell, problem, drafter)
            row.update({"optimum": optimum, "gap": optimum - row["block_efficiency"],
                        "optimum_throughput": optimum / block_time})
    except VerispecError as error:  # too large, past the timeout, or a problem the tree does not fit
        row.update({"status": "refused", "reason": f"{type(error).__name__}: {error}"})
    row["seconds"] = time.perf_counter() - start
    return row


def run_cells(cells: list[dict]) -> list[dict]:
    """The rows of a chunk of cells, in order (one task of a pool or cluster)."""
    return [run_cell(cell) for cell in cells]


__all__ = ["MAX_CELL_BYTES", "MAX_CELL_SECONDS", "build_problem", "cell_estimate", "check_cell_costs", "family_shape",
           "problem_file_name", "run_cell", "run_cells", "write_problems"]
