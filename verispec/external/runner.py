"""Calls of an external verification function on rows of a batch: arguments, fed draws, timeouts, outcomes.

``Runner`` is what ``adapter.ExternalVerifier`` runs for one batch topology: it builds the layout's arguments,
calls the function (batched or one tree at a time) inside a ``rng.Capture`` that feeds, forbids or leaves
alone its draws, enforces the call timeout, decodes the emitted tokens, and probes the function before a
topology is integrated. ``SelfDraftingRunner`` runs a block that drafts its own tokens (the ``gpt-fast``
layout). What each mode does and what the probes check: ``adapter``'s module docstring.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import numpy as np

from verispec.errors import VerifierError
from verispec.external.calls import (
    CLOCK_SHIFT,
    PROBE_SEEDS,
    FunctionRaised,
    NondeterministicError,
    call_function,
    snapshot,
    written_positions,
)
from verispec.external.rng import Capture, KeyRefusal, RowByRowRefusal, Tape, TorchEscape, UniformsExhausted
from verispec.external.rng.rules import Signal
from verispec.external.tree_arrays import TreeArrays, as_int_matrix, decode
from verispec.guard import budget
from verispec.simulator.trees import TreeBatch

#: Tape of the first probe call in capture mode (doubled until the function's draws fit).
FIRST_TAPE = 8
#: Seed of the probe's uniforms.
PROBE_SEED = 20_240_607
#: Rows of a per-row probe.
PROBE_ROWS = 4
#: Rows of a batched call that raised which are called one at a time to find the tree that raises.
RAISE_ROWS = 256
#: The code of a run that raised, where a runner goes on past raises (``Runner.raises``).
RAISED = -1
#: Rows whose calls cross to a sandboxed function in one message (``SandboxedFunction.prefetch``), each then read in
#: the row loop: enough to spread a message's cost, few enough that the answers held stay small (all of an exact
#: integration's chunk, 65,536 rows, held gigabytes).
PREFETCH_ROWS = 256


class RaiseLog:
    """The raises a runner went on past (``Runner.raises``): the runs that raised count as outcome RAISED, so that
    the calls that did not raise are still integrated or tested (the one rule of ``verispec.verdict``: a raise does
    not hide the loss the other calls show)."""

    def __init__(self):
        #: The first raise located on one tree (its inputs, whether it repeats), or the first raise at all.
        self.first: FunctionRaised | None = None
        #: Runs (rows) that raised.
        self.count = 0
        #: Batched calls that raised while no part of them raised when called again (the raise did not repeat).
        self.vanished = 0
        #: Runs of a black-box test that raised, counted from their codes, and those the budget left unmade when it
        #: ended the test past a raise (``cut``: the runs made are tested, ``blackbox``'s module docstring).
        self.runs = self.unmade = 0
        self.cut = False

    def add(self, error: FunctionRaised, rows: int) -> None:
        self.count += rows
        if self.first is None or (self.first.draft_paths is None and error.draft_paths is not None):
            self.first = error


class Runner:
    """Calls the function on rows of one batch (see ``adapter``'s module docstring): builds the arguments, feeds or
    watches the draws, enforces the call timeout, decodes the outcome. Kept per topology by the verifier and
    bound to the batch at hand (``bind``)."""

    def __init__(self, verifier, batch: TreeBatch):
        #: The ``adapter.ExternalVerifier`` whose function is called.
        self.verifier = verifier
        self.layout = verifier.layout
        #: Draws from the global generators are fed from a tape (else forbidden, or for ``unfed`` left alone).
        self.capture = verifier.rng != "explicit" and not verifier.unfed
        #: The layout's uniform arguments are handed to the function (else left out).
        self.handed = verifier.rng != "capture"
        #: Uniforms a row's tape holds (capture mode), after the layout's own.
        self.tape = 0
        #: The draws every batched capture call must make: those of the probe's first call (``rng.Tape``).
        self.trace: tuple | None = None
        #: The most uniforms one call drew (capture mode), over the calls since it was last reset.
        self.max_cursor = 0
        self.caught_by_mode = 0
        self._session: Capture | None = None
        #: The path label of each row of the last run (capture mode, ``_labels``), and the label of each path seen.
        self.last_paths: np.ndarray | None = None
        self.last_breaks: list[dict] = []  # each row's known breakpoints in the last run ({uniform: points})
        self.path_ids: dict[bytes, int] = {}
        #: Where set, the runs that raise are outcome RAISED and the calls go on (``RaiseLog``); else a raise ends
        #: the run.
        self.raises: RaiseLog | None = None
        self._again = False
        #: Seconds added to the clocks the calls read (the probe's second identical call: ``probe``).
        self.clock_offset = 0.0
        #: The keys each row of the last run drew from, in order of first use (capture mode; ``rng.Tape.keys``).
        self.last_keys: list[tuple[str, ...]] = []
        #: The seed handed to the first call of a run (``verifier.takes_seed``; ``_seeds``).
        self.seed_base = PROBE_SEEDS[0]
        self._seed_rng = np.random.default_rng(PROBE_SEED)
        self.bind(batch)

    def bind(self, batch: TreeBatch) -> None:
        """Run on ``batch`` (of the topology probed) from now on."""
        self.trees = TreeArrays(batch)
        self.width = self.layout.width(self.trees)
        self.own = self.layout.num_uniforms(batch) if self.handed else self.layout.own_uniforms(batch)
        #: Outcome codes of this batch (integration adds a path label in multiples of it: ``integrand``).
        self.code_count = batch.num_nodes * batch.vocab_size

    @property
    def width_uniforms(self) -> int:
        return self.own + self.tape

    @contextmanager
    def session(self):
        """One Capture around a run of calls (an integration, a batch of samples): the calls inside feed from
        it (or are watched by it) instead of entering one each. Raises TorchEscape on leaving where a torch draw
        escaped the replaced attributes: the caller runs the calls again (``torch_full`` is then set)."""
        verifier = self.verifier
        if verifier.unfed:  # nothing to feed or forbid: the function draws from its own generators
            yield
            return
        capture = Capture(verifier.name, "capture" if self.capture else "forbid", torch_full=verifier.torch_full,
                          keys=verifier.keys, max_keys=verifier.max_keys)
        self._session = capture
        try:
            with capture:
                yield
        except Signal as signal:
            raise signal.error from None
        finally:
            self._session = None
        _add_counts(verifier, capture)

    def integrand(self, rows: np.ndarray, points: np.ndarray):
        """What exact integration evaluates: codes, and in capture mode which uniforms each run read, with each
        run's path as a label (code + code_count * label; ``integrate`` adds the volume to code % code_count).

        Why the label: in capture mode which column of the tape feeds which draw depends on the path (a loop
        that draws once per draft and stops at the first acceptance, a rejection that draws a residual where an
        acceptance draws the next test). Two paths may end in the same outcome on every line the integration
        scans through a box's anchor, while on the rest of the box they read other columns with other
        thresholds: with outcomes alone, only the random probes could see that, and a box was taken as one cell
        where it was not (mass misplaced between outcomes). Labelled by path - the draws made, in order, and the
        results of the discrete ones - a box holding two paths changes label along the uniform whose piece
        chooses between them, and is split there like any outcome change. Third: each run's breakpoints known in
        advance ({uniform: points}: an integer draw's), which the integration scans instead of bisecting."""
        codes, used = self.run(rows, points, races=True)
        if used is None:
            return codes
        return codes + self.code_count * self.last_paths, used, self.last_breaks

    def _labels(self, tape: Tape) -> np.ndarray:
        """Small integers for the paths of ``tape``'s rows [M] (equal paths, equal labels, over the runner's life)."""
        keys, inverse = tape.paths()
        return np.array([self.path_ids.setdefault(key, len(self.path_ids)) for key in keys], dtype=np.int64)[inverse]

    def run(self, rows: np.ndarray, uniforms: np.ndarray, *, races: bool, inspect: bool = False,
            one_by_one: bool | None = None):
        """Run the function on ``rows`` [M] with ``uniforms`` [M, own + tape] -> (codes [M], used [M, own + tape]
        or None in explicit mode). ``inspect``: also return the names of the arguments it wrote into.
        ``one_by_one``: call it one row at a time (default: ``per_row``)."""
        one_by_one = self.verifier.per_row if one_by_one is None else one_by_one
        try:
            return self._run(rows, uniforms, races, inspect, self.verifier.torch_full, one_by_one)
        except TorchEscape:  # a torch draw through a name bound before the call: follow every operation from now on
            self.verifier.torch_full = True
            return self._run(rows, uniforms, races, inspect, True, one_by_one)

    def _run(self, rows, uniforms, races, inspect, full, one_by_one):
        verifier, layout, trees = self.verifier, self.layout, self.trees
        count = len(rows)
        uniforms = np.array(uniforms, dtype=np.float64)  # a copy: the function may write into what it is handed
        if self.capture:
            own, tape = uniforms[:, :self.own], uniforms[:, self.own:]
        else:
            own, tape = uniforms, None
        names = layout.argument_names if self.handed else layout.capture_argument_names()

        def build(some_rows, some_own):
            if self.handed:
                return layout.arguments(trees, some_rows, some_own)
            return layout.capture_arguments(trees, some_rows, some_own)

        if one_by_one and not layout.rows_first:  # built row by row (a flattened layout)
            batched = None
            per_row = [self._convert(build(rows[index:index + 1], own[index:index + 1])) for index in range(count)]
        else:
            batched = self._convert(build(rows, own))
            per_row = [layout.row_arguments(batched, index) for index in range(count)] if one_by_one else None
        arrays = batched if batched is not None else [a for args in per_row for a in args]
        before = snapshot(arrays) if inspect else None
        try:
            results, used = self._calls(per_row if one_by_one else batched, tape, uniforms.shape, races, full)
        except FunctionRaised as error:  # the witness: which tree, which uniforms (a call on one tree)
            if self.raises is None:
                raise self._located(error, rows, uniforms, races, full) from None
            codes, used = self._past_raise(error, rows, uniforms, races, full)  # going on: the rows that raise
            return (codes, used, []) if inspect else (codes, used)
        raised = ([index for index, result in enumerate(results) if isinstance(result, FunctionRaised)]
                  if one_by_one else [])
        if raised:  # one row at a time, going on past raises: those rows' code is RAISED
            for index in raised:
                self._witness(results[index], rows[index:index + 1], uniforms[index:index + 1], races, full)
            kept = np.setdiff1d(np.arange(count), raised)
            codes = np.full(count, RAISED, dtype=np.int64)
            if len(kept):
                emitted = np.concatenate([layout.row_matrix(results[index], verifier.name, self.width)
                                          for index in kept])
                codes[kept] = decode(emitted, trees, rows[kept], verifier.name,
                                     layout.drafted_paths(trees, rows[kept]))
        elif one_by_one:
            emitted = np.concatenate([layout.row_matrix(result, verifier.name, self.width) for result in results])
        else:
            emitted = layout.own_rows(as_int_matrix(results, verifier.name, (layout.output_rows(count), self.width)))
        if not raised:
            codes = decode(emitted, trees, rows, verifier.name, layout.drafted_paths(trees, rows))
        if not inspect:
            return codes, used
        written = written_positions(arrays, before)
        if batched is None:  # positions in the flattened list of every row's arguments
            written = {index % len(names) for index in written}
        return codes, used, sorted(names[index] if index < len(names) else f"#{index}" for index in written)

    def _located(self, error: FunctionRaised, rows, uniforms, races: bool, full: bool) -> FunctionRaised:
        """``error`` with the tree and uniforms it raised on: a batched call's rows (the first RAISE_ROWS) are called
        one at a time to find them; the raise on one tree is made once more (``repeats``)."""
        if error.row is None and len(rows) > 1 and not self.verifier.unfed:  # find the row: its uniforms are at hand
            try:
                self._run(rows[:RAISE_ROWS], uniforms[:RAISE_ROWS], races, False, full, True)
            except FunctionRaised as alone:
                return alone
            if len(rows) <= RAISE_ROWS:  # every row of the call was called alone, and none raised
                error.repeats = False
            return error
        if error.row is not None:
            self._witness(error, rows[error.row:error.row + 1], uniforms[error.row:error.row + 1], races, full)
        return error

    def _witness(self, error: FunctionRaised, rows, uniforms, races: bool, full: bool) -> None:
        """Give ``error``, raised by a call on the one tree of ``rows`` [1] with ``uniforms`` [1, ...], that tree's
        paths and the uniforms it read, and (once per runner life where it goes on past raises) whether it repeats."""
        if error.draft_paths is not None:
            return
        tree = self.trees.batch.tree(int(rows[0]))
        error.draft_paths = [list(path) for node, path in enumerate(tree.paths) if tree.is_leaf(node)]
        error.uniforms = uniforms[0, :self.own + error.drawn].tolist()
        if self._again or (self.raises is not None and self.raises.first is not None
                           and self.raises.first.repeats is not None):
            return
        raises, self.raises, self._again = self.raises, None, True
        try:  # the same call at once: a raise that does not repeat depends on something besides the inputs
            self._run(rows, uniforms, races, False, full, True)
            error.repeats = False
        except FunctionRaised:
            error.repeats = True
        finally:
            self.raises, self._again = raises, False

    def _past_raise(self, error: FunctionRaised, rows, uniforms, races: bool, full: bool):
        """(codes, used) of ``rows`` where one batched call raised: each half called again, down to single rows,
        whose code is RAISED where they raise (``raises`` counts them); a raise that no part repeats is counted
        as vanished."""
        budget.check(f"running external function {self.verifier.name}")
        if len(rows) == 1:
            self._witness(error, rows, uniforms, races, full)
            self.raises.add(error, 1)
            self.last_paths = np.zeros(1, dtype=np.int64) if self.capture else None
            self.last_breaks = [{}]
            return np.full(1, RAISED, dtype=np.int64), np.ones(uniforms.shape, dtype=bool) if self.capture else None
        half = len(rows) // 2
        first = self._run(rows[:half], uniforms[:half], races, False, full, False)
        first_paths, first_breaks = self.last_paths, self.last_breaks
        second = self._run(rows[half:], uniforms[half:], races, False, full, False)
        self.last_paths = None if first_paths is None else np.concatenate([first_paths, self.last_paths])
        self.last_breaks = first_breaks + self.last_breaks
        codes = np.concatenate([first[0], second[0]])
        if not np.any(codes == RAISED):
            self.raises.vanished += 1
            if self.raises.first is None:
                error.repeats = False
                self.raises.first = error
        return codes, None if first[1] is None else np.concatenate([first[1], second[1]])

    def _calls(self, arguments, tape, shape: tuple, races: bool, full: bool):
        """Call the function on ``arguments`` (a list of one tuple per row, or one batched tuple), feeding (or in
        explicit mode watching; ``unfed``: leaving alone) its draws, inside the session's Capture or one of its
        own: -> (results, used [M, own + tape] or None). Sets ``last_paths`` (capture mode: each row's path label)."""
        verifier = self.verifier
        one_by_one = isinstance(arguments, list)
        used = np.ones(shape, dtype=bool) if self.capture else None
        session = self._session
        capture = session
        if session is None and not verifier.unfed:
            capture = Capture(verifier.name, "capture" if self.capture else "forbid", torch_full=full,
                              keys=verifier.keys, max_keys=verifier.max_keys, clock_offset=self.clock_offset)
        if capture is not None:
            capture.races = races
        batch_tape = None
        paths = np.zeros(shape[0], dtype=np.int64) if self.capture else None
        keys: list[tuple[str, ...]] = [() for _ in range(shape[0])]
        breaks: list[dict] = [{} for _ in range(shape[0])]  # each row's known breakpoints, by its uniforms' index
        if verifier.takes_seed:  # the request's seed, after the layout's arguments
            seeds = self._seeds(shape[0])
            arguments = ([(*row, int(seed)) for row, seed in zip(arguments, seeds)] if one_by_one
                         else (*arguments, int(seeds[0])))
        if capture is not None:
            capture.handed_seed = verifier.takes_seed
        try:
            with capture if capture is not None and session is None else nullcontext():
                if one_by_one:
                    results = []
                    prefetch = getattr(verifier.function, "prefetch", None) if len(arguments) > 1 else None
                    for index, row_arguments in enumerate(arguments):
                        if index % 64 == 0:
                            budget.check(f"running external function {verifier.name}")
                        if prefetch is not None and index % PREFETCH_ROWS == 0:  # sandboxed: PREFETCH_ROWS
                            part = range(index, min(index + PREFETCH_ROWS, len(arguments)))
                            prefetch([arguments[row] for row in part],
                                     [tape[row:row + 1] if self.capture else None for row in part])
                        row_tape = Tape(tape[index:index + 1]) if self.capture else None
                        try:
                            results.append(self._fed(capture, row_tape, row_arguments))
                        except FunctionRaised as error:
                            error.row, error.drawn = index, 0 if row_tape is None else row_tape.cursor
                            if self.raises is None:
                                raise
                            error.__context__ = error.__traceback__ = None  # its frames held no longer (line kept)
                            results.append(error)  # going on past it: the row's outcome is the raise
                            self.raises.add(error, 1)
                            continue
                        if row_tape is not None:
                            used[index, self.own:] = row_tape.used
                            paths[index] = self._labels(row_tape)[0]
                            keys[index] = tuple(row_tape.keys)
                            breaks[index] = row_tape.known(self.own)
                            self.max_cursor = max(self.max_cursor, row_tape.cursor)
                else:
                    batch_tape = Tape(tape, self.trace) if self.capture else None
                    try:
                        results = self._fed(capture, batch_tape, arguments)
                    except FunctionRaised as error:
                        if shape[0] == 1:  # a batch of one tree is a call on one tree
                            error.row, error.drawn = 0, 0 if batch_tape is None else batch_tape.cursor
                        raise
                    if batch_tape is not None:
                        used[:, self.own:] = batch_tape.used[None, :]
                        paths[:] = self._labels(batch_tape)
                        breaks = [batch_tape.known(self.own)] * shape[0]
                        self.max_cursor = max(self.max_cursor, batch_tape.cursor)
        except Signal as signal:
            raise signal.error from None
        finally:
            if session is None and capture is not None:
                _add_counts(verifier, capture)
                self.caught_by_mode = capture.caught_by_mode
        if batch_tape is not None and self.trace is None:  # the first complete batched call sets the draws
            self.trace = tuple(batch_tape.draws)
        self.last_paths = paths
        self.last_keys = keys
        self.last_breaks = breaks
        return results, used

    def _fed(self, capture: Capture | None, tape: Tape | None, arguments: tuple):
        """One call with its draws fed from ``tape`` (None in explicit mode; ``capture`` None: ``unfed``)."""
        if capture is None:
            return self._call(arguments)
        capture.start(tape)
        try:
            result = self._call(arguments)
        except FunctionRaised:  # the call's own generators are not checked (end_call) after a call that raised
            capture._generators = []
            raise
        finally:
            capture.start(None)
        capture.end_call()
        if tape is not None:
            tape.finish(self.verifier.name)
        return result

    def _convert(self, arguments: tuple) -> tuple:
        if self.verifier.arrays != "torch":
            return arguments
        import torch

        device = self.verifier.device
        return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) if isinstance(a, np.ndarray) else a
                     for a in arguments)

    def _call(self, arguments: tuple):
        """One call of the function: its own errors on one line, the call timeout enforced (``call_function``)."""
        verifier = self.verifier
        return call_function(verifier.function, verifier.name, verifier.call_timeout, arguments)

    def probe(self) -> None:
        """The probes of ``adapter``'s module docstring; sets ``tape`` to the longest a probe call drew (capture
        mode)."""
        verifier = self.verifier
        batch = self.trees.batch
        rng = np.random.default_rng(PROBE_SEED)
        count = PROBE_ROWS if verifier.per_row else max(3, batch.vocab_size + batch.num_nodes + self.width + 1)
        rows = np.arange(count, dtype=np.int64) % batch.num_rows
        self.tape = min(FIRST_TAPE, verifier.max_uniforms) if self.capture else 0
        batched = self.capture and not verifier.per_row
        if verifier.unfed:  # two calls would differ by design: one call, for the output's form and written arguments
            written = self._run(rows, rng.random((count, self.width_uniforms)), False, True, False, True)[2]
            self._note_written(written)
            verifier.note(f"{verifier.name} draws randomness verispec does not feed: black-box runs only, one call "
                           "per run on one tree, its own generator supplying fresh randomness to each call")
            return
        while True:
            uniforms = rng.random((count, self.width_uniforms))
            # uniforms sorted by row (row k all (k + 1/2) / count): rows that accept everything and rows that
            # reject at once in one batch, and a row reading another row's draws meets very different values
            sorted_rows = np.broadcast_to(((np.arange(count) + 0.5) / count)[:, None], uniforms.shape).copy()
            self.max_cursor = 0
            try:
                first, _, written = self._run(rows, uniforms, False, True, True, verifier.per_row)
                first_keys = self.last_keys
                if self.caught_by_mode:  # draws through names bound before the call: the mode must stay on
                    verifier.torch_full = True
                self.clock_offset = CLOCK_SHIFT  # a key read from the time then differs between the two calls
                try:
                    second, _ = self.run(rows, uniforms, races=False)
                finally:
                    self.clock_offset = 0.0
                self._same_keys(rows, first_keys, self.last_keys)
                if verifier.takes_seed:  # the same calls handed other seeds: every key must change with the seed
                    self.seed_base = PROBE_SEEDS[1]
                    try:
                        self.run(rows, uniforms, races=False)
                    finally:
                        self.seed_base = PROBE_SEEDS[0]
                    self._seed_free_keys(rows, first_keys, self.last_keys)
                if batched:
                    together = [first, self.run(rows, sorted_rows, races=False)[0]]
                    reversed_ = [self.run(rows[::-1], some[::-1], races=False)[0][::-1]
                                 for some in (uniforms, sorted_rows)]
                    alone = [self.run(rows, some, races=False, one_by_one=True)[0] for some in (uniforms, sorted_rows)]
                break
            except UniformsExhausted as exhausted:
                verifier.grow(self, exhausted.needed)
        if not np.array_equal(first, second):
            row = int(np.flatnonzero(first != second)[0])
            size = batch.vocab_size
            raise NondeterministicError(
                f"external function {verifier.name} gave two different outcomes (node {first[row] // size} token "
                f"{first[row] % size}, then node {second[row] // size} token {second[row] % size}) for the same "
                "arguments and uniforms, so its output is not a function of its inputs and uniforms: "
                + ("it draws randomness verispec does not feed (a numpy Generator or torch state created before the "
                   "call, os.urandom, the time), so exact mode cannot integrate it: black-box mode tests it as it is "
                   "(--mode blackbox, which auto mode falls back to), or create its generators inside the call or "
                   "draw through the global ones" if self.capture else
                   "if it draws from torch, numpy or random global generators check it with --rng capture; "
                   "randomness from elsewhere (a Generator created before the call, the time) cannot be integrated, "
                   "and black-box mode tests it as it is (--mode blackbox, which auto mode falls back to)"))
        if batched:
            for other, how in ((reversed_, "when the rows of its batch were reversed"),
                               (alone, "when called on that tree alone")):
                if not all(np.array_equal(a, b) for a, b in zip(together, other)):
                    raise RowByRowRefusal(
                        f"external function {verifier.name} gave a tree another outcome {how} (same uniforms), so a "
                        "row's output depends on the other rows of its batch (values or draws read across rows, or "
                        "a draw without the batch dimension fed to the wrong row): call it one row at a time "
                        "(--per-row)")
        self._note_written(written)
        if self.capture and self.max_cursor == 0:
            verifier.note(f"{verifier.name} drew nothing from a captured generator in the probe calls")
        self.tape = self.max_cursor if self.capture else 0


    def _seeds(self, count: int) -> np.ndarray:
        """The seeds handed to ``count`` calls: ``seed_base`` plus the call's index (the same for the same calls, so
        that two identical calls are identical), or fresh random seeds where the function draws from generators
        verispec does not feed (``unfed``: a fresh seed per run, as an engine gives a request)."""
        if self.verifier.unfed:
            return self._seed_rng.integers(0, 2**62, size=count)
        return self.seed_base + np.arange(count, dtype=np.int64)

    def _seed_free_keys(self, rows: np.ndarray, first: list, other: list) -> None:
        """Refuse (``KeyRefusal``) a key drawn both in a call handed one seed and in the same call handed another:
        it does not come from the request's seed, so every request would draw the same numbers from it."""
        for row, (before, after) in enumerate(zip(first, other)):
            shared = sorted(set(before) & set(after))
            if shared:
                raise KeyRefusal(
                    f"external function {self.verifier.name} drew from key {shared[0]} whether handed seed "
                    f"{PROBE_SEEDS[0] + row} or {PROBE_SEEDS[1] + row} on tree {int(rows[row])}: that key does not "
                    "depend on the request's seed, so every request draws the same numbers from it; derive every "
                    "key from the seed it is handed")

    def _same_keys(self, rows: np.ndarray, first: list, second: list) -> None:
        """Refuse (``KeyRefusal``) where two identical calls drew from different keys: a key taken from the time,
        ``os.urandom``, a counter kept across calls, which verispec cannot read from the inputs."""
        for row, (before, after) in enumerate(zip(first, second)):
            if before != after:
                differing = next((pair for pair in zip(before, after) if pair[0] != pair[1]), None)
                shown = (f"key {differing[0]}, then {differing[1]}" if differing is not None else
                         f"keys {list(before)}, then {list(after)}")
                raise KeyRefusal(
                    f"external function {self.verifier.name} drew from {shown} in two identical calls on tree "
                    f"{int(rows[row])}: its key is not a function of its inputs (the time, os.urandom, a counter "
                    "kept across calls), so verispec cannot read it; derive the seed from the inputs (a request's "
                    "seed, a position)")

    def _note_written(self, written: list[str]) -> None:
        if written:
            name = self.verifier.name
            self.verifier.note(f"{name} writes into its argument{'s' if len(written) > 1 else ''} "
                                f"{', '.join(written)}; verispec hands it fresh arrays on every call, so the law is "
                                "right, but a caller that reuses them would see them changed")


class SelfDraftingRunner(Runner):
    """Runs a function that drafts its own block (``layouts.GptFastLayout``) on the whole problem held by a batch
    of every chain: each call gets fresh models backed by the batch's conditionals, and its outcome is coded by
    (the draft tree it drew, node, token), or ``other`` for drafts no row of the batch holds."""

    def bind(self, batch: TreeBatch) -> None:
        super().bind(batch)
        self.chain = self.layout._chain(self.trees)
        self.row_of = {tuple(int(t) for t in self.trees.tokens[row, self.chain[1:]]): row
                       for row in range(batch.num_rows)}
        self.other = batch.num_rows * batch.num_nodes * batch.vocab_size
        self.code_count = self.other + 1

    def _run(self, rows, uniforms, races, inspect, full, one_by_one):
        layout, batch, name = self.layout, self.trees.batch, self.verifier.name
        uniforms = np.array(uniforms, dtype=np.float64)
        calls = [self._convert(layout.capture_arguments(self.trees, rows[index:index + 1], uniforms[index:index + 1,
                                                                                                    :self.own]))
                 for index in range(len(rows))]
        try:
            results, used = self._calls(calls, uniforms, uniforms.shape, races, full)
        except FunctionRaised as error:  # the block drafts its own tree: the witness is the uniforms it was fed
            if error.row is not None:
                error.uniforms = uniforms[error.row, :self.own + error.drawn].tolist()
            raise
        codes = np.empty(len(rows), dtype=np.int64)
        for index, (result, arguments) in enumerate(zip(results, calls)):
            drafts, emitted = layout.drafts_and_emitted(result, arguments, name)
            size = batch.vocab_size
            if not 0 <= emitted[-1] < size:
                raise VerifierError(f"external function {name} emitted token {emitted[-1]}, outside 0..{size - 1}")
            row = self.row_of.get(drafts)
            node = self.chain[len(emitted) - 1]
            codes[index] = self.other if row is None else (row * batch.num_nodes + node) * size + emitted[-1]
        return (codes, used, []) if inspect else (codes, used)

    def split_by_drafts(self, joint: np.ndarray) -> np.ndarray:
        """law[D] = P(D, outcome) / P(D) from the joint law [N n V + 1] of (draft tree, outcome); refused where the
        function's drafting law P(D) is not the draft model's Q(D) (the engine would weigh its trees by Q)."""
        batch, trees, name = self.trees.batch, self.trees, self.verifier.name
        by_tree = joint[:-1].reshape(batch.num_rows, batch.num_nodes * batch.vocab_size)  # [N, n V]
        drafted = by_tree.sum(axis=1)  # [N]
        rows = np.arange(batch.num_rows)
        expected = np.prod([trees.q[rows, node, trees.tokens[rows, child]]
                            for node, child in zip(self.chain[:-1], self.chain[1:])], axis=0)  # [N] Q(D)
        if joint[-1] > 1e-12:
            raise VerifierError(f"external function {name} drafted, with probability {joint[-1]:.3g}, draft paths of "
                                "probability 0 under the draft model (or this batch does not hold every draft tree "
                                "of the problem)")
        worst = int(np.argmax(np.abs(drafted - expected)))
        if abs(drafted[worst] - expected[worst]) > 1e-9:
            path = [int(t) for t in trees.tokens[worst, self.chain[1:]]]
            raise VerifierError(f"external function {name} drafts {path} with probability {drafted[worst]:.6g}, but "
                                f"the draft model gives it {expected[worst]:.6g}: it does not draft from the draft "
                                "model's conditionals (it filters or rescales them), so its law is not a sum over "
                                "verispec's draft trees and the gpt-fast layout cannot check it")
        return by_tree / drafted[:, None]


def _add_counts(verifier, capture: Capture) -> None:
    """Add what ``capture`` fed (draws by primitive, races read) to the verifier's counts."""
    for what, times in capture.counts.items():
        verifier.draws[what] = verifier.draws.get(what, 0) + times
    verifier.races_read += capture.races_read
    verifier.float32_draws += capture.float32_draws
