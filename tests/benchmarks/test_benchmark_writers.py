"""Issue 64: every benchmark writer follows the writers' rule (benchmarks/measure.py). A benchmark's --output
overwrote a file of the user's, --fresh deleted it (and the .md written beside it was replaced), and
``measure.publish_table`` replaced whatever its path named. Now each output is claimed before any work: a file that
is not a benchmark's own of that kind (its marker) is refused on one line, status 2, unless --overwrite; each output
is locked for the run (a second run writing it is refused naming the first); writes are atomic.

Negative controls: the old code paths (``path.unlink()`` under --fresh, ``atomic_write_text`` with no check) put
back, the same inputs lose the user's file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import verispec.files.store_lock as lock_module
from verispec.files.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import measure  # noqa: E402  benchmarks/measure.py

NOTES = "my own notes\n"


@pytest.fixture(autouse=True)
def _fresh_claims(monkeypatch):
    """Each test starts with no output claimed, and gives back the locks it took."""
    monkeypatch.setattr(measure, "_CLAIMED", {})
    held = set(lock_module._HELD)
    yield
    for key in set(lock_module._HELD) - held:
        while key in lock_module._HELD:
            lock_module.release(key)


def _refused(capsys, call) -> str:
    with pytest.raises(SystemExit) as ended:
        call()
    assert ended.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], lines
    return lines[0]


def test_publish_table_refuses_a_users_file_and_replaces_its_own(tmp_path, capsys, monkeypatch):
    path = tmp_path / "README.md"
    path.write_text(NOTES)
    line = _refused(capsys, lambda: measure.publish_table(path, "caption", ["a"], [[1]]))
    assert "README.md" in line and "--overwrite" in line and path.read_text() == NOTES
    own = tmp_path / "table.md"
    measure.publish_table(own, "caption", ["a"], [[1]])
    measure.publish_table(own, "caption", ["a"], [[2]])  # its own, marked: replaced
    lines = own.read_text().splitlines()
    assert lines[0].startswith("<!-- written by verispec") and lines[1:] == ["caption", "", "| a |", "|---|", "| 2 |"]
    capsys.readouterr()
    # negative control: the old publish_table wrote with no check, and the user's file was gone
    monkeypatch.setattr(measure, "write_table", lambda path, text: atomic_write_text(Path(path), text))
    measure.publish_table(path, "caption", ["a"], [[1]])
    assert path.read_text() != NOTES


def _old_run_arguments_fresh(path: Path) -> None:
    """What run_arguments did with --fresh before issue 64."""
    if path.exists():
        path.unlink()


@pytest.mark.parametrize("content", [NOTES, '{"rows": []}', '{"parameters": {"benchmark": "x"}, "rows": []}'])
def test_fresh_never_deletes_a_file_that_is_not_a_benchmarks_store(tmp_path, capsys, content):
    path = tmp_path / "rows.json"
    path.write_text(content)
    line = _refused(capsys, lambda: measure.run_arguments("d", "results/x.json", ["--output", str(path), "--fresh"],
                                                          script="bench_x.py"))
    assert "rows.json" in line and path.read_text() == content
    _old_run_arguments_fresh(path)  # negative control: the old --fresh deleted it
    assert not path.exists()


def test_fresh_starts_its_own_store_over_and_the_table_beside_it_is_checked(tmp_path, capsys):
    path = tmp_path / "rows.json"
    args, _, store = measure.run_arguments("d", "results/x.json", ["--output", str(path)], script="bench_x.py")
    store.add("k", {"v": 1})
    _, _, store = measure.run_arguments("d", "results/x.json", ["--output", str(path)], script="bench_x.py")
    assert store.done("k")  # resumed
    _, _, store = measure.run_arguments("d", "results/x.json", ["--output", str(path), "--fresh"], script="bench_x.py")
    assert not store.done("k") and json.loads(path.read_text())["rows"] == [{"key": "k", "v": 1}]  # kept till a row
    (tmp_path / "other.md").write_text(NOTES)  # the table beside --output other.json is the user's
    other = ["--output", str(tmp_path / "other.json")]
    line = _refused(capsys, lambda: measure.run_arguments("d", "results/x.json", other, script="bench_x.py"))
    assert "other.md" in line and (tmp_path / "other.md").read_text() == NOTES
    assert not (tmp_path / "other.json").exists()
    # an --output whose table is itself (x.md) is refused: one file cannot hold both
    assert "cannot hold both" in _refused(capsys, lambda: measure.run_arguments(
        "d", "results/x.json", ["--output", str(tmp_path / "x.md")], script="bench_x.py"))


def test_a_result_file_is_replaced_only_when_a_benchmark_wrote_it(tmp_path, capsys):
    old = tmp_path / "old.json"  # a result written before the marker: its record names a benchmarks/ command
    old.write_text(json.dumps({"record": {"command": "python benchmarks/bench_dp.py"}, "rows": []}))
    verdict = tmp_path / "verdict.json"  # another command's result file, which the old check took for one
    verdict.write_text(json.dumps({"record": {"command": "verispec selector verdict"}, "tables": []}))
    started = measure.start_record("bench_x.py", [], result=old)
    measure.write_result(old, started, {"rows": [1]})
    assert json.loads(old.read_text())["written_by"]["kind"] == measure.RESULT_KIND
    before = verdict.read_text()
    assert "verdict.json" in _refused(capsys, lambda: measure.start_record("bench_x.py", [], result=verdict))
    assert verdict.read_text() == before
    from verispec.files.provenance import check_result_output

    check_result_output(verdict)  # negative control: the old check (a record naming a command) let it through


SCRIPT = ["benchmarks/bench_chain_lp.py", "--lengths", "3", "--full-up-to", "3"]


def test_a_benchmark_refuses_before_any_work_and_a_second_run_names_the_first(tmp_path):
    """bench_chain_lp with the user's notes at its table's name: exit 2 at once, one line, nothing written. The
    same script's output held by another run: refused naming that run's pid."""
    (tmp_path / "c.md").write_text(NOTES)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *SCRIPT, "--output", str(tmp_path / "c.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "c.md" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.md"] and (tmp_path / "c.md").read_text() == NOTES
    assert time.perf_counter() - start < 60
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom verispec.files.store_lock import acquire\n"
                               "acquire(sys.argv[1], 'the first run'); print('held', flush=True); time.sleep(60)",
                               str(tmp_path / "d.json")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        done = subprocess.run([sys.executable, *SCRIPT, "--output", str(tmp_path / "d.json")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and f"pid {holder.pid}" in done.stderr and "the first run" in done.stderr
        assert not (tmp_path / "d.json").exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_disk_that_fills_during_the_run_ends_it_on_one_line(tmp_path, capsys, monkeypatch):
    """The store's save and the table's write fail with ENOSPC after the claims passed: status 2 and one line, the
    saved file whole. Negative control: a plain ResultStore's save raises OutputError (a traceback in a script)."""
    import errno
    import os

    import verispec.files.io as io_module
    from verispec.errors import OutputError

    path = tmp_path / "rows.json"
    _, _, store = measure.run_arguments("d", "results/x.json", ["--output", str(path)], script="bench_x.py")
    store.add("a", {"v": 1})
    saved = path.read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io_module, "open", full, raising=False)
    line = _refused(capsys, lambda: store.add("b", {"v": 2}))
    assert "No space left on device" in line and path.read_text() == saved
    assert "No space left" in _refused(capsys, lambda: measure.write_table(tmp_path / "rows.md", "text"))
    with pytest.raises(OutputError):
        io_module.ResultStore(path).add("b", {"v": 2})
