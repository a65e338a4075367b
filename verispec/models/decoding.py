"""Real speculative decoding: verispec's drafters and verifiers on a (target, draft) pair of language models.

One block (the reference's "one step of speculative decoding"):

1. *Drafting.* The draft model feeds the tokens the target has accepted that it has not seen yet (the last of
   them is the tree's root) and the drafter draws a tree through ``DraftSide``, a ``Problem`` whose draft
   conditionals q(. | root-to-node path) are computed on demand by the draft model over its KV cache, one
   forward pass per tree level (``Problem.prepare_drafts``). The drafter is the very ``Drafter.draw`` the
   exact engine enumerates; its random decisions come from a ``RandomChooser`` over the run's explicit
   numpy Generator.
2. *Target forward.* The target feeds its unseen tokens and every node of the tree in ONE forward pass
   (``CachedModel.extend``: tree attention mask and positions over the cache), giving p at every node.
3. *Verification.* (A rule written only as a sampling procedure runs as written instead, with the same
   Generator.) The verifier's batched law ``emission_laws`` (the same code the exact engine sums over
   draft outcomes) runs on a one-row ``TreeBatch`` of torch float64 tensors on the models' device and
   returns law[node, token] = P(accept the path to node, then emit token). The decoder draws (node, token)
   from that law with the same Generator: the accepted path and the extra token together have exactly the
   law of the rule's sampling procedure, so the output keeps the target's law whenever the rule is lossless.
4. *Cache update.* Both caches keep the accepted path and drop the rest of the tree (``CachedModel.commit``).

p and q are the same ``Sampling`` law (temperature, top-k, top-p) of each model's logits in float64, and
drafting samples from exactly the q the verifier is handed (the reference's trap 8).

``sample_target`` is the reference: plain sampling from the target with the same settings, one target
forward per token, over the same cache machinery.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from verispec import budget
from verispec.errors import ModelError, ProblemTooLargeError, VerifierError, VerispecError
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel
from verispec.simulator.chooser import MAX_CHOICES_PER_TRACE, RandomChooser
from verispec.simulator.drafters import Drafter, parse_tree
from verispec.simulator.engine import check_compatible
from verispec.simulator.interfaces import Verifier, checked_outcome
from verispec.simulator.laws import check_emission_laws
from verispec.simulator.problems import Prefix, Problem, readable_count
from verispec.simulator.trees import DraftTree, TreeBatch, TreeShape, shape_paths

#: Most nodes (root included) of a tree decoded: every target forward feeds the whole tree with an n x (context + n)
#: attention mask, and the verifier's law holds n x V float64 entries. Sequoia's and DySpec's largest trees have
#: 768 nodes; iid:99999,2 (200,000 nodes) was built and forwarded with no estimate.
MAX_DECODE_NODES = 4096

#: Most float64 entries (nodes x V) of one tree's conditionals: p, q and the verifier's law each hold one such
#: array (2 GiB at this limit); at Qwen's V = 151,936 the limit allows 1,766 nodes.
MAX_TREE_LAW_ENTRIES = 1 << 28

#: Seconds one call of a user's rule (a procedure, or a Verifier or NodeSolver of one's own) may take in real
#: decoding, once per block: a hard limit (verispec.budget), since such a rule may loop without ever returning.
#: Registered verifiers run without it.
USER_RULE_CALL_SECONDS = 60.0


def check_decode_tree(drafter: Drafter, vocab_size: int | None = None) -> None:
    """ProblemTooLargeError, before any model runs, when a tree of ``drafter`` could have more than
    MAX_DECODE_NODES nodes or (given the vocabulary) its conditionals more than MAX_TREE_LAW_ENTRIES float64
    entries. Computed from ``Drafter.max_nodes`` alone: nothing is drawn or built."""
    nodes = drafter.max_nodes
    log_entries = math.log(nodes) + math.log(vocab_size or 1)
    if nodes > MAX_DECODE_NODES or log_entries > math.log(MAX_TREE_LAW_ENTRIES):
        shown = readable_count(log_entries) if log_entries >= math.log(1e9) else f"{math.exp(log_entries):,.0f}"
        raise ProblemTooLargeError(
            f"tree {drafter.spec} has up to {nodes:,} nodes; one block would forward all of them at once (an "
            f"n x n attention mask) and hold "
            + (f"{shown} float64 conditionals (n x V at V={vocab_size:,}: {math.exp(log_entries) * 8 / 2**30:,.1f} "
               "GiB per array)" if vocab_size else "n x V float64 conditionals")
            + f", above the limits of {MAX_DECODE_NODES:,} nodes and {MAX_TREE_LAW_ENTRIES:,} entries; use a "
              "smaller tree")


def _synchronize(device) -> None:
    """Wait for queued GPU work, so a wall-clock split charges each phase its own time."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


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

    @property
    def total_s(self) -> float:
        return self.drafting_s + self.target_s + self.verify_s + self.cache_s


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
        phases = {name: sum(getattr(block, name) for block in self.blocks)
                  for name in ("drafting_s", "target_s", "verify_s", "cache_s")}
        return {"new_tokens": len(self.tokens), "text": self.text, "tokens": self.tokens,
                "blocks": len(self.blocks), "target_calls": self.target_calls,
                "draft_calls": sum(block.draft_calls for block in self.blocks),
                "tokens_per_target_call": self.tokens_per_target_call,
                "mean_accepted": (float(np.mean([b.accepted for b in self.blocks])) if self.blocks else 0.0),
                "decode_s": self.decode_s, "prefill_s": self.prefill_s,
                "tokens_per_s": len(self.tokens) / self.decode_s if self.decode_s > 0 else None,
                **phases, "records": [asdict(block) for block in self.blocks]}


class DraftSide(Problem):
    """The draft half of a problem for one block, backed by the draft model: ``draft(prefix)`` is q(. | the
    tokens before the root, root, prefix), computed by the draft model over its KV cache.

    Every prefix the drafter asks about extends one it asked about before (a child is drawn from its
    parent's q), so each new prefix is one new token under an already fed node. ``prepare_drafts`` feeds a
    whole level in one forward pass. ``target`` is not available here: the target scores the finished tree
    in one pass instead."""

    exact = False

    def __init__(self, model: CachedModel, root_logits, root_node: int, sampling: Sampling, horizon: int,
                 law_for_drafting=None):
        self.model = model
        self.sampling = sampling
        self.horizon = horizon
        self.vocab_size = int(root_logits.shape[-1])
        #: q for the drafter, optionally different from the verifier's (only the broken controls in tests)
        self._law_for_drafting = law_for_drafting
        self.node: dict[Prefix, int] = {(): root_node}  # prefix -> its pending index in the draft cache
        self.law: dict[Prefix, Any] = {}                # prefix -> q on the device, float64 [V]
        self.host: dict[Prefix, np.ndarray] = {}        # prefix -> the drafter's q on the host [V]
        self.forward_calls = 0
        self._store([()], root_logits[None])

    def _store(self, prefixes, logits) -> None:
        laws = self.sampling.probabilities(logits)  # [n, V] float64
        drafting = laws if self._law_for_drafting is None else self._law_for_drafting(logits)
        host = drafting.cpu().numpy()
        host.setflags(write=False)  # on a CPU it shares memory with the q the verifier is handed
        for row, prefix in enumerate(prefixes):
            self.law[prefix] = laws[row]
            self.host[prefix] = host[row]

    def prepare_drafts(self, prefixes) -> None:
        missing = [prefix for prefix in dict.fromkeys(tuple(p) for p in prefixes) if prefix not in self.law]
        if not missing:
            return
        for prefix in missing:
            if prefix[:-1] not in self.node:
                raise VerispecError(f"the drafter asked for q after {prefix} before drawing its parent's child")
        first = self.model.pending
        logits = self.model.extend([prefix[-1] for prefix in missing], [self.node[prefix[:-1]] for prefix in missing])
        self.forward_calls += 1
        for offset, prefix in enumerate(missing):
            self.node[prefix] = first + offset
        self._store(missing, logits)

    def draft(self, prefix: Prefix) -> np.ndarray:
        prefix = tuple(prefix)
        if prefix not in self.law:
            self.prepare_drafts([prefix])
        return self.host[prefix]

    def target(self, prefix: Prefix) -> np.ndarray:
        raise VerispecError("the draft side of a block has no target law; the target scores the whole tree at once")


@dataclass(frozen=True)
class TreeLayout:
    """A drawn shape as node arrays in its canonical (breadth-first) order: what TreeBatch and the target's
    tree forward need."""

    paths: tuple[tuple[int, ...], ...]
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    tokens: tuple[int, ...]
    child_lists: tuple[tuple[int, ...], ...]

    @classmethod
    def of_shape(cls, shape: TreeShape) -> TreeLayout:
        paths = shape_paths(shape)
        index = {path: node for node, path in enumerate(paths)}
        parent = (-1,) + tuple(index[path[:-1]] for path in paths[1:])
        child_lists = tuple(tuple(index[paths[node] + (int(token),)] for token in children)
                            for node, children in enumerate(shape))
        return cls(tuple(paths), parent, tuple(len(path) for path in paths),
                   (-1,) + tuple(path[-1] for path in paths[1:]), child_lists)

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root's first child down to ``node`` (empty for the root)."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parent[node]
        return path[::-1]


def _categorical(rng: np.random.Generator, weights: np.ndarray, what: str) -> int:
    """Index i with probability weights[i] / sum(weights) (tiny negative rounding clipped)."""
    weights = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    total = weights.sum()
    if not total > 0:
        raise VerifierError(f"{what}: the law has no positive mass")
    return RandomChooser(rng).categorical(weights / total)


class SpeculativeDecoder:
    """Speculative decoding of one sequence with a pair, a drafter and a verifier (batch size one).

    ``run(prompt, max_new_tokens)`` decodes; the decoder keeps no state between runs except the models.
    ``law_for_drafting`` exists for the negative controls in the tests only: a function of the draft's
    logits giving the law the drafter samples from, while the verifier still sees ``sampling``'s q."""

    def __init__(self, pair: ModelPair, drafter: Drafter | str, verifier: Verifier | str,
                 sampling: Sampling | None = None, seed: int = 0, *, stop_at_eos: bool = True,
                 static_cache: bool = False, graphs: bool = False, law_for_drafting=None):
        from verispec.verifiers import get_verifier

        self.pair = pair
        self.drafter = parse_tree(drafter) if isinstance(drafter, str) else drafter
        self.verifier = get_verifier(verifier) if isinstance(verifier, str) else verifier
        check_compatible(self.verifier, self.drafter)
        check_decode_tree(self.drafter, pair.vocab_size)
        self.sampling = sampling or Sampling()
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise VerispecError(f"seed must be a non-negative integer, got {seed!r}")
        self.rng = np.random.default_rng(int(seed))
        self.stop_tokens = pair.eos_token_ids if stop_at_eos else frozenset()
        #: graphs: CUDA graphs over static caches (tree_forward.GraphedForward); it implies a static cache
        self.graphs = bool(graphs)
        self.static_cache = static_cache or self.graphs
        #: True for rules written only as a sampling procedure (ProcedureVerifier, or the top-down walk of a
        #: ProcedureSolver): they are sampled by their procedure instead of through an enumerated law.
        self.by_procedure = _procedure_only(self.verifier)
        #: a rule of the user's own runs each call under USER_RULE_CALL_SECONDS
        self.user_rule = _user_rule(self.verifier)
        self._law_for_drafting = law_for_drafting

    def run(self, prompt, max_new_tokens: int, progress=None) -> Generation:
        _check_budget(max_new_tokens)
        prompt_tokens = self.pair.encode(prompt)
        device = self.pair.device
        # A static cache holds the prompt, the continuation, a whole tree and the draft's unseen tokens.
        slots = (len(prompt_tokens) + max_new_tokens + self.drafter.max_nodes + self.drafter.depth + 2
                 if self.static_cache else None)
        target = CachedModel(self.pair.target, slots, graphs=self.graphs)
        draft = CachedModel(self.pair.draft, slots, graphs=self.graphs)
        start = time.perf_counter()
        if len(prompt_tokens) > 1:
            target.prefill(prompt_tokens[:-1])
            draft.prefill(prompt_tokens[:-1])
        _synchronize(device)
        generation = Generation(prompt_tokens, [], "", prefill_s=time.perf_counter() - start)
        # Tokens in the sequence that a model has not fed yet; the last one is the next tree's root.
        target_unseen, draft_unseen = [prompt_tokens[-1]], [prompt_tokens[-1]]
        while len(generation.tokens) < max_new_tokens:
            emitted, record, draft_unseen = self._block(target, draft, target_unseen, draft_unseen)
            room = max_new_tokens - len(generation.tokens)
            kept = emitted[:room]
            for index, token in enumerate(kept):
                if token in self.stop_tokens:
                    kept = kept[: index + 1]
                    break
            record.emitted = len(kept)
            generation.tokens.extend(kept)
            generation.blocks.append(record)
            if progress is not None:
                progress.update(len(kept))
            if kept and kept[-1] in self.stop_tokens or len(kept) < len(emitted):
                break
            target_unseen = [emitted[-1]]
        generation.text = self.pair.decode(generation.tokens)
        return generation

    def first_block_taus(self, context, seeds) -> list[int]:
        """tau of the first block after ``context`` (text or token ids), once per seed: each block is drawn with
        a Generator seeded from that seed, over caches prefilled ONCE and rolled back after every block
        (``CachedModel.rollback``). What real decoding measures against a prediction at that context."""
        tokens = self.pair.encode(context)
        if len(tokens) < 2:
            raise VerispecError("first_block_taus needs a context of at least 2 tokens")
        slots = len(tokens) + self.drafter.max_nodes + self.drafter.depth + 2 if self.static_cache else None
        target = CachedModel(self.pair.target, slots, graphs=self.graphs)
        draft = CachedModel(self.pair.draft, slots, graphs=self.graphs)
        target.prefill(tokens[:-1])
        draft.prefill(tokens[:-1])
        taus, run_rng = [], self.rng
        try:
            for seed in seeds:
                self.rng = np.random.default_rng(int(seed))  # the block draws everything from self.rng
                _, record, _ = self._block(target, draft, [tokens[-1]], [tokens[-1]])
                taus.append(record.accepted)
                target.rollback(len(tokens) - 1)
                draft.rollback(len(tokens) - 1)
        finally:
            self.rng = run_rng  # run() goes on with the decoder's own seed
        return taus

    def _sample_procedure(self, layout: TreeLayout, p, q) -> tuple[int, int]:
        """A rule given only as a sampling procedure runs as written, on the host, with the run's generator
        (its law would come from enumerating every random choice: hopeless at a real vocabulary)."""
        tree = DraftTree.from_topology(int(p.shape[-1]), layout.parent, layout.tokens, layout.child_lists,
                                       p.cpu().numpy(), q.cpu().numpy())
        # the decision cap of exact enumeration (MAX_CHOICES_PER_TRACE) holds here too: a rule that never stops
        # choosing is named instead of decoding forever
        chooser = RandomChooser(self.rng, max_choices=MAX_CHOICES_PER_TRACE, name=self.verifier.name)
        with self._rule_call():
            outcome = self.verifier.procedure(tree, chooser)
        return checked_outcome(outcome, tree, self.verifier.name)

    def _rule_call(self):
        """A hard limit of USER_RULE_CALL_SECONDS around one call of a user's rule (nothing for registered ones)."""
        if not self.user_rule:
            return contextlib.nullcontext()
        return budget.time_budget(time.monotonic() + USER_RULE_CALL_SECONDS, hard=True,
                                  what=f"one call of the rule '{self.verifier.name}' (at most "
                                       f"{USER_RULE_CALL_SECONDS:g} s per block in decoding)")

    def _block(self, target: CachedModel, draft: CachedModel, target_unseen: list[int], draft_unseen: list[int]):
        import torch

        device = self.pair.device
        times = [time.perf_counter()]
        # 1. drafting: catch the draft up on the accepted tokens it has not seen; the last one is the root
        root_logits = draft.extend(draft_unseen, list(range(-1, len(draft_unseen) - 1)))[-1]
        side = DraftSide(draft, root_logits, len(draft_unseen) - 1, self.sampling, self.drafter.depth,
                         self._law_for_drafting)
        self.drafter.check_problem(side)
        layout = TreeLayout.of_shape(self.drafter.draw(side, RandomChooser(self.rng, max_choices=MAX_CHOICES_PER_TRACE,
                                                                           name=self.drafter.spec)))
        _synchronize(device)
        times.append(time.perf_counter())
        # 2. the target: its unseen tokens, then every drafted node, in one forward pass
        unseen = len(target_unseen)
        parents = list(range(-1, unseen - 1)) + [unseen - 1 + parent for parent in layout.parent[1:]]
        logits = target.extend(target_unseen + list(layout.tokens[1:]), parents)[unseen - 1:]  # [n, V]
        p = self.sampling.probabilities(logits)
        _synchronize(device)
        times.append(time.perf_counter())
        # 3. the verifier's law on the device, then (node, token) drawn from it with the run's generator
        nodes = len(layout.parent)
        q = torch.full_like(p, float("nan"))
        for node, children in enumerate(layout.child_lists):
            if children:
                q[node] = side.law[layout.paths[node]]
        batch = TreeBatch(vocab_size=int(p.shape[-1]), parent=layout.parent, depth=layout.depth,
                          child_lists=layout.child_lists,
                          tokens=torch.tensor([layout.tokens], dtype=torch.int64, device=device),
                          p=p[None], q=q[None], contexts=torch.arange(nodes, device=device)[None])
        if self.by_procedure:
            node, token = self._sample_procedure(layout, p, q)
        else:
            with self._rule_call():
                laws = self.verifier.emission_laws(batch)  # [1, n, V]
            check_emission_laws(self.verifier.name, batch, laws)  # the exact engine's check, on the device
            law = laws[0]
            node_mass = law.sum(dim=-1).cpu().numpy()
            node = _categorical(self.rng, node_mass, f"verifier '{self.verifier.name}'")
            token = _categorical(self.rng, law[node].cpu().numpy(),
                                 f"verifier '{self.verifier.name}' at node {node}")
        times.append(time.perf_counter())
        # 4. caches: keep the accepted path, drop the rest of the tree
        path = layout.path_to(node)
        target.commit(list(range(unseen)) + [unseen - 1 + n for n in path])
        fed = [n for n in path if layout.paths[n] in side.node]  # leaves were never fed to the draft
        draft.commit(list(range(len(draft_unseen))) + [side.node[layout.paths[n]] for n in fed])
        accepted = [layout.tokens[n] for n in path]
        emitted = accepted + [token]
        next_draft_unseen = accepted[len(fed):] + [token]
        _synchronize(device)
        times.append(time.perf_counter())
        record = BlockRecord(accepted=len(path), emitted=len(emitted), tree_size=nodes - 1, target_calls=1,
                             draft_calls=1 + side.forward_calls, drafting_s=times[1] - times[0],
                             target_s=times[2] - times[1], verify_s=times[3] - times[2],
                             cache_s=times[4] - times[3])
        return emitted, record, next_draft_unseen


def _user_rule(verifier: Verifier) -> bool:
    """Whether ``verifier`` is not one of the registered rules (a user's own, or a variant)."""
    from verispec.verifiers import REGISTRY

    return not any(verifier is registered for registered in REGISTRY.values())


def _procedure_only(verifier: Verifier) -> bool:
    from verispec.verifiers import ProcedureSolver, ProcedureVerifier

    return isinstance(verifier, ProcedureVerifier) or isinstance(verifier.node_solver, ProcedureSolver)


def _check_budget(max_new_tokens) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise VerispecError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def generate(pair: ModelPair, prompt: str | Sequence[int], drafter: Drafter | str, verifier: Verifier | str,
             max_new_tokens: int, sampling: Sampling | None = None, seed: int = 0, *,
             stop_at_eos: bool = True, static_cache: bool = False, graphs: bool = False,
             progress=None) -> Generation:
    """Speculative decoding of ``prompt`` with ``drafter`` (a Drafter or a tree spec such as 'delayed:4,2,2')
    and ``verifier`` (a Verifier or a registry name); see the module docstring. Returns the continuation and
    one ``BlockRecord`` per block. ``seed`` seeds the one numpy Generator every random decision comes from.
    ``static_cache``: both models keep their KV in a StaticCache allocated once for the whole run (fixed
    tensor addresses) instead of a growing DynamicCache. ``graphs``: every forward of both models replays a CUDA
    graph captured once per input width over a static cache (``tree_forward.GraphedForward``; on a CPU the same
    padded buffers run eagerly), which is what makes small forwards cheap on a GPU."""
    decoder = SpeculativeDecoder(pair, drafter, verifier, sampling, seed, stop_at_eos=stop_at_eos,
                                 static_cache=static_cache, graphs=graphs)
    return decoder.run(prompt, max_new_tokens, progress)


def sample_target(pair: ModelPair, prompt: str | Sequence[int], max_new_tokens: int,
                  sampling: Sampling | None = None, seed: int = 0, *, stop_at_eos: bool = True,
                  static_cache: bool = False, graphs: bool = False, progress=None) -> Generation:
    """Plain sampling from the target with ``sampling`` (the reference speculative decoding must match): one
    target forward per token over its KV cache; one ``BlockRecord`` per token (accepted 0, tree size 0).
    ``static_cache`` and ``graphs`` as in ``generate``."""
    _check_budget(max_new_tokens)
    sampling = sampling or Sampling()
    rng = np.random.default_rng(int(seed))
    stop_tokens = pair.eos_token_ids if stop_at_eos else frozenset()
    prompt_tokens = pair.encode(prompt)
    slots = len(prompt_tokens) + max_new_tokens + 1 if static_cache or graphs else None
    target = CachedModel(pair.target, slots, graphs=graphs)
    start = time.perf_counter()
    if len(prompt_tokens) > 1:
        target.prefill(prompt_tokens[:-1])
    _synchronize(pair.device)
    generation = Generation(prompt_tokens, [], "", prefill_s=time.perf_counter() - start)
    last = prompt_tokens[-1]
    while len(generation.tokens) < max_new_tokens:
        begin = time.perf_counter()
        logits = target.extend([last], [-1])[0]
        law = sampling.probabilities(logits).cpu().numpy()
        _synchronize(pair.device)
        forward = time.perf_counter()
        last = _categorical(rng, law, "the target's sampling law")
        drawn = time.perf_counter()
        target.commit([0])
        _synchronize(pair.device)
        generation.tokens.append(last)
        generation.blocks.append(BlockRecord(accepted=0, emitted=1, tree_size=0, target_calls=1, draft_calls=0,
                                             drafting_s=0.0, target_s=forward - begin, verify_s=drawn - forward,
                                             cache_s=time.perf_counter() - drawn))
        if progress is not None:
            progress.update(1)
        if last in stop_tokens:
            break
    generation.text = pair.decode(generation.tokens)
    return generation


__all__ = ["BlockRecord", "DraftSide", "Generation", "ModelError", "SpeculativeDecoder", "TreeLayout", "generate",
           "sample_target"]
