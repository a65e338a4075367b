"""verispec sweep: grids, tidy rows, resuming, table formats, and identical rows on every execution backend."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from verispec.cli import main
from verispec.errors import IncompatibleDraftError, VerispecError
from verispec.simulator import analyze, parse_tree, random_markov_problem
from verispec.simulator.engine import check_compatible
from verispec.study.grid import SweepError, SweepGrid, cell_key, parse_seeds
from verispec.study.sweep import run_sweep
from verispec.study.tables import read_table
from verispec.verifiers import REGISTRY

SMALL = SweepGrid(families=("context-free", "markov"), vocab_sizes=(3,), seeds=(0, 1), trees=("chain:2", "iid:2,2"),
                  verifiers=("bv", "specinfer", "spectr", "traversal", "gbv"))


def _without_time(rows):
    return [{name: value for name, value in row.items() if name != "seconds"} for row in rows]


def test_the_grid_pairs_each_verifier_with_the_trees_it_is_valid_for():
    cells, skipped = SMALL.cells()
    valid = 0
    for spec in SMALL.trees:
        for name in SMALL.verifiers:
            try:
                check_compatible(REGISTRY[name], parse_tree(spec))
                valid += 1
            except IncompatibleDraftError:
                pass
    problems = 2 * 2  # two families, two seeds
    assert len(cells) == problems * valid and skipped == problems * (2 * 5 - valid)
    assert len({cell_key(cell) for cell in cells}) == len(cells)


def test_a_draft_equal_to_the_target_accepts_every_token(tmp_path):
    """Divergence 0 gives q = p, so every ratio test min(1, p/q) passes: token-level (naive), block
    verification, SpecInfer's first test, NaiveTree's first child and SpecTr (rho* = 1, since beta(1) = 1 and
    p_acc = 1) accept the whole path, E[tau+1] = L + 1, on every family."""
    grid = SweepGrid(families=("context-free", "random", "markov"), vocab_sizes=(3, 4), divergences=(0.0,),
                     seeds=(0, 1), trees=("chain:3", "iid:2,2", "delayed:2,1,2"),
                     verifiers=("naive", "bv", "specinfer", "naivetree", "spectr"))
    rows = run_sweep(grid, tmp_path / "equal.csv", backend="serial", progress=False)
    assert rows and all(row["status"] == "ok" for row in rows)
    for row in rows:
        assert abs(row["block_efficiency"] - (row["depth"] + 1)) < 1e-12
        assert row["acceptance_by_depth"] == pytest.approx([1.0] * row["depth"], abs=1e-12)


def test_rows_are_the_engine_results_of_the_seeded_problems(tmp_path):
    rows = run_sweep(SMALL, tmp_path / "small.csv", backend="serial", progress=False)
    row = next(r for r in rows if r["family"] == "markov" and r["seed"] == 1 and r["verifier"] == "specinfer"
               and r["tree"] == "iid:2,2")
    direct = analyze(random_markov_problem(3, 1), parse_tree("iid:2,2"), REGISTRY["specinfer"])
    assert row["block_efficiency"] == pytest.approx(float(direct.block_efficiency), abs=1e-12)
    assert row["tau_law"] == pytest.approx([float(x) for x in direct.tau_law], abs=1e-12)
    assert row["lossless"] is True and row["tv_distance"] < 1e-12
    assert sum(row["tau_law"]) == pytest.approx(1, abs=1e-12)


def test_a_rerun_computes_only_the_cells_it_has_not_finished(tmp_path, monkeypatch):
    import verispec.study.cells as cells

    output = tmp_path / "resume.csv"
    first = run_sweep(SMALL, output, backend="serial", progress=False)
    calls = []
    original = cells.run_cell
    monkeypatch.setattr(cells, "run_cell", lambda cell: calls.append(cell) or original(cell))
    larger = SweepGrid(**{**SMALL.__dict__, "seeds": (0, 1, 2)})
    rows = run_sweep(larger, output, backend="serial", progress=False)
    assert len(calls) == len(larger.cells()[0]) - len(first) and all(cell["seed"] == 2 for cell in calls)
    assert [row for row in rows if row["seed"] != 2] == first  # kept, not recomputed
    assert len(read_table(output)) == len(rows)


def test_csv_and_parquet_hold_the_same_rows(tmp_path):
    pytest.importorskip("pyarrow")
    grid = SweepGrid(**{**SMALL.__dict__, "gap": True})
    rows = run_sweep(grid, tmp_path / "t.csv", backend="serial", progress=False)
    run_sweep(grid, tmp_path / "t.parquet", backend="serial", progress=False)
    for table in ("t.csv", "t.parquet"):
        read = read_table(tmp_path / table)
        assert _without_time(read) == _without_time(rows), table  # float64 round-trips exactly in both
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary left
    # bv is optimal on a single path (Sun et al. 2024): its gap to the LP optimum is 0 on chains
    assert all(abs(row["gap"]) < 1e-7 for row in rows if row["verifier"] == "bv" and row["tree"] == "chain:2")
    assert all(row["gap"] > -1e-7 for row in rows)  # no valid verifier beats the optimum


def test_local_processes_give_the_serial_rows(tmp_path):
    serial = run_sweep(SMALL, tmp_path / "serial.csv", backend="serial", progress=False)
    local = run_sweep(SMALL, tmp_path / "local.csv", backend="local", jobs=2, progress=False)
    assert _without_time(local) == _without_time(serial)


def test_a_dask_cluster_gives_the_serial_rows(tmp_path):
    distributed = pytest.importorskip("distributed")
    serial = run_sweep(SMALL, tmp_path / "serial.csv", backend="serial", progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as \
            cluster, distributed.Client(cluster) as client:
        clustered = run_sweep(SMALL, tmp_path / "dask.csv", backend="dask", address=client, progress=False)
    assert _without_time(clustered) == _without_time(serial)


def test_a_cell_too_large_is_recorded_as_refused(tmp_path):
    grid = SweepGrid(families=("markov",), vocab_sizes=(200,), trees=("iid:4,8",), verifiers=("khisti",))
    (row,) = run_sweep(grid, tmp_path / "big.csv", backend="serial", progress=False)
    assert row["status"] == "refused" and row["reason"].startswith("ProblemTooLargeError")
    assert row.get("block_efficiency") is None


def test_a_random_problem_too_large_to_tabulate_is_refused_before_it_is_built(tmp_path):
    grid = SweepGrid(families=("random",), vocab_sizes=(50,), trees=("chain:4",), verifiers=("bv",))
    (row,) = run_sweep(grid, tmp_path / "table.csv", backend="serial", progress=False)
    assert row["status"] == "refused" and "6,377,551 prefixes" in row["reason"] and row["seconds"] < 1


def test_a_cell_past_its_timeout_is_recorded_as_refused(tmp_path):
    # bv on chain:7 at V = 6 enumerates 6^7 draft paths: about 25 s here, stopped after 0.05 s
    grid = SweepGrid(families=("markov",), vocab_sizes=(6,), trees=("chain:7",), verifiers=("bv",),
                     cell_timeout=0.05)
    (row,) = run_sweep(grid, tmp_path / "slow.csv", backend="serial", progress=False)
    assert row["status"] == "refused" and "Timeout" in row["reason"] and row["seconds"] < 5


@pytest.mark.parametrize("options,message", [
    ({"families": ("nope",)}, "unknown problem family"),
    ({"families": ("file:/no/such.json",)}, "does not exist"),
    ({"vocab_sizes": (1,)}, "vocabulary size"),
    ({"divergences": (1.5,)}, "divergence"),
    ({"temperatures": (0.0,)}, "temperature"),
    ({"concentrations": (float("inf"),)}, "concentration"),
    ({"divergences": (True,)}, "divergence"),
    ({"seeds": (-1,)}, "seed"),
    ({"methods": ("fastest",)}, "unknown method"),
    ({"trees": ()}, "empty"),
    ({"cell_timeout": -1.0}, "cell_timeout"),
])
def test_bad_grids_are_refused_on_one_line(options, message):
    with pytest.raises(VerispecError, match=message):  # SweepError, or the generators' InvalidProblemError
        SweepGrid(**options)


def test_seeds_parse_lists_and_ranges():
    assert parse_seeds("0-3,7") == (0, 1, 2, 3, 7) and parse_seeds("5") == (5,)
    for text in ("3-1", "a", "1,,2"):
        with pytest.raises(SweepError, match="seeds"):
            parse_seeds(text)


def test_the_command_line_writes_the_table_and_refuses_bad_input(tmp_path, capsys):
    output = tmp_path / "cli.csv"
    assert main(["sweep", "--families", "context-free,markov", "--seeds", "0-1", "--trees", "chain:2;iid:2,2",
                 "--verifiers", "bv,specinfer", "--backend", "serial", "--out", str(output)]) == 0
    assert capsys.readouterr().out.startswith("12 cells in")  # bv: chain only; specinfer: both trees; x 4 problems
    rows = read_table(output)
    assert len(rows) == 12 and {row["status"] for row in rows} == {"ok"}
    assert json.loads(output.with_name(output.name + ".cells.json").read_text())["rows"]
    for argv, message in [(["--out", str(tmp_path / "x.txt")], ".csv or .parquet"),
                          (["--vocab", "3,x"], "vocabulary size"),
                          (["--backend", "dask"], "--address")]:
        assert main(["sweep", *argv, "--out" if "--out" not in argv else "--jobs",
                     str(tmp_path / "y.csv") if "--out" not in argv else "1"]) == 2
        error = capsys.readouterr().err
        assert message in error and len(error.strip().splitlines()) == 1


def test_a_local_dask_cluster_is_named_local_n():
    pytest.importorskip("distributed")
    from verispec.study.clusters import dask_client

    for address in ("local:0", "local:x"):
        with pytest.raises(SweepError, match="local:N"), dask_client(address):
            pass


def test_a_ray_cluster_gives_the_serial_rows(tmp_path, ray_cluster):
    """A local Ray (the session's, ``ray_cluster``; Ray is in the sweep extra, so this runs wherever the suite's
    install does), compared row for row with the serial run; the sweep keeps a Ray it did not start."""
    serial = run_sweep(SMALL, tmp_path / "serial.csv", backend="serial", progress=False)
    clustered = run_sweep(SMALL, tmp_path / "ray.csv", backend="ray", progress=False)
    assert _without_time(clustered) == _without_time(serial)
    assert ray_cluster.is_initialized()


def test_a_cell_too_large_for_a_build_is_refused_before_the_first_cell(tmp_path):
    """traversal on chain:16 at V = 3 keeps an output law of 3 + 9 + .. + 3^17 = 193,710,243 entries beside
    tables of 3^16 prefixes filled one by one: minutes and tens of GB, which the engine alone would start (the
    selector's default grid ran past two minutes at 2.8 GB without a word). The sweep names the cell and refuses
    before any cell runs: no table, no row store; the same grid without that tree runs."""
    grid = SweepGrid(families=("markov",), vocab_sizes=(3,), trees=("chain:2", "chain:16"),
                     verifiers=("traversal",))
    out = tmp_path / "deep.csv"
    start = time.perf_counter()
    with pytest.raises(SweepError, match=r"traversal on chain:16 at V=3 \(markov\) is estimated at .* GiB.* smaller "
                                         r"tree or --vocab"):
        run_sweep(grid, out, backend="serial", progress=False)
    assert time.perf_counter() - start < 2
    assert not out.exists() and not out.with_name(out.name + ".cells.json").exists()
    rows = run_sweep(replace(grid, trees=("chain:2",)), out, backend="serial", progress=False)
    assert [row["status"] for row in rows] == ["ok"]


def test_a_cell_past_a_minute_needs_a_cell_timeout(tmp_path):
    """specinfer's walk DP on iid:1200,2 at V = 3 (1,200 i.i.d. draws at the root) is estimated at about two
    minutes of one core in a few hundred MB: refused without --cell-timeout, which the message names; with one,
    the cell runs and is stopped at it, a refused row."""
    grid = SweepGrid(families=("markov",), vocab_sizes=(3,), trees=("iid:1200,2",), verifiers=("specinfer",))
    with pytest.raises(SweepError, match=r"specinfer on iid:1200,2 .* above the 60 s .*--cell-timeout"):
        run_sweep(grid, tmp_path / "slow.csv", backend="serial", progress=False)
    (row,) = run_sweep(replace(grid, cell_timeout=0.2), tmp_path / "slow.csv", backend="serial", progress=False)
    assert row["status"] == "refused" and "Timeout" in row["reason"] and row["seconds"] < 2


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_cluster_that_is_not_there_is_named_on_one_line_at_once(tmp_path):
    """--backend dask at a closed port waited 30 s for an OSError traceback, and --backend ray retried for
    minutes: now one line naming the address and how to start a scheduler, exit status 2, in about the time to
    connect (each in a process of its own, as a user runs it: a Ray this test process runs would be kept)."""
    pytest.importorskip("distributed")
    port = _closed_port()
    for backend, address, start_one in (("dask", f"tcp://127.0.0.1:{port}", "dask scheduler --port"),
                                        ("ray", f"127.0.0.1:{port}", "ray start --head --port")):
        if backend == "ray" and importlib.util.find_spec("ray") is None:
            continue
        began = time.perf_counter()
        finished = subprocess.run([sys.executable, "-m", "verispec", "sweep", "--backend", backend, "--address",
                                   address, "--trees", "chain:1", "--verifiers", "bv", "--out",
                                   str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=60)
        error = finished.stderr.strip()
        assert finished.returncode == 2 and len(error.splitlines()) == 1, error
        assert address in error and "connection refused" in error and start_one in error, error
        assert time.perf_counter() - began < 8  # start-up included; the refusal itself is immediate
        assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("backend,address,message", [
    ("dask", "tcp://127.0.0.1", "HOST:PORT with a port in 1..65535"),
    ("dask", "tcp://127.0.0.1:99999", "HOST:PORT with a port in 1..65535"),
    ("dask", "http://127.0.0.1:8786", "http:// is not an address of a Dask scheduler"),
    ("dask", "tcp://no-such-host.invalid:8786", "cannot be resolved"),
    ("ray", "127.0.0.1", "HOST:PORT with a port in 1..65535"),
    ("ray", "http://127.0.0.1:6379", "http:// is not an address of a Ray cluster"),
    ("local", "tcp://127.0.0.1:8786", "--backend local runs here"),
    ("serial", "local:2", "--backend serial runs here"),
])
def test_a_cluster_address_that_cannot_be_one_is_refused(tmp_path, backend, address, message):
    pytest.importorskip({"dask": "distributed", "ray": "ray"}.get(backend, "verispec"))
    with pytest.raises(SweepError, match=message):
        run_sweep(SMALL, tmp_path / "a.csv", backend=backend, address=address, progress=False)
    assert not (tmp_path / "a.csv").exists()


def test_a_port_that_answers_but_is_no_scheduler_is_refused_within_the_connect_timeout(tmp_path, monkeypatch):
    """A port that accepts connections and stays silent (a Dask scheduler sends its handshake at once):
    distributed's client waited on it for ever whatever its timeout; now one line at CONNECT_TIMEOUT (1 s here)."""
    pytest.importorskip("distributed")
    import verispec.study.clusters as clusters

    monkeypatch.setattr(clusters, "CONNECT_TIMEOUT", 1.0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        began = time.perf_counter()
        with pytest.raises(SweepError, match=f"no Dask scheduler answers at {address} .*sent no Dask scheduler's "
                                             "handshake within 1 s"):
            run_sweep(SMALL, tmp_path / "a.csv", backend="dask", address=address, progress=False)
        assert time.perf_counter() - began < 5


def test_write_problems_saves_every_seeded_problem_and_reproduces_its_cells(tmp_path):
    from verispec.simulator.problem_files import load_problem
    from verispec.study.cells import problem_file_name, run_cell, write_problems

    grid = SweepGrid(families=("context-free", "random", "markov"), vocab_sizes=(3,), seeds=(0, 1),
                     trees=("chain:2", "iid:2,3"), verifiers=("specinfer", "bv"))
    written = write_problems(grid, tmp_path / "problems")
    assert sorted(path.name for path in written) == sorted(problem_file_name(s) for s in grid.problem_settings())
    assert len(written) == 6
    cells, _ = grid.cells()
    for cell in cells:
        problem = load_problem(tmp_path / "problems" / problem_file_name(cell))
        row = run_cell(cell)
        result = analyze(problem, parse_tree(cell["tree"]), REGISTRY[cell["verifier"]])
        assert abs(result.block_efficiency - row["block_efficiency"]) < 1e-12


def test_sweep_save_problems_through_the_cli(tmp_path, capsys):
    from verispec.study.cells import problem_file_name

    out, folder = tmp_path / "s.csv", tmp_path / "problems"
    code = main(["sweep", "--families", "random,context-free", "--vocab", "3", "--seeds", "0-1", "--trees", "chain:2",
                 "--verifiers", "bv", "--out", str(out), "--save-problems", str(folder)])
    assert code == 0 and "4 problems written" in capsys.readouterr().out
    setting = {"family": "random", "vocab": 3, "divergence": 0.5, "temperature": 1.0, "concentration": 1.0, "seed": 1}
    assert main(["exact", "--problem", str(folder / problem_file_name(setting)), "--tree", "chain:2", "--verifier",
                 "bv", "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)["block_efficiency"]
    row = next(row for row in read_table(out) if row["family"] == "random" and row["seed"] == 1)
    assert abs(exact - row["block_efficiency"]) < 1e-12
    # a table beyond the generators' limits is refused, one line, before anything is written
    code = main(["sweep", "--families", "random", "--vocab", "50", "--trees", "chain:5", "--verifiers", "bv", "--out",
                 str(tmp_path / "big.csv"), "--save-problems", str(tmp_path / "big")])
    assert code == 2 and not (tmp_path / "big").exists() and not (tmp_path / "big.csv").exists()
