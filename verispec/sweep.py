"""Sweeps: exact analyses over a grid of problems, draft trees, verifiers and methods, one tidy row per cell.

A grid (``SweepGrid``) is the product of

* problem families: ``context-free`` (one Dirichlet pair (p, q) at every prefix), ``random`` (an independent
  pair per prefix, to the tree's depth), ``markov`` (order-1 Markov rows), each drawn with the knobs of
  ``verispec.simulator.problems`` (vocabulary size V, ``divergence`` of the draft from the target,
  ``temperature`` applied to both laws, Dirichlet ``concentration``) and a seed; or ``file:PATH``, a problem
  file (a derived problem from ``verispec derive``, say), for which the knobs do not apply and whose cells are
  keyed on the SHA-256 of its content (``file_sha256``), so that an edited file is a new problem;
* tree specifications, verifiers (a verifier is paired only with the trees it is valid for) and methods.

Every cell is a pure function of its parameters (``run_cell``): the seeded problem is rebuilt in the worker,
so cells run in any order, on any process or machine, and give identical rows. A row holds every parameter,
then ``block_efficiency`` (E[tau+1]), ``expected_accepted``, ``tau_law`` and ``acceptance_by_depth`` (lists),
``tv_distance`` and ``lossless`` (None where the method keeps no output law), the method used, the LP optimum
and the ``gap`` to it where asked (``gap=True``), and the wall time. A cell that cannot be analysed (too large,
or past ``cell_timeout``) gives a row with ``status`` 'refused' and the one-line reason instead of stopping
the sweep.

``run_sweep`` executes the cells through an existing engine, never a home-made pool: serially,
``concurrent.futures.ProcessPoolExecutor`` on local cores, a Dask cluster (``distributed.Client``; 'local:N'
starts one here) or a Ray cluster, never starting more processes here than there are cores
(``worker_processes``), and keeps them in a ``ResultStore`` keyed on every parameter of the cell: an
interrupted or extended sweep computes only the cells it has not finished, and several sweeps may share one
store (the report's studies do), so that no cell is computed twice. The tidy table (CSV, or Parquet with
pyarrow) holds the cells of the grid just run, in grid order, and is rewritten atomically as rows arrive;
rows of other grids stay in the store only (``SweepRows.elsewhere`` counts them).

Outputs never destroy data: before any cell runs, ``check_sweep_output`` refuses an output that is not this
tool's (a table whose header is not the sweep's columns, a table without its row store, a row store of
something else) unless ``overwrite`` is given, and a path that cannot be written (a directory, a read-only
folder, a path through a regular file), each on one line.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from verispec.errors import ResultStoreError, VerispecError, describe
from verispec.io import OutputKind, ResultStore, atomic_output, atomic_write_text, check_output, check_output_file
from verispec.latency import LatencyModel

#: The sweep's default price of a block: t_q = 1, t_p(n) = 4 whatever the tree size.
DEFAULT_LATENCY = LatencyModel.from_ratio(4.0)

#: Problem families drawn from seeds (``file:PATH`` names a problem file instead).
FAMILIES = ("context-free", "random", "markov")

#: Execution backends of ``run_sweep``.
BACKENDS = ("serial", "local", "dask", "ray")

#: Most cells one sweep accepts (each is at least one exact analysis).
MAX_CELLS = 1_000_000

#: Most prefixes a random per-prefix problem may tabulate (1 + V + .. + V^L; 2 [V] laws each).
MAX_RANDOM_PREFIXES = 100_000

#: The largest cell a build of many cells runs, by the engine's estimate (``estimate_analysis``), checked for every
#: distinct cell before the first one runs: a cell estimated above MAX_CELL_SECONDS of one core needs a time limit
#: per cell (``cell_timeout``, --cell-timeout), and one estimated above MAX_CELL_BYTES is refused whatever the
#: limit (a time limit does not bound memory, and every local worker may hold such a cell at once). A sweep of
#: quick cells that met one slow cell would otherwise run on for hours, or swap, without a word.
MAX_CELL_SECONDS = 60.0
MAX_CELL_BYTES = 4 << 30

#: Seconds between rewrites of the result files while cells arrive (and after the last); at least
#: ``SAVE_SHARE`` times the last rewrite took, so that rewriting a large store (the report's studies share one)
#: takes at most about 1/SAVE_SHARE of the time.
SAVE_EVERY = 2.0
SAVE_SHARE = 10


class SweepError(VerispecError):
    """A sweep specification or output that cannot be used."""


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a sweep; ``cells()`` is their product (knobs only for seeded families)."""

    families: tuple[str, ...] = ("context-free",)
    vocab_sizes: tuple[int, ...] = (3,)
    divergences: tuple[float, ...] = (0.5,)
    temperatures: tuple[float, ...] = (1.0,)
    concentrations: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0,)
    trees: tuple[str, ...] = ("chain:2",)
    verifiers: tuple[str, ...] = ("all",)
    methods: tuple[str, ...] = ("auto",)
    gap: bool = False
    cell_timeout: float | None = None
    #: prices each block for the throughput columns (default: a target forward costs 4 draft steps)
    latency: LatencyModel = DEFAULT_LATENCY

    def __post_init__(self):
        from verispec.simulator import parse_tree
        from verispec.simulator.engine import METHODS
        from verispec.simulator.problems import check_knobs, check_vocab_size
        from verispec.verifiers import get_verifier

        for name, values in self._axes().items():
            if not values:
                raise SweepError(f"the sweep axis {name} is empty; give at least one value")
        for family in self.families:
            if family not in FAMILIES and not (family.startswith("file:") and len(family) > 5):
                raise SweepError(f"unknown problem family {family!r}; use one of {', '.join(FAMILIES)} or file:PATH")
            if family.startswith("file:") and not Path(family[5:]).is_file():
                raise SweepError(f"problem file {family[5:]!r} of family {family!r} does not exist")
        for vocab in self.vocab_sizes:
            if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
                raise SweepError(f"vocabulary size {vocab!r} must be an integer >= 2")
            # the seeded families' tables, before any is built: one vector of V per law, V + 1 for a Markov problem
            if any(not family.startswith("file:") for family in self.families):
                check_vocab_size(vocab, f"--vocab {vocab}", markov="markov" in self.families)
        for seed in self.seeds:
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise SweepError(f"seed {seed!r} must be a non-negative integer")
        # the generators' own rule for their knobs, one axis at a time (the others at valid values)
        for divergence in self.divergences:
            check_knobs(2, 1.0, divergence, 1.0, 0.0)
        for temperature in self.temperatures:
            check_knobs(2, 1.0, 0.5, temperature, 0.0)
        for concentration in self.concentrations:
            check_knobs(2, concentration, 0.5, 1.0, 0.0)
        for spec in self.trees:
            parse_tree(spec)
        for name in self.verifiers:
            if name != "all":
                get_verifier(name)
        for method in self.methods:
            if method not in METHODS:
                raise SweepError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if self.cell_timeout is not None and not (self.cell_timeout > 0 and math.isfinite(self.cell_timeout)):
            raise SweepError(f"cell_timeout must be a positive number of seconds, got {self.cell_timeout!r}")

    def _axes(self) -> dict:
        return {"families": self.families, "vocab_sizes": self.vocab_sizes, "divergences": self.divergences,
                "temperatures": self.temperatures, "concentrations": self.concentrations, "seeds": self.seeds,
                "trees": self.trees, "verifiers": self.verifiers, "methods": self.methods}

    def verifier_names(self) -> list[str]:
        from verispec.verifiers import REGISTRY

        names = sorted(REGISTRY) if "all" in self.verifiers else []
        return list(dict.fromkeys(names + [name for name in self.verifiers if name != "all"]))

    def problem_settings(self) -> list[dict]:
        """The distinct problems: a seeded family for every knob combination, a file once with the SHA-256 of its
        content (``file_sha256``), so that a row of the file as it was is never taken for one of the file as it
        is now."""
        settings = []
        for family in dict.fromkeys(self.families):
            if family.startswith("file:"):
                settings.append({"family": family, "vocab": None, "divergence": None, "temperature": None,
                                 "concentration": None, "seed": None, "file_sha256": file_sha256(family[5:])})
                continue
            for vocab, divergence, temperature, concentration, seed in itertools.product(
                    dict.fromkeys(self.vocab_sizes), dict.fromkeys(self.divergences),
                    dict.fromkeys(self.temperatures), dict.fromkeys(self.concentrations), dict.fromkeys(self.seeds)):
                settings.append({"family": family, "vocab": vocab, "divergence": float(divergence),
                                 "temperature": float(temperature), "concentration": float(concentration),
                                 "seed": seed})
        return settings

    def size_estimate(self) -> int:
        """Cells before dropping invalid (verifier, tree) pairs: checked before anything is built."""
        problems = sum(1 if family.startswith("file:") else
                       len(set(self.vocab_sizes)) * len(set(self.divergences)) * len(set(self.temperatures))
                       * len(set(self.concentrations)) * len(set(self.seeds))
                       for family in set(self.families))
        return problems * len(set(self.trees)) * len(self.verifier_names()) * len(set(self.methods))

    def cells(self) -> tuple[list[dict], int]:
        """(the cells, how many (verifier, tree) pairs were left out as invalid for the verifier's draft law)."""
        from verispec.errors import IncompatibleDraftError
        from verispec.simulator import parse_tree
        from verispec.simulator.engine import check_compatible
        from verispec.verifiers import get_verifier

        estimate = self.size_estimate()
        if estimate > MAX_CELLS:
            raise SweepError(f"the grid has up to {estimate:,} cells, above {MAX_CELLS:,}; sweep fewer values")
        pairs, skipped = [], 0
        for spec in dict.fromkeys(self.trees):
            drafter = parse_tree(spec)
            for name in self.verifier_names():
                try:
                    check_compatible(get_verifier(name), drafter)
                    pairs.append((spec, name))
                except IncompatibleDraftError:
                    skipped += 1
        latency = self.latency.as_dict()
        problems = self.problem_settings()
        cells = [{**problem, "tree": spec, "verifier": name, "method": method, "lp_optimum": self.gap,
                  "cell_timeout": self.cell_timeout, "latency": latency}
                 for problem in problems for spec, name in pairs for method in dict.fromkeys(self.methods)]
        return cells, skipped * len(problems) * len(set(self.methods))


def cell_key(cell: dict) -> str:
    """Every parameter of the cell, canonically: the key under which its row is kept."""
    return json.dumps(cell, sort_keys=True, separators=(",", ":"))


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of a problem file's content, read with ``load_problem``'s bound: a longer file is refused
    when it is loaded, so its first bytes are enough to key it."""
    from verispec.simulator.problems import MAX_PROBLEM_FILE_BYTES

    digest, remaining = hashlib.sha256(), MAX_PROBLEM_FILE_BYTES + 1
    try:
        with open(path, "rb") as stream:
            while remaining > 0 and (chunk := stream.read(min(1 << 20, remaining))):
                digest.update(chunk)
                remaining -= len(chunk)
    except OSError as error:
        raise SweepError(f"cannot read problem file {str(path)!r}: {error.strerror or error}") from None
    return digest.hexdigest()


def build_problem(cell: dict, depth: int):
    """The problem of one cell (seeded families are rebuilt identically in every process; a problem file is
    refused where its content is no longer the one the cell's ``file_sha256`` names)."""
    from verispec.simulator import random_context_free_problem, random_markov_problem, random_problem
    from verispec.simulator.problems import load_problem

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
    from verispec.simulator.problems import load_problem
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
    from verispec.simulator.problems import load_problem

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
    (``verispec.io.check_output``), unless ``overwrite``."""
    from verispec.io import check_output, check_output_dir
    from verispec.simulator import parse_tree
    from verispec.simulator.problems import PROBLEM_FILE, check_table_size, problem_to_npz

    directory = Path(directory)
    depth = max(parse_tree(spec).depth for spec in grid.trees)
    settings = [setting for setting in grid.problem_settings() if not setting["family"].startswith("file:")]
    for setting in settings:
        check_table_size(setting["vocab"], depth, f"--save-problems ({problem_file_name(setting)})")
    if settings:
        check_output_dir(directory, "--save-problems")
    for setting in settings:
        check_output(directory / problem_file_name(setting), PROBLEM_FILE, what="--save-problems", overwrite=overwrite)
    written = []
    for setting in settings:
        path = directory / problem_file_name(setting)
        problem_to_npz(build_problem(setting, depth), depth, path,
                       metadata={"description": f"verispec sweep problem {setting}"})
        written.append(path)
    return written


def _number(value):
    return None if value is None else float(value)


#: LP optima already solved in this process, by (problem, tree): every verifier of a problem and tree shares one.
_OPTIMA: dict[str, float] = {}


def _optimum(cell: dict, problem, drafter) -> float:
    from verispec.lp_analysis.multistep import optimal_block_efficiency

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


# --- execution --------------------------------------------------------------------------------------------------

#: Seconds a cluster named by --address has to answer, first a TCP connection to its port, then the Dask
#: scheduler's or Ray's own handshake, before the build is refused on one line: a closed port, a host that does
#: not answer or a port that is no scheduler's is named within this time, not after distributed's 30 s of retries
#: or Ray's endless ones.
CONNECT_TIMEOUT = 10.0

#: Address schemes of a Dask scheduler (``distributed``'s comms; ``tcp`` when none is written); those over TCP
#: (all but inproc and ucx) are probed before connecting.
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "inproc", "ucx")


def _split_address(address: str, what: str, schemes: tuple[str, ...], example: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a cluster address 'SCHEME://HOST:PORT' or 'HOST:PORT' ('[::1]:8786' for IPv6);
    one line naming the address where it is not one (no port, a port outside 1..65535, another scheme)."""
    scheme, separator, rest = address.partition("://")
    if not separator:
        scheme, rest = "", address
    if scheme and scheme not in schemes:
        raise SweepError(f"--address {address[:80]!r}: {scheme}:// is not an address of {what}; write "
                         f"{example}")
    if scheme in ("inproc", "ucx"):
        return scheme, rest, None
    host, colon, port_text = rest.rpartition(":")
    port = int(port_text) if port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 else 0
    if not colon or not host.strip("[]") or not 1 <= port <= 65535:
        raise SweepError(f"--address {address[:80]!r} is not HOST:PORT with a port in 1..65535; write {example}")
    return scheme, host.strip("[]"), port


def _probe(host: str, port: int, address: str, what: str, hint: str, *, speaks_first: bool = False) -> None:
    """One TCP connection to (host, port) within CONNECT_TIMEOUT, or a one-line SweepError naming ``address`` (as
    given, with where it came from), why none came (a name that does not resolve, nothing listening, no answer)
    and ``hint``, how to start one. ``speaks_first``: the server sends the first bytes (a Dask scheduler's
    handshake does, at once), so a port that accepts and stays silent is no such server; distributed's own
    client waits on it for ever, whatever its timeout."""
    import socket

    began = time.monotonic()
    try:
        connection = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except socket.gaierror:
        why = f"the host {host!r} cannot be resolved"
    except ConnectionRefusedError:
        why = f"connection refused: nothing listens on port {port} there"
    except TimeoutError:
        why = f"no answer within {CONNECT_TIMEOUT:g} s"
    except OSError as error:
        why = error.strerror or str(error)
    else:
        with connection:
            if not speaks_first:
                return
            connection.settimeout(max(0.1, CONNECT_TIMEOUT - (time.monotonic() - began)))
            try:
                if connection.recv(1):
                    return
                why = "the port accepted and closed the connection without a word"
            except TimeoutError:
                why = f"the port accepts connections but sent no {what}'s handshake within {CONNECT_TIMEOUT:g} s"
            except OSError as error:
                why = error.strerror or str(error)
    raise SweepError(f"no {what} answers at {address[:120]} ({why}); {hint}")


def _dask_hint(port: int | None) -> str:
    return (f"start one with 'dask scheduler --port {port or 8786}' and workers with 'dask worker HOST:"
            f"{port or 8786}', or give --address local:N for N worker processes here")


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(error).__name__


@contextlib.contextmanager
def dask_client(address):
    """A ``distributed.Client``: ``address`` itself when it is one, a new client of the scheduler at ``address``
    (tcp://host:8786; refused on one line within ``CONNECT_TIMEOUT`` where no scheduler answers), or, for
    'local:N', a cluster of N single-threaded worker processes started here."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError("--backend dask needs dask's scheduler: pip install 'dask[distributed]'") from None
    if not isinstance(address, str):
        yield address
        return
    if is_local_cluster(address):
        workers, _ = local_cluster_workers(address)
        import logging

        # warnings only past ERROR: an interrupted build's cancelled tasks and killed workers are expected
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            yield client
        return
    scheme, host, port = _split_address(address, "a Dask scheduler", DASK_SCHEMES,
                                        "tcp://HOST:PORT (a scheduler) or local:N (N worker processes here)")
    if scheme not in ("inproc", "ucx"):
        _probe(host, port, address, "Dask scheduler", _dask_hint(port), speaks_first=scheme in ("", "tcp"))
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except Exception as error:  # a port that answers but is no scheduler's fails in many ways
        # (OSError, TimeoutError; a web server's reply read as a frame length asked numpy for 3 EiB)
        raise SweepError(f"cannot connect to a Dask scheduler at {address!r} within {CONNECT_TIMEOUT:g} s "
                         f"({_first_line(error)}); is it a scheduler's address? {_dask_hint(port)}") from None
    with client:
        yield client


def _ray_address(address) -> tuple[str | None, str]:
    """(the address ray.init will use, where it comes from): --address, else the RAY_ADDRESS variable (which
    ray.init reads itself when given none), else None: a Ray started here."""
    if address is None and os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    return address, "--address"


@contextlib.contextmanager
def ray_session(address):
    """Ray, initialised for the block: kept as it is where this process already initialised it (a caller's
    session, or the report's for all its studies), else ``ray.init(address)`` (None: a Ray started here, as many
    CPUs as cores, no dashboard) and ``ray.shutdown()`` after the block, which stops a Ray started here with
    every process of it. An address that answers nothing is refused on one line within ``CONNECT_TIMEOUT``."""
    try:
        import ray
    except ImportError:
        raise SweepError("--backend ray needs Ray: pip install ray (or pip install -e '.[sweep]')") from None
    target, origin = _ray_address(address)
    where = None  # (host, port) of a cluster elsewhere
    if target not in (None, "local", "auto"):
        if not isinstance(target, str):
            raise SweepError(f"--backend ray takes an address HOST:PORT (or ray://HOST:PORT), got {describe(target)}")
        _, host, port = _split_address(target, "a Ray cluster", ("ray",), "HOST:PORT of a Ray head node (ray start "
                                       "--head --port PORT), ray://HOST:PORT, or no --address")
        where = (host, port)
    if ray.is_initialized():
        yield
        return
    if where is not None:
        _probe(*where, target + (" (RAY_ADDRESS)" if origin == "RAY_ADDRESS" else ""), "Ray cluster",
               f"start one with 'ray start --head --port {where[1]}' on that host, or "
               + ("unset RAY_ADDRESS" if origin == "RAY_ADDRESS" else "leave --address out") + " to start Ray here")
    options = {"num_cpus": available_cores(), "include_dashboard": False} if target in (None, "local") else {}
    started = _descendants() if options else []
    _ray_init(ray, address, options, target, origin)
    # a Ray started here: its processes end with this one even when it is killed outright (SIGKILL), when Ray's own
    # fate sharing leaves its agents running for minutes
    reaper = _start_reaper(sorted(set(_descendants()) - set(started))) if options else None
    try:
        yield
    finally:
        ray.shutdown()
        if reaper is not None:
            reaper.terminate()
            reaper.wait()


def _descendants() -> list[tuple[int, float]]:
    """(pid, start time) of every process below this one (psutil: Ray depends on it), or [] where it cannot tell."""
    try:
        import psutil

        return [(child.pid, child.create_time()) for child in psutil.Process().children(recursive=True)]
    except Exception:  # no psutil, or a process that ended while listed: nothing to watch
        return []


#: The reaper of a Ray started here (``_start_reaper``): it reads its standard input, a pipe from the build's
#: process, until the end of file that the build's end (however it ends) gives, then kills the processes named on
#: its command line (pid:start time, so that a reused pid is left alone) and exits. SIGINT is ignored: Ctrl-C
#: reaches the whole process group, and the build's process shuts Ray down itself.
_REAPER = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
while sys.stdin.buffer.read(1 << 16):
    pass
import psutil
for item in sys.argv[1:]:
    pid, started = item.split(":")
    try:
        process = psutil.Process(int(pid))
        if abs(process.create_time() - float(started)) < 0.01:
            process.kill()
    except psutil.Error:
        pass
"""


def _start_reaper(processes: list[tuple[int, float]]):
    """A small process that kills ``processes`` (pid, start time) once this process has ended, unless it is
    terminated first (``ray_session`` does, after ``ray.shutdown``): Ray's processes started here must not outlive
    a build killed outright. None where there is nothing to watch."""
    import subprocess
    import sys

    if not processes:
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, *(f"{pid}:{started!r}" for pid, started in processes)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ray_init(ray, address, options: dict, target, origin: str) -> None:
    """``ray.init``: in this thread for a Ray started here (its SIGTERM handler, which exits the process, is taken
    back off so that the build's own handler stops it cleanly), in a helper thread for a cluster elsewhere, given
    ``CONNECT_TIMEOUT`` to connect: Ray retries a port that answers but is no Ray's for minutes, then ends the
    process."""
    import logging
    import signal
    import threading

    if not options:
        outcome: dict = {}

        def connect():
            try:
                ray.init(address=address, logging_level=logging.ERROR)
                outcome["done"] = True
            except Exception as error:  # every failure of Ray's is named on one line below
                outcome["error"] = error

        logging.getLogger("ray").setLevel(logging.ERROR)  # "SIGTERM handler is not set ... not the main thread"
        thread = threading.Thread(target=connect, name="ray.init", daemon=True)
        thread.start()
        thread.join(CONNECT_TIMEOUT)
        if "done" not in outcome:
            why = (_first_line(outcome["error"]) if "error" in outcome else
                   f"no Ray handshake within {CONNECT_TIMEOUT:g} s: is it a Ray head node's GCS port?")
            raise SweepError(f"cannot connect to a Ray cluster at {target!r}"
                             + (" (RAY_ADDRESS)" if origin == "RAY_ADDRESS" else "") + f" ({why}); start one with "
                             "'ray start --head --port PORT' and give HOST:PORT, or leave --address out to start "
                             "Ray here")
        return
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=address, logging_level=logging.ERROR, **options)
    except Exception as error:  # Ray raises RuntimeError, ValueError, ConnectionError ...
        raise SweepError(f"cannot start Ray here ({_first_line(error)})") from None
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


# --- workers that end with their build ---------------------------------------------------------------------------

#: Seconds between a local worker's checks that the build's process is still alive (the fallback where the
#: kernel's parent-death signal is not available).
PARENT_POLL_SECONDS = 0.5

#: prctl(2) option: the signal a process receives when the thread that created it ends (Linux).
_PR_SET_PDEATHSIG = 1


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's (the pid was reused): the build's process is gone
        return False
    return True


def watch_parent(parent: int) -> None:
    """Initializer of a local worker process: it ends when the build's process ``parent`` ends, however that ends
    (SIGKILL included), rather than computing on as an orphan. On Linux the kernel sends it SIGKILL when its parent
    dies (prctl PR_SET_PDEATHSIG); everywhere a daemon thread checks every ``PARENT_POLL_SECONDS`` that its parent
    is the same and ``parent`` alive, and exits otherwise. SIGINT is ignored (Ctrl-C reaches the whole process
    group, and the build's process stops its workers itself) and SIGTERM restored to its default (a forked worker
    inherits the build's handler, which would make it raise in its task instead of ending)."""
    import signal
    import sys
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    started_under = os.getppid()
    if not _process_alive(parent):  # it ended before the signal was asked for
        os._exit(1)

    def watch():
        while os.getppid() == started_under and _process_alive(parent):
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="verispec parent watch", daemon=True).start()


def _stop_pool(pool) -> None:
    """End a pool of local processes now, its running tasks included (an interrupted build): queued tasks are
    cancelled and every worker is sent SIGTERM, then SIGKILL if it has not ended within 5 s."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(1)


class BuildInterrupted(KeyboardInterrupt):
    """A build stopped by SIGTERM or Ctrl-C (SIGINT), raised in its main thread (``interrupt_on_signals``): the
    executor stops its workers, the rows finished so far are saved, and the CLI exits with 128 + the signal's
    number after one line saying that a rerun resumes."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.exit_status = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}: the finished cells are kept in the row "
                         "store; run the same command again to resume")


@contextlib.contextmanager
def interrupt_on_signals():
    """For the block, SIGTERM and SIGINT raise ``BuildInterrupted`` in the main thread (elsewhere the block runs
    as it is), so that a build ends whole, workers and all, with its store saved, rather than dying with its
    workers orphaned (SIGTERM's default) or waiting for every running task (a pool's exit on Ctrl-C)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def interrupt(signum, frame):
        received.append(signum)
        raise BuildInterrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except KeyboardInterrupt as error:
        if received and not isinstance(error, BuildInterrupted):  # Ray's wait turns it into a KeyboardInterrupt
            raise BuildInterrupted(received[0]) from None
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


#: Tasks handed to each worker of a pool or cluster: cells are milliseconds each, so they travel in chunks
#: (a task per cell spends more on scheduling than on the cell), yet enough chunks to balance the load.
TASKS_PER_WORKER = 8


def run_cells(cells: list[dict]) -> list[dict]:
    """The rows of a chunk of cells, in order (one task of a pool or cluster)."""
    return [run_cell(cell) for cell in cells]


def _chunks(cells: list[dict], workers: int) -> list[list[dict]]:
    """Contiguous chunks (neighbouring cells share problems and LP optima), TASKS_PER_WORKER per worker."""
    count = max(1, min(len(cells), workers * TASKS_PER_WORKER))
    size = -(-len(cells) // count)
    return [cells[start:start + size] for start in range(0, len(cells), size)]


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the system reports one, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_workers(jobs: int | None) -> tuple[int, str | None]:
    """(local worker processes for ``jobs``, a one-line note when ``jobs`` was capped, else None). Never more
    processes than cores: cells are CPU-bound, so extra processes only queue behind each other, and each costs
    a process start and a copy of the interpreter (``--jobs 10000`` once started 1,117)."""
    cores = available_cores()
    if jobs is None:
        return cores, None
    if jobs > cores:
        return cores, f"--jobs {jobs} is more than the {cores} cores here; running {cores} local processes"
    return jobs, None


def is_local_cluster(address) -> bool:
    """Whether a Dask ``address`` asks for a cluster started here: 'local' or 'local:N' ('localhost:8786' is a
    scheduler's address)."""
    return isinstance(address, str) and (address == "local" or address.startswith("local:"))


def local_cluster_workers(address: str) -> tuple[int, str | None]:
    """(worker processes of the Dask cluster 'local:N' started here, a one-line note when N was capped, else
    None): N, by default and at most the cores here, as for local processes (``local_workers``)."""
    _, _, count = address.partition(":")
    try:
        workers = int(count) if count else None
        if workers is not None and workers < 1:
            raise ValueError
    except ValueError:
        raise SweepError(f"a local Dask cluster is 'local:N' with N >= 1 workers, got {address!r}") from None
    cores = available_cores()
    if workers is None:
        return cores, None
    if workers > cores:
        return cores, (f"--address {address} asks for {workers} worker processes, more than the {cores} cores "
                       f"here; starting {cores}")
    return workers, None


def worker_processes(backend: str, jobs: int | None, address) -> tuple[int | None, str | None]:
    """(the worker processes ``run_sweep`` starts here, a one-line note when the request was capped at the
    cores): ``jobs`` local processes, or the N workers of a Dask cluster 'local:N', at most the cores either
    way. None where it starts none: serial runs in this process, and a cluster at an address (or Ray) keeps the
    workers it has."""
    if backend in ("serial", "local") and address is not None:
        raise SweepError(f"--address {str(address)[:80]!r} names a cluster, which --backend dask or ray uses; "
                         f"--backend {backend} runs here (leave --address out)")
    if backend == "local":
        return local_workers(jobs)
    if backend == "dask" and is_local_cluster(address):
        return local_cluster_workers(address)
    return None, None


def execute(tasks: list, backend: str, jobs: int | None, address: str | None,
            run_chunk: Callable[[list], list[dict]] = run_cells) -> Iterable[list[dict]]:
    """Results of ``tasks`` in batches, as the batches finish, in any order: ``run_chunk`` (a module-level
    function, so that it travels to processes and clusters) maps a chunk of tasks to their rows, serially in
    this process, on a pool of local processes capped at the cores, on a Dask cluster or on Ray. Sweep cells by
    default; the selector's dataset labels its roots through it too.

    A generator: close it (``contextlib.closing``) when the loop over it ends early. Ended by an exception (a
    ``BuildInterrupted`` from SIGTERM or Ctrl-C included) or closed, it stops the work it started: a local pool's
    workers are ended, their running tasks too (``_stop_pool``), a Dask client's futures and Ray's tasks are
    cancelled, and a cluster started here (Dask's local:N, a local Ray) is shut down with its processes. Local
    workers also end on their own when this process dies (``watch_parent``)."""
    if not tasks:
        return
    if backend == "serial":
        for task in tasks:
            yield run_chunk([task])
    elif backend == "local":
        from concurrent.futures import ProcessPoolExecutor, as_completed

        workers, _ = local_workers(jobs)
        pool = ProcessPoolExecutor(max_workers=workers, initializer=watch_parent, initargs=(os.getpid(),))
        try:
            for future in as_completed([pool.submit(run_chunk, chunk) for chunk in _chunks(tasks, workers)]):
                yield future.result()
        except BaseException:
            _stop_pool(pool)
            raise
        pool.shutdown()
    elif backend == "dask":
        try:
            from distributed import as_completed
        except ImportError:
            raise SweepError("--backend dask needs dask's scheduler: pip install 'dask[distributed]'") from None
        with dask_client(address) as client:
            workers = max(1, len(client.scheduler_info().get("workers", {})))
            futures = client.map(run_chunk, _chunks(tasks, workers), pure=False)
            try:
                for future in as_completed(futures):
                    yield future.result()
            except BaseException:
                client.cancel(futures)
                raise
    elif backend == "ray":
        with ray_session(address):
            import ray

            remote = ray.remote(run_chunk)
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
            pending = [remote.remote(chunk) for chunk in _chunks(tasks, workers)]
            try:
                while pending:
                    finished, pending = ray.wait(pending, num_returns=1)
                    yield ray.get(finished[0])
            except BaseException:
                for reference in pending:
                    ray.cancel(reference, force=True)
                raise
    else:
        raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


@contextlib.contextmanager
def cluster_session(backend: str, address):
    """One connection for several builds (the report's studies): for Dask at an address or 'local:N', a client
    (and the local cluster) whose ``distributed.Client`` is yielded to pass on as their address; for Ray, Ray
    initialised once (``ray_session``); otherwise ``address`` unchanged."""
    if backend == "dask" and isinstance(address, str):
        with dask_client(address) as client:
            yield client
    elif backend == "ray":
        with ray_session(address):
            yield address
    else:
        yield address


class SweepRows(list):
    """The rows of a sweep's grid in grid order (a list), with what the run did: ``skipped`` cells left out
    because the (verifier, tree) pair is invalid for the verifier's draft law, ``computed`` cells run now,
    ``reused`` rows read back from the store, and ``elsewhere`` rows of the store that are not cells of this grid
    (earlier grids, or other sweeps sharing the store): kept in the store, not in the table. ``keys``: the
    store's key of each row (``cell_key``), in the same order."""

    keys: list[str]
    skipped: int = 0
    computed: int = 0
    reused: int = 0
    elsewhere: int = 0


def run_sweep(grid: SweepGrid, output: str | Path, *, backend: str = "local", jobs: int | None = None,
              address=None, progress: bool = True, overwrite: bool = False, store: ResultStore | None = None,
              note: Callable[[str], None] | None = None) -> SweepRows:
    """Run every cell of ``grid`` not yet in the row store and return the grid's rows in grid order.

    ``output`` ends in .csv or .parquet and holds the cells of ``grid`` only, rewritten on every run; the rows
    are kept in a ``ResultStore``, by default ``<output>.cells.json``, or ``store`` (one opened by
    ``open_sweep_store``, which several sweeps may share), so that a later run with this or another grid
    resumes: rows of other grids stay in the store, not in the table (``SweepRows.elsewhere`` counts them).
    ``backend``: 'serial', 'local' (``jobs`` processes, default and at most the cores here), 'dask' (``address``
    of a scheduler, 'local:N' for N worker processes here, at most the cores, or a ``distributed.Client``) or
    'ray' (``address`` of a cluster, or None for a local one). An existing output that is not a sweep's is
    refused before any cell runs (``check_sweep_output``); ``overwrite`` replaces it and starts over (with
    ``store``, the table only: the store was opened with its own). ``note`` is called with a one-line note
    when the processes asked for are capped at the cores, once the outputs have passed their checks and before
    any cell runs."""
    from tqdm import tqdm

    output = Path(output)
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend in ("dask",) and address is None:
        raise SweepError("--backend dask needs --address (a scheduler such as tcp://host:8786, or local:N for a "
                         "cluster of N worker processes started here)")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise SweepError(f"jobs must be a positive integer, got {jobs!r}")
    _, capped = worker_processes(backend, jobs, address)  # refuses a malformed 'local:N' before any check
    cells, skipped = grid.cells()
    if not cells:
        raise SweepError("the grid has no cell: no verifier given is valid for any tree given")
    if store is None:
        store, table_format = check_sweep_output(output, overwrite=overwrite)
    else:
        table_format = check_sweep_table(output, store.path, overwrite=overwrite)
    if capped and note is not None:
        note(capped)
    # a row holds its cell's parameters and the results; a file's cell has one parameter more (file_sha256)
    parameters = set().union(*cells)
    keys = [cell_key(cell) for cell in cells]
    todo = [cell for cell, key in zip(cells, keys) if not store.done(key)]
    check_cell_costs(todo)  # the largest cell, before the first one runs
    pending: dict[str, dict] = {}
    last, interval = time.monotonic(), SAVE_EVERY
    try:
        with tqdm(total=len(cells), initial=len(cells) - len(todo), desc="sweep cells", disable=not progress) as \
                bar, contextlib.closing(execute(todo, backend, jobs, address)) as batches:
            for rows in batches:
                for row in rows:
                    pending[cell_key({name: value for name, value in row.items() if name in parameters})] = row
                bar.update(len(rows))
                if time.monotonic() - last >= interval:
                    began = time.monotonic()
                    _save(store, pending, output, keys, table_format)
                    pending, last = {}, time.monotonic()
                    interval = max(SAVE_EVERY, SAVE_SHARE * (last - began))
    except BaseException:  # interrupted (SIGTERM, Ctrl-C) or failed: the rows that arrived are kept, to resume
        if pending:
            _save(store, pending, output, keys, table_format)
        raise
    _save(store, pending, output, keys, table_format)
    result = SweepRows(_stored(store.rows[key]) for key in keys)
    result.keys = keys
    result.skipped, result.computed, result.reused = skipped, len(todo), len(cells) - len(todo)
    result.elsewhere = len(store.rows) - len(set(keys))
    return result


def _stored(row: dict) -> dict:
    return {name: value for name, value in row.items() if name != "key"}


def store_path(output: Path) -> Path:
    return output.with_name(output.name + ".cells.json")


#: The parameters recorded in every sweep's row store (the cells' keys hold everything else).
STORE_PARAMETERS = {"kind": "verispec sweep"}


def check_sweep_output(output: str | Path, *, overwrite: bool = False) -> tuple[ResultStore, str]:
    """(the row store of ``output``, its table format), after refusing on one line, before any cell runs, an
    output that cannot be written or that is not this tool's.

    This tool's output is a table whose header is the sweep's columns (in ``write_table``'s order) beside its
    row store ``OUTPUT.cells.json`` (a ``ResultStore`` of kind 'verispec sweep'), either of them absent on a
    first run. Anything else at either path (a file of the user's, a table whose store was deleted, so that a
    rerun would replace its rows, any JSON that is not a sweep's row store) is refused unless ``overwrite``,
    which starts over."""
    output = Path(output)
    table_format = check_sweep_table(output, store_path(output), overwrite=overwrite)
    return open_sweep_store(store_path(output), overwrite=overwrite), table_format


def check_sweep_table(output: str | Path, store: str | Path, *, overwrite: bool = False) -> str:
    """The table format of ``output``, after refusing on one line an output that cannot be written, and, unless
    ``overwrite``, an existing file that is not a sweep table (read: its header only) or a sweep table whose row
    store ``store`` is missing."""
    output = Path(output)
    table_format = output_format(output)
    check_output(output, SWEEP_TABLE, what="output", overwrite=overwrite, error=SweepError)
    if overwrite or not output.exists():
        return table_format
    shown = repr(str(output))
    if not Path(store).exists():
        raise SweepError(f"output {shown} is a sweep table without its row store {str(store)!r}, so a rerun cannot "
                         "resume it and would replace its rows; pass --overwrite to replace it, or choose another "
                         "output")
    return table_format


def open_sweep_store(path: str | Path, *, overwrite: bool = False) -> ResultStore:
    """The sweep row store at ``path`` (a ``ResultStore`` of kind 'verispec sweep', read once; several tables may
    share it), after refusing on one line a path that cannot be written and, unless ``overwrite`` (which starts
    it over), an existing file that is not a sweep's row store: one whose recorded parameters are not the
    sweep's, or that records none (a file of the user's, ``{"rows": []}``)."""
    check_output_file(path, "the row store")
    try:
        return ResultStore(path, parameters=STORE_PARAMETERS, overwrite=overwrite)
    except ResultStoreError as error:
        raise SweepError(f"{error} (or pass --overwrite to replace it)") from None


def is_sweep_table(path: str | Path, table_format: str | None = None) -> bool:
    """Whether ``path`` holds a table ``write_table`` wrote: its header is the sweep's columns (the known ones in
    ``COLUMNS`` order, any others after them, sorted), the parameters of a cell among them. Reads the header only."""
    path = Path(path)
    table_format = table_format or output_format(path)
    try:
        if table_format == "parquet":
            names = _parquet_columns(path)
        else:
            with path.open(newline="", encoding="utf-8") as stream:
                names = next(csv.reader([stream.readline(1 << 16)]), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    if names is None:
        return False
    known = [name for name in names if name in COLUMNS]
    extras = names[len(known):]
    return (set(REQUIRED_COLUMNS) <= set(names) and names[:len(known)] == known
            and known == sorted(known, key=COLUMNS.index) and extras == sorted(extras)
            and len(set(names)) == len(names))


#: What 'verispec sweep --out' writes (``verispec.io.check_output``; the table's row store is a ``ResultStore``).
SWEEP_TABLE = OutputKind("verispec sweep table (its header is not the sweep's columns)", is_sweep_table, "sweep.csv")


def _parquet_columns(path: Path) -> list[str] | None:
    """The column names of a Parquet file, or None where it is not one."""
    import pyarrow
    import pyarrow.parquet

    try:
        return list(pyarrow.parquet.read_schema(path).names)
    except pyarrow.ArrowException:
        return None


def output_format(output: Path) -> str:
    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise SweepError(f"output {str(output)!r} must end in .csv or .parquet")
    if suffix == ".parquet":
        try:
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError:
            raise SweepError("Parquet output needs pandas and pyarrow: pip install pandas pyarrow, or write .csv") \
                from None
    return suffix[1:]


def _save(store: ResultStore, rows: dict, output: Path, keys: Sequence[str], table_format: str) -> None:
    store.add_many(rows)
    finished = [_stored(store.rows[key]) for key in keys if key in store.rows]
    write_table(finished, output, table_format)


#: Columns first in every table (then any others, sorted).
COLUMNS = ("family", "vocab", "vocab_size", "divergence", "temperature", "concentration", "seed", "file_sha256", "tree",
           "depth", "verifier",
           "method", "lp_optimum", "cell_timeout", "status", "reason", "method_used", "block_efficiency",
           "expected_accepted", "tau_law", "acceptance_by_depth", "tv_distance", "lossless", "nodes", "block_time",
           "throughput", "speedup", "optimum", "gap", "optimum_throughput", "latency", "seconds")


#: Columns every sweep table has: a cell's parameters and its status.
REQUIRED_COLUMNS = ("family", "tree", "verifier", "method", "status")


def _columns(rows: list[dict]) -> list[str]:
    present = set().union(*rows) if rows else set(COLUMNS)
    return [name for name in COLUMNS if name in present] + sorted(present - set(COLUMNS))


def write_table(rows: list[dict], output: Path, table_format: str) -> None:
    """The tidy table, atomically: CSV (lists as JSON text) or Parquet (lists as list columns)."""
    columns = _columns(rows)
    if table_format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({name: json.dumps(row.get(name)) if isinstance(row.get(name), (list, dict)) else
                             ("" if row.get(name) is None else row.get(name)) for name in columns})
        atomic_write_text(output, buffer.getvalue())
        return
    import pandas

    # dicts (the latency model) as JSON text: Parquet structs would not read back as the same dict
    frame = pandas.DataFrame([{name: json.dumps(row.get(name)) if isinstance(row.get(name), dict) else row.get(name)
                               for name in columns} for row in rows], columns=columns)
    with atomic_output(output) as temporary:
        frame.to_parquet(temporary, index=False)


def read_table(path: str | Path) -> list[dict]:
    """Rows of a table written by ``write_table`` (CSV cells parsed back to numbers, lists and booleans)."""
    path = Path(path)
    if output_format(path) == "parquet":
        import pandas

        frame = pandas.read_parquet(path)
        return [{name: _from_parquet(value) for name, value in row.items()} for row in frame.to_dict("records")]
    with path.open(newline="") as stream:
        return [{name: _from_csv(value) for name, value in row.items()} for row in csv.DictReader(stream)]


def _from_parquet(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, str) and value.startswith("{"):
        return json.loads(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _from_csv(text: str):
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.startswith(("[", "{")):
        return json.loads(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


#: Most seeds one --seeds names (ranges counted before they are expanded): every seed is at least one cell of a
#: sweep (MAX_CELLS) and one root of a selector dataset.
MAX_SEEDS = MAX_CELLS


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0-4' or '1,3,5' (or both: '0-2,7') -> seeds; more than MAX_SEEDS of them is refused by counting the ranges,
    before any is expanded."""
    spans = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            span = (int(low), int(high)) if dash else (int(part), int(part))
            if span[1] < span[0]:
                raise ValueError
        except ValueError:
            raise SweepError(f"cannot read seeds {_shortened(text)!r}: write a list such as 0,1,2 or a range such "
                             "as 0-9") from None
        spans.append(span)
    count = sum(high - low + 1 for low, high in spans)
    if count > MAX_SEEDS:
        raise SweepError(f"--seeds {_shortened(text)!r} names {count:,} seeds, above the limit of {MAX_SEEDS:,}; give "
                         "fewer seeds")
    return tuple(dict.fromkeys(seed for low, high in spans for seed in range(low, high + 1)))


def _shortened(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:40]}..."


__all__ = ["BACKENDS", "FAMILIES", "SweepError", "SweepGrid", "SweepRows", "available_cores", "cell_key",
           "check_sweep_output", "check_sweep_table", "file_sha256", "is_local_cluster", "is_sweep_table",
           "local_cluster_workers", "local_workers", "open_sweep_store", "parse_seeds", "read_table", "run_cell",
           "run_cells", "run_sweep", "worker_processes", "write_table"]
