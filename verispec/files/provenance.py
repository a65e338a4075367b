"""Who wrote a file: the ``written_by`` marker every verispec writer puts into what it writes.

A command that writes a file at a path the user names replaces an existing file there only when it can show that
verispec wrote it: the file carries the marker ``{"tool": "verispec", "kind": KIND, "command": ..., "version":
...}`` of the same kind (a problem file, a latency model, a selector, a selector dataset, a report). Recognising
the *format* is not enough: a hand-written problem file is a problem file, and replacing it because it parses
destroys the user's work (issue 54). Files written by a verispec older than the marker carry none and are refused
like any other file, unless ``--overwrite``.

Where the marker lives, so that every reader of the format still reads the file (each loader ignores it): a JSON
file's top-level key ``written_by``; a ``.npz`` archive's member ``written_by`` (a JSON string); a selector
file's entry ``written_by``; a Markdown report's first line, an HTML comment (``MARKDOWN_MARKER``), which no
renderer shows. A sweep table (CSV or Parquet) has no place for one that every CSV reader skips, so its row
store, which verispec writes beside it, records the SHA-256 of the table it wrote (``verispec.study.tables``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

#: The key (JSON, selector file) or member (.npz) holding the marker.
MARKER_KEY = "written_by"
TOOL = "verispec"

#: Kinds of output, as recorded in the marker: a writer replaces only a file whose marker names its kind.
PROBLEM = "problem file"
LATENCY = "latency model"
SELECTOR = "selector"
DATASET = "selector dataset"
REPORT = "report"
RESULT_STORE = "row store"
JSON_OUT = "json output"

#: The first line of a report verispec wrote: an HTML comment, invisible once rendered (``markdown_marker``).
MARKDOWN_MARKER = "<!-- written by verispec"

#: Most bytes read from a JSON file to find its marker (``verispec.files.io.json_marker``) (problem files and latency
#: models
#: are far smaller; a
#: larger file is read only as far as its loader would).
MAX_MARKER_READ = 1 << 30


def written_by(kind: str, command: str) -> dict:
    """The marker a writer puts into a file of ``kind`` that ``verispec COMMAND`` writes."""
    from verispec.version import package_version

    return {"tool": TOOL, "kind": kind, "command": command, "version": package_version()}


def is_marked(marker, kind: str) -> bool:
    """Whether ``marker`` (a file's ``written_by`` value, or None) shows verispec wrote a file of ``kind``."""
    return isinstance(marker, Mapping) and marker.get("tool") == TOOL and marker.get("kind") == kind


def npz_member(marker: dict):
    """The marker as a .npz member (a 0-d string array), for ``np.savez``'s ``written_by=``."""
    import numpy as np

    return np.asarray(json.dumps(marker, sort_keys=True))


def markdown_marker(command: str) -> str:
    """The first line of a Markdown file verispec writes: the marker as an HTML comment."""
    marker = written_by(REPORT, command)
    return f"{MARKDOWN_MARKER} {marker['command']} {marker['version']} -->"


def markdown_marked(path: str | Path) -> bool:
    """Whether the Markdown file ``path`` begins with ``MARKDOWN_MARKER`` (its first 256 bytes are read)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(256)
    except OSError:
        return False
    return head.startswith(MARKDOWN_MARKER.encode())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str | None:
    """The SHA-256 of a file's bytes, read in chunks; None where it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def commit_of(folder: str | Path, *, mark_dirty: bool = True, outputs=()) -> str | None:
    """The commit a checkout is at, with ``-dirty`` (``mark_dirty``) when its tracked files differ from it, the run's
    own ``outputs`` apart (a result file a rerun overwrites is not the code that made it); None outside a git
    checkout."""
    import subprocess

    def git(*arguments: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *arguments], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        root = Path(git("rev-parse", "--show-toplevel")).resolve()
        # the outputs inside the checkout (git refuses a path outside it, and one outside cannot make it dirty)
        excluded = [f":(exclude,literal){Path(path).resolve()}" for path in outputs
                    if Path(path).resolve().is_relative_to(root)]
        dirty = mark_dirty and bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded))
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


#: The largest file ``check_result_output`` reads to see whether it is a result file (the largest verispec writes,
#: the selector study's JSON, is about 0.2 MB).
MAX_RESULT_BYTES = 1 << 26


def check_result_output(path: str | Path) -> None:
    """Refuse (``VerispecError``, one line) to write a result file over a file that is not one: a result file is
    JSON with a ``record`` naming its command (``run_record``); anything else at ``path`` is the user's."""
    import json

    from verispec.errors import VerispecError

    path = Path(path)
    _check_result_folder(path)
    if not path.exists() and not path.is_symlink():
        return
    try:  # a result file is small; a large file is not one, and is not read to find out
        ours = path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_RESULT_BYTES and isinstance(
            json.loads(path.read_text()).get("record", {}).get("command"), str)
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise VerispecError(f"{str(path)!r} exists and is not a result file (JSON with a 'record' naming its "
                            "command); choose another path, or move the file away")


#: The least free space a result file's folder must have before the work starts (result files are at most a few MB).
RESULT_ROOM = 16 << 20


def _check_result_folder(path: Path) -> None:
    """Refuse (``VerispecError``, one line) a result path that cannot be written, before any work: a folder on the
    way that is a file, a folder this user cannot write, or a file system with less than ``RESULT_ROOM`` free."""
    import os

    from verispec.errors import VerispecError

    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise VerispecError(f"cannot write {str(path)[:300]!r}: {str(folder)[:300]!r} is a file, not a folder; "
                            "choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise VerispecError(f"cannot write {str(path)[:300]!r}: the folder {str(folder)[:300]!r} is not writable "
                            "here; choose another path")
    try:
        status = os.statvfs(folder)
    except OSError:
        return  # a file system that reports no space: the write will tell
    free = status.f_bavail * status.f_frsize
    if free < RESULT_ROOM:
        raise VerispecError(f"cannot write {str(path)[:300]!r}: its file system has {free:,} bytes free, less than "
                            f"the {RESULT_ROOM >> 20} MiB a result file is given; free some space or choose "
                            "another path")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def run_record(command: str, inputs=(), *, threads: int | None = None, device: str = "cpu", outputs=()) -> dict:
    """What a result file states about the run that made it (issue 55): the command line, the commit (``-dirty``
    when the checkout had uncommitted changes), the date (UTC), the machine (cores, CPU, threads, device, the
    one-minute load average at the start) and the SHA-256 of each input file.

    ``threads``: the torch threads the run pinned (None: not a torch run). ``outputs``: the files the run writes, which
    do not make the checkout dirty. Call it before the work starts: the load it records is the box's before the run
    adds its own."""
    import datetime
    import os
    import platform

    root = Path(__file__).resolve().parents[2]  # the checkout: verispec/files/provenance.py
    return {"command": command, "commit": commit_of(root, outputs=outputs) or "unknown",
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cores": os.cpu_count(), "cpu": _cpu_model(), "threads": threads, "device": device,
                        "load": round(os.getloadavg()[0], 2), "python": platform.python_version()},
            "inputs": {_shown(Path(path), root): sha256_file(path) for path in inputs}}


def describe_record(record: dict) -> str:
    """A run record (``run_record``) in one line: its command, commit, date and machine (the inputs' SHA-256 stay in
    the file)."""
    machine = record["machine"]
    threads = machine.get("threads")
    threads = f", {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    return (f"`{record['command']}` at commit {record['commit'][:12]}, {record['date'][:10]}, {machine['cores']} "
            f"cores ({machine.get('cpu', 'cpu')}{threads}, {machine['device']}, load {machine['load']:.1f})")


def _shown(path: Path, root: Path) -> str:
    """An input's name in a record: relative to the checkout when it lies inside, so records compare across
    clones."""
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


__all__ = ["DATASET", "LATENCY", "MARKDOWN_MARKER", "MARKER_KEY", "PROBLEM", "REPORT", "RESULT_STORE", "SELECTOR",
           "check_result_output", "commit_of", "describe_record", "is_marked", "markdown_marked", "markdown_marker",
           "npz_member", "run_record", "sha256_bytes", "sha256_file", "written_by"]
