"""Problem files: the JSON layout and the binary .npz form of a problem, written (``problem_to_json``,
``problem_to_npz``) and read (``load_problem``, which tells the two apart by their first bytes whatever the file
is called; ``problem_from_json``, ``problem_from_npz``), with the limits that refuse a hostile file before it
costs memory.

JSON: {"vocab_size": V, "target": {"": [...], "0": [...], "0,1": [...]}, "draft": {...}} (the layout of
docs/guides/cli.md). Float mode checks every table at once (``_checked_rows``), after a vectorised scan of the bytes has
found no number that only the exact reading may take (``_floats_read_plainly``); a file that fails is read again
the exact way, so that the error names the first problem.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np

from verispec.errors import InvalidDistributionError, InvalidProblemError, ProblemTooLargeError, describe
from verispec.files.io import OutputKind, read_user_file
from verispec.simulator.distributions import SUM_TOLERANCE, float_rows, parse_number
from verispec.simulator.expansion import check_json_exact_entries, check_npz_expansion, rational_floats
from verispec.simulator.problems import CheckedRows, Prefix, Problem, TabularProblem, prefix_label
from verispec.sizes import MAX_TABLE_ENTRIES, check_vocab_size

#: Largest problem file read: a problem file of the largest table (MAX_TABLE_ENTRIES probabilities per law, up
#: to 24 bytes each as JSON floats, plus the prefix keys) takes under 200 MiB: random_problem(2, 19) writes 121 MiB,
#: random_problem(2047, 1) 93 MiB. ``/dev/zero`` was read to 7.7 GB.
MAX_PROBLEM_FILE_BYTES = 256 << 20

#: Top-level keys of a problem file: the three required ones and two optional free-text notes.
REQUIRED_KEYS = ("vocab_size", "target", "draft")
NOTE_KEYS = ("comment", "description")
#: Optional keys holding JSON objects that readers ignore: "derived" is the provenance ``verispec derive``
#: writes (the pair, context, settings and the real tokens behind every derived prefix); "written_by" the marker
#: of the verispec command that wrote the file (``verispec.files.provenance``: only a file carrying it is replaced
#: without --overwrite).
METADATA_KEYS = ("derived", "written_by")


def _checked_rows(prefixes: list, rows, size: int, largest_token: int | None = None, *, numbers_only: bool = False,
                  depth: int | None = None) -> CheckedRows | None:
    """Float mode in bulk: ``rows`` (lists of JSON numbers, or a [n, V] array) as one [n, V] float64 matrix,
    checked at once by ``float_rows`` (``as_distribution``'s float rule, batched) and
    handed out as read-only row views. None when a row has another length, an entry is not a number (a string
    such as "1/3", a bool, null) or a check fails: the per-vector path (``as_distribution``) then reads the table
    and names the first problem, so the errors are the same as before. ``largest_token``: the prefixes' largest
    token when the caller knows it (non-negative tokens); else it is found here. ``numbers_only``: the caller
    knows no entry is a bool (a JSON file without the literals true and false), so numpy's conversion, which
    leaves strings as strings and None as an object, tells the rest apart without a Python pass. ``depth``: the
    complete depth, when the caller knows the layout (``CheckedRows.depth``)."""
    if isinstance(rows, np.ndarray):
        matrix = rows
        if matrix.ndim != 2 or matrix.shape[1] != size or matrix.dtype.kind not in "fiu":
            return None
        matrix = matrix.astype(np.float64)
    else:
        if numbers_only:  # numpy tells rows of V numbers from anything else (ragged, nested, strings, null)
            try:
                matrix = np.array(rows)
            except ValueError:  # ragged rows
                return None
            if matrix.shape != (len(rows), size) or matrix.dtype.kind not in "fi":
                return None
            matrix = matrix.astype(np.float64, copy=False)
        else:
            if any(type(row) is not list or len(row) != size for row in rows):
                return None
            if not {type(value) for row in rows for value in row} <= {float, int}:
                return None
            matrix = np.array(rows, dtype=np.float64).reshape(len(rows), size)
    matrix = float_rows(matrix)
    if matrix is None:
        return None
    matrix.setflags(write=False)
    if largest_token is None:
        tokens = [prefix for prefix in prefixes if prefix]
        if tokens and min(map(min, tokens)) < 0:
            return None
        largest_token = max(map(max, tokens), default=-1)
    if largest_token >= size:
        return None
    table = CheckedRows(zip(prefixes, matrix))
    table.depth = depth
    return table


def problem_from_json(data: Mapping, *, exact: bool = False) -> TabularProblem:
    """Build a TabularProblem from the JSON layout documented in docs/guides/cli.md (the README links it).

    The object has exactly the keys "vocab_size", "target" and "draft", plus optionally "comment" and/or
    "description" (free text, ignored) and "derived" (an object, ignored: ``verispec derive``'s provenance);
    any other key is refused. Keys of "target" and "draft" are prefixes
    as comma-joined token ids ("" is the root; spaces around ids are allowed, but two keys naming the same
    prefix, such as "0,1" and "0, 1", are refused); values are lists of probabilities: JSON numbers or
    strings such as "1/3" or "0.25".

    Exact mode (``exact=True``) reads every entry as an exact rational: an integer or a string as itself,
    and a JSON number with a fraction or an exponent (a float) as the decimal written in the file (a Python
    float as its shortest round-trip decimal, ``repr``, which is what ``json.dumps`` writes). A vector with
    at least one such float entry is taken to be rounded: when its exact sum lies within ``SUM_TOLERANCE``
    (1e-8) of 1 it is divided by that sum, exactly, so it sums to exactly 1. A vector given only as integers
    and strings must sum to exactly 1. So a file that ``problem_to_json`` wrote from a float problem is
    readable in exact mode, within about 1e-16 of the float values. Float mode renormalises every vector
    whose sum is within ``SUM_TOLERANCE`` of 1.
    """
    return _problem_from_json(data, exact=exact)


def _problem_from_json(data: Mapping, *, exact: bool = False, numbers_only: bool = False) -> TabularProblem:
    """``problem_from_json``; ``numbers_only``: the file holds no JSON true or false (``_checked_rows``)."""
    if not isinstance(data, Mapping):
        raise InvalidProblemError(f"a problem file must hold a JSON object, got {type(data).__name__}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise InvalidProblemError(f"problem JSON is missing the key {key!r}")
    for key in data:
        if key not in REQUIRED_KEYS and key not in NOTE_KEYS and key not in METADATA_KEYS:
            raise InvalidProblemError(
                f"problem JSON has an unknown key {str(key)!r}; allowed keys: "
                f"{', '.join(REQUIRED_KEYS)} (required), {', '.join(NOTE_KEYS)} (optional text), "
                f"{', '.join(METADATA_KEYS)} (optional object)")
        if key in METADATA_KEYS and not isinstance(data[key], Mapping):
            raise InvalidProblemError(f"problem JSON key {key!r} must be an object, got {type(data[key]).__name__}")
        if key in NOTE_KEYS and not isinstance(data[key], str):
            raise InvalidProblemError(f"problem JSON key {key!r} must be a string (free text), "
                                      f"got {type(data[key]).__name__}")
    size = data["vocab_size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidProblemError(f"vocab_size must be a positive integer, got {_json_text(size)}")
    check_vocab_size(size, "vocab_size")
    tables = {}
    for name in ("target", "draft"):
        raw = data[name]
        if not isinstance(raw, Mapping):
            raise InvalidProblemError(f"problem JSON key {name!r} must map prefixes to probability lists")
        layout = _lexicographic_layout(list(raw), size)
        if layout is not None:  # problem_to_json's own layout: every prefix of length 0..L, in order
            parsed, depth = layout
            largest, keys = (size - 1 if depth else -1), dict(zip(parsed, raw))
        else:
            keys, largest, depth = {}, None, None
            try:  # all at once; a key that does not parse is named by _parse_prefix_key below
                parsed = [tuple(map(int, key.split(","))) if key.strip() else () for key in raw]
            except (ValueError, AttributeError):
                parsed = [_parse_prefix_key(key, name) for key in raw]
        if len(keys) != len(raw):  # two keys naming one prefix ("0,1" and "0, 1"): name them
            keys = {}
            for key, prefix in zip(raw, parsed):
                if prefix in keys:
                    raise InvalidProblemError(
                        f"{name}: prefix keys {keys[prefix]!r} and {key!r} both name the prefix "
                        f"'{prefix_label(prefix)}'; keep one")
                keys[prefix] = key
        bulk = None if exact else _checked_rows(list(keys), list(raw.values()), size, largest,
                                                numbers_only=numbers_only, depth=depth)
        if bulk is not None:  # float mode, every row a valid distribution: checked at once
            tables[name] = bulk
            continue
        table = {}
        for prefix, key in keys.items():
            values = raw[key]
            if not isinstance(values, list):
                raise InvalidDistributionError(f"{name} at prefix '{key}': expected a list of probabilities")
            try:
                table[prefix] = _read_vector(values, exact)
            except InvalidDistributionError as error:
                raise InvalidDistributionError(f"{name} at prefix '{key}': {error}") from None
        tables[name] = table
    return TabularProblem(size, tables["target"], tables["draft"], exact=exact)


def _json_text(value) -> str:
    """A JSON value as the file wrote it, for messages (no Python reprs such as Decimal('2.0'))."""
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value) if isinstance(value, (str, int, float, bool, type(None), list, dict)) else repr(value)


def _read_vector(values: list, exact: bool) -> list:
    """One probability list of a problem file, by the rule of ``problem_from_json``."""
    if not exact:
        return [parse_number(value, exact=False) for value in values]
    entries, rounded = [], False
    for value in values:
        if isinstance(value, float):  # a Python float stands for the decimal json.dumps writes for it
            parse_number(value, exact=True)  # refuses NaN and infinities
            value = Decimal(repr(value))
        rounded = rounded or isinstance(value, Decimal)  # a JSON number with a fraction or an exponent
        entries.append(parse_number(value, exact=True))
    total = sum(entries, Fraction(0))
    if rounded and total != 1 and total > 0 and abs(total - 1) <= Fraction(SUM_TOLERANCE):
        entries = [value / total for value in entries]
    return entries


def _lexicographic_layout(keys: list, size: int) -> tuple[list[Prefix], int] | None:
    """(the prefixes, L) when ``keys`` are exactly the keys ``problem_to_json`` writes, every prefix of length 0..L
    in lexicographic order ("", "0", "1", "0,0", ...), found by one list comparison and turned into tuples by
    itertools.product at C speed; else None, and the caller parses the keys one by one."""
    total, depth = 1, 0
    while total < len(keys) and depth < 64:
        depth += 1
        total += size ** depth
    if total != len(keys):
        return None
    digits = [str(token) for token in range(size)] if depth else []  # depth >= 1: at most len(keys) of them
    level, expected = [""], [""]
    for length in range(1, depth + 1):
        level = digits if length == 1 else [f"{key},{digit}" for key in level for digit in digits]
        expected += level
    if keys != expected:
        return None
    return list(itertools.chain.from_iterable(itertools.product(range(size), repeat=length)
                                              for length in range(depth + 1))), depth


def _prefix_tuples(lengths: np.ndarray, tokens: np.ndarray) -> list[Prefix]:
    """The prefixes as tuples of Python ints from their lengths [n] and tokens [n, longest] (padded), grouped by
    length so that each group converts in one call."""
    prefixes: list = [None] * len(lengths)
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        for row, prefix in zip(rows.tolist(), map(tuple, tokens[rows, :length].tolist())):
            prefixes[row] = prefix
    return prefixes


def _parse_prefix_key(key: str, name: str) -> Prefix:
    if not isinstance(key, str):
        raise InvalidProblemError(f"{name}: prefix key {describe(key)} is not a string of comma-joined token ids")
    if key.strip() == "":
        return ()
    try:
        return tuple(map(int, key.split(",")))
    except ValueError:
        raise InvalidProblemError(f"{name}: prefix key {key!r} is not comma-joined token ids") from None


def _refuse_duplicate_keys(pairs: list) -> dict:
    """object_pairs_hook for json.loads: a key given twice in one object is an error, not 'last one wins'."""
    data = dict(pairs)
    if len(data) == len(pairs):
        return data
    data = {}
    for key, value in pairs:
        if key in data:
            raise InvalidProblemError(f"key {key!r} appears twice in one JSON object; keep one")
        data[key] = value
    return data


def load_problem(path: str | Path, *, exact: bool = False) -> TabularProblem:
    """Read a problem file: JSON (see ``problem_from_json`` for the layout and the exact-mode rule) or the binary
    ``.npz`` form (``problem_to_npz``), told apart by their first bytes, whatever the file is called.

    A key repeated within one JSON object is refused. In exact mode JSON numbers with a fraction or an exponent are
    read as the decimals written in the file; in float mode they are read as floats (the same values, correctly
    rounded) and every table is checked at once (``_checked_rows``), at about a million numbers a second; a file
    that fails a check is read again the exact way, so that the error names the first problem as before.
    """
    content = read_user_file(path, limit=MAX_PROBLEM_FILE_BYTES, what="problem file", error=InvalidProblemError,
                             why=f"a file of the largest table verispec generates, {MAX_TABLE_ENTRIES:,} probabilities "
                                 "per law, takes under 200 MiB", binary=True)
    if content[:4] == NPZ_MAGIC:
        return problem_from_npz(content, exact=exact, name=str(path))
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidProblemError(f"problem file {str(path)!r} is neither JSON (it is not UTF-8 text) nor verispec's "
                                  ".npz problem form; write one with problem_to_json or problem_to_npz") from None
    if not exact:
        try:
            # json's own float reading (C) when no number can pass the exponent limit; else one call per number
            reading = {} if _floats_read_plainly(content) else {"parse_float": _plain_float}
            data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys, **reading)
            return _problem_from_json(data, exact=False, numbers_only=b"true" not in content
                                      and b"false" not in content)
        except ProblemTooLargeError as error:
            raise ProblemTooLargeError(f"problem file {str(path)!r}: {error}") from None
        except (json.JSONDecodeError, RecursionError, InvalidProblemError, InvalidDistributionError, _ReadExactly):
            pass  # read again the exact way below, for the canonical message
    if exact:
        check_json_exact_entries(content, text, str(path))
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys, parse_float=Decimal)
    except json.JSONDecodeError as error:
        raise InvalidProblemError(
            f"problem file {str(path)!r} is not valid JSON: {error.msg} at line {error.lineno}") from None
    except RecursionError:  # arrays or objects nested thousands deep; a problem file nests three levels
        raise InvalidProblemError(f"problem file {str(path)!r} nests JSON arrays or objects too deeply to be a "
                                  "problem (a problem nests three levels: object, prefix table, list)") from None
    except InvalidProblemError as error:
        raise InvalidProblemError(f"problem file {str(path)!r}: {error}") from None
    try:
        return problem_from_json(data, exact=exact)
    except ProblemTooLargeError as error:
        raise ProblemTooLargeError(f"problem file {str(path)!r}: {error}") from None


#: The float reading of a problem file refers to the exact one any JSON number longer than this (more digits than
#: any float's shortest form) or with an exponent of at least ``_EXPONENT_DIGITS`` digits: such a number may pass
#: MAX_EXPONENT, which the exact reading refuses, where a float would silently become 0 or infinity.
_LONGEST_PLAIN_NUMBER = 40
_EXPONENT_DIGITS = 5
_LONG_EXPONENT = re.compile(rf"[eE][+-]?\d{{{_EXPONENT_DIGITS},}}")


class _ReadExactly(Exception):
    """A JSON number the float reading must not take (``_plain_float``)."""


def _plain_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, as a float; ``_ReadExactly`` for one the float reading must
    not take (``_LONGEST_PLAIN_NUMBER``): such a file is read the exact way, which refuses it as before (float and
    exact mode decide alike)."""
    if len(text) > _LONGEST_PLAIN_NUMBER or (("e" in text or "E" in text) and _LONG_EXPONENT.search(text)):
        raise _ReadExactly(text)
    return float(text)


def _floats_read_plainly(content: bytes) -> bool:
    """Whether no JSON number in ``content`` (UTF-8) is one that ``_plain_float`` refers to the exact reading, found
    by a few vectorised passes over the bytes (runs of number bytes anywhere, strings included: a false alarm only
    costs the slower reading); then json's own float parser reads the file."""
    chars = np.frombuffer(content, dtype=np.uint8)
    exponent = (chars | 32) == ord("e")                             # e or E
    # + - . and digits are bytes 43..57 except ',' (44) and '/' (47)
    number = (((chars - np.uint8(43)) < 15) & (chars != ord(",")) & (chars != ord("/"))) | exponent
    if _all_in_window(number, _LONGEST_PLAIN_NUMBER + 1).any():
        return False
    positions = np.flatnonzero(exponent)
    padded = np.concatenate((chars, np.zeros(_EXPONENT_DIGITS + 2, dtype=np.uint8)))
    after = positions + 1 + ((padded[positions + 1] == ord("+")) | (padded[positions + 1] == ord("-")))
    digits = [(padded[after + k] - np.uint8(48)) < 10 for k in range(_EXPONENT_DIGITS)]
    return not np.logical_and.reduce(digits).any() if len(positions) else True


def _all_in_window(mask: np.ndarray, width: int) -> np.ndarray:
    """windows[i] = mask[i:i + width].all() for every full window, by doubling (blocks of 1, 2, 4, .. combined
    along the binary digits of ``width``): O(n log width) instead of O(n width)."""
    count = len(mask) - width + 1
    if count <= 0:
        return np.zeros(0, dtype=bool)
    windows, block, size, offset, remaining = np.ones(count, dtype=bool), mask, 1, 0, width
    while remaining:
        if remaining & 1:
            windows &= block[offset:offset + count]
            offset += size
        remaining >>= 1
        if remaining:
            block = block[:-size] & block[size:]
            size *= 2
    return windows

#: The first bytes of a .npz file (a zip archive).
NPZ_MAGIC = b"PK\x03\x04"

#: Most bytes the arrays of a .npz problem file may take uncompressed, checked from the archive's directory and
#: the arrays' headers before anything is decompressed: twice what the largest table verispec generates takes
#: (random_problem(2, 19): 2^20 - 1 target and 2^19 - 1 draft prefixes, their lengths, tokens padded to 19 and 18
#: columns and rows, 8 bytes each, some 260 MiB).
MAX_NPZ_ARRAY_BYTES = 512 << 20

#: Arrays of the .npz problem form: the vocabulary, then per law the prefixes (lengths and tokens, padded with -1)
#: and the rows, as float64 "values" or as int64 "numerators" and "denominators" (an exact problem).
NPZ_FORMAT = "verispec-problem-1"


def _prefix_arrays(prefixes: list) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.asarray([len(prefix) for prefix in prefixes], dtype=np.int64)
    tokens = np.full((len(prefixes), int(lengths.max(initial=0))), -1, dtype=np.int64)
    for row, prefix in enumerate(prefixes):
        tokens[row, :len(prefix)] = prefix
    return lengths, tokens


def problem_to_npz(problem: Problem, depth: int, path: str | Path, *, metadata: Mapping | None = None,
                   written_by: Mapping | None = None, within: str | Path | None = None) -> None:
    """Write ``problem`` (prefixes of length <= depth; draft <= depth - 1) in the binary .npz form, atomically.

    A float problem stores float64 rows; an exact one stores each row as int64 numerators and denominators, and
    refuses (InvalidProblemError) an entry whose numerator or denominator does not fit (write JSON instead).
    ``metadata`` (JSON-serialisable: a description, ``verispec derive``'s provenance) is kept as JSON text;
    ``written_by`` (``verispec.files.provenance.written_by``), the marker of the command writing it, as the member
    ``written_by``. ``within``: the output folder the file must stay in (``verispec.files.io.atomic_output``)."""
    import io

    from verispec.files.io import atomic_write_bytes

    problem.require_depth(depth)
    arrays = {"format": np.asarray(NPZ_FORMAT), "vocab_size": np.asarray(problem.vocab_size, dtype=np.int64),
              "metadata": np.asarray(json.dumps(dict(metadata or {}), default=str))}
    if written_by is not None:
        from verispec.files.provenance import npz_member

        arrays["written_by"] = npz_member(dict(written_by))
    for name, last, law in (("target", depth, problem.target), ("draft", depth - 1, problem.draft)):
        prefixes = [prefix for length in range(last + 1) for prefix in problem.prefixes(length)]
        arrays[f"{name}_lengths"], arrays[f"{name}_tokens"] = _prefix_arrays(prefixes)
        rows = [law(prefix) for prefix in prefixes]
        if problem.exact:
            fractions = [Fraction(value) for row in rows for value in row]
            if any(abs(f.numerator) >= 2 ** 63 or f.denominator >= 2 ** 63 for f in fractions):
                raise InvalidProblemError("an exact probability's numerator or denominator does not fit in 64 bits; "
                                          "write this problem as JSON (problem_to_json), which keeps any rational")
            shape = (len(prefixes), problem.vocab_size)
            arrays[f"{name}_numerators"] = np.asarray([f.numerator for f in fractions], dtype=np.int64).reshape(shape)
            arrays[f"{name}_denominators"] = np.asarray([f.denominator for f in fractions],
                                                        dtype=np.int64).reshape(shape)
        else:
            arrays[f"{name}_values"] = np.asarray(rows, dtype=np.float64).reshape(len(prefixes), problem.vocab_size)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue(), within=within)


def _npz_table(arrays: dict, law: str, size: int, exact: bool):
    """One law's table of a .npz problem file (``problem_from_npz``): prefixes as tuples, rows as checked float
    rows (float mode) or Fraction lists (exact mode)."""
    lengths, tokens = arrays[f"{law}_lengths"], arrays[f"{law}_tokens"]
    if lengths.ndim != 1 or tokens.ndim != 2 or tokens.shape[0] != lengths.size or (
            lengths.size and (lengths.min() < 0 or lengths.max() > tokens.shape[1])):
        raise InvalidProblemError(f"{law}: the prefix arrays have inconsistent shapes "
                                  f"{lengths.shape} and {tokens.shape}")
    prefixes = _prefix_tuples(lengths, tokens.astype(np.int64, copy=False))
    if len(set(prefixes)) != len(prefixes):
        raise InvalidProblemError(f"{law}: a prefix appears twice")
    if f"{law}_values" in arrays:
        rows = arrays[f"{law}_values"]
        if rows.ndim != 2 or rows.shape != (len(prefixes), size):
            raise InvalidProblemError(f"{law}: rows of shape {rows.shape}, expected ({len(prefixes)}, {size})")
        if exact:
            return {prefix: _read_vector(row, True) for prefix, row in zip(prefixes, rows.tolist())}
    else:
        numerators, denominators = arrays[f"{law}_numerators"], arrays[f"{law}_denominators"]
        if numerators.shape != (len(prefixes), size) or denominators.shape != numerators.shape:
            raise InvalidProblemError(f"{law}: rational rows of shapes {numerators.shape} and "
                                      f"{denominators.shape}, expected ({len(prefixes)}, {size})")
        if (denominators <= 0).any():
            raise InvalidProblemError(f"{law}: a denominator is not positive")
        if exact:
            return {prefix: [Fraction(a, b) for a, b in zip(top, bottom)] for prefix, top, bottom in
                    zip(prefixes, numerators.astype(np.int64).tolist(), denominators.astype(np.int64).tolist())}
        rows = rational_floats(numerators, denominators)
        bulk = _checked_rows(prefixes, rows, size)
        return bulk if bulk is not None else dict(zip(prefixes, rows.tolist()))  # Python floats, as before
    bulk = _checked_rows(prefixes, rows, size)
    return bulk if bulk is not None else dict(zip(prefixes, (list(row) for row in rows)))


def _unreadable_npz(name: str, error: Exception) -> InvalidProblemError:
    return InvalidProblemError(f"problem file {name!r} is a zip archive but not a readable .npz ({error}); write one "
                               "with problem_to_npz")


def _npz_arrays(archive, keys, name: str) -> dict:
    """The named arrays of an open .npz, decompressed now (KeyError for a missing one)."""
    import zipfile

    missing = [key for key in keys if key not in archive.files]
    if missing:
        raise KeyError(missing[0])
    try:
        return {key: archive[key] for key in keys}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise _unreadable_npz(name, error) from None


def problem_from_npz(content: bytes, *, exact: bool = False, name: str = "problem file") -> TabularProblem:
    """A problem from the bytes of a .npz file (``problem_to_npz``), validated as a JSON file is: shapes, NaN,
    negative entries and sums, with one-line errors; a .npz that is not a verispec problem is named as such."""
    import io
    import zipfile

    from verispec.files.io import check_zip_sizes

    check_zip_sizes(io.BytesIO(content), limit=MAX_NPZ_ARRAY_BYTES, what=f"problem file {name!r}",
                    error=InvalidProblemError)  # before anything is decompressed
    try:
        archive = np.load(io.BytesIO(content), allow_pickle=False)
        found = "format" in archive.files and str(archive["format"]) == NPZ_FORMAT
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise _unreadable_npz(name, error) from None
    if not found:
        raise InvalidProblemError(f"problem file {name!r} is a .npz file but not a verispec problem (no format "
                                  f"{NPZ_FORMAT!r}; found arrays: {', '.join(sorted(archive.files)) or 'none'})")
    arrays: dict = {}
    try:
        # the vocabulary and the prefix lengths first (8 bytes a prefix): what the rest expands to is counted from
        # them before the rows are decompressed
        arrays.update(_npz_arrays(archive, ("vocab_size", "target_lengths", "draft_lengths"), name))
        size = int(arrays["vocab_size"])
        check_vocab_size(size, "vocab_size")
        check_npz_expansion(arrays, size, exact)
        arrays.update(_npz_arrays(archive, [key for key in archive.files if key not in arrays], name))
        tables = {law: _npz_table(arrays, law, size, exact) for law in ("target", "draft")}
    except KeyError as error:
        raise InvalidProblemError(f"problem file {name!r} lacks the array {error.args[0]!r} of the .npz problem "
                                  "form") from None
    except (InvalidProblemError, InvalidDistributionError, ProblemTooLargeError) as error:
        if str(error).startswith(f"problem file {name!r}"):
            raise
        raise type(error)(f"problem file {name!r}: {error}") from None
    try:
        return TabularProblem(size, tables["target"], tables["draft"], exact=exact)
    except (InvalidProblemError, InvalidDistributionError) as error:
        raise type(error)(f"problem file {name!r}: {error}") from None


def is_problem_file(path: str | Path) -> bool:
    """Whether ``path`` holds a problem file in one of the forms ``load_problem`` reads: a .npz whose format array
    names NPZ_FORMAT, or a JSON object whose keys are those of the layout (vocab_size, target, draft and the
    optional notes and metadata); the tables themselves are not checked. What the commands that write problem
    files (hunt, check-external, derive, sweep --save-problems) name in their refusal: a problem file without the
    marker (``problem_file_marked``) is not replaced without --overwrite."""
    import io
    import zipfile

    from verispec.files.io import check_zip_sizes

    try:
        content = read_user_file(path, limit=MAX_PROBLEM_FILE_BYTES, what="problem file", error=InvalidProblemError,
                                 binary=True)
        if content[:4] == NPZ_MAGIC:
            check_zip_sizes(io.BytesIO(content), limit=MAX_NPZ_ARRAY_BYTES, what="problem file",
                            error=InvalidProblemError)
            with np.load(io.BytesIO(content), allow_pickle=False) as archive:
                return "format" in archive.files and str(archive["format"]) == NPZ_FORMAT
        data = json.loads(content)
    except (InvalidProblemError, OSError, ValueError, EOFError, RecursionError, zipfile.BadZipFile):
        return False
    allowed = set(REQUIRED_KEYS) | set(NOTE_KEYS) | set(METADATA_KEYS)
    return isinstance(data, dict) and set(REQUIRED_KEYS) <= set(data) <= allowed


def problem_file_marked(path: str | Path) -> bool:
    """Whether ``path`` carries the ``written_by`` marker of a problem file verispec wrote
    (``verispec.files.provenance``):
    the member of a .npz, the key of a JSON object. What the commands that write problem files may replace
    without --overwrite: a hand-written problem file, or one a verispec older than the marker wrote, has none."""
    from verispec.files.io import json_marker, npz_marker
    from verispec.files.provenance import PROBLEM, is_marked

    try:
        with open(path, "rb") as stream:
            magic = stream.read(4)
    except OSError:
        return False
    marker = npz_marker(path, MAX_NPZ_ARRAY_BYTES) if magic == NPZ_MAGIC else json_marker(path,
                                                                                         MAX_PROBLEM_FILE_BYTES)
    return is_marked(marker, PROBLEM)


#: What the commands that write problem files write (``verispec.files.io.check_output``).
PROBLEM_FILE = OutputKind("verispec problem file (JSON or .npz)", problem_file_marked, is_problem_file,
                          "problem.json")


def problem_to_json(problem: Problem, depth: int) -> dict:
    """The JSON layout of any problem, restricted to prefixes of length <= depth (draft: <= depth - 1)."""
    problem.require_depth(depth)

    def encode(vector):
        return [str(v) if isinstance(v, Fraction) else float(v) for v in vector]

    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in problem.prefixes(length):
            key = prefix_label(prefix)
            target[key] = encode(problem.target(prefix))
            if length < depth:
                draft[key] = encode(problem.draft(prefix))
    return {"vocab_size": problem.vocab_size, "target": target, "draft": draft}
