"""Whole speculative-decoding steps in engines' shapes: code that drafts its own tokens from RAW logits under the
requested sampling, then verifies them, checked by the law of what it emits.

The engines' bugs of 2025-26 sat around the acceptance rule: drafts drawn from a processed q while the verifier
was handed the raw one (transformers #47932), sampling settings applied to some tokens only (vLLM #42802), noise
keyed so that drafting and recovery share it (vLLM #47386). None of them can be seen on drafts verispec draws and
laws it hands already processed; all of them show in the law of one whole step. A step layout hands the code two
models backed by the problem's conditionals, returning raw logits, the requested sampling parameters and the
request's seed; the code drafts, scores, verifies and returns the emitted tokens. verispec checks the emitted
block, continued with the target, against the law the user asked for: the target's conditionals after the
requested transform (``verispec.models.sampling.Sampling``), not the raw target. Any drafting law is allowed (an
engine may draft greedily, or from a filtered q), as long as the verification keeps the output law.

Layouts (V = vocabulary size; P = ``STEP_PROMPT`` junk prompt tokens; models are ``LogitsModel``:
``model(input_ids [B, S] int64) -> logits [B, S, V]`` torch float64, the logits at position t the log of the raw
law after the row's tokens P..t, NaN before position P - 1 and where the problem holds no law):

``step`` (one sequence; gpt-fast's and transformers' whole step):
    f(draft_model, target_model, input_ids [1, P], num_draft_tokens K, temperature, top_k, top_p, min_p, seed)
    -> emitted tokens [m + 1] (or [1, m + 1]) int: the accepted drafts, then one more token.

``step-ragged`` (vLLM's batch: requests of different draft counts, per-request sampling and seeds):
    f(draft_model, target_model, input_ids [B, P], num_draft_tokens [B] int64, temperature [B] float64,
      top_k [B] int64, top_p [B] float64, min_p [B] float64, seeds [B] int64)
    -> output_token_ids [B, max(num_draft_tokens) + 1] int64, each row's emitted tokens padded with -1.
    B = 3: request 1 is the one checked (K drafts, the requested sampling, its seed); requests 0 and 2 are greedy
    fillers (temperature 0: argmax decoding) with 1 and 0 drafts: whatever their drafts, a correct step emits 1 to
    K + 1 tokens each the target's argmax (ties to the smallest id) after the ones before it
    (``greedy_consistent``); anything else is an outcome no correct step has, so the step is lossy with at least
    that mass. So is a token outside the vocabulary, in every step layout (an all-NaN row turned into a token id,
    vLLM #53029). Fillers catch offsets and per-request settings applied to the wrong request. With sampled
    neighbours (``neighbours``, ``verispec.external.step_neighbours``) requests 0 and 2 sample with settings and
    seeds of their own and the three requests' joint law is checked, so noise shared across requests shows too.

``step-tree`` (a static draft tree, EAGLE's and SpecInfer's shape):
    f(draft_model, target_model, input_ids [1, P], parents [N] int64, temperature, top_k, top_p, min_p, seed)
    -> emitted tokens [m + 1] int. ``parents[j]`` is the parent of node j + 1 (0 is the root; a parent before its
    children): the code drafts a token at every node from the draft model at its parent's prefix, in any way
    it likes (i.i.d., without replacement), scores the tree, verifies and returns the accepted path's tokens and
    one more. The tree is the shape of ``--tree`` (i.i.d. paths as separate branches).

``step-penalties`` (``step`` with ``output_ids`` and vLLM's three penalties): ``verispec.external.step_penalties``.

Parameters off: top_k 0, top_p 1.0, min_p 0.0. Temperature > 0 for the checked request (greedy is refused by
``Sampling.parse``: a point mass is not a law to check).

Exact mode integrates the step over every draw it makes (RNG capture, keys read: ``verispec.external.rng``),
path-labelled, and gives the law of the emitted block; black-box mode runs the step N times with fresh uniforms
and tests the block law with Bernstein's inequality and the TV test of ``verispec.external.blackbox`` (one
stratum, each run weight 1/N). Either way the block is continued with the transformed target exactly.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from verispec.errors import VerifierError, VerispecError
from verispec.external.blackbox import BlackBoxResult, _bernstein, discrepancies
from verispec.external.calls import FunctionRaised, NondeterministicError, call_function
from verispec.external.exact import IntegrationStats, NotPiecewiseConstantError, integrate
from verispec.external.rng import MAX_KEYS, Capture, Signal, Tape, TorchEscape, UniformsExhausted
from verispec.external.step_auto import AUTO_EXACT_SHARE, ExactOutOfTime, blackbox_runs, exact_within
from verispec.external.step_neighbours import JointCodes, joint_target, neighbours_note
from verispec.external.step_penalties import (
    LOGIT_SHIFT,
    STEP_PROMPT,
    history,
    penalties_arguments,
    penalties_note,
    requested_problem,
)
from verispec.guard import budget
from verispec.guard.limits import DEFAULT_THRESHOLD
from verispec.simulator.laws import OutputLaw
from verispec.simulator.problems import target_law
from verispec.verdict import Verdict

#: The checked request's index in ``step-ragged``, and the fillers' draft counts (greedy).
RAGGED_CHECKED = 1
FILLER_DRAFTS = (1, 0)
#: Seeds handed to the requests (the checked one's plus its index): fixed, since each call's keys are fresh
#: uniforms anyway (``verispec.external.rng``: keys are read per call).
STEP_SEED = 1_000_003
#: The longest tape of uniforms one step may draw.
MAX_STEP_UNIFORMS = 4096
#: The most sequences of a block a check tabulates (V^(D+1) summed over lengths).
MAX_STEP_SEQUENCES = 200_000


class LogitsModel:
    """A causal language model backed by a problem's raw conditionals: ``model(input_ids [B, S]) -> logits
    [B, S, V]`` (torch float64). The logits at position t of row b are the log of the law after the row's tokens
    at positions P..t (the block so far; P the prompt's length), NaN before position P - 1 and past the depth
    the problem holds; log 0 = -inf."""

    def __init__(self, law, vocab_size: int, depth: int, prompt: int = STEP_PROMPT, shift: float = 0.0):
        self._law, self.vocab_size, self.depth, self.prompt, self.shift = law, vocab_size, depth, prompt, shift
        self._cache: dict[tuple, np.ndarray] = {}
        self.calls = 0

    def logits_after(self, prefix: tuple) -> np.ndarray:
        logits = self._cache.get(prefix)
        if logits is None:
            if len(prefix) > self.depth:
                logits = np.full(self.vocab_size, np.nan)
            else:
                with np.errstate(divide="ignore"):
                    logits = np.log(np.asarray(self._law(prefix), dtype=np.float64)) + self.shift
            self._cache[prefix] = logits
        return logits

    def __call__(self, input_ids):
        import torch

        ids = np.asarray(input_ids.detach().cpu().numpy() if hasattr(input_ids, "detach") else input_ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"input_ids must be an integer tensor [B, S], got {ids.dtype} of shape {list(ids.shape)}")
        self.calls += 1
        rows, length = ids.shape
        logits = np.full((rows, length, self.vocab_size), np.nan)
        for row in range(rows):
            tokens = ids[row].tolist()
            for position in range(self.prompt - 1, length):
                prefix = tuple(tokens[self.prompt:position + 1])
                if any(not 0 <= t < self.vocab_size for t in prefix):
                    raise ValueError(f"token {prefix} outside the vocabulary 0..{self.vocab_size - 1}")
                logits[row, position] = self.logits_after(prefix)
        return torch.from_numpy(logits)


@dataclass(frozen=True)
class StepLayout:
    """A whole-step layout (module docstring): its name, argument names and what it hands and reads."""

    name: str
    argument_names: tuple[str, ...]

    def arguments(self, problem, sampling, depth: int, parents: np.ndarray | None, seed: int = STEP_SEED,
                  neighbours: dict | None = None, penalties=None):
        """Fresh arguments for one call, the checked request handed ``seed`` (the others seed + their index);
        ``neighbours``: {request: Sampling} of sampling neighbours in ``step-ragged`` (else greedy fillers);
        ``penalties``: ``step-penalties``' ``Penalties``."""
        import torch

        size = problem.vocab_size
        params = (float(sampling.temperature), int(sampling.top_k or 0), float(sampling.top_p or 1.0),
                  float(sampling.min_p or 0.0))
        if self.name == "step-penalties":  # the models read the history after the prompt, and their logits shifted
            before = STEP_PROMPT + len(history(size))
            return penalties_arguments(LogitsModel(problem.draft, size, depth, before, LOGIT_SHIFT),
                                       LogitsModel(problem.target, size, depth + 1, before, LOGIT_SHIFT),
                                       depth, params, penalties, seed)
        draft = LogitsModel(problem.draft, size, depth)
        target = LogitsModel(problem.target, size, depth + 1)
        if self.name == "step":
            return (draft, target, torch.zeros((1, STEP_PROMPT), dtype=torch.int64), depth, *params, seed)
        if self.name == "step-tree":
            return (draft, target, torch.zeros((1, STEP_PROMPT), dtype=torch.int64),
                    torch.from_numpy(np.asarray(parents, dtype=np.int64)), *params, seed)
        counts = [FILLER_DRAFTS[0], depth, FILLER_DRAFTS[1]]
        greedy = (0.0, 0, 1.0, 0.0)
        rows = [greedy, params, greedy] if not neighbours else [
            (float(own.temperature), int(own.top_k or 0), float(own.top_p or 1.0), float(own.min_p or 0.0))
            if request in neighbours else params for request, own in enumerate(
                [neighbours.get(0), sampling, neighbours.get(2)])]
        return (draft, target, torch.zeros((3, STEP_PROMPT), dtype=torch.int64),
                torch.tensor(counts, dtype=torch.int64),
                torch.tensor([r[0] for r in rows], dtype=torch.float64),
                torch.tensor([r[1] for r in rows], dtype=torch.int64),
                torch.tensor([r[2] for r in rows], dtype=torch.float64),
                torch.tensor([r[3] for r in rows], dtype=torch.float64),
                torch.tensor([seed - RAGGED_CHECKED + index for index in range(3)], dtype=torch.int64))

    def emitted(self, result, name: str, depth: int, fillers: dict | None) -> tuple | None:
        """The checked request's emitted tokens, or None where a filler emitted other than its greedy output;
        VerifierError for output the layout cannot read."""
        if self.name != "step-ragged":
            return _tokens(result, name, depth)
        matrix = _matrix(result, name, (3, max(depth, *FILLER_DRAFTS) + 1))
        for request, (problem, drafts) in fillers.items():
            if not greedy_consistent(tuple(_row(matrix[request], name)), problem, drafts):
                return None
        return _tokens(matrix[RAGGED_CHECKED], name, depth)

    def blocks(self, result, name: str, depth: int) -> list[tuple]:
        """``step-ragged``'s three requests' emitted tokens (the checked one's read as ``emitted`` reads it)."""
        matrix = _matrix(result, name, (3, max(depth, *FILLER_DRAFTS) + 1))
        return [tuple(_row(matrix[0], name)), _tokens(matrix[RAGGED_CHECKED], name, depth),
                tuple(_row(matrix[2], name))]


STEP_LAYOUTS = {layout.name: layout for layout in (
    StepLayout("step", ("draft_model", "target_model", "input_ids", "num_draft_tokens", "temperature", "top_k",
                        "top_p", "min_p", "seed")),
    StepLayout("step-ragged", ("draft_model", "target_model", "input_ids", "num_draft_tokens", "temperature",
                               "top_k", "top_p", "min_p", "seeds")),
    StepLayout("step-tree", ("draft_model", "target_model", "input_ids", "parents", "temperature", "top_k", "top_p",
                             "min_p", "seed")),
    StepLayout("step-penalties", ("draft_model", "target_model", "input_ids", "output_ids", "num_draft_tokens",
                                  "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty",
                                  "presence_penalty", "seed")),
)}


def _matrix(result, name: str, shape: tuple) -> np.ndarray:
    if hasattr(result, "detach"):
        result = result.detach().cpu().numpy()
    array = np.asarray(result)
    if array.dtype.kind not in "iu" or array.shape != shape:
        raise VerifierError(f"external function {name} returned {array.dtype} of shape {list(array.shape)}; the "
                            f"step-ragged layout expects integers of shape {list(shape)} (each request's emitted "
                            "tokens, padded with -1)")
    return array.astype(np.int64)


def _row(row: np.ndarray, name: str) -> list[int]:
    tokens = [int(t) for t in row]
    if -1 in tokens:
        cut = tokens.index(-1)
        if any(t != -1 for t in tokens[cut:]):
            raise VerifierError(f"external function {name} returned a row {tokens} with tokens after its padding")
        tokens = tokens[:cut]
    return tokens


def _tokens(result, name: str, depth: int) -> tuple:
    if hasattr(result, "detach"):
        result = result.detach().cpu().numpy()
    array = np.asarray(result)
    if array.dtype.kind not in "iu" or array.ndim not in (1, 2) or (array.ndim == 2 and array.shape[0] != 1):
        raise VerifierError(f"external function {name} returned {array.dtype} of shape {list(array.shape)}; "
                            "expected the emitted tokens as integers of shape [m + 1] or [1, m + 1]")
    tokens = tuple(_row(array.reshape(-1), name))
    if not 1 <= len(tokens) <= depth + 1:
        raise VerifierError(f"external function {name} emitted {len(tokens)} tokens {list(tokens)}; a step emits 1 "
                            f"to {depth + 1} (the accepted drafts, then one more)")
    return tokens


def greedy_consistent(tokens: tuple, problem, drafts: int) -> bool:
    """Whether ``tokens`` is what a correct greedy request (temperature 0) with ``drafts`` drafts may emit, whatever
    its drafter proposed: 1 to drafts + 1 tokens, each the target's argmax after the tokens before it (ties to the
    smallest id, as plain greedy decoding takes them: a greedy step must emit what plain greedy decoding would)."""
    if not 1 <= len(tokens) <= drafts + 1:
        return False
    for index, token in enumerate(tokens):
        law = np.asarray(problem.target(tuple(tokens[:index])), dtype=np.float64)
        if token != int(np.argmax(law)):
            return False
    return True


def greedy_output(problem, drafts: int) -> tuple:
    """What a correct step emits for a greedy request (temperature 0) with ``drafts`` drafts: each draft the argmax
    of the raw draft law (ties to the smallest id), accepted while it is the target's argmax; then the target's
    argmax at the first mismatch, or the bonus."""
    prefix: tuple = ()
    for _ in range(drafts):
        draft = int(np.argmax(problem.draft(prefix)))
        best = int(np.argmax(problem.target(prefix)))
        if draft != best:
            return (*prefix, best)
        prefix = (*prefix, draft)
    return (*prefix, int(np.argmax(problem.target(prefix))))


@dataclass
class StepCheck:
    """One check of a whole step (``check_step``): what it needs and what it found."""

    function: object
    name: str
    layout: StepLayout
    problem: object
    sampling: object
    depth: int
    parents: np.ndarray | None
    call_timeout: float | None
    keys: str = "keyed"
    max_keys: int = MAX_KEYS
    evaluations: int = 0
    filler_mass: float = 0.0
    #: {request: Sampling} of ``step-ragged``'s sampling neighbours (``step_neighbours``); None: greedy fillers.
    neighbours: dict | None = None
    #: ``step-penalties``' ``Penalties`` (``step_penalties``); None in the other layouts.
    penalties: object = None

    def __post_init__(self):
        if (self.penalties is not None) != (self.layout.name == "step-penalties"):  # step_entry gives the default
            raise VerispecError(f"penalties go with the step-penalties layout alone, not {self.layout.name} (or none)")
        size = self.problem.vocab_size
        self.lengths = self.depth + 1
        self.offsets = np.cumsum([0] + [size ** length for length in range(1, self.lengths + 1)])
        # the code of an outcome no correct step has: a filler's non-greedy output, a token outside the vocabulary
        self.filler = int(self.offsets[-1])
        self.count = self.filler + 1
        self.fillers = ({0: (self.problem, FILLER_DRAFTS[0]), 2: (self.problem, FILLER_DRAFTS[1])}
                        if self.layout.name == "step-ragged" and not self.neighbours else None)
        self.joint = None
        if self.neighbours:  # one code over the three requests' blocks
            self.joint = JointCodes(size, (FILLER_DRAFTS[0], self.depth, FILLER_DRAFTS[1]))
            self.filler, self.count = self.joint.impossible, self.joint.count
        self.outside: tuple | None = None
        self.tape = 8
        self.path_ids: dict[bytes, int] = {}
        self.torch_full = False
        self.last_keys: tuple = ()
        self.last_breaks: dict = {}  # the last call's breakpoints known in advance ({uniform: points})

    def code(self, tokens: tuple | None) -> int:
        if tokens is None:
            return self.filler
        size = self.problem.vocab_size
        if any(not 0 <= t < size for t in tokens):  # an impossible outcome (vLLM #53029, #44744), not bad output
            self.outside = self.outside or tokens
            return self.filler
        return int(self.offsets[len(tokens) - 1] + np.ravel_multi_index(tokens, (size,) * len(tokens)))

    def run(self, capture: Capture, values: np.ndarray, seed: int = STEP_SEED):
        """One call with its draws fed from ``values`` [1, U]: (code, used [U], path label); ``last_keys`` holds the
        keys it drew from."""
        tape = Tape(values)
        arguments = self.layout.arguments(self.problem, self.sampling, self.depth, self.parents, seed, self.neighbours,
                                          self.penalties)
        capture.start(tape)
        try:
            result = call_function(self.function, self.name, self.call_timeout, arguments)
        finally:
            capture.start(None)
        capture.end_call()
        self.evaluations += 1
        code = (self.joint.code(self.layout.blocks(result, self.name, self.depth)) if self.joint is not None
                else self.code(self.layout.emitted(result, self.name, self.depth, self.fillers)))
        self.last_keys = tuple(tape.keys)
        keys, inverse = tape.paths()
        self.last_breaks = tape.known()
        return code, tape.used, self.path_ids.setdefault(keys[int(inverse[0])], len(self.path_ids))

    def probe(self, rng: np.random.Generator) -> None:
        """Before any law: the same call twice (the second with the clocks a day ahead) must draw from the same keys
        and give the same outcome, and the call handed another seed must draw from other keys (``KeyRefusal``
        otherwise, as ``runner.Runner.probe`` refuses for the other layouts)."""
        from verispec.external.calls import CLOCK_SHIFT
        from verispec.external.rng import KeyRefusal

        values = rng.random((1, self.tape))
        while True:
            try:
                outcomes = []
                for seed, offset in ((STEP_SEED, 0.0), (STEP_SEED, CLOCK_SHIFT), (STEP_SEED + 7919, 0.0)):
                    capture = self.capture(clock_offset=offset)
                    try:
                        with capture:
                            code, _, _ = self.run(capture, values, seed)
                    except Signal as signal:
                        raise signal.error from None
                    outcomes.append((code, self.last_keys))
                break
            except UniformsExhausted as exhausted:
                self.grow(exhausted.needed)
                values = np.concatenate([values, rng.random((1, self.tape - values.shape[1]))], axis=1)
        (first, keys), (second, again), (_, other) = outcomes
        if keys != again:
            raise KeyRefusal(f"external function {self.name} drew from keys {list(keys)}, then {list(again)} in two "
                             "identical calls: its keys are not a function of its inputs (the time, os.urandom, a "
                             "counter kept across calls), so verispec cannot read them; derive them from the seed")
        shared = sorted(set(keys) & set(other))
        if shared:
            raise KeyRefusal(f"external function {self.name} drew from key {shared[0]} whether handed seed {STEP_SEED} "
                             f"or {STEP_SEED + 7919}: that key does not depend on the request's seed, so every request "
                             "draws the same numbers from it; derive every key from the seed it is handed")
        if first != second:
            raise NondeterministicError(f"external function {self.name} gave two different outcomes for the same "
                                        "arguments and uniforms: it draws randomness verispec does not feed")

    def _evaluate(self, capture: Capture, rows: np.ndarray, points: np.ndarray):
        """What exact integration evaluates: each point's code, labelled by its path, the uniforms it read, and its
        breakpoints known in advance ({uniform: points}: an integer draw's)."""
        codes = np.empty(len(rows), dtype=np.int64)
        used = np.zeros(points.shape, dtype=bool)
        breaks = []
        for index in range(len(rows)):
            code, row_used, label = self.run(capture, points[index:index + 1])
            codes[index] = code + self.count * label
            used[index] = row_used
            breaks.append(self.last_breaks)
        return codes, used, breaks

    def capture(self, clock_offset: float = 0.0) -> Capture:
        capture = Capture(self.name, "capture", torch_full=self.torch_full, keys=self.keys, max_keys=self.max_keys,
                          clock_offset=clock_offset)
        capture.handed_seed = True  # every step layout hands the request's seed
        return capture

    def exact_law(self, options: dict) -> np.ndarray:
        """The law [count] of the step's codes, integrated over its draws (the tape grown until they fit)."""
        while True:
            capture = self.capture()
            try:
                with capture:
                    return integrate(functools.partial(self._evaluate, capture), 1, self.tape, self.count,
                                     name=self.name, stats=IntegrationStats(), **options)[0]
            except Signal as signal:
                raise signal.error from None
            except UniformsExhausted as exhausted:
                self.grow(exhausted.needed)
            except TorchEscape:
                self.torch_full = True

    def grow(self, needed: int) -> None:
        if needed > MAX_STEP_UNIFORMS:
            raise VerifierError(f"external function {self.name} drew more than {MAX_STEP_UNIFORMS} uniforms in one "
                                "step")
        self.tape = min(max(needed, 2 * self.tape), MAX_STEP_UNIFORMS)

    def sampled_law(self, samples: int, rng: np.random.Generator,
                    until: float | None = None) -> tuple[np.ndarray, int]:
        """(the frequencies [count] of the codes of ``samples`` runs, each with fresh uniforms, the runs made); with
        ``until`` (a ``time.monotonic()`` value), of the runs made before it, at least one: a number set by the
        clock, not by the outcomes, so the tests stay valid."""
        counts = np.zeros(self.count)
        capture = self.capture()
        runs = 0
        try:
            with capture:
                for index in range(samples):
                    if index and until is not None and time.monotonic() >= until:
                        break
                    if index % 256 == 0:
                        budget.check(f"running external function {self.name}")
                    values = rng.random((1, self.tape))
                    while True:
                        try:
                            code, _, _ = self.run(capture, values)
                            break
                        except UniformsExhausted as exhausted:  # fresh uniforms appended: the same run, longer
                            self.grow(exhausted.needed)
                            values = np.concatenate([values, rng.random((1, self.tape - values.shape[1]))], axis=1)
                    counts[code] += 1
                    runs += 1
        except Signal as signal:
            raise signal.error from None
        return counts / runs, runs

    def requested(self) -> list:
        """The problem each checked request asks for (``requested_problem``): the checked request's, or with
        sampling neighbours the three requests' in order."""
        depth = self.depth + 1
        if self.joint is None:
            return [requested_problem(self.problem, self.sampling, depth, self.penalties)]
        return [requested_problem(self.problem, own, drafts + 1) for own, drafts in zip(
            (self.neighbours[0], self.sampling, self.neighbours[2]), self.joint.drafts)]

    def target(self, wanted: list) -> np.ndarray:
        """The law the step must emit: (V,)*(D+1), or the product of the three requests' (``joint_target``)."""
        if self.joint is None:
            return np.asarray(target_law(wanted[0], self.depth + 1), dtype=np.float64)
        return joint_target(wanted, self.joint.drafts, self.problem.vocab_size)

    def continued(self, law: np.ndarray, wanted: list) -> np.ndarray:
        """The law of codes continued with the target(s), in ``target``'s shape."""
        if self.joint is not None:
            return self.joint.continued(law, wanted)
        tables = tuple(self.block_tables(law))
        return np.asarray(OutputLaw(self.problem.vocab_size, self.depth, tables).continued_with_target(wanted[0]),
                          dtype=np.float64)

    def block_tables(self, law: np.ndarray) -> list[np.ndarray]:
        """The law of codes as the checked request's emitted-block tables [(V,)*l for l = 1..D+1]."""
        if self.joint is not None:
            return self.joint.tables(law, RAGGED_CHECKED)
        size = self.problem.vocab_size
        return [law[self.offsets[length - 1]:self.offsets[length]].reshape((size,) * length)
                for length in range(1, self.lengths + 1)]


def step_depth(layout: StepLayout, drafter, problem) -> tuple[int, np.ndarray | None]:
    """(the block's depth D, the tree's parents for ``step-tree``: node j + 1's parent at [j]) from ``--tree``."""
    if layout.name != "step-tree":
        if type(drafter).__name__ != "ChainDrafter":
            raise VerispecError(f"layout {layout.name!r} drafts one chain: give --tree chain:K (got {drafter.spec!r})")
        return drafter.depth, None
    from verispec.external.layouts import ExpandedTree

    tree, _ = next(iter(drafter.outcomes(problem)))
    expanded = ExpandedTree.of(tree.as_batch())
    return drafter.depth, np.asarray(expanded.parent[1:], dtype=np.int64)


def check_signature(function, layout: StepLayout, name: str) -> None:
    """Refuse, before any call, a function whose parameters are not the layout's arguments, by name and in order
    (further parameters need defaults): a wrong --layout, or arguments misnamed."""
    import inspect

    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required_after = [p.name for p in parameters[len(layout.argument_names):]
                      if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if tuple(names[:len(layout.argument_names)]) != layout.argument_names or required_after:
        raise VerispecError(f"external function {name} takes ({', '.join(names)}), but the {layout.name} layout hands "
                            f"({', '.join(layout.argument_names)}), by these names and in this order: rename its "
                            "parameters, or check --layout (verispec.external.step states each layout)")


def check_step(function, layout_name: str, drafter, problem, sampling, *, name: str, mode: str = "auto",
               samples: int | None = None, alpha: float, detect_tv: float, power: float, seed: int,
               call_timeout: float | None, keys: str = "keyed", max_keys: int = MAX_KEYS, options: dict | None = None,
               threshold: float = DEFAULT_THRESHOLD, neighbours: dict | None = None, penalties=None):
    """The verdict on a whole step (module docstring): a ``CheckReport``; ``neighbours``: ``step-ragged``'s sampling
    neighbours ({request: Sampling}, ``step_neighbours``), whose joint law with the checked request is checked;
    ``penalties``: ``step-penalties``' ``Penalties`` (``step_penalties``)."""
    from verispec.external.check_report import CheckReport

    start = time.monotonic()
    layout = STEP_LAYOUTS[layout_name]
    check_signature(function, layout, name)
    depth, parents = step_depth(layout, drafter, problem)
    size = problem.vocab_size
    if sum(size ** length for length in range(1, depth + 2)) > MAX_STEP_SEQUENCES:
        raise VerispecError(f"a step check tabulates the blocks of up to {depth + 1} tokens over V = {size}, more than "
                            f"{MAX_STEP_SEQUENCES:,}; use a smaller vocabulary or fewer drafts")
    check = StepCheck(function, name, layout, problem, sampling, depth, parents, call_timeout, keys, max_keys,
                      neighbours=neighbours, penalties=penalties)
    wanted = check.requested()
    target = check.target(wanted)  # (V,)*(D+1), or the three requests' product
    note = (f"checked against the target after the requested sampling ({sampling.describe()})"
            + neighbours_note(neighbours) + penalties_note(penalties, size))
    blackbox, tv, used_mode = None, None, mode
    try:
        check.probe(np.random.default_rng(seed))
        out_of_time = False
        if mode in ("auto", "exact"):
            try:
                law = check.exact_law(options or {}) if mode == "exact" else exact_within(check, options)
                used_mode = "exact"
            except (NotPiecewiseConstantError, NondeterministicError) as error:
                if mode == "exact":
                    raise
                note += f"; exact mode refused, so black-box mode was used: {error}"
                used_mode = "blackbox"
            except ExactOutOfTime as ran_out:
                note += (f"; exact mode did not finish in {ran_out.seconds:.3g} s ({AUTO_EXACT_SHARE:.0%} of the time "
                         f"left) after {ran_out.evaluations:,} calls, so black-box mode was used")
                used_mode, out_of_time = "blackbox", True
        if used_mode == "blackbox":
            samples, until = blackbox_runs(samples, target, detect_tv, alpha, power, out_of_time)
            law, runs = check.sampled_law(samples, np.random.default_rng(seed), until)
            if runs < samples:
                note += f"; {runs:,} runs fit the time left (the verdict says what they can detect)"
                samples = runs
    except FunctionRaised as raised:
        return CheckReport(function=name, layout=layout_name, tree=drafter.spec, mode=used_mode,
                           verdict=Verdict.RAISES, scope="on the given problem", tv_distance=None, tv_estimate=None,
                           block_efficiency=None, problem=None, problem_source="given",
                           seconds=time.monotonic() - start, evaluations=check.evaluations, note=note,
                           raised={"problem": None, "witness_label": "", **raised.to_json()})
    filler = float(law[check.filler])
    tables = check.block_tables(law)
    estimate = check.continued(law, wanted)
    efficiency = float(sum(table.sum() * (length + 1) for length, table in enumerate(tables)))
    if filler > 0:
        outside = (f"emitted tokens outside the vocabulary 0..{size - 1} (e.g. {list(check.outside)})"
                   if check.outside is not None else "")
        wrong = ("a greedy filler request (0 or 2) emitted other than target-argmax tokens (e.g. "
                 f"{list(greedy_output(problem, FILLER_DRAFTS[0]))} for request 0)" if check.fillers else "")
        note += (f"; with probability {filler:.6g} the step has an outcome no correct step has: "
                 + " or ".join(part for part in (outside, wrong) if part))
    if used_mode == "exact":
        tv = float(0.5 * np.abs(estimate - target).sum() + 0.5 * filler)
        verdict = Verdict.LOSSY if tv > threshold else Verdict.LOSSLESS
    else:
        blackbox = _bernstein(estimate, target, samples, alpha, power, 1.0 / samples, 1.0 / samples, False,
                              efficiency)
        if filler > 0:
            blackbox = _with_filler(blackbox)
        verdict = (Verdict.LOSSY if blackbox.rejected else Verdict.LOSSLESS
                   if blackbox.detectable_tv <= detect_tv else Verdict.INCONCLUSIVE)
    shown = None if verdict is Verdict.LOSSLESS else discrepancies(estimate, target)
    return CheckReport(function=name, layout=layout_name, tree=drafter.spec, mode=used_mode, verdict=verdict,
                       scope="on the given problem", tv_distance=tv,
                       tv_estimate=None if blackbox is None else blackbox.tv_estimate,
                       block_efficiency=efficiency, problem=None, problem_source="given",
                       seconds=time.monotonic() - start, blackbox=blackbox, discrepancies=shown,
                       evaluations=check.evaluations, note=note, threshold=threshold, block_tables=tables)


def _with_filler(result: BlackBoxResult) -> BlackBoxResult:
    """A black-box result where a filler emitted a wrong output: impossible for a correct step, so rejected."""
    result.adjusted_p = 0.0
    return result


__all__ = ["STEP_LAYOUTS", "LogitsModel", "StepLayout", "check_step", "greedy_output"]
