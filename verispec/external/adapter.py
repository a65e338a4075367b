"""An external verification function as a verispec ``Verifier``: its exact law by integration over its uniforms.

``ExternalVerifier(function, layout)`` wraps a function in one of the production layouts
(``verispec.external.layouts``). Its emission law on a batch of draft trees is the law of the function's
outcome over independent Uniform[0, 1) inputs, found by exact integration (``verispec.external.exact``), so
every engine, ``hunt`` and the reports take it like any built-in rule. Its ``procedure`` samples (node,
token) from that law through a chooser. It accepts any draft law (``valid_for``): whether the function
accounts for how its drafts were drawn is exactly what a check finds out.

Where the randomness comes from (``rng``):

* ``explicit``: the function is handed its uniforms (the layout's uniform arguments) and draws nothing itself.
  While it runs, the global generators of torch, numpy and ``random`` are watched (``verispec.external.rng``
  in ``forbid`` mode): a draw from them is refused at once with the hint to use ``capture``.
* ``capture``: the function draws its own randomness from those generators (transformers'
  ``_speculative_sampling``, gpt-fast, most research code); the layout's uniform arguments are left out and
  every draw is fed from the row's uniforms (``docs/guides/check_external.md``'s glossary states the rule of each
  primitive).
  How many uniforms a row draws is found by probing; a row that draws more than expected on some path makes
  the integration start again with a longer tape (``UniformsExhausted``; the tape at least doubles, up to
  ``max_uniforms``, and what the abandoned attempt counted is dropped from ``stats``), never reuse or invent
  randomness.
  The integration is told which uniforms each run read, and does not scan along the others, and each run's
  path (the draws it made, and the results of its discrete draws; ``runner.Runner.integrand`` says why).
* ``explicit+capture``: both, for a function handed its uniforms that also draws from a global generator (it
  may ignore the uniforms): the layout's uniform arguments are handed and integrated, and the draws are fed
  from a tape after them. ``check_external`` turns to it when explicit mode sees such a draw.

``unfed``: the function's randomness is not fed by verispec at all (``os.urandom``, a generator created before
the call, CUDA's generator): its outputs are not a function of the uniforms, so it has no law to integrate
(``emission_laws`` raises ``NondeterministicError``) and only black-box runs can test it. Each run is one call
on one tree (``per_row``), handed fresh uniforms where the layout has them, with nothing captured or forbidden,
so the runs are independent as long as the function's own generator gives independent draws from call to call.

One ``Capture`` is entered around each integration and each ``sample_codes`` (not around each call): the
global generators are restored when it ends, also on an exception, and compared with their state on entry.

``per_row``: call the function on one tree at a time (batch size 1) and stack the results: the batch helper
for functions written for one sequence (layouts marked ``one_sequence``, like ``transformers``, always are).
The layout's arguments are still built for all rows at once, and the function gets views of one row.

Before a batch topology is integrated the function is *probed*: called twice on the same arguments and
uniforms, the outputs must agree (``NondeterministicError`` otherwise, with what to do), and its arguments are
compared with copies taken before the call. A function that writes into its arguments is reported in
``notes``; every call gets freshly built arguments (and uniforms), so such writes cannot change the law.

Batched capture (not ``per_row``): what makes each row's outcome a function of its own tree and uniforms,
and how much of it is checked ("Rows" in ``docs/guides/check_external.md``'s glossary):

* on EVERY call: every draw has the batch as its first dimension, and the call makes the same draws, in the
  same order, as the probe's first call (so a row's draws take the same uniforms whatever rows it is batched
  with); otherwise ``CaptureRefusal``, which advises ``per_row``;
* at the probe's points ONLY: each row's outcome is the one it gets called alone, and with the batch's rows
  reversed, on the same uniforms (random ones, and ones sorted by row, so that rows which accept and rows
  which reject sit in one batch); otherwise ``CaptureRefusal``. A function that reads another row's values or
  draws only on paths the probe does not reach is not caught, and its exact law is then wrong; ``per_row``
  assumes nothing of the kind (each call sees one row) and is the check to run where that matters.

``call_timeout``: seconds one call of the function may take, enforced by a hard time budget
(``verispec.guard.budget``); a call past it raises a one-line ``VerifierError`` naming the function and the limit.

What is bad input and what is a finding. A function that cannot take the layout's arguments (its signature,
read before any call) is refused at once (``VerispecError``): a wrong ``--layout`` or ``--rng``. An exception
raised inside a call is the function's own failure on that problem, ``runner.FunctionRaised``: the exception, the
line that raised it, and for a call on one tree the draft tree and the uniforms, which ``check_external``
reports as a witness (verdict RAISES).
"""

from __future__ import annotations

import inspect
import math

import numpy as np

from verispec.errors import UnknownVerifierError, VerifierError, VerispecError
from verispec.external.exact import IntegrationStats, NotPiecewiseConstantError, integrate
from verispec.external.layouts import ARRAY_KINDS, Layout, get_layout
from verispec.external.rng import KEY_MODES, MAX_KEYS, CaptureRefusal, TorchEscape, UniformsExhausted
from verispec.external.runner import RAISED, NondeterministicError, RaiseLog, Runner, SelfDraftingRunner
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.user_code import load_attribute

RNG_MODES = ("explicit", "capture", "explicit+capture")
#: Most uniforms one row may draw in capture mode.
MAX_UNIFORMS = 4096


def load_function(spec: str):
    """The function named by ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``; UnknownVerifierError on one
    line when it cannot be loaded or is not callable."""
    from verispec.external import sandboxed
    from verispec.user_code import load_sandboxed

    box = load_sandboxed(spec, "function", sandboxed.describe, sandboxed.call_in_sandbox)
    if box is not None:  # a supervised worker: the function runs in a process of its own (verispec.guard.sandbox)
        if not box.description["callable"]:
            raise UnknownVerifierError(f"{spec!r} is not a function (it is {box.description['type']})")
        return sandboxed.SandboxedFunction(box)
    function = load_attribute(spec, "function")
    if not callable(function):
        raise UnknownVerifierError(f"{spec!r} is not a function (it is {type(function).__name__})")
    return function


class ExternalVerifier(Verifier):
    """A production-shape verification function (see ``verispec.external.layouts``) as a verifier.

    ``arrays``: 'numpy' or 'torch' (float64 tensors on ``device``, the CPU by default). ``rng``, ``per_row``,
    ``unfed`` and ``call_timeout``: see the module docstring. ``scan``, ``probes``, ``max_boxes``, ``max_breaks`` and
    ``check_races`` (off only to measure what the breakpoint check saves) tune exact integration
    (``verispec.external.exact.integrate``); ``max_uniforms`` bounds what one row may draw in capture mode.
    ``stats`` accumulates what each integration saw (evaluations, cells, how each uniform was used), also one
    that ended in a refusal, but not an attempt abandoned for a longer tape; ``notes`` what the probes found
    (arguments written into, what was captured)."""

    valid_for = frozenset(DraftLaw)

    def __init__(self, function, layout: str | Layout, *, name: str | None = None, arrays: str = "numpy",
                 device: str = "cpu", rng: str = "explicit", per_row: bool = False,
                 call_timeout: float | None = None, scan: int = 16, probes: int = 4, max_boxes: int = 1024,
                 max_breaks: int = 512, check_races: bool = True, max_uniforms: int = MAX_UNIFORMS,
                 unfed: bool = False, keys: str = "keyed", max_keys: int = MAX_KEYS):
        if not callable(function):
            raise VerispecError(f"an external verifier needs a function, got {type(function).__name__}")
        if arrays not in ARRAY_KINDS:
            raise VerispecError(f"arrays must be one of {', '.join(ARRAY_KINDS)}, got {arrays!r}")
        if rng not in RNG_MODES:
            raise VerispecError(f"rng must be one of {', '.join(RNG_MODES)}, got {rng!r}")
        if not isinstance(per_row, bool):
            raise VerispecError(f"per_row must be True or False, got {per_row!r}")
        if not isinstance(unfed, bool):
            raise VerispecError(f"unfed must be True or False, got {unfed!r}")
        if call_timeout is not None and not (isinstance(call_timeout, (int, float))
                                             and not isinstance(call_timeout, bool)
                                             and math.isfinite(call_timeout) and call_timeout > 0):
            raise VerispecError(f"call_timeout must be a positive number of seconds, got {call_timeout!r}")
        if not (isinstance(max_uniforms, int) and max_uniforms >= 1):
            raise VerispecError(f"max_uniforms must be a positive integer, got {max_uniforms!r}")
        if keys not in KEY_MODES:
            raise VerispecError(f"keys must be one of {', '.join(KEY_MODES)}, got {keys!r}")
        if isinstance(max_keys, bool) or not (isinstance(max_keys, int) and max_keys >= 1):
            raise VerispecError(f"max_keys must be a positive integer, got {max_keys!r}")
        self.function = function
        self.layout = get_layout(layout) if isinstance(layout, str) else layout
        self.name = name or getattr(function, "__name__", None) or getattr(getattr(function, "func", None),
                                                                            "__name__", "external")
        if rng != "capture" and not self.layout.uniform_arguments:
            raise VerispecError(f"the {self.layout.name} layout hands the function no uniforms (it draws its own): "
                                "check it with rng='capture' (--rng capture)")
        if rng != "explicit" and not unfed and not (per_row or self.layout.one_sequence or self.layout.rows_first):
            raise VerispecError(f"in the {self.layout.name} layout a batched call's draws run over draft tokens, not "
                                "over trees, so they cannot be fed row by row: add per_row=True (--per-row)")
        self.arrays = arrays
        self.device = device
        self.rng = rng
        self.unfed = unfed
        self.per_row = per_row or self.layout.one_sequence or unfed  # unfed: independent runs, one call each
        self.call_timeout = None if call_timeout is None else float(call_timeout)
        self.max_uniforms = max_uniforms
        #: How keyed draws are fed (``verispec.external.rng.KEY_MODES``) and the most keys one call may draw from.
        self.keys = keys
        self.max_keys = max_keys
        if arrays == "torch" or self.layout.one_sequence:
            try:
                import torch

                torch.empty(0, device=device)
            except ImportError:
                raise VerispecError("arrays 'torch' needs torch: pip install 'torch==2.13.0'") from None
            except (AssertionError, RuntimeError, TypeError, ValueError) as error:
                raise VerispecError(f"device {device!r} cannot be used by torch here ({error}); give cpu, cuda or "
                                    "cuda:N") from None
            if self.layout.one_sequence:
                self.arrays = "torch"
        self.options = dict(scan=scan, probes=probes, max_boxes=max_boxes, max_breaks=max_breaks,
                            check_races=bool(check_races))
        self.stats = IntegrationStats()
        #: What the probes and captures found, one line each (shown by a check's report).
        self.notes: list[str] = []
        #: Draws captured, by primitive (capture mode), and exponential races read as one categorical draw.
        self.draws: dict[str, int] = {}
        self.races_read = 0
        self.float32_draws = 0
        #: (vocabulary, topology) -> its probed runner (which holds the tape length and the draws of a call).
        self._runners: dict = {}
        #: torch draws are followed through a TorchFunctionMode throughout (``verispec.external.rng.Capture``).
        self.torch_full = False
        #: The function takes a ``seed`` after the layout's arguments (capture mode): each call is handed the seed
        #: of its request, and the keys of its seeded draws are read ("Keys" in the RNG glossary).
        self.takes_seed = False
        self._check_signature()

    def _check_signature(self) -> None:
        """Refuse, before any call, a function that cannot take the layout's arguments as this mode hands them:
        bad input (a wrong --layout or --rng), where an exception inside a call is a finding (FunctionRaised)."""
        handed = self.layout.argument_names
        given = handed if self.rng != "capture" else self.layout.capture_argument_names()
        try:
            signature = inspect.signature(self.function)
        except (TypeError, ValueError):  # no readable signature (a builtin, say): its calls will tell
            return

        def takes(names) -> bool:
            try:
                signature.bind(*names)
            except TypeError:
                return False
            return True

        if self.rng != "explicit" and "seed" in signature.parameters and takes((*given, "seed")):
            self.takes_seed = True  # a function that seeds its own draws takes its request's seed after the rest
            return
        if takes(given):
            return
        if self.rng == "capture" and takes(handed):
            hint = ("it takes the uniform arguments too: leave out --rng capture (auto mode captures the draws of a "
                    "function that is handed uniforms and also draws from a global generator)")
        elif self.rng != "capture" and takes(self.layout.capture_argument_names()):
            hint = "it takes no uniform arguments, so it draws its own randomness: check it with --rng capture"
        else:
            hint = "check --layout (verispec.external.layouts states each layout's arguments)"
        raise VerispecError(f"external function {self.name}{signature} cannot take the {len(given)} arguments the "
                            f"{self.layout.name} layout hands it ({', '.join(given)}): {hint}")

    # -- what the black-box test and exact integration call

    def sample_codes(self, batch: TreeBatch, rows: np.ndarray, rng: np.random.Generator,
                     raises: RaiseLog | None = None) -> np.ndarray:
        """One run of the function on each of ``rows`` with fresh uniforms from ``rng`` (as many as each run draws:
        a run that draws past its tape is run again with more fresh uniforms appended, the ones it read kept, so
        the runs are independent draws of the function's law). -> codes [M] (node * V + token). With ``raises``
        the runs go on past raises (code ``runner.RAISED``, counted there); without, a raise ends them."""
        runner = self._runner(batch, raises)
        if isinstance(runner, SelfDraftingRunner):
            raise VerifierError(f"external function {self.name} drafts its own tokens, so it cannot be run on a given "
                                "draft tree: check it in exact mode (--mode exact)")
        rows = np.asarray(rows, dtype=np.int64)
        runner.raises = raises
        try:
            if self.unfed:  # one call per run, fresh uniforms handed; the function's own randomness does the rest
                return runner.run(rows, rng.random((len(rows), runner.width_uniforms)), races=False)[0]
            uniforms = rng.random((len(rows), runner.width_uniforms))
            while True:
                try:
                    with runner.session():
                        return runner.run(rows, uniforms, races=False)[0]
                except UniformsExhausted as exhausted:
                    extra = self.grow(runner, exhausted.needed) - (uniforms.shape[1] - runner.own)
                    uniforms = np.concatenate([uniforms, rng.random((len(rows), extra))], axis=1)
                except TorchEscape:  # a torch draw through a name bound before the call: follow every operation
                    self.torch_full = True
        finally:
            runner.raises = None

    def emission_laws(self, batch: TreeBatch):
        law, _ = self._integrated(batch, None)
        return law

    def laws_past_raises(self, batch: TreeBatch, log: RaiseLog):
        """(laws [N, n, V], raised [N]): the law of the outcomes of the inputs on which the function does not raise
        (mass 1 - raised[row] on each tree), and the mass of those on which it raises, each integrated exactly as
        ``emission_laws`` integrates a function that never raises (the raise is one more outcome). What
        ``verispec.external.raises.law_past_raises`` adds up; refused for a block that drafts its own tokens."""
        if self.layout.self_drafting:
            raise NotPiecewiseConstantError(f"external function {self.name} drafts its own tokens: its raises are "
                                            "not integrated beside its outcomes")
        return self._integrated(batch, log)

    def _integrated(self, batch: TreeBatch, raises: RaiseLog | None):
        """The emission laws of ``batch`` by exact integration, and with ``raises`` (going on past raises: the
        runner's RAISED outcome integrated as one more code) the mass of the raising inputs of each tree [N]."""
        if self.unfed:
            raise NondeterministicError(f"external function {self.name} draws randomness verispec does not feed, so "
                                        "it has no law over verispec's uniforms to integrate: check it in black-box "
                                        "mode (--mode blackbox)")
        runner = self._runner(batch, raises)
        codes = batch.num_nodes * batch.vocab_size
        self_drafting = isinstance(runner, SelfDraftingRunner)
        evaluate = runner.integrand if raises is None else _past_raises(runner, codes)
        count = codes + (raises is not None)
        runner.raises = raises
        try:
            while True:
                stats = IntegrationStats()  # this attempt's: dropped if it is abandoned for another, else kept
                abandoned = False
                try:
                    with runner.session():
                        if self_drafting:  # one integration of the whole block, split below by the drafts it made
                            law = integrate(runner.integrand, 1, runner.width_uniforms, batch.num_rows * codes + 1,
                                            name=self.name, stats=stats, **self.options)[0]
                        else:  # a batched function's calls cost more than its rows: bisection cuts 3 times a call
                            law = integrate(evaluate, batch.num_rows, runner.width_uniforms, count,
                                            name=self.name, stats=stats, bisect_depth=1 if self.per_row else 3,
                                            **self.options)
                except UniformsExhausted as exhausted:  # a path draws more than the probes saw: start again, longer
                    self.grow(runner, exhausted.needed)
                    abandoned = True
                except TorchEscape:
                    self.torch_full = True
                    abandoned = True
                finally:  # a completed integration, or the one that ended in a refusal (what it cost is reported)
                    if not abandoned:
                        self.stats.merge(stats)
                if not abandoned:
                    break
        finally:
            runner.raises = None
        if self_drafting:
            law = runner.split_by_drafts(law)
        self._note_capture()
        raised = law[:, codes] if raises is not None else None
        return law[:, :codes].reshape(batch.num_rows, batch.num_nodes, batch.vocab_size), raised

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """One outcome drawn from the integrated law (the function itself draws nothing from a chooser)."""
        law = np.asarray(self.emission_law(tree), dtype=np.float64).reshape(-1)
        code = chooser.categorical(law / law.sum())
        return divmod(int(code), tree.vocab_size)

    def __repr__(self) -> str:
        return f"<external verifier {self.name} ({self.layout.name})>"

    # -- internals

    def _runner(self, batch: TreeBatch, raises: RaiseLog | None = None) -> Runner:
        """The runner of ``batch``'s topology, probed on its first batch and kept (bound to ``batch``); the probe
        goes on past raises into ``raises`` where it is given."""
        if batch.exact:
            raise VerispecError(f"external function {self.name} runs in float64; analyse a float problem "
                                "(leave out --exact), its breakpoints are float64 numbers")
        if not isinstance(batch.p, np.ndarray):
            raise VerispecError(f"external function {self.name} is checked on numpy problems of small vocabularies; "
                                "its law is integrated over its uniforms, which real decoding's vocabularies make "
                                "hopeless (run the function itself in your engine instead)")
        self.layout.check_batch(batch)
        key = (batch.vocab_size, batch.child_lists)
        runner = self._runners.get(key)
        if runner is None:
            runner = (SelfDraftingRunner if self.layout.self_drafting else Runner)(self, batch)
            runner.raises = raises
            try:
                runner.probe()
            finally:
                runner.raises = None
            self._runners[key] = runner
        elif runner.trees.batch is not batch:
            runner.bind(batch)
        return runner

    def grow(self, runner: Runner, needed: int) -> int:
        """Lengthen ``runner``'s tape to hold ``needed`` uniforms a row: at least doubled (so that a rule that
        draws more and more is rerun few times; unread uniforms cost no scanning), at most ``max_uniforms``,
        past which CaptureRefusal."""
        if needed > self.max_uniforms:
            raise CaptureRefusal(f"external function {self.name} drew more than {self.max_uniforms} uniforms on one "
                                 "row; raise max_uniforms if that is right")
        runner.tape = min(max(needed, 2 * runner.tape), self.max_uniforms)
        return runner.tape

    def note(self, line: str) -> None:
        """Add ``line`` to ``notes`` (once)."""
        if line not in self.notes:
            self.notes.append(line)

    def _note_capture(self) -> None:
        if self.rng == "explicit":
            return
        if self.draws:
            listed = ", ".join(sorted(self.draws))
            self.notes[:] = [line for line in self.notes if not line.startswith("draws captured:")]
            self.notes.append(f"draws captured: {listed}" + (
                f"; exponential races read as one categorical draw: {self.races_read}" if self.races_read else ""))
        if self.float32_draws:
            self.note(f"{self.name} draws float32 uniforms, fed as its generator draws them (multiples of 2^-24): "
                       "a test u < t then accepts with probability ceil(t 2^24) 2^-24, up to 6e-8 more than t, so "
                       "its exact law may differ from a lossless rule's by about that much per test (draw in "
                       "float64 to check the rule itself)")


def _past_raises(runner: Runner, codes: int):
    """``runner.integrand`` going on past raises: a run that raised is outcome ``codes`` (one past the last), and in
    capture mode path labels count in multiples of ``codes + 1``."""
    def evaluate(rows: np.ndarray, points: np.ndarray):
        found, used = runner.run(rows, points, races=True)
        found = np.where(found == RAISED, codes, found)
        return found if used is None else (found + (codes + 1) * runner.last_paths, used)
    return evaluate
