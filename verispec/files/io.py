"""Small file helpers shared by the command line and the experiment scripts."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path

from verispec.errors import OutputError, ResultStoreError, VerispecError
from verispec.files.markers import (  # noqa: F401  (re-exported: their home before issue 64)
    MAX_PNG_HEAD,
    PNG_SIGNATURE,
    json_field,
    json_marker,
    npz_marker,
    png_marker,
)
from verispec.files.reading import (  # noqa: F401  (re-exported: the readers' home before issue 64)
    check_zip_sizes,
    file_type,
    open_without_blocking,
    read_user_file,
    size_text,
)


def cache_root() -> Path:
    """Where verispec keeps what it installs or builds (models, compiled kernels): ``$VERISPEC_CACHE`` if set, else
    ``~/.cache/verispec``."""
    configured = os.environ.get("VERISPEC_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "verispec"


#: Largest result store read back (``ResultStore``): a sweep row takes about 1.6 KB (measured), so some 650,000
#: rows.
MAX_RESULT_FILE_BYTES = 1 << 30


def atomic_write_text(path: str | Path, text: str, *, within: str | Path | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that readers see either the old file or the whole new one; the file
    gets the permissions ``open(path, "w")`` would give it (see ``atomic_output``, and its ``within``)."""
    with atomic_output(path, within=within) as temporary, open(temporary, "w", encoding="utf-8") as stream:
        stream.write(text)


def atomic_write_bytes(path: str | Path, data: bytes, *, within: str | Path | None = None) -> None:
    """``atomic_write_text`` for bytes (a binary problem file)."""
    with atomic_output(path, within=within) as temporary, open(temporary, "wb") as stream:
        stream.write(data)


def plain_json(value):
    """``value`` with every number a plain Python int or float (numpy scalars and arrays converted,
    fractions as strings), mappings as dicts with string keys and sequences as lists, so that ``--json``
    output holds only str, int, float, bool, None, list and dict."""
    if value is None or type(value) in (bool, str, int, float):
        return value
    if isinstance(value, enum.Enum):
        return plain_json(value.value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, Mapping):
        return {str(plain_json(key)): plain_json(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(plain_json(item) for item in value)
    if isinstance(value, (list, tuple)):
        return [plain_json(item) for item in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return plain_json(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def atomic_write_json(path: str | Path, data, *, within: str | Path | None = None) -> None:
    atomic_write_text(path, json.dumps(data, indent=1) + "\n", within=within)


@contextlib.contextmanager
def atomic_output(path: str | Path, *, suffix: str = ".tmp", within: str | Path | None = None):
    """A temporary file beside ``path`` for a writer that takes a file name (a figure, a Parquet table). When the
    block ends without error the file is synced to disk and renamed over ``path`` in one step, then the folder
    is synced (so that the new name survives a crash), so readers see the old file or the whole new one and an
    interrupted write leaves no half file; on an error it is removed.

    The result is what a plain ``open(path, "w")`` would leave, in these respects: the permissions (an existing
    file's own mode, else 0666 less the umask; ``mkstemp`` makes its files 0600, which would hide a report from
    the user's group); a symbolic link at ``path`` (or on the way to it) is written through, the file it points
    to replaced and the link kept; an existing read-only file is refused. Missing parent folders are created.
    What differs, because the new content is a new file renamed into place rather than the old file truncated:
    the file's owner and group become the writer's, and its ACLs, extended attributes and inode number are not
    carried over (only the permission bits are); other hard links to the old file keep the old content, and a
    process holding the old file open keeps reading it. Any ``OSError`` on the way (a read-only folder, a full
    disk, a path through a regular file, a loop of links) becomes a one-line ``OutputError`` naming ``path``.

    ``within``: the output folder ``path`` lies in (a report's ``--out``, ``--save-problems DIR``, the folder of a
    row store beside its table), for a file the user did not name: a link at ``path``, or a path resolving
    outside the folder, is refused instead of followed (``check_inside``), so no output leaves its folder. The
    rename would replace such a link rather than write through it, but the user is told instead."""
    shown = repr(str(path))
    temporary = None
    if within is not None:
        with _refusing("the output", shown):
            check_inside(within, path, "cannot write")
    try:
        target = Path(os.path.realpath(path))  # where open() would write: through every link
        if target.is_symlink():
            raise OutputError(f"cannot write {shown}: its symbolic links form a loop; give another path")
        _refuse_special(target, shown)
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = _open_mode(target, shown)
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=temporary_prefix(target.name), suffix=suffix)
        os.close(handle)
        temporary = Path(name)
        yield temporary
        os.chmod(temporary, mode)
        handle = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
        os.replace(temporary, target)
        temporary = None
        _sync_folder(target.parent)
    except OutputError:
        raise
    except OSError as error:
        raise OutputError(f"cannot write {shown} ({error.strerror or error}); choose a writable location") from None
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def _refuse_special(target: Path, shown: str) -> None:
    """Refuse a target that exists and is not a regular file: the rename would replace a FIFO, a socket or a device
    node (``/dev/null``, as root) with a regular file, where ``open(path, "w")`` would have written into it."""
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise OutputError(f"cannot write {shown}: it is {file_type(mode)}, not a regular file; give a file path")


#: Most bytes of the target's name a temporary file's name repeats (``temporary_prefix``).
TEMPORARY_NAME_BYTES = 32


def temporary_prefix(name: str) -> str:
    """The prefix of a temporary file written beside the file ``name``: a dot, the name's first characters up to
    ``TEMPORARY_NAME_BYTES`` bytes (enough to tell whose it is, should a crash leave it), a dot. The whole name
    (``mkstemp`` adds 8 random characters and the suffix) must fit the file system's limit on one name (NAME_MAX,
    255 bytes on Linux) wherever ``name`` does: the full name as prefix made a legal 255-byte name fail (issue 64).
    Cut by whole characters, counted in the bytes the file system stores."""
    kept, size = [], 0
    for character in name:
        size += len(os.fsencode(character))
        if size > TEMPORARY_NAME_BYTES:
            break
        kept.append(character)
    return f".{''.join(kept)}."


#: Errors of opening or syncing a folder that mean the system does not offer it (a folder we may write but
#: not read, a file system without directory sync): the rename is done, only its durability is best effort.
_FOLDER_SYNC_UNSUPPORTED = {errno.EACCES, errno.EPERM, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def _sync_folder(folder: Path) -> None:
    """fsync ``folder``, so that a rename into it is on disk (skipped where the system does not offer it)."""
    try:
        handle = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as error:
        if error.errno in _FOLDER_SYNC_UNSUPPORTED:
            return
        raise
    try:
        os.fsync(handle)
    except OSError as error:
        if error.errno not in _FOLDER_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(handle)


def _open_mode(path: Path, shown: str) -> int:
    """The permission bits ``open(path, "w")`` leaves ``path`` with: an existing file keeps its own (and one we may
    not write is refused, as ``open`` would refuse it), a new one gets 0666 less the umask."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()
    _refuse_read_only(path, shown)
    return mode


def _refuse_read_only(path: Path, label: str) -> None:
    """Refuse an existing regular file this process may not write, as ``open(path, "w")`` would (``label`` names
    it in the one-line ``OutputError``)."""
    if path.is_file() and not os.access(path, os.W_OK):
        raise OutputError(f"{label} exists and is read-only; make it writable or choose another path")


def current_umask() -> int:
    """The process's umask, read from /proc/self/status where Linux reports it: ``os.umask`` can only read it by
    setting it, and another thread creating a file in between would get the placeholder mask."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def check_output_file(path: str | Path, what: str = "--output", example: str | None = None) -> None:
    """Refuse, before any work, a file path that ``atomic_output`` could not write: a directory, something that
    is not a regular file, a path through a regular file, a read-only file or folder (symbolic links followed,
    as the writer follows them). ``what`` names the option in the one-line ``OutputError``; ``example`` is a
    file name to suggest inside a directory given by mistake."""
    shown = repr(str(path))
    with _refusing(what, shown):
        target = Path(os.path.realpath(path))
        if target.is_dir():
            hint = f"give a file name such as {os.path.join(str(path), example)!r}" if example else \
                "give a file name"
            raise OutputError(f"{what} {shown} is a directory; {hint}")
        if target.exists() and not target.is_file():
            raise OutputError(f"{what} {shown} exists and is not a regular file; give another file name")
        _refuse_read_only(target, f"{what} {shown}")
        _check_folder_writable(target.parent, what, shown)


def check_output_dir(path: str | Path, what: str = "--out") -> None:
    """Refuse, before any work, a directory path that cannot hold output: an existing file, a path through a
    regular file, a read-only place (the one-line ``OutputError`` names ``what``)."""
    target = Path(path)
    shown = repr(str(path))
    with _refusing(what, shown):
        if target.exists() and not target.is_dir():
            raise OutputError(f"{what} {shown} is a file, not a folder; give a directory")
        _check_folder_writable(target, what, shown)


@dataclasses.dataclass(frozen=True)
class OutputKind:
    """A kind of file a command writes at a path the user names (a problem file, a selector, a latency model, a
    sweep table): ``name`` in words for the refusal ('verispec problem file'); ``marked(path)``, whether an
    existing file carries the marker verispec writes into files of this kind (``verispec.files.provenance``: a marker
    it writes, not a format it reads, so a hand-written file of the same format is not taken for its own; never
    raising); ``recognise(path)``, whether it is of the format at all (for the refusal's words only: a file of
    the format without the marker was written by hand or by a verispec older than the marker); and
    ``example``, a file name to suggest when a directory is given."""

    name: str
    marked: Callable[[Path], bool]
    recognise: Callable[[Path], bool] | None = None
    example: str = "output"


def check_output(path: str | Path, kind: OutputKind, *, what: str, overwrite: bool = False,
                 error: type[VerispecError] = OutputError) -> None:
    """The one guard of every file a command writes, called before any work: refuse a path ``atomic_output``
    could not write (``check_output_file``) and, unless ``overwrite``, an existing file that does not carry
    verispec's marker of ``kind`` (a file of the user's, even one of the same format; another kind of verispec
    file; one written before the marker existed), so that it is never replaced by accident. Missing parent
    folders are allowed: every writer creates them (``atomic_output``). ``what`` names the option in the
    one-line ``error``."""
    check_output_file(path, what, example=kind.example)
    target = Path(os.path.realpath(path))
    if overwrite or not target.exists():
        return
    if _never_raising(kind.marked, target):
        return
    shown = repr(str(path))
    if kind.recognise is not None and _never_raising(kind.recognise, target):
        raise error(f"{what} {shown} exists and is a {kind.name} without the written_by marker verispec writes "
                    "(written by hand, or by a verispec older than the marker), so verispec cannot show it wrote it; "
                    "choose another path, or pass --overwrite to replace it")
    raise error(f"{what} {shown} exists and is not a {kind.name} that verispec wrote; choose another path, or pass "
                "--overwrite to replace it")


def _never_raising(check: Callable[[Path], bool], path: Path) -> bool:
    try:
        return bool(check(path))
    except Exception:  # a file the check cannot read is not this tool's
        return False


def check_inside(folder: str | Path, path: str | Path, what: str = "--out") -> None:
    """Refuse on one line (``OutputError``) an output ``path`` inside the output folder ``folder`` that is a
    symbolic link, or whose resolved path leaves the folder (through a linked subfolder): a writer that follows
    it would write outside the folder the user named, over a file of theirs. The folder itself may be a link
    (the user named it); what is inside it may not. Called by the folder's checks and again by each write."""
    base = os.path.realpath(folder)
    shown = repr(str(path))
    if os.path.islink(path):
        raise OutputError(f"{what}: {shown} is a symbolic link (to {os.readlink(path)!r}); verispec does not write "
                          f"through a link inside its output folder {str(folder)!r}; remove the link, or choose "
                          "another folder")
    resolved = os.path.realpath(path)
    if os.path.commonpath([base, resolved]) != base:
        raise OutputError(f"{what}: {shown} resolves to {resolved!r}, outside the output folder {str(folder)!r} "
                          "(a linked subfolder); remove the link, or choose another folder")


@contextlib.contextmanager
def _refusing(what: str, shown: str):
    """Turn any other ``OSError`` of a check (a path under /proc, a name too long) into the one-line
    ``OutputError`` of the output check."""
    try:
        yield
    except OutputError:
        raise
    except OSError as error:
        raise OutputError(f"{what} {shown} cannot be written ({error.strerror or error}); give a path in a "
                          "writable folder") from None


def _check_folder_writable(folder: Path, what: str, shown: str) -> None:
    """``folder``, or the nearest existing folder above it (the missing ones will be created), is a folder in
    which a file or folder can be created: probed by creating and removing one."""
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"{what} {shown} cannot be written: {str(ancestor)!r} is a file, not a folder")
    if ancestor == folder:
        handle, probe = tempfile.mkstemp(dir=ancestor, prefix=".verispec-probe.", suffix=".tmp")
        os.close(handle)
        os.unlink(probe)
    else:
        os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".verispec-probe."))


class ResultStore:
    """Rows of a long run, keyed, saved atomically after every row so that an interrupted run resumes.

    ``parameters`` (a JSON-able dict) are everything the rows depend on besides their keys: the problem
    (kind, vocabulary, seed, divergence ...), the verifier, the method. They are recorded in the file with
    the verispec version, and reopening the file with different parameters raises ``ResultStoreError``
    naming what differs, so a run never resumes from, or mixes with, rows computed for another setting. A file
    that records no parameters (an older format, or any JSON object of someone else's, rows or not) is refused
    too when ``parameters`` are given: the first ``add`` would replace it.

    With ``overwrite`` the file's rows are ignored without reading it, and the first ``add`` replaces it: the
    run starts over (the file is only replaced, atomically, once a row exists to replace it with).

    The file carries verispec's ``written_by`` marker, and ``outputs``: for each file written from the rows (a
    sweep's table), its path relative to the store's folder and the SHA-256 of its last two contents, so that a
    rerun replaces only a table it can show it wrote (``add_many(outputs=...)``; ``verispec.study.tables``). One
    writer at a time: a command holds ``verispec.files.store_lock.store_lock`` for its run, because each ``add``
    rewrites
    the whole file from this object's rows, and a second writer's rows would be lost.

    ``within``: the output folder the file lies in, when the user named the folder, not the file (a report's):
    a link at its path is refused, not followed (``atomic_output``).

    >>> store = ResultStore("results/bench.json", parameters={"verifier": "bv", "seed": 0})
    >>> if not store.done(key): store.add(key, row)
    """

    def __init__(self, path: str | Path, parameters: dict | None = None, *, overwrite: bool = False,
                 within: str | Path | None = None):
        self.path = Path(path)
        self.within = within  # the output folder the file must stay in (atomic_output), if any
        self.parameters = None
        if parameters is not None:
            from verispec.version import package_version

            self.parameters = _json_round_trip({**parameters, "verispec": parameters.get("verispec",
                                                                                          package_version())})
        self.rows: dict[str, dict] = {}
        self.outputs: dict[str, list[str]] = {}
        if self.path.exists() and not overwrite:
            data = self._read()
            self.rows = {row["key"]: row for row in data.get("rows", [])}
            outputs = data.get("outputs")
            self.outputs = dict(outputs) if isinstance(outputs, dict) else {}
            self._check_parameters(data.get("parameters"))

    def _read(self) -> dict:
        text = read_user_file(self.path, limit=MAX_RESULT_FILE_BYTES, what="the result file", error=ResultStoreError,
                              why="a sweep row takes about 1.6 KB, so this is some 650,000 rows")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise ResultStoreError(f"cannot read the result file {str(self.path)!r} ({error}); delete it or "
                                   "choose another output file") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows", []), list) or not all(
                isinstance(row, dict) and "key" in row for row in data.get("rows", [])):
            raise ResultStoreError(f"{str(self.path)!r} is not a result file (expected {{'parameters': ..., "
                                   "'rows': [{'key': ...}, ...]}); delete it or choose another output file")
        return data

    def _check_parameters(self, stored) -> None:
        if self.parameters is None or stored == self.parameters:
            return
        if not isinstance(stored, dict):
            # any JSON object passes _read ({"my": "settings"}, {"rows": []}): without parameters it is not a
            # file this store wrote, and the first add would replace it
            held = f"holds {len(self.rows)} row(s) with no recorded parameters (an older format), so they may " \
                "belong to another setting" if self.rows else "has no recorded parameters, so it is not a result " \
                "file of this run"
            raise ResultStoreError(f"{str(self.path)!r} {held}; delete it or choose another output file")
        names = sorted(set(stored) | set(self.parameters), key=str)
        differences = ", ".join(f"{name}: {_shown(stored, name)} in the file, {_shown(self.parameters, name)} now"
                                for name in names if stored.get(name, _MISSING) != self.parameters.get(name, _MISSING))
        raise ResultStoreError(f"{str(self.path)!r} holds rows of a run with other parameters ({differences}); "
                               "use another output file, or delete this one to start over")

    def done(self, key: str) -> bool:
        return key in self.rows

    def add(self, key: str, row: dict) -> None:
        self.add_many({key: row})

    def add_many(self, rows: dict[str, dict], *, outputs: dict[str, str] | None = None) -> None:
        """Add several rows (key -> row) and save once. ``outputs``: files about to be written from the rows (path
        -> SHA-256 of their new content), recorded before they are written (``wrote``)."""
        from verispec.files.provenance import MARKER_KEY, RESULT_STORE, written_by

        for key, row in rows.items():
            self.rows[key] = {"key": key, **row}
        for path, digest in (outputs or {}).items():
            name = self._output_name(path)
            self.outputs[name] = [digest, *[old for old in self.outputs.get(name, [])[:1] if old != digest]]
        data = {MARKER_KEY: written_by(RESULT_STORE, "row store"), "outputs": self.outputs,
                "rows": list(self.rows.values())}
        if self.parameters is not None:
            data = {"parameters": self.parameters, **data}
        # compact, no indentation: indenting the rows made the committed trace stores 1.5x larger (issue 55)
        atomic_write_text(self.path, json.dumps(data, separators=(",", ":")) + "\n", within=self.within)

    def wrote(self, path: str | Path, digest: str | None) -> bool:
        """Whether ``digest`` (the SHA-256 of the file now at ``path``) is one of the last two contents this store
        recorded for it: the file is one verispec wrote from these rows, not since edited or replaced (the
        previous content counts too: a run stopped between saving the store and writing the file left it)."""
        return digest is not None and digest in self.outputs.get(self._output_name(path), [])

    def _output_name(self, path: str | Path) -> str:
        return os.path.relpath(os.path.realpath(path), os.path.realpath(self.path.parent))


_MISSING = object()


#: Most characters of one parameter's value a refusal quotes (an action list of 476 names is some 12,000).
SHOWN_PARAMETER_CHARS = 160


def _shown(parameters: dict, name: str) -> str:
    """A parameter's value as a refusal quotes it: its JSON, cut after ``SHOWN_PARAMETER_CHARS`` characters (a list
    with its length), so the refusal stays a readable line."""
    if name not in parameters:
        return "(absent)"
    value = parameters[name]
    text = json.dumps(value)
    if len(text) <= SHOWN_PARAMETER_CHARS:
        return text
    size = f" ({len(value)} items)" if isinstance(value, (list, dict)) else ""
    return f"{text[:SHOWN_PARAMETER_CHARS]}...{size}"


def _json_round_trip(parameters: dict) -> dict:
    """The parameters as they read back from the file (tuples become lists), so that equal runs compare equal."""
    try:
        return json.loads(json.dumps(parameters))
    except (TypeError, ValueError) as error:
        raise ResultStoreError(f"result-store parameters must be JSON values: {error}") from None


#: Most bytes one packed array of a row may declare (a root's labels of the largest grid are far below it).
MAX_PACKED_BYTES = 1 << 28

#: The key of a float64 array packed into a JSON row (``pack_floats``).
PACKED_FLOATS = "float64_zlib_b64"


def pack_floats(values) -> dict:
    """A float64 array as a JSON value a row store keeps compactly: its little-endian bytes, zlib-compressed and
    base64-encoded, with its shape (every bit kept; about 11 characters a value at worst, against about 19 in a
    JSON list, and far fewer where values repeat, as a root's equal sampled trees make them)."""
    import base64
    import zlib

    import numpy as np

    array = np.ascontiguousarray(values, dtype="<f8")
    return {PACKED_FLOATS: base64.b64encode(zlib.compress(array.tobytes(), 6)).decode("ascii"),
            "shape": list(array.shape)}


def unpack_floats(value):
    """The float64 array of a ``pack_floats`` value, or of a plain (nested) list of numbers as older rows hold."""
    import base64
    import math
    import zlib

    import numpy as np

    if not isinstance(value, dict):
        return np.asarray(value, dtype=np.float64)
    try:
        shape = tuple(int(size) for size in value["shape"])
        expected = 8 * math.prod(shape)
        if any(size < 0 for size in shape) or expected > MAX_PACKED_BYTES:  # before anything that size is made
            raise ValueError(f"the shape {shape} declares {expected:,} bytes, above {MAX_PACKED_BYTES:,}")
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(value[PACKED_FLOATS]), expected + 1)  # at most one byte too many
        if len(raw) != expected or inflate.unconsumed_tail:
            raise ValueError(f"{len(raw):,}{'+' if inflate.unconsumed_tail else ''} bytes for the shape {shape}")
        return np.frombuffer(raw, dtype="<f8").reshape(shape).astype(np.float64)
    except (KeyError, TypeError, ValueError, zlib.error) as error:
        raise ResultStoreError(f"a packed array of a result row cannot be read ({error}); the row store is damaged: "
                               "delete it to recompute its rows") from None


def json_format(name: str) -> Callable[[Path], bool]:
    """Whether a path is a JSON result of format ``name`` (its ``format`` field), for an ``OutputKind``'s words on
    a file of the format without its marker (written by a verispec older than the marker, or by hand)."""
    return lambda path: json_field(path, "format", MAX_RESULT_FILE_BYTES, regular_only=True) == name


def marked_json(kind: str) -> Callable[[Path], bool]:
    """``OutputKind.marked`` of a JSON file verispec writes with the ``written_by`` marker of ``kind``."""
    from verispec.files.provenance import is_marked

    return lambda path: is_marked(json_marker(path), kind)


def _markdown_marked(path: Path) -> bool:
    from verispec.files.provenance import markdown_marked

    return markdown_marked(path)


def _png_marked(path: Path) -> bool:
    from verispec.files.provenance import REPORT, is_marked

    return is_marked(png_marker(path), REPORT)


def _row_store_marked(path: Path) -> bool:
    from verispec.files.provenance import RESULT_STORE, is_marked

    return is_marked(json_marker(path), RESULT_STORE)


#: A Markdown file verispec writes (a report, a table): its first line is the marker (``markdown_marker``).
MARKDOWN_OUTPUT = OutputKind("Markdown file (its first line the marker)", _markdown_marked, example="table.md")
#: A figure verispec writes: a PNG whose ``written_by`` text chunk is the marker (``figure_metadata``).
FIGURE_OUTPUT = OutputKind("figure (a PNG with the written_by text)", _png_marked, example="figure.png")
#: A row store (``ResultStore``): JSON carrying the row store's marker.
ROW_STORE_OUTPUT = OutputKind("verispec row store", _row_store_marked, example="rows.json")


def figure_metadata(command: str) -> dict:
    """The PNG text chunks of a figure verispec writes (``savefig(metadata=...)``): its ``written_by`` marker
    (kind report), so that a rerun can show it wrote the figure it replaces (``FIGURE_OUTPUT``)."""
    from verispec.files.provenance import MARKER_KEY, REPORT, written_by

    return {MARKER_KEY: json.dumps(written_by(REPORT, command), sort_keys=True)}
