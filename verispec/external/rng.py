"""RNG capture: run unmodified code that draws its own randomness, with every draw fed from the checker's uniforms.

Production verification code rarely takes its random numbers as arguments: transformers' ``_speculative_sampling``
calls ``torch.rand_like`` and ``torch.multinomial``, gpt-fast's ``speculative_decode`` draws exponential noise
with ``Tensor.exponential_``, research code calls ``np.random.random`` or ``random.random``. For the duration of
one call of such a function a ``Capture`` hands out every draw from a *tape*: the row's uniforms in [0, 1), in
the order the function draws them. The function becomes a deterministic map of (its arguments, the tape), which
is what exact integration (``verispec.external.exact``) and the black-box test need. Each rule below turns
independent Uniform[0, 1) variables into a draw with the primitive's own law, so the law of the function over a
random tape is its law under a fresh random generator.

Rules, per primitive (u: the row's next uniform; every element of a draw takes its own u, in row-major order):

* uniform: ``torch.rand``, ``rand_like``, ``Tensor.uniform_(a, b)``; numpy's ``random``, ``rand``,
  ``random_sample``, ``ranf``, ``sample``, ``uniform(a, b)`` and ``Generator.random`` / ``uniform``;
  ``random.random`` / ``uniform(a, b)``: the value a + (b - a) u.
* categorical: ``torch.multinomial`` / ``Tensor.multinomial``, ``np.random.choice``, ``Generator.choice``,
  ``random.choices`` / ``choice``: ONE u per draw, by inverse CDF (``layouts.inverse_cdf``: the first index
  whose cumulative weight exceeds u times the total, the rule numpy's ``choice`` and CPython's ``choices``
  use themselves). Without replacement each draw takes its u from the weights left (the sequential law of
  torch and numpy).
* integers: ``torch.randint``, ``randint_like``, ``Tensor.random_(a, b)``, ``torch.randperm``,
  ``np.random.randint``, ``Generator.integers``, ``random.randint`` / ``randrange``: the uniform categorical
  by inverse CDF, low + floor(u n); ``randperm`` draws without replacement.
* exponential: ``Tensor.exponential_(rate)``, numpy's ``exponential`` / ``standard_exponential`` (both
  interfaces), ``random.expovariate``: -log(u) / rate.
* Bernoulli: ``torch.bernoulli``, ``Tensor.bernoulli``, ``bernoulli_``: 1[u < p].
* normal: ``torch.randn``, ``randn_like``, ``torch.normal``, ``Tensor.normal_``, numpy's ``normal``,
  ``randn``, ``standard_normal`` (both interfaces), ``random.gauss`` / ``normalvariate``: mean + std
  Phi^-1(u). A continuous use of u: exact mode refuses it (with the reason), black-box mode runs it.

Precision of uniform draws. A float32 uniform (``torch.rand``'s default dtype, numpy's ``random(dtype=
np.float32)``) is fed as floor(u 2^24) 2^-24: torch's CPU generator and numpy's draw exactly that law (each of
the 2^24 values k 2^-24 with probability 2^-24), so exact mode gives the code's law under the real generator,
with every threshold's breakpoint at a multiple of 2^-24 (not the law of a continuous uniform: a test
``u < t`` accepts with probability ceil(t 2^24) 2^-24, up to 6e-8 more than t). float64 draws are fed u
itself (the generators' grid of 2^-53 moves a mass by at most 2^-53 per breakpoint). Half-precision draws
(float16, bfloat16) are fed u rounded DOWN to the type: below 1 and monotone in u, but not the law of torch's
generator for them (which rounds a float32 draw), so masses may differ from it by up to the type's spacing at
each breakpoint. u = 0 is read as the smallest positive float where a logarithm or Phi^-1 would be infinite.

Rows. In a call of ONE row (``per_row``, or a batch of one) every draw belongs to that row. In a batched call
of M rows a draw whose first dimension is M gives row i the elements [i, ...], taken from row i's tape; every
other draw (a scalar, ``random.random()``, a draw of shape [K], a 1-D law passed to ``multinomial``) cannot be
attributed to a row and is refused with that reason (``CaptureRefusal``): call the function one row at a time.
The rows of a batched call share the tape's cursor, so the columns a row's draw takes depend on every draw made
before it in the call, whichever row needed it. What is guaranteed, and how:

* checked on every batched call: the call makes the same draws (primitive and size per row, in order) as the
  first batched call on that tree shape (``Tape.expected``), so each row's draws take the same tape columns
  whatever rows it is batched with. A call that draws otherwise (a correction drawn only when some row of the
  batch rejects, a loop that draws until every row is done) is refused with ``CaptureRefusal``;
* checked by the adapter's probe only, at its points: each row's outcome is the one it gets when called alone
  and when the rows are reversed (same uniforms). That catches a function that reads other rows' values or
  draws, and a draw whose first dimension equals the batch size by coincidence (the probe's batch is larger
  than every dimension of the arguments); on paths the probe does not reach it is NOT checked, and exact
  results then rest on it. One row at a time (``per_row``) nothing is assumed: each call sees one row.

Running out. How many uniforms a row needs is not known in advance (a rule may draw more after a rejection):
a row that draws past its tape raises ``UniformsExhausted`` (a ``BaseException``, so the function's own
``except Exception`` does not swallow it) with the count it needed; the adapter grows the tape and starts
again. No draw ever reuses or invents randomness: each element of each draw takes a column of its own.

Exponential races. ``argmax(w / E)`` over independent E_v ~ Exp(1) picks v with probability w_v / sum w (the
race of gpt-fast's ``multinomial_sample_one_no_sync`` and vLLM's recovered-token sampler). With ``races``
on, a ``TorchFunctionMode`` follows each noise tensor E filled by ``exponential_``: when E (a tensor of its
own storage, not a view, allocated by torch) is used exactly once, as the divisor of an out-of-place division
``w / E`` of the same shape with w finite and >= 0 (w is copied when the division runs, so writing into w
afterwards changes nothing), and the quotient exactly once, by ``argmax`` along a dimension that is not the
batch's, the argmax is returned as ONE inverse-CDF draw from w along that dimension, taken from the first of
the uniforms the slice's noise took. That is the same joint law (both are functions of the slice's own
uniforms, with the same law given w, and nothing else reads them), and it is piecewise constant in one
uniform, which exact mode can integrate; the slice's other uniforms are reported unused. Any other use of E
or the quotient before the argmax leaves the real race in place (exact mode then refuses it fast and
black-box mode runs it); any use after it raises ``NotPiecewiseConstantError``, since the replaced argmax
would then disagree with what the code reads. Black-box mode runs with ``races`` off: real exponentials.

Shared memory. "Nothing else reads them" is checked through torch: every torch operation on E is seen, and E
must hold its storage alone. Memory torch shares with numpy is not seen: E made by ``torch.from_numpy(a)`` (or
DLPack) could be read through ``a`` after the race, so such a tensor (its storage is not resizable: torch did
not allocate it) is never replaced, and its race runs for real. One case remains: a numpy view of E taken
BEFORE ``exponential_`` fills it (``E.numpy()``, ``np.asarray(E)``; after it, the mode sees them) and read
after the argmax reads the real exponentials while the argmax was replaced. The race rule assumes E is not
read that way.

What is not captured (never silently: each is refused, or caught by the determinism probe):

* names bound before the call from numpy or ``random`` (``from numpy.random import rand``, ``from random
  import random``) and other primitives of those modules (``shuffle``, ``permutation``, ``poisson``, ...):
  they move the global state, which is compared on entering and leaving the capture (around a run of calls),
  and refused;
* numpy ``Generator`` objects created before the call (a module-level ``default_rng(0)``): their draws make
  the output differ between two identical calls, which the adapter's determinism probe refuses.
  ``default_rng()`` called inside the function without a seed IS captured (its methods above; any other
  method of such a generator is refused). A generator seeded inside the call (``default_rng(0)``,
  ``Generator(PCG64(0))``) draws the same numbers on every call, which is the function's true law, and is
  left alone; so are an unseeded ``Generator(PCG64())`` and a ``RandomState()``, which the determinism probe
  then refuses;
* torch's other random primitives (``poisson``, ``cauchy_``, ``geometric_``, ``log_normal_``, ``dropout``
  in training, ``random_()`` without bounds) are refused by name.

Draws with an explicit torch ``generator=`` are captured like the global ones: the checker models every draw
as fresh randomness, which is what a persistent generator gives. ``np.random.seed``, ``random.seed`` and
``torch.manual_seed`` inside the call are refused: re-seeded on every call, the function would draw the same
numbers every time, and feeding its draws as fresh randomness would hide that.

In explicit mode (the function is handed its uniforms) a ``Capture`` runs in ``forbid`` mode: the first draw
from any primitive above raises ``GlobalRandomnessError``, with the hint to use ``rng='capture'``.
"""

from __future__ import annotations

import math
import operator
import os
import random as _random
import sys
import traceback
from dataclasses import dataclass, field

import numpy as np

from verispec.errors import VerifierError, VerispecError
from verispec.external.exact import NotPiecewiseConstantError
from verispec.external.layouts import inverse_cdf

MODES = ("capture", "forbid")

#: The smallest positive float: u = 0 is read as this where log(u) or Phi^-1(u) would be infinite.
_TINY = float(np.nextafter(0.0, 1.0))


class CaptureRefusal(VerifierError):
    """A function's draws cannot be fed from the uniforms (no batch dimension, an uncaptured primitive)."""


class RowByRowRefusal(CaptureRefusal):
    """A batched call's draws cannot be fed row by row (no batch dimension, draws that depend on the batch, rows
    that read each other); calling the function one row at a time (``per_row``) can."""


class GlobalRandomnessError(VerifierError):
    """In explicit mode, the function draws from a global random generator besides the uniforms it is handed."""


class UniformsExhausted(BaseException):
    """A row drew past the end of its tape; ``needed`` uniforms would have done (see the module docstring)."""

    def __init__(self, needed: int):
        super().__init__(f"a row needed {needed} uniforms")
        self.needed = needed


class TorchEscape(BaseException):
    """A torch draw escaped the replaced attributes (see ``Capture``): run the calls again with ``torch_full``."""


class _Signal(BaseException):
    """Carries a VerispecError out of the function (whose own ``except Exception`` must not swallow it)."""

    def __init__(self, error: VerispecError):
        super().__init__(str(error))
        self.error = error


def _libraries(own: str) -> tuple[str, ...]:
    """Path prefixes of the code around a user's function: ``own`` (a file or folder of verispec), numpy, torch
    and ``random``."""
    return (os.path.dirname(np.__file__) + os.sep, own, _random.__file__) + (
        (os.path.dirname(sys.modules["torch"].__file__) + os.sep,) if "torch" in sys.modules else ())


def _site() -> str:
    """file:line of the innermost frame outside this module, torch, numpy and ``random`` (the user's draw)."""
    skipped = _libraries(__file__)
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(skipped):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def raise_site(error: BaseException) -> str:
    """file:line where a user's function raised ``error``: the innermost frame of its traceback outside verispec,
    numpy, torch and ``random`` (for an error raised inside a library call - ``torch.multinomial`` on an all-zero
    law, or verispec's captured version of it - the user's line that made the call); '?' if there is none."""
    skipped = _libraries(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    for frame in reversed(frames):
        if not frame.f_code.co_filename.startswith(skipped):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    return "?"


class Tape:
    """The uniforms [M, U] of one call's rows, handed out in order of drawing (one cursor shared by the rows).

    ``used[j]`` says whether column j was drawn (and not left unread by a replaced race); ``draws`` lists the
    draws made, (primitive, uniforms per row), in order. ``expected``: the draws a batched call must make (those
    of the first batched call on the same tree shape; see "Rows" in the module docstring): a call that draws
    otherwise is refused at its first differing draw, or by ``finish`` when it draws less."""

    def __init__(self, values: np.ndarray, expected: tuple | None = None):
        self.values = values  # [M, U]
        self.rows, self.size = values.shape
        self.cursor = 0
        self.used = np.zeros(self.size, dtype=bool)  # [U]
        self.draws: list[tuple[str, int]] = []
        self.expected = expected
        #: The results of the discrete draws (categorical, integers, Bernoulli), each [M, k] int64, in order.
        self.choices: list[np.ndarray] = []

    def take(self, shape, what: str, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The next uniforms for a draw of ``shape``: (values of that shape, their tape columns, of the per-row
        shape: ``shape`` in a one-row call, ``shape[1:]`` in a batched one)."""
        shape = tuple(int(size) for size in shape)
        if self.rows == 1:
            per_row = shape
        elif shape and shape[0] == self.rows:
            per_row = shape[1:]
        else:
            raise _Signal(RowByRowRefusal(
                f"external function {name} draws {what} of shape {list(shape)} at {_site()} in a batched call of "
                f"{self.rows} rows; verispec feeds a draw from each row's uniforms only when its first dimension is "
                "the batch's, and this one has none: call the function one row at a time (--per-row)"))
        count = math.prod(per_row)
        if self.expected is not None:
            index = len(self.draws)
            if index >= len(self.expected) or self.expected[index] != (what, count):
                raise _Signal(self._differs(name, f"{what} of {count} per row at {_site()}"))
        self.draws.append((what, count))
        if self.cursor + count > self.size:
            raise UniformsExhausted(self.cursor + count)
        columns = np.arange(self.cursor, self.cursor + count)
        values = self.values[:, self.cursor:self.cursor + count].reshape(shape).copy()
        self.used[self.cursor:self.cursor + count] = True
        self.cursor += count
        return values, columns.reshape(per_row)

    def note(self, results) -> None:
        """Record the results of a discrete draw just made (first dimension the batch's in a batched call)."""
        self.choices.append(np.asarray(results).astype(np.int64, copy=False).reshape(self.rows, -1))

    def paths(self) -> tuple[list[bytes], np.ndarray]:
        """The rows' paths through the code: (the distinct paths, as bytes; the index of each row's [M]). A path is
        the draws made (primitive and size, in order; a batched call's are the same for every row) and the
        results of the discrete draws. Exact integration keeps points of different paths apart
        (``verispec.external.adapter._Runner.integrand``): which column feeds which draw depends on the path."""
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


# ------------------------------------------------------------------------------------------------------------
# The rules (numpy float64 in, numpy out)


def _uniform(u, low=0.0, high=1.0):
    return low + (high - low) * u


def _exponential(u, rate=1.0):
    return -np.log(np.maximum(u, _TINY)) / rate


def _normal(u, mean=0.0, std=1.0):
    from scipy.special import ndtri

    return mean + std * ndtri(np.maximum(u, _TINY))


def _integers(u, low, high):
    """low + floor(u (high - low)), the uniform categorical on low..high-1 by inverse CDF."""
    if high <= low:  # what the libraries refuse too
        raise ValueError(f"empty range of integers [{low}, {high})")
    return low + np.minimum(np.floor(u * (high - low)), high - low - 1).astype(np.int64)


def _categorical(weights: np.ndarray, u: np.ndarray, replacement: bool) -> np.ndarray:
    """Draws from the rows of ``weights`` [R, V] with ``u`` [R, n]: by inverse CDF, one u per draw; without
    replacement each draw from the weights left. -> [R, n] int64."""
    rows, draws = u.shape
    if draws == 1:
        return inverse_cdf(weights, u[:, 0])[:, None]
    if replacement:
        return inverse_cdf(np.repeat(weights, draws, axis=0), u.reshape(-1)).reshape(rows, draws)
    left = weights.copy()
    out = np.empty((rows, draws), dtype=np.int64)
    for index in range(draws):
        out[:, index] = inverse_cdf(left, u[:, index])
        left[np.arange(rows), out[:, index]] = 0.0
    return out


def _check_weights(weights: np.ndarray, draws: int, replacement: bool, what: str) -> None:
    """Refuse what ``torch.multinomial`` refuses, with its kind of error (the RuntimeError the function sees)."""
    totals = weights.sum(axis=-1)
    if not (np.isfinite(totals).all() and weights.min() >= 0):  # a NaN fails both, an inf the first
        raise RuntimeError(f"{what}: probability tensor contains either inf, nan or element < 0")
    if totals.min() <= 0:
        raise RuntimeError(f"{what}: invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and np.any((weights > 0).sum(axis=-1) < draws):
        raise RuntimeError(f"{what}: invalid multinomial distribution (with replacement=False, not enough "
                           "non-negative category to sample)")


# ------------------------------------------------------------------------------------------------------------
# The capture


@dataclass
class _Noise:
    """Exponential noise E filled by ``exponential_``, followed for the race rule."""

    tensor: object
    uniforms: np.ndarray  # E.shape: the u of each element
    columns: np.ndarray  # per-row shape: tape column of each element
    site: str
    state: str = "fresh"  # fresh -> divided -> raced; or impure


@dataclass
class _Score:
    """The quotient w / E of a followed noise E; ``weights``: w as it was when the division ran (float64, a copy)."""

    tensor: object
    noise: _Noise
    weights: np.ndarray
    state: str = "fresh"


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
    #: Uniform draws made in float32 (fed on the generators' grid of 2^-24, ``_on_grid``).
    float32_draws: int = 0
    _saved: list = field(default_factory=list)
    #: id of a followed tensor -> its _Noise or _Score (the race rule).
    _tracked: dict = field(default_factory=dict)
    _generators: list = field(default_factory=list)
    #: Follow every torch operation through the TorchFunctionMode (see above).
    torch_full: bool = False
    #: Draws the mode caught (names bound before the call), while entered.
    caught_by_mode: int = 0
    _feed: object = None
    _feed_entered: bool = False
    _states: tuple = ()

    def __post_init__(self):
        if self.mode not in MODES:
            raise VerispecError(f"capture mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    # -- entering and leaving

    def __enter__(self) -> Capture:
        self._states = _global_states()
        _ACTIVE.append(self)
        try:
            self._patch_modules()
            if "torch" in sys.modules:
                mode_class, table = _torch_feed()
                self._feed = mode_class(self)
                for owner, attribute, replacement in table(self._feed):
                    self._patch(owner, attribute, replacement)
                if self.torch_full:
                    self.engage()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self._restore()
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
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        self._tracked.clear()

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
        """Feed the next call from ``tape`` (forget the previous call's noise tensors); None between calls."""
        self.tape = tape
        self._tracked.clear()
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

    def draw(self, what: str, shape) -> tuple[np.ndarray, np.ndarray]:
        """Uniforms for a draw of ``shape`` by primitive ``what`` (refused in forbid mode)."""
        self.counts[what] = self.counts.get(what, 0) + 1
        if self.mode == "forbid":
            library = what.split(".")[0]
            raise _Signal(GlobalRandomnessError(
                f"external function {self.name} draws from {library}'s random generator ({what} at {_site()}) "
                "although it is handed its uniforms, so its output is not a function of its inputs and uniforms: "
                "if all its randomness comes from such draws, check it with --rng capture (the layout's uniform "
                "arguments are then left out); if it mixes both, draw the handed uniforms in a wrapper instead"))
        if self.tape is None:
            raise _Signal(CaptureRefusal(f"external function {self.name} drew {what} outside a call"))
        return self.tape.take(shape, what, self.name)

    def chose(self, results):
        """Record the results of a discrete draw (``Tape.note``) and return them."""
        if self.tape is not None and self.mode == "capture":
            self.tape.note(results)
        return results

    def refuse(self, what: str) -> None:
        raise _Signal(CaptureRefusal(
            f"external function {self.name} draws with {what} at {_site()}, which verispec does not feed from the "
            "uniforms (verispec.external.rng lists the primitives it does); rewrite that draw with one of them"))

    # -- module patches (numpy's global functions and Generator construction, random's functions)

    def _patch(self, owner, attribute: str, replacement) -> None:
        if hasattr(owner, attribute):
            self._saved.append((owner, attribute, getattr(owner, attribute), attribute in vars(owner)))
            setattr(owner, attribute, replacement)

    def _patch_modules(self) -> None:
        nprandom = np.random
        for attribute, function in _numpy_functions(self).items():
            self._patch(nprandom, attribute, function)
        for attribute, function in _random_functions(self).items():
            self._patch(_random, attribute, function)
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            self._patch(torch, "manual_seed", self.seeding("torch.manual_seed"))
            self._patch(torch.random, "manual_seed", self.seeding("torch.manual_seed"))

    def generator(self):
        """A numpy Generator whose methods draw from this capture (``default_rng()`` inside a call)."""
        created = _CapturedGenerator(np.random.PCG64(0))
        self._generators.append((created, created.bit_generator.state))
        return created

    def seeding(self, what: str):
        """A replacement for a global seeding function, which refuses: seeded on every call, the global draws
        would be the same on every call, and feeding them as fresh randomness would hide that."""
        def refuse(*args, **kwargs):
            raise _Signal(CaptureRefusal(
                f"external function {self.name} calls {what} at {_site()}: re-seeded on every call, its draws are "
                "the same on every call, so its output is not random at all; verispec will not feed them as fresh "
                "randomness: leave the seeding to the caller"))
        return refuse


_ACTIVE: list[Capture] = []




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


# ------------------------------------------------------------------------------------------------------------
# numpy and random


def _size_shape(size) -> tuple:
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


def _scalar_or_array(values: np.ndarray, size):
    return values.item() if size is None and values.ndim == 0 else values


def _numpy_functions(capture: Capture) -> dict:
    original_default_rng = np.random.default_rng
    def take(what, size):
        return capture.draw(f"numpy.random.{what}", _size_shape(size))[0]

    def random_sample(size=None):
        return _scalar_or_array(take("random", size), size)

    def rand(*dims):
        return _scalar_or_array(take("rand", dims), None if not dims else dims)

    def uniform(low=0.0, high=1.0, size=None):
        shape = size if size is not None else np.broadcast_shapes(np.shape(low), np.shape(high))
        return _scalar_or_array(np.asarray(_uniform(take("uniform", shape), np.asarray(low, float),
                                                    np.asarray(high, float))), size)

    def choice(a, size=None, replace=True, p=None):
        return _numpy_choice(capture, "numpy.random.choice", a, size, replace, p, legacy=True)

    def randint(low, high=None, size=None, dtype=int):
        low, high = (0, low) if high is None else (low, high)
        values = capture.chose(_integers(take("randint", size), int(low), int(high))).astype(dtype)
        return _scalar_or_array(values, size)

    def exponential(scale=1.0, size=None):
        shape = size if size is not None else np.shape(scale)
        return _scalar_or_array(np.asarray(_exponential(take("exponential", shape)) * _scale(scale)), size)

    def standard_exponential(size=None):
        return _scalar_or_array(_exponential(take("standard_exponential", size)), size)

    def normal(loc=0.0, scale=1.0, size=None):
        shape = size if size is not None else np.broadcast_shapes(np.shape(loc), np.shape(scale))
        return _scalar_or_array(np.asarray(_normal(take("normal", shape), loc, _scale(scale))), size)

    def standard_normal(size=None):
        return _scalar_or_array(np.asarray(_normal(take("standard_normal", size))), size)

    def randn(*dims):
        return _scalar_or_array(np.asarray(_normal(take("randn", dims))), None if not dims else dims)

    def default_rng(seed=None):
        # seeded inside the call, a generator gives the same draws on every call: that IS the function's law
        return capture.generator() if seed is None else original_default_rng(seed)

    return {"random": random_sample, "random_sample": random_sample, "ranf": random_sample,
            "sample": random_sample, "rand": rand, "uniform": uniform, "choice": choice, "randint": randint,
            "exponential": exponential, "standard_exponential": standard_exponential, "normal": normal,
            "standard_normal": standard_normal, "randn": randn, "default_rng": default_rng,
            "seed": capture.seeding("numpy.random.seed")}


def _scale(scale):
    """A numpy ``scale`` argument as float64, refused as numpy refuses it (ValueError)."""
    scale = np.asarray(scale, dtype=np.float64)
    if np.any(scale < 0):
        raise ValueError("scale < 0")
    return scale


#: numpy's tolerance on the total of ``choice``'s ``p``.
_CHOICE_ATOL = math.sqrt(np.finfo(np.float64).eps)


def _numpy_choice(capture: Capture, what: str, a, size, replace, p, legacy: bool):
    """``choice`` with numpy's own checks and errors (ValueError; ``legacy``: ``np.random.choice``, whose ``a``
    must be 1-D, else ``Generator.choice``, which draws along axis 0), its draws by the categorical rule."""
    shape = _size_shape(size)
    draws = math.prod(shape)
    population = np.asarray(a)
    if population.ndim == 0:
        try:
            size_of_a = operator.index(population.item())
        except TypeError:
            raise ValueError("a must be 1-dimensional or an integer") from None
        if size_of_a <= 0 and draws:
            raise ValueError("a must be a positive integer unless no samples are taken")
        population = np.arange(size_of_a)
    elif population.ndim != 1 and legacy:
        raise ValueError("a must be 1-dimensional")
    elif len(population) == 0 and draws:
        raise ValueError("a cannot be empty unless no samples are taken")
    count = len(population)
    if p is None:
        weights = np.full(count, 1.0)
    else:
        tolerance = _CHOICE_ATOL
        if isinstance(p, np.ndarray) and np.issubdtype(p.dtype, np.floating):
            tolerance = max(tolerance, math.sqrt(np.finfo(p.dtype).eps))
        weights = np.asarray(p, dtype=np.float64)
        if weights.ndim != 1:
            raise ValueError("p must be 1-dimensional")
        if weights.shape != (count,):
            raise ValueError("a and p must have same size")
        total = math.fsum(weights)
        if math.isnan(total):
            raise ValueError("probabilities contain NaN")
        if np.any(weights < 0):
            raise ValueError("probabilities are not non-negative")
        if not abs(total - 1.0) <= tolerance:
            raise ValueError("probabilities do not sum to 1")
    if not replace:
        if draws > count:
            raise ValueError("Cannot take a larger sample than population when 'replace=False'")
        if np.count_nonzero(weights > 0) < draws:
            raise ValueError("Fewer non-zero entries in p than size")
        if shape and capture.tape is not None and capture.tape.rows > 1:
            capture.refuse(f"{what}(replace=False) over a batch")  # a batch of draws from one population
    u = capture.draw(what, shape)[0].reshape(1, -1)
    index = capture.chose(_categorical(weights[None, :], u, bool(replace)))
    chosen = population[index.reshape(shape)]
    return chosen if size is not None else chosen.item() if chosen.ndim == 0 else chosen


class _CapturedGenerator(np.random.Generator):
    """A numpy Generator created inside a captured call: its usual methods draw from the active capture."""

    def _capture(self):
        return _ACTIVE[-1] if _ACTIVE else None

    def _take(self, what, size):
        return self._capture().draw(f"numpy.Generator.{what}", _size_shape(size))[0]

    def random(self, size=None, dtype=np.float64, out=None):
        if self._capture() is None:
            return super().random(size, dtype, out)
        values = self._take("random", size)
        if np.dtype(dtype) == np.float32:
            values = _on_grid(values, np.float32)
            self._capture().float32_draws += 1
        else:
            values = values.astype(dtype)
        if out is not None:
            out[...] = values
            return out
        return _scalar_or_array(values, size)

    def uniform(self, low=0.0, high=1.0, size=None):
        if self._capture() is None:
            return super().uniform(low, high, size)
        shape = size if size is not None else np.broadcast_shapes(np.shape(low), np.shape(high))
        values = np.asarray(_uniform(self._take("uniform", shape), np.asarray(low, float), np.asarray(high, float)))
        return _scalar_or_array(values, size)

    def choice(self, a, size=None, replace=True, p=None, axis=0, shuffle=True):
        capture = self._capture()
        if capture is None:
            return super().choice(a, size, replace, p, axis, shuffle)
        if axis != 0:
            capture.refuse("Generator.choice(axis != 0)")
        if not replace and not shuffle:  # numpy's own order of the chosen set, which the rule does not follow
            capture.refuse("Generator.choice(replace=False, shuffle=False)")
        return _numpy_choice(capture, "numpy.Generator.choice", a, size, replace, p, legacy=False)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        if self._capture() is None:
            return super().integers(low, high, size, dtype, endpoint)
        low, high = (0, low) if high is None else (low, high)
        high = int(high) + (1 if endpoint else 0)
        drawn = self._capture().chose(_integers(self._take("integers", size), int(low), high))
        return _scalar_or_array(drawn.astype(dtype), size)

    def exponential(self, scale=1.0, size=None):
        if self._capture() is None:
            return super().exponential(scale, size)
        shape = size if size is not None else np.shape(scale)
        return _scalar_or_array(np.asarray(_exponential(self._take("exponential", shape)) * _scale(scale)), size)

    def standard_exponential(self, size=None, dtype=np.float64, method="zig", out=None):
        if self._capture() is None:
            return super().standard_exponential(size, dtype, method, out)
        return _scalar_or_array(_exponential(self._take("standard_exponential", size)).astype(dtype), size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        if self._capture() is None:
            return super().normal(loc, scale, size)
        shape = size if size is not None else np.broadcast_shapes(np.shape(loc), np.shape(scale))
        return _scalar_or_array(np.asarray(_normal(self._take("normal", shape), loc, _scale(scale))), size)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        if self._capture() is None:
            return super().standard_normal(size, dtype, out)
        return _scalar_or_array(np.asarray(_normal(self._take("standard_normal", size))).astype(dtype), size)


def _random_functions(capture: Capture) -> dict:
    def one(what):
        return float(capture.draw(f"random.{what}", ())[0])

    def random():
        return one("random")

    def uniform(a, b):
        return a + (b - a) * one("uniform")

    def choices(population, weights=None, *, cum_weights=None, k=1):
        count = len(population)
        if cum_weights is not None:
            cumulative = np.asarray(cum_weights, dtype=np.float64)
            weights_array = np.diff(np.concatenate([[0.0], cumulative]))
        else:
            weights_array = np.full(count, 1.0) if weights is None else np.asarray(weights, dtype=np.float64)
        if weights_array.shape != (count,):
            raise ValueError("The number of weights does not match the population")
        total = float(np.sum(weights_array))
        if total <= 0.0:  # CPython's checks, in its order
            raise ValueError("Total of weights must be greater than zero")
        if not math.isfinite(total):
            raise ValueError("Total of weights must be finite")
        if weights_array.min() < 0:  # CPython bisects cumulative weights that are not monotone: no categorical law
            capture.refuse("random.choices with a negative weight")
        u = capture.draw("random.choices", (k,))[0].reshape(1, -1)
        return [population[int(i)] for i in capture.chose(_categorical(weights_array[None, :], u, True))[0]]

    def choice(seq):
        if not len(seq):
            raise IndexError("Cannot choose from an empty sequence")
        return seq[int(capture.chose(_integers(np.asarray(one("choice")), 0, len(seq))))]

    def randrange(start, stop=None, step=1):
        start, stop = (0, start) if stop is None else (start, stop)
        count = len(range(start, stop, step))
        if count <= 0:
            raise ValueError(f"empty range in randrange({start}, {stop}, {step})")
        return start + step * int(capture.chose(_integers(np.asarray(one("randrange")), 0, count)))

    def randint(a, b):
        return a + int(capture.chose(_integers(np.asarray(one("randint")), 0, b - a + 1)))

    def expovariate(lambd=1.0):
        return float(_exponential(np.asarray(one("expovariate")), lambd))

    def gauss(mu=0.0, sigma=1.0):
        return float(_normal(np.asarray(one("gauss")), mu, sigma))

    return {"random": random, "uniform": uniform, "choices": choices, "choice": choice, "randrange": randrange,
            "randint": randint, "expovariate": expovariate, "gauss": gauss, "normalvariate": gauss,
            "seed": capture.seeding("random.seed")}


# ------------------------------------------------------------------------------------------------------------
# torch


_TORCH_FEED = None


def _torch_feed():
    """(the TorchFunctionMode class, the table of attributes it replaces); built on first use, so that numpy-only
    runs never import torch."""
    global _TORCH_FEED
    if _TORCH_FEED is None:
        _TORCH_FEED = _build_torch_mode()
    return _TORCH_FEED


#: Tensor attributes whose reading does not read the values.
_METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "device", "is_cuda", "ndim", "requires_grad", "layout",
                                  "is_sparse", "names", "is_leaf", "grad_fn"})


def _build_torch_mode():
    import torch
    from torch.overrides import TorchFunctionMode

    tensor = torch.Tensor
    divisions = {tensor.div, torch.div, tensor.true_divide, torch.true_divide, tensor.__truediv__}
    argmaxes = {tensor.argmax, torch.argmax}
    metadata = {tensor.size, tensor.dim, tensor.__len__, tensor.numel, tensor.stride, tensor.is_contiguous,
                tensor.is_floating_point, tensor.element_size, tensor.nelement, tensor.ndimension}
    refused = {torch.poisson: "torch.poisson", tensor.cauchy_: "Tensor.cauchy_",
               tensor.geometric_: "Tensor.geometric_", tensor.log_normal_: "Tensor.log_normal_",
               torch.binomial: "torch.binomial", torch._standard_gamma: "torch._standard_gamma",
               torch.nn.functional.dropout: "torch.nn.functional.dropout",
               torch.nn.functional.alpha_dropout: "torch.nn.functional.alpha_dropout"}

    def uniform_like(values: np.ndarray, dtype, device):
        """float64 uniforms as a tensor of ``dtype``: on the CPU generator's grid for float32 (``_on_grid``), else
        rounded down (so they stay below 1)."""
        if dtype == torch.float32:
            return torch.from_numpy(_on_grid(values, np.float32)).to(device=device)
        return _as_tensor(values, dtype, device, down=True)

    def _as_tensor(values, dtype, device, down=False):
        values = np.asarray(values)
        if dtype == torch.float64 or not dtype.is_floating_point:
            out = torch.from_numpy(np.ascontiguousarray(values.astype(np.float64) if dtype.is_floating_point
                                                        else values))
            return out.to(dtype=dtype, device=device)
        if not down:
            return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(dtype=dtype, device=device)
        if dtype == torch.float16:
            return torch.from_numpy(_round_down(values, np.float16)).to(device=device)
        single = _round_down(values, np.float32)
        if dtype == torch.bfloat16:  # truncating a float32's low 16 bits rounds a non-negative value down
            single = (single.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
        return torch.from_numpy(single).to(dtype=dtype, device=device)

    def size_of(args, kwargs, start=0):
        if "size" in kwargs:
            size = kwargs["size"]
        elif len(args) > start and isinstance(args[start], (tuple, list, torch.Size)):
            size = args[start]
        else:
            size = args[start:]
        return tuple(int(s) for s in size)

    def finish(result, kwargs):
        out = kwargs.get("out")
        if out is not None:
            out.resize_(result.shape)
            out.copy_(result)
            return out
        if kwargs.get("requires_grad"):
            result.requires_grad_()
        return result

    class FeedMode(TorchFunctionMode):
        def __init__(self, capture: Capture):
            super().__init__()
            self.capture = capture
            self.handlers = {
                torch.rand: self.rand, torch.rand_like: self.rand_like, tensor.uniform_: self.uniform_,
                torch.randn: self.randn, torch.randn_like: self.randn_like, tensor.normal_: self.normal_,
                torch.normal: self.normal, tensor.exponential_: self.exponential_,
                torch.bernoulli: self.bernoulli, tensor.bernoulli: self.bernoulli, tensor.bernoulli_: self.bernoulli_,
                torch.multinomial: self.multinomial, tensor.multinomial: self.multinomial,
                torch.randint: self.randint, torch.randint_like: self.randint_like, tensor.random_: self.random_,
                torch.randperm: self.randperm,
            }

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            handler = self.handlers.get(func)
            if handler is not None:
                self.capture.caught_by_mode += 1
                return handler(*args, **kwargs)
            if func in refused:
                if func in (torch.nn.functional.dropout, torch.nn.functional.alpha_dropout) and not (
                        kwargs.get("training", args[2] if len(args) > 2 else True)
                        and float(kwargs.get("p", args[1] if len(args) > 1 else 0.5)) > 0):
                    return func(*args, **kwargs)
                if self.capture.mode == "forbid":
                    self.capture.draw(refused[func], ())
                self.capture.refuse(refused[func])
            if self.capture._tracked:
                return self.follow(func, args, kwargs)
            return func(*args, **kwargs)

        # -- uniform, normal, exponential, Bernoulli

        def rand(self, *args, **kwargs):
            shape = size_of(args, kwargs)
            values = self.capture.draw("torch.rand", shape)[0]
            dtype = kwargs.get("dtype") or (kwargs["out"].dtype if kwargs.get("out") is not None
                                            else torch.get_default_dtype())
            self.capture.float32_draws += dtype == torch.float32
            return finish(uniform_like(values, dtype, kwargs.get("device")), kwargs)

        def rand_like(self, input, **kwargs):
            values = self.capture.draw("torch.rand_like", tuple(input.shape))[0]
            dtype, device = kwargs.get("dtype") or input.dtype, kwargs.get("device") or input.device
            self.capture.float32_draws += dtype == torch.float32
            return finish(uniform_like(values, dtype, device), kwargs)

        def uniform_(self, self_tensor, a=0.0, b=1.0, **kwargs):
            a, b = kwargs.get("from", a), kwargs.get("to", b)
            values = self.capture.draw("Tensor.uniform_", tuple(self_tensor.shape))[0]
            if self_tensor.dtype == torch.float32:  # the generator's float32 draw, then scaled (rounded down)
                values = _on_grid(values, np.float64)
                self.capture.float32_draws += 1
            with torch.no_grad():
                self_tensor.copy_(_as_tensor(_uniform(values, a, b), self_tensor.dtype, self_tensor.device, down=True))
            return self_tensor

        def randn(self, *args, **kwargs):
            shape = size_of(args, kwargs)
            values = self.capture.draw("torch.randn", shape)[0]
            dtype = kwargs.get("dtype") or torch.get_default_dtype()
            return finish(_as_tensor(_normal(values), dtype, kwargs.get("device")), kwargs)

        def randn_like(self, input, **kwargs):
            values = self.capture.draw("torch.randn_like", tuple(input.shape))[0]
            return finish(_as_tensor(_normal(values), kwargs.get("dtype") or input.dtype,
                                     kwargs.get("device") or input.device), kwargs)

        def normal_(self, self_tensor, mean=0.0, std=1.0, **kwargs):
            values = self.capture.draw("Tensor.normal_", tuple(self_tensor.shape))[0]
            with torch.no_grad():
                self_tensor.copy_(_as_tensor(_normal(values, mean, std), self_tensor.dtype, self_tensor.device))
            return self_tensor

        def normal(self, mean=0.0, std=1.0, size=None, **kwargs):
            means = mean.detach().cpu().numpy() if isinstance(mean, torch.Tensor) else np.asarray(mean, float)
            stds = std.detach().cpu().numpy() if isinstance(std, torch.Tensor) else np.asarray(std, float)
            shape = tuple(size) if size is not None else np.broadcast_shapes(means.shape, stds.shape)
            values = self.capture.draw("torch.normal", shape)[0]
            like = next((t for t in (mean, std) if isinstance(t, torch.Tensor)), None)
            dtype = kwargs.get("dtype") or (like.dtype if like is not None else torch.get_default_dtype())
            device = kwargs.get("device") or (like.device if like is not None else None)
            return finish(_as_tensor(_normal(values, means, stds), dtype, device), kwargs)

        def exponential_(self, self_tensor, lambd=1.0, **kwargs):
            values, columns = self.capture.draw("Tensor.exponential_", tuple(self_tensor.shape))
            with torch.no_grad():
                self_tensor.copy_(_as_tensor(_exponential(values, float(lambd)), self_tensor.dtype,
                                             self_tensor.device))
            if self.capture.races and _own_storage(self_tensor) and (self.capture.tape.rows == 1
                                                                       or self_tensor.dim() >= 2):
                self.capture._tracked[id(self_tensor)] = _Noise(self_tensor, np.array(values, copy=True), columns,
                                                                _site())
                self.capture.engage()  # follow what is done with the noise
            return self_tensor

        def bernoulli(self, input, p=None, **kwargs):
            probabilities = input if p is None else p
            values = self.capture.draw("torch.bernoulli", tuple(input.shape))[0]
            probs = (probabilities.detach().cpu().numpy() if isinstance(probabilities, torch.Tensor)
                     else np.asarray(probabilities, float))
            if np.any((probs < 0) | (probs > 1)) or not np.all(np.isfinite(probs)):
                raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true")
            result = _as_tensor(self.capture.chose(values < probs).astype(np.float64), input.dtype, input.device)
            return finish(result, kwargs)

        def bernoulli_(self, self_tensor, p=0.5, **kwargs):
            result = self.bernoulli(self_tensor, p)
            with torch.no_grad():
                self_tensor.copy_(result)
            return self_tensor

        # -- categorical and integers

        def multinomial(self, input, num_samples, replacement=False, **kwargs):
            weights = input.detach().cpu().numpy()
            weights = weights if weights.dtype == np.float64 else weights.astype(np.float64)
            if weights.ndim not in (1, 2):
                raise RuntimeError("prob_dist must be 1 or 2 dim")
            rows = weights.reshape(-1, weights.shape[-1])  # [R, V]
            _check_weights(rows, int(num_samples), bool(replacement), "torch.multinomial")
            shape = weights.shape[:-1] + (int(num_samples),)
            u = self.capture.draw("torch.multinomial", shape)[0].reshape(len(rows), int(num_samples))
            drawn = self.capture.chose(_categorical(rows, u, bool(replacement)).reshape(shape))
            return finish(torch.from_numpy(drawn).to(device=input.device), kwargs)

        def randint(self, *args, **kwargs):
            numbers = [a for a in args if isinstance(a, (int, np.integer))]
            low, high = (0, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1]) if numbers else (
                kwargs.get("low", 0), kwargs["high"])
            if "low" in kwargs or "high" in kwargs:
                low, high = kwargs.get("low", low), kwargs.get("high", high)
            shape = size_of(args, kwargs, start=len(numbers))
            values = self.capture.draw("torch.randint", shape)[0]
            dtype = kwargs.get("dtype") or torch.int64
            drawn = self.capture.chose(_integers(values, int(low), int(high)))
            return finish(_as_tensor(drawn, dtype, kwargs.get("device")), kwargs)

        def randint_like(self, input, low=0, high=None, **kwargs):
            low, high = (0, low) if high is None else (low, high)
            values = self.capture.draw("torch.randint_like", tuple(input.shape))[0]
            return finish(_as_tensor(self.capture.chose(_integers(values, int(low), int(high))),
                                     kwargs.get("dtype") or input.dtype,
                                     kwargs.get("device") or input.device), kwargs)

        def random_(self, self_tensor, *args, **kwargs):
            bounds = list(args) + [kwargs[k] for k in ("from", "to") if k in kwargs]
            if not bounds:
                self.capture.refuse("Tensor.random_() without bounds")
            low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
            values = self.capture.draw("Tensor.random_", tuple(self_tensor.shape))[0]
            with torch.no_grad():
                self_tensor.copy_(_as_tensor(self.capture.chose(_integers(values, int(low), int(high))),
                                             self_tensor.dtype,
                                             self_tensor.device))
            return self_tensor

        def randperm(self, n, **kwargs):
            n = int(n)
            u = self.capture.draw("torch.randperm", (n,))[0].reshape(1, n)
            drawn = _categorical(np.ones((1, n)), u, False)[0] if n else np.zeros(0, dtype=np.int64)
            self.capture.chose(drawn)
            return finish(_as_tensor(drawn, kwargs.get("dtype") or torch.int64, kwargs.get("device")), kwargs)

        # -- exponential races

        def follow(self, func, args, kwargs):
            capture = self.capture
            tracked = capture._tracked
            involved = [tracked[id(a)] for a in _flat(args, kwargs) if id(a) in tracked]
            if not involved or func in metadata or _harmless_attribute(func):
                return func(*args, **kwargs)
            if func in divisions and len(args) == 2 and not kwargs:
                noise = tracked.get(id(args[1]))
                if isinstance(noise, _Noise) and noise.state == "fresh" and len(involved) == 1:
                    result = func(*args)
                    noise.state = "divided"
                    weights = weights_at_division(args[0], tuple(noise.tensor.shape))
                    if tuple(result.shape) == tuple(noise.tensor.shape) and weights is not None:
                        tracked[id(result)] = _Score(result, noise, weights)
                    else:
                        noise.state = "impure"
                    return result
            if func in argmaxes and len(involved) == 1 and isinstance(involved[0], _Score):
                score = involved[0]
                if score.state == "fresh" and score.noise.state == "divided" and args[0] is score.tensor:
                    dim = args[1] if len(args) > 1 else kwargs.get("dim")
                    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
                    drawn = self.race(score, dim, bool(keepdim))
                    if drawn is not None:
                        return drawn
            for item in involved:
                if item.state == "raced":
                    noise = item.noise if isinstance(item, _Score) else item
                    raise _Signal(NotPiecewiseConstantError(
                        f"exact mode cannot integrate {capture.name}: the exponential noise drawn at {noise.site} is "
                        "raced by argmax and then read again, so its race cannot be read as one categorical draw: "
                        "use --mode blackbox"))
                item.state = "impure"
                if isinstance(item, _Score):
                    item.noise.state = "impure"
            return func(*args, **kwargs)

        def race(self, score: _Score, dim, keepdim: bool):
            """argmax(w / E, dim) as one inverse-CDF draw from w along ``dim`` (None where the rule does not hold)."""
            capture, noise = self.capture, score.noise
            shape = tuple(noise.tensor.shape)
            if dim is None or not shape:
                return None
            dim = int(dim) % len(shape)
            batched = capture.tape.rows > 1
            if batched and dim == 0:
                return None
            weights = score.weights
            if len(shape) == 1:  # one slice: the common case of a row at a time
                flat, first, columns = weights[None, :], noise.uniforms[:1], noise.columns[1:]
            else:
                moved = np.moveaxis(weights, dim, -1)  # [..., V]
                flat = moved.reshape(-1, shape[dim])
                first = np.moveaxis(noise.uniforms, dim, -1)[..., 0].reshape(-1)
                columns = np.moveaxis(noise.columns, dim - 1 if batched else dim, -1)[..., 1:]
            tokens = inverse_cdf(flat, first)  # [slices]
            tokens[flat.sum(axis=1) <= 0] = 0  # argmax of all-zero scores is the first index
            tokens = tokens.reshape(shape[:dim] + shape[dim + 1:])
            if keepdim:
                tokens = np.expand_dims(tokens, dim)
            capture.chose(tokens)
            capture.tape.used[columns.reshape(-1)] = False
            noise.state = score.state = "raced"
            capture.races_read += 1
            return torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64)).to(score.tensor.device)

    def weights_at_division(weights, shape: tuple):
        """w of ``w / E`` as it is now (a float64 copy of shape ``shape``: later writes into w must not reach the
        race), or None where the race rule does not hold (w not finite and >= 0, or not of E's shape)."""
        if isinstance(weights, torch.Tensor):
            weights = weights.detach().cpu().numpy()
        weights = np.array(weights, dtype=np.float64)  # a copy, also of a CPU tensor's memory
        if weights.shape != shape:
            try:
                weights = np.broadcast_to(weights, shape).copy()
            except ValueError:
                return None
        if weights.size and not (np.isfinite(weights).all() and weights.min() >= 0):
            return None
        return weights

    def table(feed: FeedMode) -> list:
        """(owner, attribute, replacement) for every primitive: module functions, and Tensor methods as plain
        functions (so that the tensor is passed as the first argument)."""
        entries = []
        for func, handler in feed.handlers.items():
            owner = tensor if func.__qualname__.startswith("TensorBase.") else torch
            entries.append((owner, func.__name__, handler if owner is torch else _method(handler)))
        for func, what in refused.items():
            owner = (tensor if func.__qualname__.startswith("TensorBase.") else torch.nn.functional
                     if "dropout" in what else torch)
            replacement = _refusing(feed, func)
            entries.append((owner, func.__name__, replacement if owner is not tensor else _method(replacement)))
        return entries

    def _refusing(feed, func):
        def replacement(*args, **kwargs):
            return feed.__torch_function__(func, (), args, kwargs)
        return replacement

    return FeedMode, table


def _method(handler):
    def method(self, *args, **kwargs):
        return handler(self, *args, **kwargs)
    return method


def _harmless_attribute(func) -> bool:
    owner = getattr(func, "__self__", None)
    return getattr(func, "__name__", "") == "__get__" and getattr(owner, "__name__", "") in _METADATA_ATTRIBUTES


def _flat(args, kwargs):
    for value in args:
        if type(value) in (tuple, list):
            yield from value
        else:
            yield value
    for value in kwargs.values():
        if type(value) in (tuple, list):
            yield from value
        else:
            yield value


_BASELINE_USES = None


def _own_storage(tensor) -> bool:
    """Whether no other tensor shares ``tensor``'s storage, and torch allocated it (so reading its values goes
    through torch and this tensor alone; see "Shared memory" in the module docstring)."""
    global _BASELINE_USES
    import torch

    if tensor._base is not None or not tensor.untyped_storage().resizable():  # a view, or memory torch did not
        return False  # allocate (torch.from_numpy, DLPack), which may be read without torch
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return False
    if _BASELINE_USES is None:  # a fresh tensor's count (references held while counting)
        fresh = torch.empty(1)
        fresh_storage = fresh.untyped_storage()
        _BASELINE_USES = count(fresh_storage._cdata)
    storage = tensor.untyped_storage()
    return count(storage._cdata) <= _BASELINE_USES


#: Bits of a float32 uniform drawn by torch's CPU generator and numpy's (k 2^-24, k = 0 .. 2^24 - 1).
FLOAT32_UNIFORM_BITS = 24


def _on_grid(values: np.ndarray, dtype) -> np.ndarray:
    """float64 uniforms u in [0, 1) as the float32 uniforms torch's CPU generator and numpy's ``random(dtype=
    float32)`` draw: floor(u 2^24) 2^-24, each of the 2^24 values with probability 2^-24 when u is uniform, which
    is those generators' own law (so exact mode integrates the code's law under them exactly: a threshold on such
    a draw has its breakpoint at a multiple of 2^-24, and its mass is one)."""
    scale = float(2 ** FLOAT32_UNIFORM_BITS)
    return np.array(np.floor(np.asarray(values, dtype=np.float64) * scale) / scale, dtype=dtype)  # a copy, any shape


def _round_down(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` (float64, >= 0) in a narrower float type, rounded down rather than to nearest."""
    values = np.asarray(values, dtype=np.float64)
    rounded = values.astype(dtype)
    above = rounded.astype(np.float64) > values
    rounded[above] = np.nextafter(rounded[above], dtype(-np.inf))
    return np.ascontiguousarray(rounded)
