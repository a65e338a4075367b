"""``data/MANIFEST``: every committed data file with its size, sha256, the commit that built it and the command
(issue 55). One tab-separated line a file, after comment lines (``#``) and a header line:

    path    bytes    sha256    commit    command    note

``path`` is relative to the checkout (``data/...``); ``commit`` is the commit whose change of the file made its
content (``git log --follow``); ``command`` is the one the docs give, or says plainly that none was found.

``check(root)`` lists what disagrees between the manifest and the files on disk under ``root/data``: a file on
disk the manifest does not list, a listed file that is missing, a size or a sha256 that differs. The manifest
does not list itself.

    python -m tests.support.data_manifest            # the disagreements, exit 1 if any
    python -m tests.support.data_manifest --refresh  # rewrite the sizes and sha256 of the listed files
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: The manifest's place and its columns.
MANIFEST = Path("data") / "MANIFEST"
COLUMNS = ("path", "bytes", "sha256", "commit", "command", "note")
HEADER = "\t".join(COLUMNS)


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str
    commit: str
    command: str
    note: str


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


#: Most bytes of the manifest read (it is some 10 KB).
MAX_MANIFEST_BYTES = 1 << 22


class ManifestError(ValueError):
    """The manifest cannot be read, or a line of it is malformed: one line naming the file (and line) and the fix."""


def read(root: Path) -> dict[str, Entry]:
    """The manifest's entries by path; a malformed line is a ``ManifestError`` (a ``ValueError``) naming its
    number. Read with a bound, and only as a regular file (a FIFO or a device in its place is refused, not waited
    on or read for ever); every line's path must name a file under data/, its byte count be ASCII digits (``'²'``
    passed ``str.isdigit`` and then failed ``int``: a traceback, issue 64)."""
    from verispec.errors import VerispecError
    from verispec.files.io import read_user_file

    entries: dict[str, Entry] = {}
    try:
        text = read_user_file(Path(root) / MANIFEST, limit=MAX_MANIFEST_BYTES, what="the manifest",
                              regular_only=True)
    except VerispecError as error:
        raise ManifestError(str(error)) from None
    lines = text.splitlines()
    body = [(number, line) for number, line in enumerate(lines, 1) if line and not line.startswith("#")]
    if not body or body[0][1] != HEADER:
        raise ManifestError(f"{MANIFEST}: the first line that is not a comment must be the header {HEADER!r}")
    for number, line in body[1:]:
        fields = line.split("\t")
        if len(fields) != len(COLUMNS) or not re.fullmatch(r"[0-9]+", fields[1]) \
                or not re.fullmatch(r"[0-9a-f]{64}", fields[2]) or not re.fullmatch(r"[0-9a-f]{7,40}", fields[3]) \
                or not fields[4].strip():
            raise ManifestError(f"{MANIFEST}:{number}: expected {len(COLUMNS)} tab-separated fields {COLUMNS} with "
                                f"a byte count, a sha256, a commit and a command: {line[:120]!r}; fix the line")
        parts = fields[0].split("/")
        if parts[0] != "data" or len(parts) < 2 or any(part in ("", ".", "..") for part in parts):
            raise ManifestError(f"{MANIFEST}:{number}: the path {fields[0][:120]!r} is not a file under data/ "
                                "(written data/NAME, no '..'); fix the line")
        if fields[0] in entries:
            raise ManifestError(f"{MANIFEST}:{number}: {fields[0]!r} is listed twice")
        entries[fields[0]] = Entry(fields[0], int(fields[1]), *fields[2:])
    return entries


def data_files(root: Path) -> list[str]:
    """Every file under ``root/data`` but the manifest, as paths relative to ``root``."""
    root = Path(root)
    return sorted(path.relative_to(root).as_posix() for path in (root / "data").rglob("*")
                  if path.is_file() and path != root / MANIFEST)


def check(root: Path) -> list[str]:
    """What disagrees between the manifest and the files under ``root/data``, one line each (empty: they agree)."""
    root = Path(root)
    entries, present = read(root), data_files(root)
    problems = [f"{path}: not listed in {MANIFEST}" for path in present if path not in entries]
    for path, entry in entries.items():
        file = root / path
        if not file.is_file():
            problems.append(f"{path}: listed in {MANIFEST} but missing")
        elif file.stat().st_size != entry.size:
            problems.append(f"{path}: {file.stat().st_size} bytes, {entry.size} listed")
        elif sha256(file) != entry.sha256:
            problems.append(f"{path}: sha256 {sha256(file)}, {entry.sha256} listed")
    return problems


def refresh(root: Path) -> None:
    """Rewrite the sizes and sha256 of the listed files present (comments, commits and commands kept)."""
    manifest = Path(root) / MANIFEST
    entries = read(root)
    out = []
    for line in manifest.read_text(encoding="utf-8").splitlines():  # read() above checked it
        fields = line.split("\t")
        if fields[0] in entries and (Path(root) / fields[0]).is_file():
            fields[1:3] = [str((Path(root) / fields[0]).stat().st_size), sha256(Path(root) / fields[0])]
        out.append("\t".join(fields))
    from verispec.files.io import atomic_write_text

    atomic_write_text(manifest, "\n".join(out) + "\n")  # never the manifest truncated by a full disk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="the checkout")
    parser.add_argument("--refresh", action="store_true", help="rewrite the listed files' sizes and sha256")
    args = parser.parse_args(argv)
    try:
        if args.refresh:
            refresh(Path(args.root))
        problems = check(Path(args.root))
    except (ManifestError, OSError) as error:  # a malformed line, an unreadable data file: one line, status 2
        print(f"data_manifest: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    print("\n".join(problems) or f"{MANIFEST}: every file listed, every size and sha256 as listed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
