"""Sizes counted in logs, and the limits of the tables verispec builds: what the engines, the linear programs, the
verifiers' own dynamic programs, real decoding and the problem generators estimate before building anything, and
the one-line refusals when an estimate passes a limit.

A count such as V^0 + V^1 + .. + V^L is kept as its natural log (``log_prefix_count``; ``log_add`` adds two such
counts), so that an absurd request costs nothing to refuse; ``readable_count`` prints one for a message. Nothing
here knows a problem or a tree: it sits on the ground floor (``verispec.errors`` below it), where every layer that
estimates a size can import it.
"""

from __future__ import annotations

import math

import numpy as np

from verispec.errors import InvalidProblemError, ProblemTooLargeError, describe

#: Largest table a generator builds: prefixes of length 0..depth (each with a target and a draft law), and
#: probabilities per law (prefixes x V). Generating takes about 40 us per prefix (random_problem(4, 8): 87k
#: prefixes in 3.3 s; (2, 19), 2^20 prefixes, in 71 s on a loaded machine), so the limits are about a minute
#: and a few hundred MB; random_problem(50, 12) asked for 10^20.4 prefixes and hung before they existed.
MAX_TABLE_PREFIXES = 1 << 20
MAX_TABLE_ENTRIES = 1 << 22


#: Most probabilities a problem read in exact mode holds, both laws together. Each becomes a Fraction, kept in a row
#: list and again in the checked table: about EXACT_ENTRY_BYTES each with their integers, and 10 us (a rational
#: .npz entry) to 40 us (a float entry, its row rescaled to sum to exactly 1) to read, so the limit reads in 3 to
#: 10 s and under 150 MB. A 0.8 MB .npz of 16.8M rationals (numerators and denominators compress to nothing) took
#: 4.7 GB and a minute before it was counted; a 576 KB .npz of 9M floats did not finish in 130 s.
MAX_EXACT_ENTRIES = 1 << 18
EXACT_ENTRY_BYTES = 512


def check_exact_entries(entries: int, what: str, available: int | None = None) -> None:
    """ProblemTooLargeError, before any Fraction is made, when reading ``entries`` probabilities exactly passes
    MAX_EXACT_ENTRIES or would take more memory (EXACT_ENTRY_BYTES each) than ``available`` bytes (what the system
    has available now, ``verispec.guard.memory.available_memory_bytes``, which the callers pass: this floor is below
    it)."""
    needed = entries * EXACT_ENTRY_BYTES
    if entries > MAX_EXACT_ENTRIES or (available is not None and needed > available):
        room = "" if available is None else f", {available / 2**30:.1f} GiB available"
        raise ProblemTooLargeError(
            f"{what}: reading its {entries:,} probabilities exactly makes one Fraction each (about "
            f"{needed / 2**20:,.0f} MiB{room}), above the limit of {MAX_EXACT_ENTRIES:,} exact probabilities; read "
            "it without --exact (float64), or keep fewer prefixes or a smaller vocabulary for the exact check")


def check_table_size(vocab_size: int, depth, what: str) -> None:
    """ProblemTooLargeError, before anything is built, when a table of every prefix of length 0..depth at this
    vocabulary exceeds MAX_TABLE_PREFIXES prefixes or MAX_TABLE_ENTRIES probabilities per law (sizes in logs,
    so absurd depths cost nothing); InvalidProblemError for a depth that is not a non-negative integer."""
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise InvalidProblemError(f"{what}: depth must be a non-negative integer, got {describe(depth)}")
    size = int(vocab_size)
    log_prefixes = log_prefix_count(size, 0, depth)
    log_entries = log_prefixes + math.log(size)
    if log_prefixes > math.log(MAX_TABLE_PREFIXES) or log_entries > math.log(MAX_TABLE_ENTRIES):
        raise ProblemTooLargeError(
            f"{what}: a table of every prefix of length 0..{depth} at V={size} has {readable_count(log_prefixes)} "
            f"prefixes and {readable_count(log_entries)} probabilities per law, above the limits of "
            f"{MAX_TABLE_PREFIXES:,} prefixes and {MAX_TABLE_ENTRIES:,} probabilities; use a smaller vocabulary or "
            "depth, or a context-free or Markov problem (any depth)")


def check_vocab_size(size: int, what: str, *, markov: bool = False) -> None:
    """ProblemTooLargeError, before anything of size V is built, when the probability vectors a problem of this
    vocabulary holds at least (one per law; V + 1 for a Markov problem: the root and a row per token) exceed
    MAX_TABLE_ENTRIES entries: a problem file declaring a vocabulary of 10^9 is refused at once instead of
    allocating gigabytes for it."""
    rows = size + 1 if markov else 1
    if size * rows > MAX_TABLE_ENTRIES:
        largest = (math.isqrt(4 * MAX_TABLE_ENTRIES + 1) - 1) // 2 if markov else MAX_TABLE_ENTRIES  # V (V + 1)
        tables = f"{rows:,} probability vectors" if markov else "one probability vector"
        raise ProblemTooLargeError(
            f"{what}: a vocabulary of {size:,} tokens needs {tables} of {size:,} entries per law, above the limit of "
            f"{MAX_TABLE_ENTRIES:,} probabilities; use a vocabulary of at most {largest:,} tokens")


def log_prefix_count(size: int, first: int, last: int) -> float:
    """Natural log of V^first + V^(first + 1) + .. + V^last (the prefixes of lengths first..last), computed
    without building the number (-inf when last < first): size estimates of tables, output laws and LPs."""
    if last < first:
        return -math.inf
    count = last - first + 1
    if size == 1:
        return math.log(count)
    log_size = math.log(size)
    # V^first (V^count - 1) / (V - 1)
    return (first + count) * log_size + math.log1p(-math.exp(-count * log_size)) - math.log(size - 1)


def log_add(a: float, b: float) -> float:
    """log(e^a + e^b) without overflow (either may be -inf)."""
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high)) if math.isfinite(low) else high


def readable_count(log_value: float) -> str:
    """A count given by its natural log, for messages: '87,381' below a million, else '10^20.4', and
    '10^(10^84.7)' when even the exponent is astronomical (greedy-tree:50,50's draft trees)."""
    if log_value < math.log(1e6):
        return f"{math.exp(log_value):,.0f}"
    if not math.isfinite(log_value):
        return "infinitely many"
    exponent = log_value / math.log(10)
    return f"10^{exponent:.1f}" if exponent < 1e6 else f"10^(10^{math.log10(exponent):.1f})"
