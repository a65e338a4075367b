"""One writer per row store: an exclusive advisory lock held for the whole run.

A ``ResultStore`` keeps its rows in memory and rewrites the whole file on every save, so two runs writing one
store (two ``verispec sweep`` started in one folder with the same ``--out``) each rewrite it with their own rows:
the last save wins and the other run's rows are lost (issue 54: 64 of 128 kept). A journal of appends would keep
both, but every reader and the resume logic would have to change; refusing the second writer at start keeps the
file format and says at once what is wrong.

``store_lock(store)`` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``STORE.lock`` beside the store and records the
holder (pid, command, start time) in it; a second writer, in another process, is refused on one line naming the
store, the holder and what to do. The operating system releases the lock when the holder's process ends however
it ends (killed, crashed), so a lock is never stale and nothing has to be cleaned up; the lock file itself stays
(removing it would let a third run lock a new file while a second still holds the old one). The lock is
re-entrant within one process (a command that locks its store for the whole run, then calls the library
function that locks it again). It is advisory: it guards verispec against verispec, on file systems where
``flock`` works (local disks; not every network file system).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from verispec.errors import OutputError, ResultStoreError

#: Locks this process holds: lock file (resolved) -> [descriptor, depth].
_HELD: dict[str, list[int]] = {}

#: The longest file name most file systems take, in bytes.
NAME_MAX = 255
#: Most bytes read from a lock file to name its holder.
MAX_LOCK_BYTES = 4096


def lock_path(store: str | Path) -> Path:
    """The lock file of a row store: ``STORE.lock`` beside it, or, where that name would pass the file system's
    255 bytes (a legal 251- to 255-byte output name), ``.LOCK-<digest of the name>.lock`` beside it."""
    store = Path(store)
    name = store.name + ".lock"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".LOCK-{hashlib.sha256(os.fsencode(store.name)).hexdigest()[:40]}.lock"
    return store.with_name(name)


@contextlib.contextmanager
def store_lock(store: str | Path, command: str | None = None, what: str = "row store"):
    """Hold the exclusive lock of the row store ``store`` for the block; refuse on one line
    (``ResultStoreError``) when another process holds it. ``command`` is recorded for that refusal (by default
    this process's command line); ``what`` names the file in the refusals (any output a run writes can be locked
    so: a study's files, a benchmark's table)."""
    key = acquire(store, command, what)
    try:
        yield
    finally:
        release(key)


def acquire(store: str | Path, command: str | None = None, what: str = "row store") -> str:
    """Take the lock of ``store`` (see ``store_lock``); returns the key ``release`` takes."""
    path = lock_path(store)
    shown = repr(str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(path)
        if key in _HELD:
            _HELD[key][1] += 1
            return key
        # O_NOFOLLOW: a link planted at the lock's name is refused, not followed out of the folder
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        raise OutputError(f"cannot create the lock file {shown} of the {what} {str(store)!r} "
                          f"({error.strerror or error}); remove what is at that path, or choose another output") \
            from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(handle)
        os.close(handle)
        lost = "each other's rows" if what == "row store" else "one run's output"
        raise ResultStoreError(f"the {what} {str(store)!r} is being written by another run ({holder}); wait for it "
                               f"to finish or stop it, or give this run another output: two runs writing one {what} "
                               f"would lose {lost} (the lock {shown} is released when that process ends)") from None
    except OSError as error:
        os.close(handle)
        raise OutputError(f"cannot lock {shown} ({error.strerror or error}); this file system does not offer "
                          "flock: write the row store on a local disk") from None
    record = {"pid": os.getpid(), "command": command or _command_line(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        _record_holder(handle, record, f"the {what} {str(store)!r}", shown)
    except BaseException:
        os.close(handle)  # gives the lock back
        raise
    _HELD[key] = [handle, 1]
    return key


def _record_holder(handle: int, record: dict, owner: str, shown: str) -> None:
    """Write the holder into the locked file, or refuse on one line (``OutputError``): on a full disk (ENOSPC), a
    quota or an I/O error the run could not save its rows either, so it is refused now rather than after its
    work (the bare ``OSError`` was a traceback, issue 64)."""
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, (json.dumps(record) + "\n").encode(), 0)
    except OSError as error:
        raise OutputError(f"cannot write the lock file {shown} of {owner} ({error.strerror or error}); free space "
                          "there, or choose another output") from None


def release(key: str) -> None:
    """Give back one hold of a lock ``acquire`` took; the last closes the file, which releases it."""
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        os.close(held[0])  # closing the only descriptor of the open file releases the flock


def _holder(handle: int) -> str:
    """The holder recorded in a lock file, in words."""
    try:
        record = json.loads(os.pread(handle, MAX_LOCK_BYTES, 0).decode("utf-8", "replace"))
        return f"pid {int(record['pid'])}: {str(record['command'])[:160]}, since {record['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its pid not recorded yet"


def _command_line() -> str:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name in ("__main__.py", "-c", "-m", ""):
        name = "verispec"
    return " ".join([name, *sys.argv[1:]])


__all__ = ["acquire", "lock_path", "release", "store_lock"]
