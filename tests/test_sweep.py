"""verispec sweep: grids, tidy rows, resuming, table formats, and identical rows on every execution backend."""

from __future__ import annotations

import json

import pytest

from verispec.cli import main
from verispec.errors import IncompatibleDraftError, VerispecError
from verispec.simulator import analyze, parse_tree, random_markov_problem
from verispec.simulator.engine import check_compatible
from verispec.sweep import SweepError, SweepGrid, cell_key, parse_seeds, read_table, run_sweep
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
    import verispec.sweep as sweep

    output = tmp_path / "resume.csv"
    first = run_sweep(SMALL, output, backend="serial", progress=False)
    calls = []
    original = sweep.run_cell
    monkeypatch.setattr(sweep, "run_cell", lambda cell: calls.append(cell) or original(cell))
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
    from verispec.sweep import dask_client

    for address in ("local:0", "local:x"):
        with pytest.raises(SweepError, match="local:N"), dask_client(address):
            pass


def test_a_ray_cluster_gives_the_serial_rows(tmp_path):
    """Runs where Ray is installed (pip install ray; CI does not install it): a local Ray cluster started by
    ray.init, compared row for row with the serial run."""
    ray = pytest.importorskip("ray")
    serial = run_sweep(SMALL, tmp_path / "serial.csv", backend="serial", progress=False)
    try:
        clustered = run_sweep(SMALL, tmp_path / "ray.csv", backend="ray", progress=False)
    finally:
        ray.shutdown()
    assert _without_time(clustered) == _without_time(serial)


def test_write_problems_saves_every_seeded_problem_and_reproduces_its_cells(tmp_path):
    from verispec.simulator.problems import load_problem
    from verispec.sweep import problem_file_name, run_cell, write_problems

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
    from verispec.sweep import problem_file_name

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
