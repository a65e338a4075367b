"""The checks a long script runs before any work (the scripts under ``experiments/``; issue 64).

The commands of ``verispec`` check their options as argparse reads them and their outputs before any work
(``verispec.files.io.check_output``); a script that runs for minutes or hours must do the same, or it learns only at its
first save that its ``--out`` is read-only, full or someone else's file, or never ends at all because a dataset
named on its command line is a FIFO that no one writes (its reader blocks in ``open``, before any ``--time-budget``
can stop it). Gathered here, so that every script refuses the same cases in the same words:

* ``check_ranges``: every number in its range, NaN and infinities refused (``--threads 100000`` started 100,000
  threads and crashed);
* ``check_input``: an input file is a regular file (not a FIFO, a device such as /dev/zero, or a folder), refused
  at once; its reader then reads it with a bound (``verispec.files.io.read_user_file``, ``check_zip_sizes``);
* ``RunOutputs``: every file the run will write can be written (``verispec.files.io.check_output_file``), its file
  system
  has room (``MIN_FREE_BYTES`` beyond what the files hold now: each is rewritten whole beside its old copy), an
  existing file is the run's own (a row store's ``written_by`` marker, a result file's ``record``, or a table whose
  SHA-256 the row store recorded when it wrote it), and one run at a time writes them (``verispec.files.store_lock``);
  ``write_text`` / ``write_bytes`` then record a table's digest in the row store before writing it atomically;
* ``ScriptParser``: an option argparse cannot read (``--threads abc``) is one line too, not a usage block;
* ``run_script``: any ``VerispecError`` of the run, before or during the work (a disk that fills up mid-run), ends
  it on one line ``NAME: error: ...`` with exit status 2, and the run's locks are released.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from verispec.errors import OutputError, ResultStoreError, VerispecError
from verispec.files.reading import file_type, size_text

#: Least free space the outputs' file system must have beyond the files' present sizes: a result file or a table is
#: at most a few MB (the largest committed one, the selector study's, is 0.2 MB).
MIN_FREE_BYTES = 16 << 20
#: The room a command's one small output needs (a witness problem, a latency model: a few KB): 1 MiB.
SMALL_FILE_ROOM = 1 << 20

#: Largest --time-budget of a script: a year, as the command line's (``verispec.guard.budget``'s hard timer refuses
#: delays
#: past about 10^9.5 s).
MAX_SCRIPT_BUDGET = 365 * 24 * 3600.0


class Above(float):
    """A range's lower end that the value must exceed (a width, a price, a budget: above 0), where a plain number
    is an end the value may equal."""


def check_ranges(ranges: Iterable[tuple[str, object, float | None, float | None]]) -> None:
    """Refuse on one line (``VerispecError``) the first (option, value, low, high) whose value is not a number in
    [low, high] (None: unbounded on that side; ``Above(low)``: above it): NaN and infinities included. A value of
    None (an option left out) passes."""
    for option, value, low, high in ranges:
        if value is None:
            continue
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        below = low is not None and (number <= low if isinstance(low, Above) else number < low)
        if not math.isfinite(number) or below or (high is not None and number > high):
            raise VerispecError(f"{option} {value!r} is out of range: give {_range_text(value, low, high)}")


def _range_text(value, low, high) -> str:
    kind = "a whole number" if isinstance(value, int) else "a number"
    if isinstance(low, Above):
        return f"{kind} above {_bound(low)}" + (f" and at most {_bound(high)}" if high is not None else "")
    if low is not None and high is not None:
        return f"{kind} from {_bound(low)} to {_bound(high)}"
    if low is not None:
        return f"{kind} of at least {_bound(low)}"
    return f"{kind} of at most {_bound(high)}"


def _bound(number: float) -> str:
    """A range's end as a reader takes it in: 31,536,000 rather than 3.1536e+07, 1e-09 as it is."""
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


def check_input(path: str | Path, what: str, error: type[VerispecError] = VerispecError) -> None:
    """Refuse on one line an input that is missing or is not a regular file (symbolic links followed): a FIFO's
    reader waits in ``open`` until someone writes it, a device (/dev/zero) never ends, a folder is no file. Only the
    file's status is read, so this never blocks."""
    shown = repr(str(path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} {shown} does not exist") from None
    except OSError as failure:
        raise error(f"cannot read {what} {shown}: {failure.strerror or failure}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{what} {shown} is {file_type(mode)}, not a regular file; give a file")


def check_free_space(paths: Iterable[str | Path], what: str, needed: int = MIN_FREE_BYTES) -> None:
    """Refuse on one line (``OutputError``) when the file system of an output has less than ``needed`` bytes free
    for this user beyond twice the size the outputs on it have now (an atomic rewrite holds the old and the new copy
    at once), so that a full disk is found before the work, not at its first save."""
    by_device: dict[int, list[Path]] = {}
    folders: dict[int, Path] = {}
    for path in map(Path, paths):
        folder = Path(os.path.realpath(path)).parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        device = os.stat(folder).st_dev
        by_device.setdefault(device, []).append(path)
        folders.setdefault(device, folder)
    for device, members in by_device.items():
        present = sum(os.stat(path).st_size for path in members if os.path.isfile(path))
        try:
            status = os.statvfs(folders[device])
        except OSError:
            continue  # a file system that reports no space: the writes will tell
        free = status.f_bavail * status.f_frsize
        if free < needed + 2 * present:
            raise OutputError(f"{what} {str(members[0])!r}: its file system has {size_text(free)} free, less than the "
                              f"{size_text(needed + 2 * present)} this run may need to write its results; free some "
                              "space, or choose another place")


def is_row_store(path: str | Path) -> bool:
    """Whether ``path`` is a verispec row store (``verispec.files.io.ResultStore``): it carries the row store's
    ``written_by`` marker, or (a store written before the marker) it is a JSON object recording its run's
    ``parameters`` beside its ``rows``, the format the store itself accepts to resume (it then refuses other
    parameters). Never raising: a file that cannot be read is not one."""
    from verispec.files.io import MAX_RESULT_FILE_BYTES, read_user_file
    from verispec.files.provenance import MARKER_KEY, RESULT_STORE, is_marked

    try:
        data = json.loads(read_user_file(path, limit=MAX_RESULT_FILE_BYTES, what="the row store"))
    except (VerispecError, ValueError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    return is_marked(data.get(MARKER_KEY), RESULT_STORE) or (
        isinstance(data.get("parameters"), dict) and isinstance(data.get("rows"), list))


class RunOutputs:
    """The files one run of a script writes, checked before any work (``claim``) and written as their owner.

    ``store``: the run's row store (``verispec.files.io.ResultStore``), if any; an existing file there must be a row
    store
    (``is_row_store``; the store refuses one of other parameters itself when the script opens it). ``result``:
    a result file (JSON with the run's ``record``, ``verispec.files.provenance.check_result_output``). ``tables``: the
    files written from the rows (a Markdown table, a summary, a plot): an existing one is replaced only where the
    store recorded its SHA-256 (``ResultStore.wrote``); with no store, only where ``result`` exists and is a result
    file (the run that wrote it wrote them). ``what`` names the option in the refusals."""

    def __init__(self, what: str, *, store: str | Path | None = None, result: str | Path | None = None,
                 tables: Iterable[str | Path] = ()):
        self.what = what
        self.store = None if store is None else Path(store)
        self.result = None if result is None else Path(result)
        self.tables = [Path(path) for path in tables]

    @property
    def paths(self) -> list[Path]:
        return [path for path in (self.result, self.store) if path is not None] + self.tables

    def claim(self, held: contextlib.ExitStack) -> None:
        """Before any work: every path writable with room to spare, every existing file the run's own, and the lock
        of the run's outputs taken for as long as ``held`` is open (a second run is refused on one line)."""
        from verispec.files.io import check_output_file
        from verispec.files.provenance import check_result_output
        from verispec.files.store_lock import store_lock

        seen: dict[str, Path] = {}
        for path in self.paths:
            check_output_file(path, self.what)
            where = os.path.realpath(path)
            if where in seen:  # one file written as two outputs: the second write would destroy the first
                raise OutputError(f"{str(seen[where])!r} and {str(path)!r} are one file, and this run writes both; "
                                  "give each output its own path")
            seen[where] = path
        check_free_space(self.paths, self.what)
        held.enter_context(store_lock(self.store or self.result, what="row store" if self.store else "result file"))
        if self.store is not None and self.store.exists() and not is_row_store(self.store):
            raise ResultStoreError(f"{self.what} {str(self.store)!r} exists and is not a row store this script "
                                   "wrote; choose another path, or move the file away")
        if self.result is not None:
            check_result_output(self.result)
        recorded = self._recorded_outputs()
        for path in self.tables:
            if (path.exists() or path.is_symlink()) and not self._owned(path, recorded):
                raise OutputError(f"{str(path)!r} exists and is not a file this script wrote beside "
                                  f"{str(self.store or self.result)!r}; choose another {self.what}, or move the file "
                                  "away")

    def _recorded_outputs(self):
        """The store whose digests vouch for the tables (read once), or None."""
        if self.store is None or not self.store.exists():
            return None
        from verispec.files.io import ResultStore

        return ResultStore(self.store)

    def _owned(self, path: Path, store) -> bool:
        from verispec.files.provenance import sha256_file

        if path.is_symlink() or not path.is_file():
            return False
        if self.store is not None:
            return store is not None and store.wrote(path, sha256_file(path))
        return self.result is not None and self.result.is_file()  # check_result_output passed: the run's own

    def write_text(self, store, path: str | Path, text: str) -> None:
        """Write a table atomically, its digest recorded in ``store`` first (so a rerun may replace it)."""
        self.write_bytes(store, path, text.encode("utf-8"))

    def write_bytes(self, store, path: str | Path, data: bytes) -> None:
        from verispec.files.io import atomic_write_bytes
        from verispec.files.provenance import sha256_bytes

        if store is not None:
            store.add_many({}, outputs={str(path): sha256_bytes(data)})
        atomic_write_bytes(path, data)


class ScriptParser(argparse.ArgumentParser):
    """A script's argument parser whose errors (an unknown option, a value that is not a number) are one line,
    ``NAME: error: ...``, with exit status 2 and no usage block (``--help`` still prints it), as the command line's."""

    def __init__(self, name: str, **options):
        super().__init__(**options)
        self.script = name

    def error(self, message):
        print(f"{self.script}: error: {' '.join(str(message).split())}", file=sys.stderr)
        raise SystemExit(2)


def run_script(name: str, body: Callable[[contextlib.ExitStack], int]) -> int:
    """``body(held)``'s exit status; a ``VerispecError`` anywhere in it (an option out of range, an output refused
    before the work, a disk that fills up at a save) is one line ``NAME: error: ...`` on stderr and exit status 2.
    What ``body`` enters into ``held`` (the outputs' lock) is released when it returns."""
    with contextlib.ExitStack() as held:
        try:
            return body(held)
        except VerispecError as error:
            print(f"{name}: error: {' '.join(str(error).split())}", file=sys.stderr)
            return 2


__all__ = ["MAX_SCRIPT_BUDGET", "MIN_FREE_BYTES", "SMALL_FILE_ROOM", "Above", "RunOutputs", "ScriptParser",
           "check_free_space",
           "check_input", "check_ranges", "is_row_store", "run_script"]
