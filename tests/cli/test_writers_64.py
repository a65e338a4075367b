"""Issue 64, writers that lost a file, and a full disk, a FIFO or a device where a file was expected.

(a) ``selector verdict --out DIR`` and ``selector study --out DIR`` replaced a file of the user's at one of their
names (``verdict.md``, ``pair_selector.png``, a result JSON of another command): each is refused on one line unless
--overwrite, and a rerun replaces the command's own files (their ``written_by`` marker). Two verdicts into one DIR
at once both exited 0 with one run's fits lost: the second is refused, naming the first (``verispec.files.store_lock``).

(b) The store lock gave a traceback on a full disk (``sweep --out``): one line, exit 2.

(c) A legal 255-byte file name failed through its temporary file's longer name.

(d) docs/generate.py: a result file that is a FIFO hung it, one linked to /dev/zero read without end, one without
``tables`` gave a KeyError, and a full disk truncated README.md (the page was rewritten in place). A malformed
``data/MANIFEST`` line gave a traceback.

Each behaviour has its negative control: the old code path put back (by monkeypatching) is caught by the same
assertion. Expectations are counted from the inputs (bytes written, names), not read from the code.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import verispec.files.io as io_module
import verispec.files.store_lock as lock_module
from verispec.cli import main
from verispec.errors import VerispecError

ROOT = Path(__file__).resolve().parents[2]
NOTES = b"my own notes\n"
#: A result file of another verispec command: JSON with a record naming its command, which the old verdict check
#: (``check_result_output``) took for its own.
OTHER_RESULT = json.dumps({"record": {"command": "python benchmarks/bench_dp.py"}, "rows": []}).encode()
SWEEP = ["sweep", "--trees", "chain:1", "--verifiers", "bv", "--backend", "serial"]


def _one_line(capsys, prefix: str = "verispec: error: ") -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0]


class _Reached(Exception):
    """Raised where a command would start its work: the checks before it let the run through."""


def _stop_at_inputs(monkeypatch) -> None:
    import verispec.selector.study as study

    def reached(*args, **kwargs):
        raise _Reached

    monkeypatch.setattr(study, "load_inputs", reached)


def _old_verdict_outputs(out: Path, overwrite: bool) -> None:
    """The verdict's output check before issue 64: the paths, and verdict.json by its format only."""
    from verispec.cli.selector_verdict import JSON_NAME, MARKDOWN_NAME, STORE_NAME
    from verispec.files.io import check_inside, check_output_dir, check_output_file
    from verispec.files.provenance import check_result_output

    check_output_dir(out, "--out")
    for name in (JSON_NAME, MARKDOWN_NAME, STORE_NAME):
        check_inside(out, out / name, "--out")
        check_output_file(out / name, "--out")
    check_result_output(out / JSON_NAME)


# --- (a) the verdict's and the study's files ------------------------------------------------------------------


VERDICT_FILES = [("verdict.md", NOTES), ("verdict.json", OTHER_RESULT), ("verdict.json", b'{"my": "notes"}'),
                 ("verdict.rows.json", b'{"rows": []}'), ("verdict.rows.json", NOTES)]


@pytest.mark.parametrize(("name", "content"), VERDICT_FILES)
def test_the_verdict_refuses_a_users_file_at_one_of_its_names(tmp_path, capsys, monkeypatch, name, content):
    out = tmp_path / "v"
    out.mkdir()
    (out / name).write_bytes(content)
    _stop_at_inputs(monkeypatch)  # a refusal comes before the datasets are read
    argv = ["selector", "verdict", "--dataset", str(tmp_path / "d.npz"), "--out", str(out)]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert name in line and "--overwrite" in line
    assert (out / name).read_bytes() == content and sorted(os.listdir(out)) == [name]
    with pytest.raises(_Reached):
        main(argv + ["--overwrite"])  # the user's choice lets it through
    # negative control: the old check lets the run through to its work, and the file would be replaced
    import verispec.cli.selector_verdict as verdict_cli

    if name != "verdict.json" or content == OTHER_RESULT:
        monkeypatch.setattr(verdict_cli, "_outputs", _old_verdict_outputs)
        with pytest.raises(_Reached):
            main(argv)


STUDY_FILES = [("pair_selector.md", NOTES), ("pair_selector.json", OTHER_RESULT), ("pair_selector.png", NOTES),
               ("pair_selector.json", b'{"format": "verispec pair selector study"}')]


@pytest.mark.parametrize(("name", "content"), STUDY_FILES)
def test_the_study_refuses_a_users_file_at_one_of_its_names(tmp_path, capsys, monkeypatch, name, content):
    out = tmp_path / "s"
    out.mkdir()
    (out / name).write_bytes(content)
    _stop_at_inputs(monkeypatch)
    argv = ["selector", "study", "--dataset", str(tmp_path / "d.npz"), "--out", str(out)]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert name in line and "--overwrite" in line
    assert (out / name).read_bytes() == content and sorted(os.listdir(out)) == [name]
    if name.endswith(".json") and b"format" in content:
        assert "older than the marker" in line  # the study's format without the marker: said so
    with pytest.raises(_Reached):
        main(argv + ["--overwrite"])
    # negative control: the old check (paths only) let every such file through
    import verispec.selector.study as study

    monkeypatch.setattr(study, "check_study_owned", lambda out, overwrite=False, what="--out":
                        study.check_study_outputs(out, what))
    with pytest.raises(_Reached):
        main(argv)


def _tiny_datasets(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    from tests.selector.test_verdict import _setup

    return _setup(tmp_path)


def test_own_outputs_are_replaced_and_overwrite_replaces_the_users(tmp_path, capsys):
    """--overwrite replaces the user's verdict.md and pair_selector.png; the files written carry the marker, so a
    rerun without --overwrite replaces them; the readers' content is unchanged (the Markdown begins with the
    marker comment, then the same heading)."""
    base, _, _, _ = _tiny_datasets(tmp_path)
    verdict = ["selector", "verdict", "--dataset", base, "--replicates", "2", "--folds", "2", "--epochs", "1",
               "--bootstrap", "100", "--out", str(tmp_path / "v")]
    study = ["selector", "study", "--dataset", base, "--epochs", "1", "--bootstrap", "100", "--out",
             str(tmp_path / "s")]
    from verispec.cli.selector_verdict import _outputs
    from verispec.selector.study import check_study_owned

    for argv, name, check in ((verdict, "verdict.md", _outputs), (study, "pair_selector.png", check_study_owned)):
        out = Path(argv[-1])
        out.mkdir()
        (out / name).write_bytes(NOTES)
        assert main(argv) == 2 and (out / name).read_bytes() == NOTES
        assert main(argv + ["--overwrite"]) == 0 and (out / name).read_bytes() != NOTES
        check(out, overwrite=False)  # its own files now: the check a rerun makes passes without --overwrite
        assert len(os.listdir(out)) == 4  # its three files and the lock, nothing else
    capsys.readouterr()
    from verispec.files.io import png_marker

    lines = (tmp_path / "v" / "verdict.md").read_text().splitlines()
    assert lines[0].startswith("<!-- written by verispec selector verdict") and lines[1].startswith("# Which verifier")
    assert json.loads((tmp_path / "v" / "verdict.json").read_text())["written_by"]["kind"] == "selector verdict"
    assert json.loads((tmp_path / "s" / "pair_selector.json").read_text())["written_by"]["kind"] == "selector study"
    assert png_marker(tmp_path / "s" / "pair_selector.png")["tool"] == "verispec"


HOLD = textwrap.dedent("""
    import sys, time
    from verispec.files.store_lock import acquire
    acquire(sys.argv[1], "the first run")
    print("held", flush=True)
    time.sleep(60)
""")


@contextlib.contextmanager
def _held(store: Path):
    """``store``'s lock held by another process for the block."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


@pytest.mark.parametrize(("command", "store"), [("verdict", "verdict.rows.json"), ("study", "pair_selector.json")])
def test_a_second_run_into_one_folder_is_refused_naming_the_first(tmp_path, capsys, monkeypatch, command, store):
    """The first run holds DIR's lock; the second is refused at once on one line naming the holder's pid, and
    writes nothing. Negative control: with the lock a no-op (as before), the second run goes on to its work."""
    base, _, _, _ = _tiny_datasets(tmp_path)
    out = tmp_path / "out"
    argv = ["selector", command, "--dataset", base, "--epochs", "1", "--bootstrap", "100", "--out", str(out)]
    if command == "verdict":
        argv += ["--replicates", "2", "--folds", "2"]
    import verispec.cli.selector_study as study_cli
    import verispec.cli.selector_verdict as verdict_cli

    work = "_fit_and_write" if command == "verdict" else "_write_study"
    module = verdict_cli if command == "verdict" else study_cli

    def reached(*args, **kwargs):
        raise _Reached

    monkeypatch.setattr(module, work, reached)
    with _held(out / store) as pid:
        assert main(argv) == 2
        line = _one_line(capsys)
        assert f"pid {pid}" in line and "the first run" in line
        assert sorted(os.listdir(out)) == [f"{store}.lock"]
        monkeypatch.setattr(lock_module, "store_lock", lambda *args, **kwargs: contextlib.nullcontext())
        with pytest.raises(_Reached):
            main(argv)


# --- (b) the store lock on a full disk ------------------------------------------------------------------------


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_the_store_lock_on_a_full_disk_is_one_line(tmp_path, capsys, monkeypatch):
    """Writing the holder into the lock file fails with ENOSPC (as on a full tmpfs, measured): ``sweep --out``
    exits 2 on one line naming the lock file, and the lock is given back. Negative control: the old two
    unguarded calls raise the OSError through (a traceback)."""
    monkeypatch.setattr(lock_module.os, "pwrite", _full_disk)
    out = tmp_path / "s.csv"
    # locks this test process holds already (a benchmark's test before this one keeps its outputs claimed until the
    # process ends) are not this command's: the command must give back its own
    held = dict(lock_module._HELD)
    assert main([*SWEEP, "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert "s.csv.cells.json.lock" in line and "No space left on device" in line
    assert not (tmp_path / "s.csv").exists() and lock_module._HELD == held
    with open(lock_module.lock_path(str(out) + ".cells.json"), "rb") as stream:  # nobody holds it
        fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def old_record(handle, record, owner, shown):
        os.ftruncate(handle, 0)
        os.pwrite(handle, (json.dumps(record) + "\n").encode(), 0)

    monkeypatch.setattr(lock_module, "_record_holder", old_record)
    with pytest.raises(OSError) as raised:
        main([*SWEEP, "--out", str(out)])
    assert raised.value.errno == errno.ENOSPC and not isinstance(raised.value, io_module.OutputError)


# --- (c) a 255-byte name -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a" * 255, "é" * 127 + "a", "x" * 250 + ".json"])
def test_a_255_byte_name_is_written_atomically(tmp_path, monkeypatch, name):
    assert len(os.fsencode(name)) == 255
    path = tmp_path / name
    io_module.atomic_write_text(path, "text")
    io_module.atomic_write_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and os.listdir(tmp_path) == [name]
    # negative control: the old temporary name, the whole name with a dot before it and 8 characters and .tmp after
    monkeypatch.setattr(io_module, "temporary_prefix", lambda name: f".{name}.")
    with pytest.raises(io_module.OutputError, match="too long"):
        io_module.atomic_write_text(path, "new")
    assert json.loads(path.read_text()) == {"a": 1}


# --- (d) docs/generate.py and data/MANIFEST ---------------------------------------------------------------------


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate_64", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATE = _generator()


def test_a_result_file_that_is_a_fifo_or_a_device_is_refused_at_once(tmp_path):
    from verispec.report.generated_docs import GeneratedDocsError, load_result

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(GeneratedDocsError, match="is a FIFO"):
        load_result(fifo)
    with pytest.raises(GeneratedDocsError, match="is a character device"):
        load_result(zero)
    # negative control: the old read, Path.read_text, blocks in open() on the FIFO (no writer ever comes)
    process = subprocess.Popen([sys.executable, "-c", "import sys, pathlib; pathlib.Path(sys.argv[1]).read_text()",
                                str(fifo)])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)
    finally:
        process.kill()
        process.wait()


def test_a_result_file_without_tables_names_the_file_and_the_key(tmp_path):
    from verispec.report.generated_docs import GeneratedDocsError, ResultFiles

    record = {"command": "verispec selector verdict", "commit": "0" * 40, "date": "d", "inputs": {},
              "machine": {"cores": 2, "threads": 1, "device": "cpu", "load": 0.1}}
    (tmp_path / "verdict").mkdir()
    (tmp_path / "verdict" / "verdict.json").write_text(json.dumps({"record": record, "replicates": 2}))
    results = ResultFiles(tmp_path)
    with pytest.raises(GeneratedDocsError, match=r"verdict\.json has no 'tables'.*rerun the command"):
        GENERATE.verdict_table(results)
    with pytest.raises(GeneratedDocsError, match=r"the table 'verdict' cannot be made|has no 'tables'"):
        GENERATE.render("<!--table:verdict-->\nx\n<!--/table-->", GENERATE.VALUES, GENERATE.TABLES, results)
    # a value of the wrong type (null where a number is formatted): one line naming the block, not a TypeError
    (tmp_path / "multipath_gap.json").write_text(json.dumps({"record": record, "psbv_share_closed_mean": None}))
    with pytest.raises(GeneratedDocsError, match="'multipath.share_closed' cannot be made.*TypeError"):
        GENERATE.render("<!--v:multipath.share_closed-->x<!--/v-->", GENERATE.VALUES, GENERATE.TABLES, results)
    # negative control: the same file read as the old loader did (plain JSON) gives a KeyError
    with pytest.raises(KeyError):
        GENERATE.verdict_table(lambda name: json.loads((tmp_path / name).read_text()))


class _FullDiskFile:
    """A file opened for writing on a full disk: the open truncates it, every write fails with ENOSPC."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.close()

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_docs_generate_on_a_full_disk_keeps_the_page_whole(tmp_path, capsys, monkeypatch):
    """A stale block and a disk that takes no byte: the page keeps every byte, one line, exit 2. Negative control:
    the old write (Path.write_text, in place) truncates the page to 0 bytes."""
    page = tmp_path / "README.md"
    text = "# Title\n\n<!--table:verifiers-->\nstale\n<!--/table-->\n" + "more text\n" * 100
    page.write_text(text)
    monkeypatch.setattr(GENERATE, "ROOT", tmp_path)
    monkeypatch.setattr(GENERATE, "pages", lambda: [page])
    real_open = open
    monkeypatch.setattr(io_module, "open", lambda path, mode="r", **kw: _FullDiskFile(real_open(path, mode, **kw)),
                        raising=False)
    assert GENERATE.main([]) == 2
    line = _one_line(capsys, "docs/generate.py: ")
    assert "README.md" in line and "No space left on device" in line
    assert page.read_text() == text and os.listdir(tmp_path) == ["README.md"]  # no temporary file left either
    monkeypatch.setattr(GENERATE, "atomic_write_text", lambda path, fresh: Path(path).write_text(fresh))
    monkeypatch.setattr(Path, "open", lambda self, mode="r", **kw: _FullDiskFile(real_open(self, mode, **kw)))
    with pytest.raises(OSError):
        GENERATE.main([])
    assert page.stat().st_size == 0


@pytest.mark.parametrize(("line", "says"), [
    ("data/x.json\t²\t" + "a" * 64 + "\tabcdef1\tcmd\tnote", "expected 6 tab-separated fields"),
    ("data/x.json\t12", "expected 6 tab-separated fields"),
    ("../etc/passwd\t12\t" + "a" * 64 + "\tabcdef1\tcmd\tnote", "is not a file under data/"),
    ("data/../../x\t12\t" + "a" * 64 + "\tabcdef1\tcmd\tnote", "is not a file under data/"),
    ("data/x.json\t12\t" + "a" * 63 + "\tabcdef1\tcmd\tnote", "expected 6 tab-separated fields"),
])
def test_a_malformed_manifest_line_is_one_line_naming_it(tmp_path, line, says):
    from tests.support import data_manifest

    (tmp_path / "data").mkdir()
    header = (ROOT / "data" / "MANIFEST").read_text().split("path\tbytes")[0] + data_manifest.HEADER
    (tmp_path / "data" / "MANIFEST").write_text(f"{header}\n{line}\n")
    number = header.count("\n") + 2
    done = subprocess.run([sys.executable, "-m", "tests.support.data_manifest", "--root", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and f"data/MANIFEST:{number}:" in done.stderr and says in done.stderr
    # negative control: the old test of the byte count, str.isdigit, passes '²', which int() then refuses
    assert "²".isdigit()
    with pytest.raises(ValueError, match="invalid literal"):
        int("²")


def test_an_atomic_write_never_replaces_a_fifo_or_a_device_node(tmp_path, monkeypatch):
    """The rename would put a regular file in place of a FIFO (or, as root, of /dev/null): refused on one line, the
    FIFO left a FIFO. Negative control: without the guard the FIFO is replaced by a regular file."""
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(io_module.OutputError, match="is a FIFO"):
        io_module.atomic_write_text(fifo, "text")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and os.listdir(tmp_path) == ["pipe"]
    monkeypatch.setattr(io_module, "_refuse_special", lambda target, shown: None)
    io_module.atomic_write_text(fifo, "text")
    assert stat.S_ISREG(fifo.stat().st_mode) and fifo.read_text() == "text"


def test_a_fifo_given_as_an_input_file_never_hangs_the_command(tmp_path, capsys, monkeypatch):
    """``exact --problem FIFO`` with no writer: one line at once, exit 2 (the old open() waited for a writer for
    ever). A pipe with a writer (``--problem <(...)``) is read to its end. Negative control: the old open() is still
    waiting after 0.5 s, until a writer comes."""
    import threading

    import verispec.files.reading as reading

    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    assert main(["exact", "--problem", str(fifo), "--tree", "chain:1", "--verifier", "bv"]) == 2
    assert "is a FIFO (named pipe) that nothing was written to" in _one_line(capsys)
    problem = '{"vocab_size": 2, "target": {"": [0.5, 0.5], "0": [1, 0], "1": [0, 1]}, "draft": {"": [0.5, 0.5]}}'

    def write_later():  # a writer waiting at the FIFO (as a shell's process substitution is), writing late
        with open(fifo, "w") as stream:
            time.sleep(0.2)
            stream.write(problem)

    writer = threading.Thread(target=write_later)
    writer.start()
    time.sleep(0.2)  # the writer is in open(), waiting for a reader
    text = reading.read_user_file(fifo, limit=1 << 20, what="problem file")
    writer.join()
    assert text == problem
    monkeypatch.setattr(reading, "open_without_blocking", lambda path: open(path, "rb"))
    def read():
        with contextlib.suppress(VerispecError):  # once let go, the FIFO read empty: refused, as it should be
            reading.read_user_file(fifo, limit=1 << 20, what="problem file")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(0.5)
    assert reader.is_alive()  # the old open() waits for a writer
    with open(fifo, "w"):  # let it go
        pass
    reader.join(5)
    assert not reader.is_alive()
