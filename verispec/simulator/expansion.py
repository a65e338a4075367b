"""What a problem file expands to when it is read, estimated before it is: a .npz of a few hundred KB (rows that
repeat compress to nothing) holds millions of entries, and a JSON file of a few MB as many, so the readers count
prefixes, their tokens and, in exact mode, the Fractions to be made, from the arrays' shapes or the file's bytes,
and refuse in one line (``ProblemTooLargeError``) before making one Python object per prefix or per entry; a
rational .npz read in float mode is divided by numpy (``rational_floats``), with no Fraction at all.
``verispec.simulator.problem_files`` reads the files; this module only measures them."""

from __future__ import annotations

import json

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.guard.memory import available_memory_bytes
from verispec.sizes import MAX_EXACT_ENTRIES, MAX_TABLE_PREFIXES, check_exact_entries

#: Most prefixes per law of a .npz problem file, and most tokens in all its prefixes: each prefix becomes a tuple
#: of Python ints (about 56 bytes and 8 a token). Twice the largest table verispec generates (random_problem(2, 19):
#: 2^20 - 1 prefixes, 19M tokens); a file of 8,000 prefixes 8,000 tokens long stores 512 MB of padded tokens
#: within MAX_NPZ_ARRAY_BYTES but asks for 32M tuple slots.
MAX_NPZ_PREFIXES = 2 * MAX_TABLE_PREFIXES
MAX_NPZ_PREFIX_TOKENS = 1 << 25


def check_npz_expansion(arrays: dict, size: int, exact: bool) -> None:
    """Refuse, before any Python object is made per prefix or per entry, a .npz whose arrays (a few hundred KB
    compressed) would expand past the limits: prefixes and their tokens (MAX_NPZ_PREFIXES, MAX_NPZ_PREFIX_TOKENS)
    and, in exact mode, one Fraction per probability (``check_exact_entries``). Counted from the arrays (numpy's,
    within MAX_NPZ_ARRAY_BYTES) by their shapes and one vectorised sum; arrays of the wrong shape or type are left
    to the reader's messages (``problem_files._npz_table``)."""
    entries = 0
    for law in ("target", "draft"):
        lengths = arrays[f"{law}_lengths"]
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
            return
        tokens = int(np.clip(lengths, 0, None).sum(dtype=np.float64))
        if lengths.size > MAX_NPZ_PREFIXES or tokens > MAX_NPZ_PREFIX_TOKENS:
            raise ProblemTooLargeError(
                f"{law}: {lengths.size:,} prefixes of {tokens:,} tokens in all, above the limits of "
                f"{MAX_NPZ_PREFIXES:,} prefixes and {MAX_NPZ_PREFIX_TOKENS:,} tokens a law (each prefix becomes a "
                "tuple); keep the prefixes of the depth the trees need")
        entries += lengths.size * size
    if exact:
        check_exact_entries(entries, "the exact reading", available_memory_bytes())


def rational_floats(numerators: np.ndarray, denominators: np.ndarray) -> np.ndarray:
    """float(Fraction(a, b)) of every entry, without a Fraction: numerators and denominators below 2^53 convert
    to float64 exactly, so one IEEE division rounds a / b correctly; the rest (rare) take Python's int / int, also
    correctly rounded, a million at a time. The same floats as before, at numpy's speed (a 0.1 MB .npz of 4.2M
    rationals took 30 s and 640 MB through Fractions)."""
    top, bottom = numerators.astype(np.int64, copy=False), denominators.astype(np.int64, copy=False)
    limit = 1 << 53
    plain = (top > -limit) & (top < limit) & (bottom < limit)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = top.astype(np.float64) / bottom.astype(np.float64)
    rest = np.flatnonzero(~plain)
    for first in range(0, rest.size, 1 << 20):
        where = rest[first:first + (1 << 20)]
        values.flat[where] = [a / b for a, b in zip(top.flat[where].tolist(), bottom.flat[where].tolist())]
    return values


def check_json_exact_entries(content: bytes, text: str, name: str) -> None:
    """``check_exact_entries`` for a JSON problem file read exactly, before its numbers become Decimals and
    Fractions (about 600 bytes each together): every entry but a list's last is followed by a comma, so commas
    and '[' bound the count from above, at C speed; only a file past the limit by that bound is read plainly (C
    floats, as float mode reads it) to count its entries exactly, and refused when they pass it."""
    if content.count(b",") + content.count(b"[") <= MAX_EXACT_ENTRIES:
        return
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return  # the exact reading below names the problem
    if not isinstance(data, dict):
        return
    tables = [data.get(name) for name in ("target", "draft")]
    entries = sum(len(row) for table in tables if isinstance(table, dict) for row in table.values()
                  if isinstance(row, list))
    check_exact_entries(entries, f"problem file {name!r}", available_memory_bytes())


__all__ = ["MAX_NPZ_PREFIXES", "MAX_NPZ_PREFIX_TOKENS", "check_json_exact_entries", "check_npz_expansion",
           "rational_floats"]
