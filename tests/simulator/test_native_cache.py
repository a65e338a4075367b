"""Issue 54, class 6: the compiled kernels' cache is not trusted.

A library in the cache is loaded only from bytes whose sha256 matches the record verispec wrote when it built it:
a truncated library (a killed compile, a full disk) is compiled again instead of ending the process with SIGBUS,
and a library planted under the expected name is never loaded (its constructor never runs). A ``$CC`` that hangs
is ended with its whole process group at the time limit, and the callers take the numpy route with a one-line
note. Each case has its negative control: the same input through the old loading (the check skipped, or
``subprocess.run``'s timeout) crashes, runs the constructor or waits for the orphaned child.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.timing import timed
from verispec import native

needs_cc = pytest.mark.skipif(native._compiler()[0] is None, reason="no C compiler")

#: Run in a child process: the kernels' status, then one call of the moments (the loaded library's code).
PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    from verispec import native
    if sys.argv[1] == "old":  # the loading before issue 54: whatever lies under the expected name is loaded
        native._recorded = lambda target, key: target.read_bytes() if target.is_file() else None
    print(native.kernel_status())
    rows = [np.random.default_rng(seed).normal(size=300).astype(np.float32) for seed in range(3)]
    print("moments", native.logit_moments(rows, 1.0) is not None)
""")


def _probe(cache: Path, mode: str = "new", **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "VERISPEC_CACHE": str(cache), "VERISPEC_KERNELS": "1", **env}
    return subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                          env=environment)


def _built(cache: Path) -> tuple[Path, str]:
    """A good build in ``cache``, and its key."""
    compiler, _ = native._compiler()
    path, _, compiled = native._build(compiler, cache / "kernels")
    key, _ = native.cache_entry(compiler, cache / "kernels")
    assert compiled and path.with_suffix(".json").is_file()
    return path, key


@needs_cc
def test_a_truncated_library_is_compiled_again_not_loaded(tmp_path):
    path, _ = _built(tmp_path)
    size = path.stat().st_size
    os.truncate(path, 4096)  # what a compile killed while writing, or a full disk, leaves
    done = _probe(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "compiled again: the cached library did not match the sha256" in done.stdout
    assert "moments True" in done.stdout
    assert path.stat().st_size == size  # replaced by a whole build
    # negative control: the old loading maps the truncated file and the process dies of SIGBUS (or a loader error)
    os.truncate(path, 4096)
    old = _probe(tmp_path, "old")
    assert old.returncode == -signal.SIGBUS or "not usable" in old.stdout, (old.returncode, old.stdout)


PLANTED = """
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE *out = fopen(getenv("PLANTED_MARK"), "w");
    if (out) { fputs("constructor ran\\n", out); fclose(out); }
}
int verispec_logit_moments(void) { return 1; }
int verispec_largest(void) { return 1; }
"""


@needs_cc
@pytest.mark.parametrize("with_record", [False, True])
def test_a_planted_library_is_never_loaded(tmp_path, with_record):
    """A library under the expected name whose bytes are not the recorded build's: its constructor never runs
    (with the real build's record beside it, or none), and the kernels are compiled again over it."""
    compiler, _ = native._compiler()
    path, key = _built(tmp_path)
    if not with_record:
        path.with_suffix(".json").unlink()
    source = tmp_path / "planted.c"
    source.write_text(PLANTED)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(path), str(source)], check=True, timeout=60)
    mark = tmp_path / "constructor-ran"
    done = _probe(tmp_path, PLANTED_MARK=str(mark))
    assert done.returncode == 0 and not mark.exists(), (done.stdout, done.stderr)
    assert "compiled again" in done.stdout and "moments True" in done.stdout
    assert native._recorded(path, key) is not None  # the cache holds the real build again, with its record
    # negative control: the old loading runs the planted constructor
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(path), str(source)], check=True, timeout=60)
    old = _probe(tmp_path, "old", PLANTED_MARK=str(mark))
    assert mark.read_text() == "constructor ran\n", (old.returncode, old.stdout)


@needs_cc
def test_a_library_without_its_record_is_compiled_again(tmp_path):
    """The record is written after the library: a build killed between the two leaves no record, and the library
    is compiled again rather than trusted."""
    path, key = _built(tmp_path)
    path.with_suffix(".json").unlink()
    assert native._recorded(path, key) is None
    compiler, _ = native._compiler()
    again, content, compiled = native._build(compiler, tmp_path / "kernels")
    assert again == path and compiled and native._recorded(path, key) == content
    # negative control: with the record in place the build is reused, not compiled
    assert native._build(compiler, tmp_path / "kernels")[2] is False


def _hanging_compiler(folder: Path, seconds: int, *, version_answers: bool) -> Path:
    """A $CC that starts a child (as a compiler driver does) and hangs; it writes both process ids."""
    script = folder / "hanging-cc"
    answer = 'if [ "$1" = "--version" ]; then echo "hanging-cc 1.0"; exit 0; fi\n' if version_answers else ""
    script.write_text(f"#!/bin/sh\n{answer}echo $$ > {folder}/pids\nsleep {seconds} &\necho $! >> {folder}/pids\n"
                      "wait\n")
    script.chmod(0o755)
    return script


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("sh") is None, reason="needs sh and /proc")
@pytest.mark.parametrize("version_answers", [False, True])
def test_a_hanging_compiler_is_ended_with_its_children(tmp_path, monkeypatch, version_answers):
    monkeypatch.setattr(native, "VERSION_TIMEOUT_S", 1.0)
    monkeypatch.setattr(native, "COMPILE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VERISPEC_KERNELS", "1")
    monkeypatch.setenv("CC", str(_hanging_compiler(tmp_path, 300, version_answers=version_answers)))
    status, watch = timed(native.kernel_status)
    # the 1 s timeout (a wall-clock limit), then 5 s of CPU on an idle core (stretched by the load) to end and reap the
    # compiler's group; a group left running holds the pipes for the 300 s sleep, over the bound even at the largest
    # stretch believed (1 + 5 x 50)
    assert watch.within(1.0, 5), watch
    assert status.startswith("numpy and torch routes") and "did not finish in 1 s" in status and "\n" not in status
    pids = [int(line) for line in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 5
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, pids)), pids  # the script and its sleep: no orphan left
    assert not list((tmp_path / "cache").rglob("*.so"))  # no temporary left behind


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("sh") is None, reason="needs sh and /proc")
def test_negative_control_the_old_timeout_leaves_the_child_running(tmp_path):
    """The old call (``subprocess.run`` with a timeout) kills the script alone: its child (a compiler driver's
    cc1 or ld, here a sleep) is left running as an orphan. The new call ends the whole group."""
    script = _hanging_compiler(tmp_path, 300, version_answers=False)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=0.5)
    shell, child = [int(line) for line in (tmp_path / "pids").read_text().split()]
    try:
        assert _alive(child)  # the orphan the old code left
    finally:
        os.kill(child, signal.SIGKILL)  # ours: started by this test
    (tmp_path / "pids").unlink()
    with pytest.raises(OSError, match="did not finish in 0.5 s"):
        native._run_bounded([str(script), "--version"], 0.5)
    shell, child = [int(line) for line in (tmp_path / "pids").read_text().split()]
    time.sleep(0.2)
    assert not _alive(shell) and not _alive(child)
