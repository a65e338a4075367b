"""Reading the files a user names, with bounds: a device, a FIFO or a huge file is refused on one line instead of
filling memory or hanging the command (issue 54, issue 64). ``verispec.files.io`` re-exports these; this module sits
below
``verispec.files.provenance`` so that every reader of a marker can use it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from verispec.errors import VerispecError, describe


def read_user_file(path: str | Path, *, limit: int, what: str, error: type[VerispecError] = VerispecError,
                   why: str = "", binary: bool = False, regular_only: bool = False) -> str | bytes:
    """The UTF-8 text of a file a user named (a problem, prompts, a context, a latency model), read with a
    bound: at most ``limit`` + 1 bytes are read, so a device or a huge file (``/dev/zero``) is refused at once
    instead of filling memory. Every failure is ``error`` on one line naming ``what`` and the path: a missing
    or unreadable file, text that is not UTF-8, or more than ``limit`` bytes (``why`` says where the limit
    comes from). ``binary``: the bytes, undecoded (a file that may be JSON text or a binary form).

    The file is opened without blocking (``open_without_blocking``): a FIFO nobody writes to reads as empty
    instead of hanging the command, while a pipe with a writer (``--problem <(...)``) is read to its end.
    ``regular_only``: refuse anything but a regular file (a FIFO, a device, a socket), for a file that is only
    ever one (a committed result file), on one line naming what it is."""
    shown = repr(str(path))
    try:
        with open_without_blocking(path) as stream:
            mode = os.fstat(stream.fileno()).st_mode
            if regular_only and not stat.S_ISREG(mode):
                raise error(f"{what} {shown} is {file_type(mode)}, not a regular file; give the file itself")
            data = _read_within(stream, limit)
            if not data and stat.S_ISFIFO(mode):  # nobody wrote into it: say so, not 'not valid JSON'
                raise error(f"{what} {shown} is a FIFO (named pipe) that nothing was written to; give a regular "
                            "file, or start its writer first")
    except OSError as failure:
        raise error(f"cannot read {what} {shown}: {failure.strerror or failure}") from None
    if data is None:
        reason = f" ({why})" if why else ""
        raise error(f"{what} {shown} holds more than {size_text(limit)}, the most verispec reads for it{reason}; "
                    "give a smaller file")
    if binary:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} {shown} is not UTF-8 text") from None


def open_without_blocking(path: str | Path):
    """``open(path, "rb")`` that cannot hang in ``open`` itself: a FIFO opened for reading waits there until a
    writer comes, for ever if none does (issue 64: a result file that was a FIFO hung docs/generate.py). The file
    is opened with O_NONBLOCK, which returns at once, then switched back to blocking reads, so a pipe with a
    writer is read to its end and a FIFO without one reads as empty (end of file)."""
    import fcntl

    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        flags = fcntl.fcntl(handle, fcntl.F_GETFL)
        fcntl.fcntl(handle, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


def file_type(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words: 'a FIFO', 'a character device', ..."""
    for test, words in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISREG, "a regular file")):
        if test(mode):
            return words
    return "not a regular file"


def _read_within(stream, limit: int) -> bytes | None:
    """The bytes of ``stream`` when it holds at most ``limit`` of them, else None, holding no more memory than the
    bytes read (``read(limit + 1)`` sets aside all of them at once: 256 MiB for an 81-byte problem file). A
    regular file is read in one call of its size (a short read is its end); a device or a pipe, whose size reads
    0, and a file that grew since its size was read, in chunks of 1 MiB."""
    size = os.fstat(stream.fileno()).st_size
    request = min(size, limit) + 1 if size else 1 << 20
    parts, total = [], 0
    while total <= limit:
        chunk = stream.read(min(request, limit + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        if size and len(chunk) < request:
            break
        request = 1 << 20
    if total > limit:
        return None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def size_text(count: int) -> str:
    """A byte count in words: '256 MiB', '4 KiB', '17 bytes'."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count} bytes"


def check_zip_sizes(source, *, limit: int, what: str, error: type[VerispecError] = VerispecError) -> None:
    """Refuse a zip archive (a .npz, a torch file) whose members declare more than ``limit`` bytes uncompressed,
    or a .npy member whose header declares a shape its stored bytes do not hold, from the archive's directory
    and each member's header alone: nothing proportional to a declared size is decompressed or allocated (a
    few-MB .npz of zeros expanding to gigabytes, a header declaring 10^12 entries over 16 bytes). ``source``:
    a path or a binary file object. Anything that is not a readable zip archive passes, for the caller's reader
    to name in its own words. ``what`` names the file in the one-line ``error``."""
    import zipfile

    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return
    with archive:
        members = archive.infolist()
        declared = sum(member.file_size for member in members)
        if declared > limit:
            largest = max(members, key=lambda member: member.file_size)
            raise error(f"{what} expands to {size_text(declared)} uncompressed ({largest.filename!r} alone "
                        f"{size_text(largest.file_size)}), above the {size_text(limit)} verispec reads; give a "
                        "smaller file")
        for member in members:
            if member.filename.endswith(".npy"):
                _check_npy_header(archive, member, what, error)


def _check_npy_header(archive, member, what: str, error: type[VerispecError]) -> None:
    """Refuse a .npy member whose header's shape and dtype need other than the bytes it stores (reading its
    first bytes only); a member without a readable header is left to numpy's reader."""
    import math

    import numpy as np

    with archive.open(member) as stream:
        try:
            version = np.lib.format.read_magic(stream)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read_header is None:
                return
            shape, _, dtype = read_header(stream)
            stored = member.file_size - stream.tell()
        except (ValueError, EOFError, OSError, SyntaxError, TypeError):
            return
    if dtype.hasobject:
        return  # numpy refuses pickled objects itself (allow_pickle=False)
    needed = math.prod(shape) * dtype.itemsize
    if needed != stored:
        shown = describe(tuple(shape)) if len(shape) <= 8 else f"of {len(shape)} dimensions"
        raise error(f"{what}: its array {member.filename[:-4]!r} declares shape {shown} of {dtype} "
                    f"({size_text(needed)}) but stores {size_text(stored)}; the file is damaged or not verispec's")


__all__ = ["check_zip_sizes", "file_type", "open_without_blocking", "read_user_file", "size_text"]
