"""The tape of uniforms a captured call draws from (``verispec.external.rng``): handed out in order of drawing, or by
key, with what each draw read, the discrete results that label the call's path, and the breakpoints known in advance
(an integer draw's) that exact integration scans instead of bisecting."""

from __future__ import annotations

import math

import numpy as np

from verispec.external.exact import AllBreaks
from verispec.external.rng.rules import CaptureRefusal, KeyRefusal, RowByRowRefusal, Signal, site
from verispec.guard.limits import MAX_KEYS


class UniformsExhausted(BaseException):
    """A row drew past the end of its tape; ``needed`` uniforms would have done (see "Running out" in
    ``docs/guides/check_external.md``'s glossary)."""

    def __init__(self, needed: int):
        super().__init__(f"a row needed {needed} uniforms")
        self.needed = needed



class Tape:
    """The uniforms [M, U] of one call's rows, handed out in order of drawing (one cursor shared by the rows).

    ``used[j]`` says whether column j was drawn (and not left unread by a replaced race); ``draws`` lists the
    draws made, (primitive, uniforms per row), in order. ``expected``: the draws a batched call must make (those
    of the first batched call on the same tree shape; see "Rows" in ``docs/guides/check_external.md``'s glossary): a
    call that draws otherwise is refused at its first differing draw, or by ``finish`` when it draws less."""

    def __init__(self, values: np.ndarray, expected: tuple | None = None):
        self.values = values  # [M, U]
        self.rows, self.size = values.shape
        self.cursor = 0
        self.used = np.zeros(self.size, dtype=bool)  # [U]
        self.draws: list[tuple[str, int]] = []
        self.expected = expected
        #: The results of the discrete draws (categorical, integers, Bernoulli), each [M, k] int64, in order.
        self.choices: list[np.ndarray] = []
        #: Keyed draws: (key, index) -> the tape column that stands for the index-th uniform of that key's stream.
        self.keyed: dict[tuple, int] = {}
        #: The keys drawn from, in order of first use (their reprs: two identical calls must give the same list).
        self.keys: list[str] = []
        #: How many draws read each column (a keyed column may be read twice), and the columns an exponential
        #: race was read from as one categorical draw (which no later draw may read: ``rng.torch_draws.FeedMode.race``).
        self.reads = np.zeros(self.size, dtype=np.int64)  # [U]
        self.raced = np.zeros(self.size, dtype=bool)  # [U]
        #: The columns of the last draw, and where the outcome of a draw is known to change along a column (an
        #: integer draw's floor(u n) at u = k/n): points the exact integration scans, so it need not bisect to them.
        self.last_columns = np.zeros(0, dtype=np.int64)
        self.breaks: dict[int, np.ndarray] = {}
        #: Columns whose ``breaks`` are all the points where the call can change along them: one discrete draw read
        #: the column, and its result is all the code learned of it (``know``); and columns whose value the code
        #: read past their draw (a Triton kernel loading the noise, ``read_past``), which never are.
        self.complete: set[int] = set()
        self.read_past_draw: set[int] = set()

    def take(self, shape, what: str, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The next uniforms for a draw of ``shape``: (values of that shape, their tape columns, of the per-row
        shape: ``shape`` in a one-row call, ``shape[1:]`` in a batched one)."""
        shape = tuple(int(size) for size in shape)
        if self.rows == 1:
            per_row = shape
        elif shape and shape[0] == self.rows:
            per_row = shape[1:]
        else:
            raise Signal(RowByRowRefusal(
                f"external function {name} draws {what} of shape {list(shape)} at {site()} in a batched call of "
                f"{self.rows} rows; verispec feeds a draw from each row's uniforms only when its first dimension is "
                "the batch's, and this one has none: call the function one row at a time (--per-row)"))
        count = math.prod(per_row)
        if self.expected is not None:
            index = len(self.draws)
            if index >= len(self.expected) or self.expected[index] != (what, count):
                raise Signal(self._differs(name, f"{what} of {count} per row at {site()}"))
        self.draws.append((what, count))
        if self.cursor + count > self.size:
            raise UniformsExhausted(self.cursor + count)
        columns = np.arange(self.cursor, self.cursor + count)
        values = self.values[:, self.cursor:self.cursor + count].reshape(shape).copy()
        self.used[self.cursor:self.cursor + count] = True
        self.reads[self.cursor:self.cursor + count] += 1
        self.cursor += count
        self.last_columns = columns
        return values, columns.reshape(per_row)

    def take_keyed(self, key: tuple, indices: np.ndarray, what: str, name: str,
                   max_keys: int = MAX_KEYS, *, raced_ok: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The uniforms of the elements ``indices`` (any shape) of the stream of ``key``: an element drawn before in
        this call takes the same column (so the same number), a new one the next fresh column. -> (values of
        ``indices``' shape, their columns). Only in a call of one row: a batch's rows would have keys of their own.
        ``raced_ok``: columns a race was read from may be read again (a race inside a Triton kernel on the same key,
        which ``rng.triton_races`` reads by the law of its second race, or refuses)."""
        if self.rows != 1:
            raise Signal(RowByRowRefusal(
                f"external function {name} draws {what} from a keyed source at {site()} in a batched call of "
                f"{self.rows} rows; keyed draws are fed one row a call (--per-row)"))
        label = repr(key)
        if label not in self.keys:
            if len(self.keys) >= max_keys:
                raise Signal(KeyRefusal(
                    f"external function {name} draws from more than {max_keys} keys in one call (the last at "
                    f"{site()}); each key is a stream of its own uniforms to integrate: raise --max-keys if that is "
                    "right"))
            self.keys.append(label)
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        columns = np.empty(flat.shape, dtype=np.int64)
        fresh = 0
        for position, index in enumerate(flat.tolist()):
            column = self.keyed.get((label, index))
            if column is None:
                column = self.keyed[(label, index)] = self.cursor + fresh
                fresh += 1
            columns[position] = column
        if self.cursor + fresh > self.size:
            for (stream, index), column in list(self.keyed.items()):  # leave the map as it was: the call is rerun
                if column >= self.cursor:
                    del self.keyed[(stream, index)]
            raise UniformsExhausted(self.cursor + fresh)
        self.cursor += fresh
        if not raced_ok and np.any(self.raced[columns]):
            from verispec.external.exact import NotPiecewiseConstantError

            raise Signal(NotPiecewiseConstantError(
                f"exact mode cannot integrate {name}: its draw {what} at {site()} reads again, by its key, the "
                "exponential noise of a race already read as one categorical draw (the same noise drives two "
                "races), which is not piecewise constant in one uniform: use --mode blackbox"))
        self.draws.append((f"{what} keyed {_runs(columns)}", len(flat)))
        self.used[columns] = True
        self.reads[columns] += 1
        if self.complete:  # a column read a second time: its first draw's result is no longer all the call knows of it
            self.complete.difference_update(columns[self.reads[columns] > 1].tolist())
        self.last_columns = columns
        return self.values[0, columns].reshape(np.shape(indices)).copy(), columns.reshape(np.shape(indices))

    def know(self, column: int, points: np.ndarray, complete: bool) -> None:
        """Record where the draw that just read ``column`` changes its result (``breaks``); ``complete``: its result is
        all the code learns of that uniform (an inverse-CDF draw that hands back only the token or integer), so these
        are the only points where the call can change along it - while no other draw reads the column."""
        self.breaks[column] = points
        if complete and self.reads[column] == 1 and column not in self.read_past_draw:
            self.complete.add(column)
        else:
            self.complete.discard(column)

    def read_past(self, column: int) -> None:
        """The code read ``column``'s value other than through its draw: its draw's result is not all it learned."""
        self.read_past_draw.add(column)
        self.complete.discard(column)

    def known(self, offset: int = 0) -> dict:
        """The breakpoints known in advance, by uniform (column + ``offset``), as exact integration takes them: a
        complete column's as ``exact.AllBreaks`` (scanned alone), any other's as points scanned beside the rest."""
        if not self.breaks:
            return {}
        return {offset + column: AllBreaks(at) if column in self.complete else at for column, at in self.breaks.items()}

    def note(self, results) -> None:
        """Record the results of a discrete draw just made (first dimension the batch's in a batched call)."""
        self.choices.append(np.asarray(results).astype(np.int64, copy=False).reshape(self.rows, -1))

    def paths(self) -> tuple[list[bytes], np.ndarray]:
        """The rows' paths through the code: (the distinct paths, as bytes; the index of each row's [M]). A path is
        the draws made (primitive and size, in order; a batched call's are the same for every row) and the
        results of the discrete draws. Exact integration keeps points of different paths apart
        (``verispec.external.runner.Runner.integrand``): which column feeds which draw depends on the path."""
        trace = repr(self.draws).encode()
        if not self.choices:
            return [trace], np.zeros(self.rows, dtype=np.int64)
        chosen = np.concatenate(self.choices, axis=1)  # [M, k]
        if self.rows == 1:  # a call on one tree (the common case of path-dependent draws): no sorting
            return [trace + chosen.tobytes()], np.zeros(1, dtype=np.int64)
        distinct, inverse = np.unique(chosen, axis=0, return_inverse=True)
        return ([trace + np.ascontiguousarray(row).tobytes() for row in distinct],
                np.asarray(inverse, dtype=np.int64).reshape(-1))

    def finish(self, name: str) -> None:
        """After the call: refuse one that made fewer draws than ``expected``."""
        if self.expected is not None and len(self.draws) < len(self.expected):
            missing = self.expected[len(self.draws)]
            raise self._differs(name, f"no {missing[0]} of {missing[1]} per row")

    def _differs(self, name: str, what: str) -> CaptureRefusal:
        index = len(self.draws)
        before = (f"{self.expected[index][0]} of {self.expected[index][1]} per row"
                  if index < len(self.expected) else "nothing more")
        return RowByRowRefusal(
            f"external function {name} drew {what} as draw #{index + 1} of a batched call where an earlier call on "
            f"the same tree shape drew {before}, so its draws depend on the batch's data (e.g. a correction drawn "
            "only when some row rejects) and a row's draws would take other uniforms depending on the rows beside "
            "it: call it one row at a time (--per-row)")


def _runs(columns: np.ndarray) -> str:
    """Columns as runs ("3-7,2"): part of a keyed draw's path label, since which columns it reads is the path."""
    parts, start, previous = [], None, None
    for column in columns.tolist():
        if start is not None and column == previous + 1:
            previous = column
            continue
        if start is not None:
            parts.append(f"{start}-{previous}" if previous != start else f"{start}")
        start = previous = column
    if start is not None:
        parts.append(f"{start}-{previous}" if previous != start else f"{start}")
    return ",".join(parts)
