"""Issue 54, class 3: writers.

(a) A writer replaces an existing file only when it can show verispec wrote it: the ``written_by`` marker it
writes (``verispec.files.provenance``), not a format it reads. A hand-written problem file is a problem file, and
``hunt --output`` used to replace it; now it, and every file of a writer's format without the marker (one an
older verispec wrote too), is refused untouched unless --overwrite. Readers ignore the marker.

(b) No output follows a symbolic link out of the folder it is written in: ``report --out DIR`` with ``report.md``
(or ``data/``) a link to a file outside was written through; now it is refused on one line naming the link.

(c) One writer per row store: two ``verispec sweep`` runs of one store lost one run's rows (64 of 128 kept). The
second writer is refused at start, naming the store and the holder (``verispec.files.store_lock``); a killed holder
leaves no stale lock. The negative control runs the same race with the lock made a no-op and loses rows.

Every expectation is counted here from the inputs (cells of the grids, bytes written), not read from the code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import verispec.report as report_module
from verispec.cli import main
from verispec.simulator.problem_files import is_problem_file, load_problem

FOREIGN = b"my own notes\n"
HAND_PROBLEM = json.dumps({"vocab_size": 2, "target": {"": [0.5, 0.5], "0": [1, 0], "1": [0, 1]},
                           "draft": {"": [0.5, 0.5]}}).encode()
HUNT = ["hunt", "--verifier", "typical", "--tree", "chain:1", "--output"]  # typical is lossy: a witness at once
SWEEP = ["sweep", "--trees", "chain:1", "--verifiers", "bv", "--backend", "serial"]
DATASET = ["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0", "--ks", "1", "--l1s",
           "0", "--l2s", "0-1", "--backend", "serial", "--out"]
ROOT = Path(__file__).resolve().parents[2]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verispec: error: "), err
    return lines[0]


def _run(argv) -> int:
    return main([str(part) for part in argv])


# --- (a) a marker it writes, not a format it reads ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["w.json", "w.npz"])
def test_hunt_refuses_a_hand_written_problem_file_and_replaces_its_own(capsys, tmp_path, name):
    path = tmp_path / name
    if name.endswith(".npz"):  # a problem in the binary form, written by hand (no marker member)
        from verispec.simulator.problem_files import problem_to_npz

        problem_to_npz(load_problem_bytes(HAND_PROBLEM), 1, path)
    else:
        path.write_bytes(HAND_PROBLEM)
    before = path.read_bytes()
    assert is_problem_file(path)  # the format recogniser takes it for a problem file: the old rule replaced it
    assert _run([*HUNT, path]) == 2
    line = _one_line(capsys)
    assert str(path) in line and "written_by" in line and "--overwrite" in line and "older" in line
    assert path.read_bytes() == before
    assert _run([*HUNT, path, "--overwrite"]) == 1 and path.read_bytes() != before
    written = path.read_bytes()
    assert _run([*HUNT, path]) == 1  # its own output, marked: a rerun replaces it without --overwrite
    assert is_problem_file(path) and load_problem(str(path)).vocab_size == 2  # the loader ignores the marker
    if name.endswith(".json"):
        marker = json.loads(written)["written_by"]
        assert marker["tool"] == "verispec" and marker["command"] == "hunt"


def load_problem_bytes(content: bytes):
    from verispec.simulator import problem_from_json

    return problem_from_json(json.loads(content))


def test_a_marker_of_another_kind_or_tool_is_not_enough(capsys, tmp_path):
    """A latency model's marker on a problem file, or a marker naming another tool: still refused."""
    for marker in ({"tool": "verispec", "kind": "latency model"}, {"tool": "other", "kind": "problem file"}):
        path = tmp_path / "p.json"
        content = json.dumps({**json.loads(HAND_PROBLEM), "written_by": marker}).encode()
        path.write_bytes(content)
        assert _run([*HUNT, path]) == 2 and "--overwrite" in _one_line(capsys) and path.read_bytes() == content


def test_check_external_refuses_a_hand_written_problem(capsys, tmp_path):
    rules = ROOT / "tests" / "support" / "external_rules.py"
    argv = ["check-external", f"{rules}:token_level_resample_from_target", "--layout", "chain", "--tree", "chain:1",
            "--output"]
    path = tmp_path / "w.json"
    path.write_bytes(HAND_PROBLEM)
    assert _run([*argv, path]) == 2 and str(path) in _one_line(capsys) and path.read_bytes() == HAND_PROBLEM
    assert _run([*argv, path, "--overwrite"]) == 1
    assert json.loads(path.read_text())["written_by"]["command"] == "check-external"
    assert _run([*argv, path]) == 1  # its own


def test_derive_and_latency_refuse_an_unmarked_file_of_their_format_before_any_model(capsys, tmp_path):
    toy = ["--target", "0.5,0.5", "--draft", "0.5,0.5"]
    problem = tmp_path / "d.json"
    problem.write_bytes(HAND_PROBLEM)
    assert _run(["derive", *toy, "--context", "a b", "--vocab", "3", "--depth", "1", "--output", problem]) == 2
    assert "written_by" in _one_line(capsys) and problem.read_bytes() == HAND_PROBLEM
    from verispec.latency import LatencyModel, is_latency_file

    latency = tmp_path / "l.json"
    content = json.dumps({"draft_step": 1.0, "target_sizes": [1], "target_times": [2.0]}).encode()
    latency.write_bytes(content)
    assert is_latency_file(latency)  # of the format
    assert _run(["latency", *toy, "--sizes", "1", "--out", latency]) == 2
    assert "written_by" in _one_line(capsys) and latency.read_bytes() == content
    marked = json.loads(content) | {"written_by": {"tool": "verispec", "kind": "latency model"}}
    latency.write_text(json.dumps(marked))
    assert LatencyModel.load(latency).target_times == (2.0,)  # the loader ignores the marker


def test_sweep_save_problems_refuses_an_unmarked_problem_in_its_folder(capsys, tmp_path):
    folder = tmp_path / "problems"
    argv = [*SWEEP, "--out", tmp_path / "s.csv", "--save-problems", folder]
    assert _run(argv) == 0
    (saved,) = folder.iterdir()
    with np.load(saved) as archive:
        assert json.loads(str(archive["written_by"]))["command"] == "sweep --save-problems"
    assert _run(argv) == 0  # its own: replaced
    # the same problem as an older verispec wrote it: every member but the marker
    with zipfile.ZipFile(saved) as archive:
        members = {name: archive.read(name) for name in archive.namelist() if name != "written_by.npy"}
    with zipfile.ZipFile(saved, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    before = saved.read_bytes()
    assert is_problem_file(saved) and _run(argv) == 2
    assert "written_by" in _one_line(capsys) and saved.read_bytes() == before


def test_selector_dataset_refuses_a_dataset_without_the_marker(capsys, tmp_path):
    from verispec.selector.dataset_file import Dataset, is_dataset_file

    out = tmp_path / "d.npz"
    assert _run([*DATASET, out]) == 0
    with np.load(out) as archive:
        assert json.loads(str(archive["written_by"]))["kind"] == "selector dataset"
    assert len(Dataset.load(out)) == 1  # the loader ignores the marker member
    assert _run([*DATASET, out]) == 0  # its own: a rerun
    with np.load(out) as archive:  # the dataset as a verispec before the marker wrote it
        arrays = {name: archive[name] for name in archive.files if name != "written_by"}
    with open(out, "wb") as stream:
        np.savez_compressed(stream, **arrays)
    before = out.read_bytes()
    assert is_dataset_file(out) and _run([*DATASET, out]) == 2
    assert "written_by" in _one_line(capsys) and out.read_bytes() == before


def test_selector_train_refuses_a_selector_without_the_marker(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    from verispec.selector.selector import Selector, is_selector_file

    dataset = tmp_path / "d.npz"
    assert _run(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-7", "--ks", "1",
                 "--l1s", "0-1", "--l2s", "0-1", "--backend", "serial", "--out", dataset]) == 0
    out = tmp_path / "s.pt"
    argv = ["selector", "train", "--dataset", dataset, "--epochs", "1", "--out", out]
    assert _run(argv) == 0 and _run(argv) == 0  # written, then replaced: its own
    state = torch.load(out, weights_only=True)
    assert state["written_by"]["kind"] == "selector"
    Selector.load(out)  # the loader ignores the marker
    del state["written_by"]  # as a verispec before the marker wrote it
    torch.save(state, out)
    before = out.read_bytes()
    assert is_selector_file(out) and _run(argv) == 2
    assert "written_by" in _one_line(capsys) and out.read_bytes() == before


def test_sweep_replaces_only_a_table_its_store_records(capsys, tmp_path):
    from verispec.study.tables import is_sweep_table, read_table

    out = tmp_path / "s.csv"
    argv = [*SWEEP, "--seeds", "0-2", "--out", out]
    assert _run(argv) == 0 and len(read_table(out)) == 3 and _run(argv) == 0  # its own table: a rerun
    edited = out.read_bytes() + b"my,own,row,,,\n"  # the user's row added: of the format still
    out.write_bytes(edited)
    assert is_sweep_table(out) and _run(argv) == 2
    line = _one_line(capsys)
    assert str(out) in line and "does not record writing" in line and out.read_bytes() == edited
    assert _run([*argv, "--overwrite"]) == 0 and len(read_table(out)) == 3
    store = json.loads((tmp_path / "s.csv.cells.json").read_text())  # a store of before the digests
    del store["outputs"]
    (tmp_path / "s.csv.cells.json").write_text(json.dumps(store))
    before = out.read_bytes()
    assert _run(argv) == 2 and "--overwrite" in _one_line(capsys) and out.read_bytes() == before


def test_report_md_without_the_marker_line_is_refused(capsys, tmp_path, monkeypatch):
    _no_studies(monkeypatch)
    out = tmp_path / "r"
    argv = ["report", "--quick", "--backend", "serial", "--out", out]
    assert _run(argv) == 0
    text = (out / "report.md").read_text()
    assert text.startswith("<!-- written by verispec report") and report_module.TITLE in text
    assert _run(argv) == 0  # its own report: a rerun
    mine = b"# my own report, in a verispec report folder\n"
    (out / "report.md").write_bytes(mine)
    assert _run(argv) == 2 and "marker line" in _one_line(capsys) and (out / "report.md").read_bytes() == mine
    assert _run([*argv, "--overwrite"]) == 0 and (out / "report.md").read_bytes() != mine


def _no_studies(monkeypatch):
    for name in ("verifiers", "depth", "delay", "paths", "orderings", "live", "selector", "typical"):
        monkeypatch.setattr(getattr(report_module, name), "run", lambda report: None)


# --- (b) no output follows a link out of its folder --------------------------------------------------------------


def _planted(tmp_path, name: str) -> tuple[Path, Path]:
    """A report folder (its marker) whose ``name`` is a link to a file of the user's outside it."""
    out = tmp_path / "r"
    (out / "data").mkdir(parents=True)
    (out / report_module.MARKER).write_text('{"kind": "verispec report"}')
    outside = tmp_path / "precious.txt"
    outside.write_bytes(FOREIGN)
    (out / name).symlink_to(outside)
    return out, outside


@pytest.mark.parametrize("name", ["report.md", "paths.png", "data/verifiers.csv", "data/cells.json",
                                  "data/selector_dataset.npz"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_report_refuses_a_link_in_its_folder(capsys, tmp_path, monkeypatch, name, overwrite):
    _no_studies(monkeypatch)
    out, outside = _planted(tmp_path, name)
    argv = ["report", "--quick", "--backend", "serial", "--out", out, *(["--overwrite"] if overwrite else [])]
    assert _run(argv) == 2
    line = _one_line(capsys)
    assert str(out / name) in line and "symbolic link" in line
    assert outside.read_bytes() == FOREIGN and (out / name).is_symlink()


def test_report_refuses_a_linked_data_folder(capsys, tmp_path, monkeypatch):
    _no_studies(monkeypatch)
    out = tmp_path / "r"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cells.json").write_bytes(FOREIGN)
    (out / "data").symlink_to(elsewhere)
    assert _run(["report", "--quick", "--backend", "serial", "--overwrite", "--out", out]) == 2
    assert "symbolic link" in _one_line(capsys)
    assert sorted(path.name for path in elsewhere.iterdir()) == ["cells.json"]
    assert (elsewhere / "cells.json").read_bytes() == FOREIGN


def test_save_problems_refuses_a_link_in_its_folder_even_with_overwrite(capsys, tmp_path):
    folder = tmp_path / "problems"
    folder.mkdir()
    outside = tmp_path / "precious.npz"
    outside.write_bytes(FOREIGN)
    (folder / "context-free-V3-div0.5-temp1-conc1-seed0.npz").symlink_to(outside)
    assert _run([*SWEEP, "--out", tmp_path / "s.csv", "--save-problems", folder, "--overwrite"]) == 2
    assert "symbolic link" in _one_line(capsys) and outside.read_bytes() == FOREIGN


def test_a_linked_row_store_or_lock_file_is_refused(capsys, tmp_path):
    outside = tmp_path / "precious.json"
    outside.write_bytes(FOREIGN)
    (tmp_path / "s.csv.cells.json").symlink_to(outside)
    assert _run([*SWEEP, "--out", tmp_path / "s.csv", "--overwrite"]) == 2
    assert "symbolic link" in _one_line(capsys) and outside.read_bytes() == FOREIGN
    (tmp_path / "s.csv.cells.json").unlink()
    (tmp_path / "s.csv.cells.json.lock").symlink_to(outside)
    assert _run([*SWEEP, "--out", tmp_path / "s.csv"]) == 2
    assert "lock file" in _one_line(capsys) and outside.read_bytes() == FOREIGN


def test_atomic_output_within_a_folder_refuses_a_link_and_without_writes_through_it(tmp_path):
    """``within`` (a file in an output folder): refused. Without it (a file the user named): written through, the
    link kept, as open(path, 'w') does (documented in ``atomic_output``)."""
    from verispec.errors import OutputError
    from verispec.files.io import atomic_write_text

    outside = tmp_path / "outside.txt"
    outside.write_bytes(FOREIGN)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "out.txt").symlink_to(outside)
    with pytest.raises(OutputError, match="symbolic link"):
        atomic_write_text(folder / "out.txt", "new", within=folder)
    assert outside.read_bytes() == FOREIGN
    atomic_write_text(folder / "out.txt", "new")
    assert (folder / "out.txt").is_symlink() and outside.read_text() == "new"


def test_the_selector_study_refuses_a_link_among_its_outputs(tmp_path):
    from verispec.errors import OutputError
    from verispec.selector.study import OUTPUTS, check_study_outputs

    outside = tmp_path / "precious.md"
    outside.write_bytes(FOREIGN)
    out = tmp_path / "study"
    out.mkdir()
    (out / OUTPUTS[1]).symlink_to(outside)
    with pytest.raises(OutputError, match="symbolic link"):
        check_study_outputs(out)


# --- (c) one writer per row store ---------------------------------------------------------------------------------

HOLDER = """
import sys
from verispec.files.store_lock import store_lock
with store_lock(sys.argv[1], "the test's holder"):
    print("held", flush=True)
    sys.stdin.read()
"""

SLOW_SWEEP = """
import sys, time
import verispec.study.cells as cells
original = cells.run_cell
def slow(cell):
    time.sleep(0.05)
    return original(cell)
cells.run_cell = slow
from verispec.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: The race of issue 54 without the lock: both runs read the store (empty), then each saves its own rows only.
RACE_WITHOUT_LOCK = """
import contextlib, sys, time
from pathlib import Path
import verispec.study.sweep as sweep
barrier, me = Path(sys.argv[1]), sys.argv[2]
@contextlib.contextmanager
def no_lock(store, command=None):
    (barrier / me).touch()
    while len(list(barrier.iterdir())) < 2:
        time.sleep(0.01)
    yield
sweep.store_lock = no_lock
from verispec.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _python(code: str, *args, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, text=True, **options)


def _verispec(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verispec", *map(str, argv)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def _rows(store: Path) -> set[str]:
    return {row["key"] for row in json.loads(store.read_text())["rows"]}


@pytest.fixture
def holder():
    """Hold a store's lock from another process until the test ends."""
    started = []

    def hold(store: Path) -> subprocess.Popen:
        process = _python(HOLDER, store, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdout.readline().strip() == "held"
        started.append(process)
        return process

    yield hold
    for process in started:
        process.stdin.close()
        process.wait(timeout=30)


def _refused_while_held(result: subprocess.CompletedProcess, store: Path, pid: int) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert str(store) in lines[0] and f"pid {pid}" in lines[0] and "another run" in lines[0]


def test_a_second_sweep_of_a_store_is_refused_while_the_first_holds_it(tmp_path, holder):
    out = tmp_path / "s.csv"
    store = tmp_path / "s.csv.cells.json"
    assert _verispec(*SWEEP, "--seeds", "0-3", "--out", out).returncode == 0
    before = store.read_bytes()
    process = holder(store)
    _refused_while_held(_verispec(*SWEEP, "--seeds", "4-7", "--out", out), store, process.pid)
    assert store.read_bytes() == before  # nothing written by the refused run


def test_two_concurrent_sweeps_keep_every_row(tmp_path):
    """Two real runs of one store, the first stopped (SIGSTOP) while it holds the lock: the second is refused at
    start; once the first is done the second runs and the store keeps the rows of both grids: 64 + 64 = 128."""
    out, store = tmp_path / "s.csv", tmp_path / "s.csv.cells.json"
    first = _python(SLOW_SWEEP, *SWEEP, "--seeds", "0-63", "--out", out, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    lock = tmp_path / "s.csv.cells.json.lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and f'"pid": {first.pid}' in lock.read_text()):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        _refused_while_held(_verispec(*SWEEP, "--seeds", "64-127", "--out", out), store, first.pid)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=120) == 0
    assert len(_rows(store)) == 64
    assert _verispec(*SWEEP, "--seeds", "64-127", "--out", out).returncode == 0
    assert len(_rows(store)) == 128


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    out, store = tmp_path / "s.csv", tmp_path / "s.csv.cells.json"
    first = _python(SLOW_SWEEP, *SWEEP, "--seeds", "0-63", "--out", out, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not store.exists():  # its first rows saved
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.01)
    first.kill()
    first.wait(timeout=30)
    saved = _rows(store)
    assert 0 < len(saved) < 64
    result = _verispec(*SWEEP, "--seeds", "0-63", "--out", out)
    assert result.returncode == 0 and f"{len(saved)} from the row store" in result.stdout
    assert len(_rows(store)) == 64


def test_negative_control_without_the_lock_two_sweeps_lose_rows(tmp_path):
    """The race of issue 54, with ``store_lock`` made a no-op: both runs start and finish (exit 0), and the store
    keeps the rows of one grid only (64 of 128): what the lock prevents."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    out, store = tmp_path / "s.csv", tmp_path / "s.csv.cells.json"
    runs = [_python(RACE_WITHOUT_LOCK, barrier, name, *SWEEP, "--seeds", seeds, "--out", out,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for name, seeds in (("a", "0-63"), ("b", "64-127"))]
    assert [run.wait(timeout=120) for run in runs] == [0, 0]
    assert len(_rows(store)) == 64  # one run's rows lost


def test_a_second_selector_dataset_build_is_refused(tmp_path, holder):
    out = tmp_path / "d.npz"
    store = tmp_path / "d.npz.roots.json"
    process = holder(store)
    _refused_while_held(_verispec(*DATASET, out), store, process.pid)
    assert not out.exists() and not store.exists()


def test_a_second_report_into_one_folder_is_refused(tmp_path, holder):
    out = tmp_path / "r"
    store = out / "data" / "cells.json"
    out.mkdir()
    (out / report_module.MARKER).write_text('{"kind": "verispec report"}')  # the first report's, written at its start
    process = holder(store)
    _refused_while_held(_verispec("report", "--quick", "--backend", "serial", "--out", out), store, process.pid)
    assert not (out / "report.md").exists() and not store.exists()


def test_the_lock_is_reentrant_in_one_process_and_released_after(tmp_path):
    from verispec.files.store_lock import _HELD, store_lock

    store = tmp_path / "s.json"
    with store_lock(store):
        with store_lock(store):
            assert len(_HELD) == 1
        assert len(_HELD) == 1
    assert not _HELD
    record = json.loads((tmp_path / "s.json.lock").read_text())
    assert record["pid"] == os.getpid()


def test_a_relabel_changes_in_place_a_dataset_written_before_the_marker(tmp_path):
    """``--relabel`` reads the FILE it names and writes it back with some labels replaced: a dataset of the format
    without the marker (data/selector/*.npz were written before it) is accepted there, and only there."""
    from verispec.selector.dataset import DatasetError, check_dataset_output

    out = tmp_path / "d.npz"
    assert _run([*DATASET, out]) == 0
    with np.load(out) as archive:
        arrays = {name: archive[name] for name in archive.files if name != "written_by"}
    with open(out, "wb") as stream:
        np.savez_compressed(stream, **arrays)
    with pytest.raises(DatasetError, match="written_by"):
        check_dataset_output(out)  # a build would replace it: refused
    assert check_dataset_output(out, in_place=True) == tmp_path / "d.npz.roots.json"


@pytest.mark.parametrize("command", [
    ["hunt", "--verifier", "typical", "--tree", "chain:1"],
    ["check-external", "tests.support.external_rules:token_level_resample_from_target", "--layout", "chain",
     "--tree", "chain:1"],
])
def test_a_second_witness_search_into_one_output_is_refused_while_the_first_holds_it(tmp_path, holder, command):
    """Two hunts (or two check-externals) into one --output each printed a reproduce line naming a file that held
    only one of their witnesses: the second is refused at start, and nothing is written; the control, once the
    holder is gone, writes its witness."""
    witness = tmp_path / "witness.json"
    process = holder(witness)
    result = _verispec(*command, "--output", witness)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert str(witness) in lines[0] and f"pid {process.pid}" in lines[0] and not witness.exists()
    process.stdin.close()
    process.wait(timeout=30)
    assert _verispec(*command, "--output", witness).returncode == 1 and witness.exists()
