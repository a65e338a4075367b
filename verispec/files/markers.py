"""Reading what a file says of who wrote it (the ``written_by`` marker of ``verispec.files.provenance``) and of what it
holds: a JSON result's field, a .npz archive's marker member, a PNG's text chunk. Every reader is bounded and never
raises (a file that is not of the form carries no marker). Standard library and numpy only."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from verispec.files.reading import check_zip_sizes, open_without_blocking, read_user_file


def json_marker(path: str | Path, limit: int | None = None):
    """The ``written_by`` value of a JSON file whose top level is an object, else None (never raising: a file that
    is not such JSON carries no marker)."""
    from verispec.files.provenance import MARKER_KEY, MAX_MARKER_READ

    return json_field(path, MARKER_KEY, limit or MAX_MARKER_READ)


def json_field(path: str | Path, key: str, limit: int, *, regular_only: bool = False):
    """The value at ``key`` of a JSON file whose top level is an object, read with ``limit``, else None (never
    raising)."""
    try:
        data = json.loads(read_user_file(path, limit=limit, what="the file", regular_only=regular_only))
    except (ValueError, RecursionError, OSError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def npz_marker(path: str | Path, limit: int):
    """The ``written_by`` member of a .npz archive, else None (never raising). ``limit``: the most bytes the
    archive may declare uncompressed (checked from its directory first, as its loader does)."""
    import numpy as np

    from verispec.files.provenance import MARKER_KEY

    try:
        check_zip_sizes(path, limit=limit, what="the archive")
        with np.load(path, allow_pickle=False) as archive:
            if MARKER_KEY not in archive.files:
                return None
            return json.loads(str(archive[MARKER_KEY]))
    except Exception:  # numpy and zipfile raise many kinds on a file that is not an archive of theirs
        return None


#: Most bytes of a PNG read to find its ``written_by`` text chunk: matplotlib writes its text chunks before the
#: image data, within the first few hundred bytes.
MAX_PNG_HEAD = 1 << 16
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_marker(path: str | Path):
    """The ``written_by`` value of a PNG's text chunk of that key (``figure.savefig(metadata=...)``), else None
    (never raising; only a regular file's first ``MAX_PNG_HEAD`` bytes are read, up to its image data)."""
    from verispec.files.provenance import MARKER_KEY

    try:
        with open_without_blocking(path) as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                return None
            head = stream.read(MAX_PNG_HEAD)
    except OSError:
        return None
    if not head.startswith(PNG_SIGNATURE):
        return None
    at = len(PNG_SIGNATURE)
    while at + 8 <= len(head):
        length, kind = int.from_bytes(head[at:at + 4], "big"), head[at + 4:at + 8]
        data = head[at + 8:at + 8 + length]
        if kind == b"IDAT" or len(data) < length:
            return None
        key, _, value = data.partition(b"\0")
        if kind == b"tEXt" and key == MARKER_KEY.encode():
            try:
                return json.loads(value.decode("latin-1"))
            except ValueError:
                return None
        at += 12 + length  # length, type, data, CRC
    return None


__all__ = ["MAX_PNG_HEAD", "PNG_SIGNATURE", "json_field", "json_marker", "npz_marker", "png_marker"]
