"""What decoding returns and the reference it is compared with: a ``Generation`` with one ``BlockRecord`` per block,
the ``StepClock`` that times each named step of a block, and ``sample_target``, plain sampling from the target
(one target forward per token, over the same cache machinery as speculative decoding,
``verispec.models.decoding``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from verispec.errors import VerifierError, VerispecError
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel
from verispec.simulator.chooser import RandomChooser

#: The phases a block's wall time is split into (``BlockRecord``'s fields, in seconds).
PHASES = ("drafting_s", "target_s", "verify_s", "cache_s", "select_s")


def synchronize(device) -> None:
    """Wait for queued GPU work, so a wall-clock split charges each phase its own time."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


class StepClock:
    """The wall time of one block by phase (``PHASES``): ``time(phase, step, *args)`` runs ``step(*args)`` and
    charges its time, up to the end of the GPU work it queued (``synchronize``), to ``phase``; ``wait=False`` for a
    step whose result already reached the host (a token drawn, a choice made), so no wait is added to the block. The
    steps stay free of timing; the block loop that calls them times each one."""

    def __init__(self, device):
        self.device = device
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def time(self, phase: str, step, *args, wait: bool = True):
        begin = time.perf_counter()
        result = step(*args)
        if wait:
            synchronize(self.device)
        self.seconds[phase] += time.perf_counter() - begin
        return result


@dataclass
class BlockRecord:
    """One block of speculative decoding (or one token of plain sampling)."""

    #: Draft tokens accepted (tau); the block emitted tau + 1 tokens (fewer when the generation ended).
    accepted: int
    #: Tokens this block added to the output (after truncation at max_new_tokens or an end token).
    emitted: int
    #: Drafted nodes in the tree (the root excluded).
    tree_size: int
    #: Forward passes of the target (1 per block) and of the draft (one per tree level, plus catch-up).
    target_calls: int
    draft_calls: int
    #: Wall time in seconds, split by phase.
    drafting_s: float
    target_s: float
    verify_s: float
    cache_s: float
    #: The index of the policy's action this block ran (None without a policy).
    action: int | None = None
    #: Seconds the policy spent choosing (its features and its model; 0 without a policy).
    select_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.drafting_s + self.target_s + self.verify_s + self.cache_s + self.select_s


@dataclass
class Generation:
    """A decoded continuation: its tokens and text, and one record per block."""

    prompt_tokens: list[int]
    tokens: list[int]
    text: str
    blocks: list[BlockRecord] = field(default_factory=list)
    #: Seconds spent feeding the prompt (excluded from the per-block times).
    prefill_s: float = 0.0

    @property
    def target_calls(self) -> int:
        return sum(block.target_calls for block in self.blocks)

    @property
    def tokens_per_target_call(self) -> float:
        return len(self.tokens) / max(self.target_calls, 1)

    @property
    def decode_s(self) -> float:
        return sum(block.total_s for block in self.blocks)

    def summary(self) -> dict:
        """JSON-ready totals and the per-block records."""
        phases = {name: sum(getattr(block, name) for block in self.blocks) for name in PHASES}
        return {"new_tokens": len(self.tokens), "text": self.text, "tokens": self.tokens,
                "blocks": len(self.blocks), "target_calls": self.target_calls,
                "draft_calls": sum(block.draft_calls for block in self.blocks),
                "tokens_per_target_call": self.tokens_per_target_call,
                "mean_accepted": (float(np.mean([b.accepted for b in self.blocks])) if self.blocks else 0.0),
                "decode_s": self.decode_s, "prefill_s": self.prefill_s,
                "tokens_per_s": len(self.tokens) / self.decode_s if self.decode_s > 0 else None,
                **phases, "records": [asdict(block) for block in self.blocks]}


def categorical(rng: np.random.Generator, weights: np.ndarray, what: str) -> int:
    """Index i with probability weights[i] / sum(weights) (tiny negative rounding clipped)."""
    weights = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    total = weights.sum()
    if not total > 0:
        raise VerifierError(f"{what}: the law has no positive mass")
    return RandomChooser(rng).categorical(weights / total)


def check_max_new_tokens(max_new_tokens) -> None:
    """VerispecError unless ``max_new_tokens`` is a positive integer."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise VerispecError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def _target_law(target: CachedModel, sampling: Sampling, last: int) -> np.ndarray:
    """The target's sampling law after feeding ``last``, on the host [V]."""
    return sampling.probabilities(target.extend([last], [-1])[0]).cpu().numpy()


def sample_target(pair: ModelPair, prompt: str | Sequence[int], max_new_tokens: int,
                  sampling: Sampling | None = None, seed: int = 0, *, stop_at_eos: bool = True,
                  static_cache: bool = False, graphs: bool = False, progress=None) -> Generation:
    """Plain sampling from the target with ``sampling`` (the reference speculative decoding must match): one
    target forward per token over its KV cache; one ``BlockRecord`` per token (accepted 0, tree size 0).
    ``static_cache`` and ``graphs`` as in ``verispec.models.decoding.generate``."""
    check_max_new_tokens(max_new_tokens)
    sampling = sampling or Sampling()
    rng = np.random.default_rng(int(seed))
    stop_tokens = pair.eos_token_ids if stop_at_eos else frozenset()
    prompt_tokens = pair.encode(prompt)
    slots = len(prompt_tokens) + max_new_tokens + 1 if static_cache or graphs else None
    target = CachedModel(pair.target, slots, graphs=graphs)
    start = time.perf_counter()
    if len(prompt_tokens) > 1:
        target.prefill(prompt_tokens[:-1])
    synchronize(pair.device)
    generation = Generation(prompt_tokens, [], "", prefill_s=time.perf_counter() - start)
    last = prompt_tokens[-1]
    while len(generation.tokens) < max_new_tokens:
        clock = StepClock(target.device)  # the CachedModel's, read once (a model's own walks its parameters)
        law = clock.time("target_s", _target_law, target, sampling, last)
        last = clock.time("verify_s", categorical, rng, law, "the target's sampling law", wait=False)
        clock.time("cache_s", target.commit, [0])
        generation.tokens.append(last)
        generation.blocks.append(BlockRecord(accepted=0, emitted=1, tree_size=0, target_calls=1, draft_calls=0,
                                             **clock.seconds))
        if progress is not None:
            progress.update(1)
        if last in stop_tokens:
            break
    generation.text = pair.decode(generation.tokens)
    return generation
