"""RNG capture: run unmodified code that draws its own randomness, with every draw fed from the checker's uniforms.

For the duration of one call of such a function a ``Capture`` hands out every draw from a ``Tape``: the row's
uniforms in [0, 1), in the order the function draws them, so the function becomes a deterministic map of (its
arguments, the tape), which exact integration and the black-box test need. The primitives fed:

* torch: ``rand``, ``rand_like``, ``Tensor.uniform_``, ``randn``, ``randn_like``, ``normal``, ``Tensor.normal_``,
  ``Tensor.exponential_``, ``bernoulli``, ``Tensor.bernoulli`` / ``bernoulli_``, ``multinomial``, ``randint``,
  ``randint_like``, ``Tensor.random_(a, b)``, ``randperm`` (``rng.torch_draws``);
* numpy: ``random``, ``rand``, ``random_sample``, ``ranf``, ``sample``, ``uniform``, ``choice``, ``randint``,
  ``exponential``, ``standard_exponential``, ``normal``, ``standard_normal``, ``randn``, and the ``random``,
  ``uniform``, ``choice``, ``integers``, ``exponential``, ``standard_exponential``, ``normal`` and
  ``standard_normal`` of a ``Generator`` created inside the call by ``default_rng()`` (``rng.numpy_draws``);
* ``random``: ``random``, ``uniform``, ``choices``, ``choice``, ``randrange``, ``randint``, ``expovariate``,
  ``gauss``, ``normalvariate`` (``rng.numpy_draws``).

Each primitive's rule, the precision of its draws, how rows of a batched call are fed, running out of tape,
exponential races, and what is not captured: ``docs/guides/check_external.md``, "Glossary of RNG capture". In explicit
mode (the function is handed its uniforms) a ``Capture`` runs in ``forbid`` mode: the first draw from any
primitive above raises ``GlobalRandomnessError``, with the hint to use ``rng='capture'``.
"""

from __future__ import annotations

import functools
import math
import random as _random
import sys
from dataclasses import dataclass, field

import numpy as np

from verispec.errors import VerifierError, VerispecError
from verispec.external.rng.numpy_draws import CapturedGenerator, numpy_functions, random_functions
from verispec.external.rng.rules import (
    ACTIVE,
    CaptureRefusal,
    KeyRefusal,
    RowByRowRefusal,  # noqa: F401 (imported from here by the runner)
    Signal,
    integer_breaks,
    site,
)
from verispec.external.rng.tape import Tape, UniformsExhausted, _runs  # noqa: F401 (their home before)
from verispec.external.tree_arrays import categorical_breaks
from verispec.guard.limits import KEY_MODES, MAX_KEYS

MODES = ("capture", "forbid")
# KEY_MODES: how draws from a keyed source are fed (``Capture.keys``): ``keyed``, the same key the same uniforms
# and different keys independent ones; ``fresh``, every draw fresh uniforms (verispec before keys were read: it
# misses reuse). MAX_KEYS: the most distinct keys (streams) one call may draw from, by default (``--max-keys``).


class GlobalRandomnessError(VerifierError):
    """In explicit mode, the function draws from a global random generator besides the uniforms it is handed."""


class TorchEscape(BaseException):
    """A torch draw escaped the replaced attributes (see ``Capture``): run the calls again with ``torch_full``."""


# ------------------------------------------------------------------------------------------------------------
# The capture


@dataclass
class Capture:
    """Feeds (``capture``) or forbids (``forbid``) the draws of the function named ``name`` while entered.

    Enter once around a run of calls; give each call its tape with ``start(tape)``, then ``start(None)`` and,
    when it returned, ``end_call()``. A draw while no tape is given (between calls) is refused. On leaving,
    everything is restored (also on an exception), and the global states of numpy, ``random`` and torch are
    compared with those on entry: a change means a draw no rule above fed, which raises ``CaptureRefusal``.

    torch's primitives are replaced as attributes (``torch.rand``, ``Tensor.exponential_``, ...), which costs
    nothing per tensor operation; a ``TorchFunctionMode`` (about 2 microseconds per operation) is pushed only
    while exponential noise is followed for the race rule, or throughout with ``torch_full``, which also
    catches names bound before the call (``from torch import rand``). A draw that escaped the attributes moves
    torch's global state: leaving then raises ``TorchEscape``, and the caller runs the calls again with
    ``torch_full`` (a draw through an explicit ``generator=`` escapes that check; the probe runs with
    ``torch_full`` and keeps it where any draw needed it)."""

    name: str
    mode: str = "capture"
    races: bool = True
    tape: Tape | None = None
    #: Primitive -> how many draws it made (over every call while entered).
    counts: dict = field(default_factory=dict)
    #: Races read as one inverse-CDF draw.
    races_read: int = 0
    #: Uniform draws made in float32 (fed on the generators' grid of 2^-24, ``rng.rules.on_grid``).
    float32_draws: int = 0
    _saved: list = field(default_factory=list)
    #: id of a followed tensor -> what it is to the race rule (``rng.torch_draws``).
    tracked: dict = field(default_factory=dict)
    _generators: list = field(default_factory=list)
    #: Follow every torch operation through the TorchFunctionMode (see above).
    torch_full: bool = False
    #: Draws the mode caught (names bound before the call), while entered.
    caught_by_mode: int = 0
    _feed: object = None
    _feed_entered: bool = False
    _states: tuple = ()
    #: Called on leaving, with whether the states are to be checked (no exception in flight): a function in its
    #: sandbox closes the capture that stands for this one there (``verispec.external.sandboxed``).
    closers: list = field(default_factory=list)
    #: How draws from keyed sources are fed (``KEY_MODES``; "Keys" in the glossary of
    #: ``docs/guides/check_external.md``), and the most keys one call may draw from.
    keys: str = "keyed"
    max_keys: int = MAX_KEYS
    #: Seconds added to the clocks the call reads (``time.time``, ``time_ns``, ``monotonic``, ``perf_counter``):
    #: the probe's second identical call runs with an offset, so a key taken from the time differs between the two
    #: and is refused (``KeyRefusal``) instead of being read as a function of the inputs.
    clock_offset: float = 0.0
    #: The calls are handed their request's seed (the function takes ``seed``): only then are the keys of generators
    #: seeded inside a call read (a key that does not come from such a seed gives the same numbers on every call).
    handed_seed: bool = False
    #: This call's keyed streams: id of a generator -> [key, next index, the generator] (torch generators seeded
    #: since their last draw, numpy generators seeded inside the call), and the global generators seeded inside
    #: the call: library -> [key, next index].
    _streams: dict = field(default_factory=dict)
    _global_keys: dict = field(default_factory=dict)
    #: This call's exponential noise by memory address, for races inside Triton kernels (``rng.triton_races``).
    noise_memory: dict = field(default_factory=dict)
    #: This call's races inside Triton kernels over keyed uniforms: their columns -> the race read
    #: (``rng.triton_races._keyed_race``; a second race on the same lanes is read given the first's winner).
    keyed_races: dict = field(default_factory=dict)
    #: This call's integers ``tl.randint`` fed (``rng.triton_random``: a ``tl.rand`` seeded by one after arithmetic
    #: on it, its origin lost, is refused).
    key_origins: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.mode not in MODES:
            raise VerispecError(f"capture mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.keys not in KEY_MODES:
            raise VerispecError(f"key mode must be one of {', '.join(KEY_MODES)}, got {self.keys!r}")

    # -- entering and leaving

    def __enter__(self) -> Capture:
        self._states = _global_states()
        ACTIVE.append(self)
        try:
            self._patch_modules()
            if "torch" in sys.modules:  # torch's replacements, only where torch is loaded already
                from verispec.external.rng import torch_draws as rng_torch

                self._feed = rng_torch.FeedMode(self)
                for owner, attribute, replacement in rng_torch.table(self._feed):
                    self._patch(owner, attribute, replacement)
                from verispec.external.rng import triton_races as rng_triton
                from verispec.external.rng import triton_random as rng_triton_random

                rng_triton_random.install(self)  # Triton's random functions, always
                rng_triton.install(self)  # its loads, for the race rule
                if self.torch_full:
                    self.engage()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self._restore()
        closers, self.closers = self.closers, []
        for close in closers:
            close(kind is None)
        if kind is None:
            self._check_states()

    def engage(self) -> None:
        """Push the TorchFunctionMode (for the race rule, or throughout with ``torch_full``)."""
        if not self._feed_entered:
            self._feed.__enter__()
            self._feed_entered = True

    def _disengage(self) -> None:
        if self._feed_entered:
            self._feed.__exit__(None, None, None)
            self._feed_entered = False

    def _restore(self) -> None:
        self._disengage()
        for owner, attribute, original, owned in reversed(self._saved):
            if owned:
                setattr(owner, attribute, original)
            else:  # inherited (a Tensor method of torch._C.TensorBase): drop the override
                delattr(owner, attribute)
        self._saved.clear()
        if ACTIVE and ACTIVE[-1] is self:
            ACTIVE.pop()
        self.tracked.clear()
        self.noise_memory.clear()
        self.keyed_races.clear()
        self.key_origins.clear()

    def _check_states(self) -> None:
        after = _global_states()
        for (library, before), (_, now) in zip(self._states, after):
            if not _same_state(before, now):
                if library.startswith("torch") and not self.torch_full:
                    raise TorchEscape()
                if self.mode == "forbid":
                    raise GlobalRandomnessError(
                        f"external function {self.name} draws from {library}'s global random generator although it "
                        "is handed its uniforms, so its output is not a function of its inputs and uniforms: if all "
                        "its randomness comes from such draws, check it with --rng capture")
                raise CaptureRefusal(
                    f"external function {self.name} drew from {library}'s global random generator through a "
                    "primitive verispec does not feed (a name imported before the call, e.g. 'from numpy.random "
                    "import rand', or shuffle, permutation, poisson, ...): call the module's function "
                    "(np.random.rand, random.random) or a captured primitive (verispec.external.rng lists them)")
        self.end_call()

    def start(self, tape: Tape | None) -> None:
        """Feed the next call from ``tape`` (forget the previous call's noise tensors and keyed streams); None
        between calls."""
        self.tape = tape
        self.tracked.clear()
        self.noise_memory.clear()
        self.keyed_races.clear()
        self.key_origins.clear()
        self._streams.clear()
        self._global_keys.clear()
        if not self.torch_full:
            self._disengage()

    def end_call(self) -> None:
        """After a call that returned: refuse a draw no rule fed from a Generator the call created, and forget
        those generators (a capture entered around many calls keeps none of them alive)."""
        generators, self._generators = self._generators, []
        for generator, state in generators:
            if generator.bit_generator.state != state:
                raise CaptureRefusal(
                    f"external function {self.name} drew from a numpy Generator through a method verispec does not "
                    "feed; use random, uniform, choice, integers, exponential, standard_exponential, normal or "
                    "standard_normal")

    # -- taking uniforms

    def draw(self, what: str, shape, generator=None) -> tuple[np.ndarray, np.ndarray]:
        """Uniforms for a draw of ``shape`` by primitive ``what`` (refused in forbid mode), from ``generator`` (a
        torch generator passed as ``generator=``, or a numpy Generator made inside the call) or the library's
        global one: keyed where that source is seeded by a key verispec read, fresh otherwise."""
        self._check_draw(what)
        stream = self._stream(what, generator)
        if stream is None:
            return self.tape.take(shape, what, self.name)
        shape = tuple(int(size) for size in shape)
        start = stream[1]
        stream[1] += math.prod(shape)
        indices = np.arange(start, stream[1], dtype=np.int64).reshape(shape)
        return self.tape.take_keyed(stream[0], indices, what, self.name, self.max_keys)

    def keyed_draw(self, what: str, key: tuple, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Uniforms for the elements ``indices`` of the stream of ``key`` (``verispec.keyed``: a counter-based
        source, the uniform at (key, index) the same wherever it is drawn in the call); fresh in ``fresh`` mode."""
        self._check_draw(what)
        if self.keys == "fresh" or not self.handed_seed:
            return self.tape.take(np.shape(indices), what, self.name)
        return self.tape.take_keyed(key, indices, what, self.name, self.max_keys)

    def keyed_lanes(self, key: tuple, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Uniforms of keyed lanes a Triton kernel draws (``tl.rand``, ``rng.triton_races``): as ``keyed_draw``, but a
        lane a race was read from may be taken again (the race rule of ``rng.triton_races`` reads or refuses it)."""
        what = "triton.language.rand"
        self._check_draw(what)
        if self.keys == "fresh" or not self.handed_seed:
            return self.tape.take(np.shape(offsets), what, self.name)
        return self.tape.take_keyed(key, offsets, what, self.name, self.max_keys, raced_ok=True)

    def _stream(self, what: str, generator):
        """The keyed stream [key, next index] a draw of ``what`` from ``generator`` (None: the global one) reads, or
        None for fresh uniforms."""
        if self.keys == "fresh" or not self.handed_seed:
            return None
        if generator is None:
            return self._global_keys.get(what.split(".")[0])
        stream = getattr(generator, "_verispec_stream", None)  # a numpy Generator seeded inside the call
        if stream is not None:
            return stream
        if hasattr(generator, "get_state") and hasattr(generator, "initial_seed"):
            from verispec.external.rng.torch_draws import generator_stream

            return generator_stream(self._streams, generator)
        return None

    def seed_global(self, library: str, seed) -> None:
        """A global generator seeded inside the call (``torch.manual_seed(s)``, ``np.random.seed(s)``,
        ``random.seed(s)``): its draws from here on read the stream of key (library, s)."""
        if seed is None:
            raise Signal(KeyRefusal(
                f"external function {self.name} seeds {library}'s global generator from the operating system at "
                f"{site()}: verispec cannot read that key; seed it with a number derived from the inputs"))
        self._global_keys[library] = [(library, _key_value(seed, self.name)), 0]

    def _check_draw(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        if self.mode == "forbid":
            library = what.split(".")[0]
            raise Signal(GlobalRandomnessError(
                f"external function {self.name} draws from {library}'s random generator ({what} at {site()}) "
                "although it is handed its uniforms, so its output is not a function of its inputs and uniforms: "
                "if all its randomness comes from such draws, check it with --rng capture (the layout's uniform "
                "arguments are then left out); if it mixes both, draw the handed uniforms in a wrapper instead"))
        if self.tape is None:
            raise Signal(CaptureRefusal(f"external function {self.name} drew {what} outside a call"))

    def chose(self, results, integers: int | None = None):
        """Record the results of a discrete draw (``Tape.note``) and return them. ``integers``: the draw was
        ``rng.rules.integers`` over that many values from the last draw's uniforms, whose breakpoints are then known
        (``rng.rules.integer_breaks``) and scanned by exact integration instead of bisected."""
        if self.tape is not None and self.mode == "capture":
            self.tape.note(results)
            if integers is not None:
                known = integer_breaks(int(integers))
                if known is not None:  # all the code learns of each uniform is its integer
                    for column in np.asarray(self.tape.last_columns).reshape(-1).tolist():
                        self.tape.know(int(column), known, complete=True)
        return results

    def know_categorical(self, columns, laws) -> None:
        """After inverse-CDF draws (``tree_arrays.inverse_cdf``) from the rows of ``laws`` [k, V], each by the uniform
        of tape column ``columns[i]``, in a call of one row: record where each draw's token changes
        (``tree_arrays.categorical_breaks``) as all its column's breakpoints: the token is all the code learns of
        that uniform (a token handed back by ``torch.multinomial``, or by an exponential race read as one draw: its
        noise is followed from then on, and a Triton kernel that loads it takes that back,
        ``rng.triton_races.install``)."""
        tape = self.tape
        if tape is None or self.mode != "capture" or tape.rows != 1 or not self.races:  # races: exact integration's
            return
        for column, law in zip(np.asarray(columns).reshape(-1).tolist(), laws):
            points = categorical_breaks(law)
            if points is not None:
                tape.know(int(column), points, complete=True)

    def refuse(self, what: str) -> None:
        raise Signal(CaptureRefusal(
            f"external function {self.name} draws with {what} at {site()}, which verispec does not feed from the "
            "uniforms (verispec.external.rng lists the primitives it does); rewrite that draw with one of them"))

    # -- module patches (numpy's global functions and Generator construction, random's functions)

    def _patch(self, owner, attribute: str, replacement) -> None:
        if hasattr(owner, attribute):
            self._saved.append((owner, attribute, getattr(owner, attribute), attribute in vars(owner)))
            setattr(owner, attribute, replacement)

    def _patch_modules(self) -> None:
        nprandom = np.random
        for attribute, function in numpy_functions(self).items():
            self._patch(nprandom, attribute, function)
        for attribute, function in random_functions(self).items():
            self._patch(_random, attribute, function)
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            seeding = self.seeding("torch.manual_seed", "torch")
            self._patch(torch, "manual_seed", seeding)
            self._patch(torch.random, "manual_seed", seeding)
            unreadable = self.unreadable("torch.seed()")
            self._patch(torch, "seed", unreadable)
            self._patch(torch.random, "seed", unreadable)
        if self.clock_offset:
            self._patch_clocks()

    def _patch_clocks(self) -> None:
        import time

        offset = self.clock_offset
        for name in ("time", "monotonic", "perf_counter"):
            self._patch(time, name, functools.partial(_shifted, getattr(time, name), offset))
            self._patch(time, f"{name}_ns", functools.partial(_shifted, getattr(time, f"{name}_ns"),
                                                               int(offset * 1e9)))

    def generator(self):
        """A numpy Generator whose methods draw from this capture (``default_rng()`` inside a call)."""
        created = CapturedGenerator(np.random.PCG64(0))
        self._generators.append((created, created.bit_generator.state))
        return created

    def seeding(self, what: str, library: str):
        """A replacement for a global seeding function (``torch.manual_seed``, ``np.random.seed``, ``random.seed``):
        the library's global draws from then on read the stream of that key (``seed_global``). With keys
        ``fresh`` (every draw fresh, the old model) it refuses: the draws of a generator re-seeded on every call are
        the same on every call, and feeding them as fresh randomness would hide that."""
        def seed(value=None, *args, **kwargs):
            if self.keys == "fresh" or not self.handed_seed:
                raise Signal(CaptureRefusal(
                    f"external function {self.name} calls {what} at {site()}: re-seeded on every call, its draws are "
                    "the same on every call, so its output is not random at all; verispec will not feed them as "
                    "fresh randomness: leave the seeding to the caller, or take the request's seed (a 'seed' "
                    "parameter after the layout's arguments) and seed with it"))
            if self.tape is None and self.mode == "capture":
                raise Signal(CaptureRefusal(f"external function {self.name} calls {what} outside a call"))
            self.seed_global(library, value)
            return None
        return seed

    def unreadable(self, what: str):
        """A replacement for a seeding from the operating system (``torch.seed()``), which refuses: the key it sets
        cannot be read from the call's inputs."""
        def refuse(*args, **kwargs):
            raise Signal(KeyRefusal(
                f"external function {self.name} calls {what} at {site()}, which seeds from the operating system: "
                "verispec cannot read that key; seed with a number derived from the inputs (manual_seed)"))
        return refuse

    def seeded_generator(self, seed):
        """A numpy Generator made by ``default_rng(seed)`` inside a call: its draws read the stream of key
        ("numpy", seed) (the same seed, the same numbers, as numpy's own); fresh draws in ``fresh`` mode."""
        if self.keys == "fresh" or not self.handed_seed:  # left alone: the same draws on every call, its true law
            return np.random.Generator(np.random.PCG64(seed))
        created = CapturedGenerator(np.random.PCG64(0))
        self._generators.append((created, created.bit_generator.state))
        if self.keys == "keyed":
            created._verispec_stream = [("numpy", _key_value(seed, self.name)), 0]
        return created


def _shifted(clock, offset, *args):
    """``clock`` moved forward by ``offset`` for the code under check; verispec's own readings (its time budgets)
    get the real clock."""
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if caller == "verispec" or caller.startswith("verispec."):
        return clock(*args)
    return clock(*args) + offset


def _key_value(seed, name: str):
    """A seed as a hashable key: an integer, a tuple of integers, or a SeedSequence's (entropy, spawn key); any
    other seed is refused (``KeyRefusal``)."""
    if isinstance(seed, (bool, np.bool_)):
        return int(seed)
    if isinstance(seed, (int, np.integer)):
        return int(seed)
    if hasattr(seed, "item") and getattr(seed, "ndim", 1) == 0:  # a 0-d tensor or array
        return _key_value(seed.item(), name)
    if isinstance(seed, np.random.SeedSequence):
        return ("SeedSequence", _key_value(seed.entropy, name), tuple(int(k) for k in seed.spawn_key))
    if isinstance(seed, (list, tuple, np.ndarray)) or hasattr(seed, "tolist"):
        values = seed.tolist() if hasattr(seed, "tolist") else list(seed)
        return tuple(_key_value(value, name) for value in values)
    if isinstance(seed, (str, bytes, float)):
        return (type(seed).__name__, seed)
    raise Signal(KeyRefusal(f"external function {name} seeds a generator with {type(seed).__name__} at {site()}, "
                            "which verispec cannot read as a key: seed it with an integer"))


def _global_states() -> tuple:
    states = [("numpy", np.random.get_state()), ("random", _random.getstate())]
    torch = sys.modules.get("torch")
    if torch is not None:
        states.append(("torch", torch.random.get_rng_state()))
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states.append(("torch.cuda", torch.cuda.get_rng_state_all()))
    return tuple(states)


def _same_state(before, now) -> bool:
    """Equality of two generator states (numpy's legacy tuple holds an array; torch's are byte tensors)."""
    if isinstance(before, tuple) and isinstance(now, tuple) and len(before) == len(now):
        if all(isinstance(item, int) for item in before):  # random.getstate()'s 625 words
            return before == now
        return all(_same_state(a, b) for a, b in zip(before, now))
    if isinstance(before, list) and isinstance(now, list):
        return len(before) == len(now) and all(_same_state(a, b) for a, b in zip(before, now))
    if isinstance(before, np.ndarray):
        return np.array_equal(before, now)
    if hasattr(before, "equal"):  # a torch tensor
        return bool(before.equal(now))
    return before == now
