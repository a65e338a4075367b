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

*Policies* (the delay selector of Thomas et al. 2026, arXiv 2602.16994, DDTE Sec. 6 and Appendix E): with
``selector=policy`` (a ``BlockPolicy``) every block first asks the policy which of its actions, a (tree,
verifier) pair, to run. The policy sees only what exists before the block's draws (``BlockContext``: the
sequence, p and q at the token before the root, q at the root, optionally hidden states), so the block is the
action's ordinary block and the output keeps the target's law for any such policy (each block is lossless
given the prefix it starts from; ``verispec.policy`` composes the exact law block by block). A choice
made after seeing the target's probabilities of the drafted tokens is a different, lossy rule
(``verispec.policy.PeekingVerifier``). Each ``BlockRecord`` names the action (its index) and the
seconds the policy spent choosing (``select_s``, part of ``total_s``); a catch-up forward of the draft that the
policy needed before choosing counts as drafting.

A block whose tree is the root alone (``chain:0``, or a policy's action with L1 = L2 = 0) runs no draft forward
at all: the target's one forward and its draw are plain sampling (the same uniforms as ``sample_target``: a
one-node tree draws no node), and the draft catches up on every token it has not seen in one forward when a
later block drafts (or when the policy reads q).

``sample_target`` is the reference: plain sampling from the target with the same settings, one target
forward per token, over the same cache machinery.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

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
from verispec.simulator.trees import DraftTree, TreeBatch, TreeBuilder, TreeShape, shape_paths

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
        phases = {name: sum(getattr(block, name) for block in self.blocks)
                  for name in ("drafting_s", "target_s", "verify_s", "cache_s", "select_s")}
        return {"new_tokens": len(self.tokens), "text": self.text, "tokens": self.tokens,
                "blocks": len(self.blocks), "target_calls": self.target_calls,
                "draft_calls": sum(block.draft_calls for block in self.blocks),
                "tokens_per_target_call": self.tokens_per_target_call,
                "mean_accepted": (float(np.mean([b.accepted for b in self.blocks])) if self.blocks else 0.0),
                "decode_s": self.decode_s, "prefill_s": self.prefill_s,
                "tokens_per_s": len(self.tokens) / self.decode_s if self.decode_s > 0 else None,
                **phases, "records": [asdict(block) for block in self.blocks]}


@dataclass(frozen=True)
class BlockContext:
    """What a policy may read before a block's draws (DDTE, arXiv 2602.16994, Appendix E: its features are all
    computed before the block drafts). The root is the last token of ``tokens``; "prev" is the position before
    it, whose law produced the root.

    Laws are ``Sampling``'s law of the model's logits, torch float64 [V] on the models' device, or None where
    not computed: ``p_prev`` (the target's law of the root token: from the previous block's verify forward at
    its accepted node, or from the prompt's prefill; None for a one-token prompt), ``q_prev`` (the draft's law
    there) and ``q_root`` (the draft's law after the root, from the draft's catch-up forward): both only when the
    policy ``needs_draft`` (and ``q_prev`` None for a one-token prompt). ``hidden`` (only when the policy
    ``needs_hidden``): the last layer's hidden states [H], ``"target_prev"`` (the target at the token before
    the root; the target has not fed the root yet), ``"draft_prev"`` and ``"draft_root"``; an entry is absent
    where the position does not exist (a one-token prompt)."""

    #: The whole sequence so far, prompt included; the last token is the root of the block's tree.
    tokens: tuple[int, ...]
    context_length: int
    p_prev: Any
    q_prev: Any
    q_root: Any
    hidden: dict[str, Any] | None
    sampling: Sampling


@runtime_checkable
class BlockPolicy(Protocol):
    """Chooses each block's (tree, verifier) from the ``BlockContext`` before the block's draws.

    ``actions()``: the (tree spec or Drafter, verifier name or Verifier) pairs it chooses among, validated once
    when decoding starts (``check_compatible``, ``check_decode_tree``); ``choose(context)`` returns an index
    into them. ``needs_draft``: ``choose`` reads ``q_prev``/``q_root``, so the draft catches up on the root before
    choosing (otherwise a block whose action is chain:0 runs no draft forward). ``needs_hidden``: ``choose``
    reads ``context.hidden`` (eager forwards only: not with graphs)."""

    needs_draft: bool
    needs_hidden: bool

    def actions(self) -> Sequence[tuple[Any, Any]]:
        ...

    def choose(self, context: BlockContext) -> int:
        ...


@dataclass(frozen=True)
class _Action:
    """One (drafter, verifier) a decoder may run, resolved and checked once."""

    drafter: Drafter
    verifier: Verifier
    #: rules written only as a sampling procedure run it as written (ProcedureVerifier, a ProcedureSolver's walk)
    by_procedure: bool
    #: a rule of the user's own runs each call under USER_RULE_CALL_SECONDS
    user_rule: bool

    @property
    def drafts(self) -> bool:
        """Whether a tree of this drafter can have a drafted node (chain:0 and delayed:K,0,0 cannot)."""
        return self.drafter.max_nodes > 1


def _resolve_action(drafter, verifier, vocab_size: int, what: str = "") -> _Action:
    from verispec.verifiers import get_verifier

    if isinstance(drafter, str):
        drafter = parse_tree(drafter)
    elif not isinstance(drafter, Drafter):
        raise VerispecError(f"{what}expected a tree specification such as 'delayed:2,1,2' or a Drafter, got "
                            f"{type(drafter).__name__}")
    if isinstance(verifier, str):
        verifier = get_verifier(verifier)
    elif not isinstance(verifier, Verifier):
        raise VerispecError(f"{what}expected a verifier name or a Verifier, got {type(verifier).__name__}")
    try:
        check_compatible(verifier, drafter)
        check_decode_tree(drafter, vocab_size)
    except VerispecError as error:
        if not what:
            raise
        raise type(error)(f"{what}{error}") from None
    return _Action(drafter, verifier, _procedure_only(verifier), _user_rule(verifier))


def _policy_actions(policy, vocab_size: int) -> tuple[_Action, ...]:
    """A policy's actions, resolved and checked up front (each distinct tree and verifier parsed once)."""
    name = type(policy).__name__
    for attribute in ("needs_draft", "needs_hidden", "actions", "choose"):
        if not hasattr(policy, attribute):
            raise VerispecError(f"policy {name} has no '{attribute}': a BlockPolicy has needs_draft, needs_hidden, "
                                "actions() and choose(context)")
    entries = list(policy.actions())
    if not entries:
        raise VerispecError(f"policy {name} lists no actions")
    trees: dict = {}
    verifiers: dict = {}
    actions = []
    for index, entry in enumerate(entries):
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
            raise VerispecError(f"policy {name} action {index} is {entry!r:.80}; an action is a (tree, verifier) pair")
        tree, verifier = entry
        what = f"policy {name} action {index}: "
        if isinstance(tree, str):
            if tree not in trees:
                try:
                    trees[tree] = parse_tree(tree)
                except VerispecError as error:
                    raise type(error)(f"{what}{error}") from None
            tree = trees[tree]
        if isinstance(verifier, str):
            if verifier not in verifiers:
                from verispec.verifiers import get_verifier

                try:
                    verifiers[verifier] = get_verifier(verifier)
                except VerispecError as error:
                    raise type(error)(f"{what}{error}") from None
            verifier = verifiers[verifier]
        actions.append(_resolve_action(tree, verifier, vocab_size, what))
    return tuple(actions)


@dataclass
class _Sequence:
    """What the decoder carries from block to block: the tokens each model has not fed, and the laws (and
    hidden states) at the last position each has fed, for the next block's ``BlockContext``."""

    tokens: list[int]
    #: Tokens in the sequence that a model has not fed yet; the last one is the next tree's root.
    target_unseen: list[int]
    draft_unseen: list[int]
    #: The target's law after its last fed token (the law of the next root), and its hidden state there.
    p_prev: Any = None
    target_hidden: Any = None
    #: The draft's law after its last committed token, and its hidden state there (q_prev when it has fed
    #: every token but the root).
    q_tail: Any = None
    draft_hidden: Any = None


class DraftSide(Problem):
    """The draft half of a problem for one block, backed by the draft model: ``draft(prefix)`` is q(. | the
    tokens before the root, root, prefix), computed by the draft model over its KV cache.

    Every prefix the drafter asks about extends one it asked about before (a child is drawn from its
    parent's q), so each new prefix is one new token under an already fed node. ``prepare_drafts`` feeds a
    whole level in one forward pass. ``target`` is not available here: the target scores the finished tree
    in one pass instead."""

    exact = False

    def __init__(self, model: CachedModel, root_logits, root_node: int, sampling: Sampling, horizon: int,
                 law_for_drafting=None, root_hidden=None, root_law=None):
        self.model = model
        self.sampling = sampling
        self.horizon = horizon
        self.vocab_size = int(root_logits.shape[-1])
        #: q for the drafter, optionally different from the verifier's (only the broken controls in tests)
        self._law_for_drafting = law_for_drafting
        self.node: dict[Prefix, int] = {(): root_node}  # prefix -> its pending index in the draft cache
        self.law: dict[Prefix, Any] = {}                # prefix -> q on the device, float64 [V]
        self.host: dict[Prefix, np.ndarray] = {}        # prefix -> the drafter's q on the host [V]
        self.hidden: dict[Prefix, Any] = {}             # prefix -> the draft's hidden state [H] (model.hidden only)
        self.forward_calls = 0
        self._store([()], root_logits[None], None if root_hidden is None else root_hidden[None],
                    None if root_law is None else root_law[None])

    def _store(self, prefixes, logits, hidden=None, laws=None) -> None:
        """``laws``: the sampling laws of ``logits`` when the caller has them already (the policy's q_root)."""
        laws = self.sampling.probabilities(logits) if laws is None else laws  # [n, V] float64
        drafting = laws if self._law_for_drafting is None else self._law_for_drafting(logits)
        host = drafting.cpu().numpy()
        host.setflags(write=False)  # on a CPU it shares memory with the q the verifier is handed
        for row, prefix in enumerate(prefixes):
            self.law[prefix] = laws[row]
            self.host[prefix] = host[row]
            if hidden is not None:
                self.hidden[prefix] = hidden[row]

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
        self._store(missing, logits, self.model.last_hidden if self.model.hidden else None)

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
    """Speculative decoding of one sequence with a pair, a drafter and a verifier (batch size one), or with a
    ``BlockPolicy`` (``selector``) choosing each block's (drafter, verifier) among its actions.

    ``run(prompt, max_new_tokens)`` decodes; the decoder keeps no state between runs except the models.
    ``law_for_drafting`` exists for the negative controls in the tests only: a function of the draft's
    logits giving the law the drafter samples from, while the verifier still sees ``sampling``'s q."""

    def __init__(self, pair: ModelPair, drafter: Drafter | str | None = None, verifier: Verifier | str | None = None,
                 sampling: Sampling | None = None, seed: int = 0, *, selector: BlockPolicy | None = None,
                 stop_at_eos: bool = True, static_cache: bool = False, graphs: bool = False, law_for_drafting=None):
        self.pair = pair
        self.policy = selector
        if selector is None:
            if drafter is None or verifier is None:
                raise VerispecError("give a drafter (tree) and a verifier, or a policy (selector=...)")
            action = _resolve_action(drafter, verifier, pair.vocab_size)
            self.actions: tuple[_Action, ...] = (action,)
            self.drafter, self.verifier = action.drafter, action.verifier
        else:
            if drafter is not None or verifier is not None:
                raise VerispecError("a policy (selector=...) chooses each block's tree and verifier; give it without "
                                    "a drafter or verifier")
            self.actions = _policy_actions(selector, pair.vocab_size)
            self.drafter = self.verifier = None
        self.sampling = sampling or Sampling()
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise VerispecError(f"seed must be a non-negative integer, got {seed!r}")
        self.rng = np.random.default_rng(int(seed))
        self.stop_tokens = pair.eos_token_ids if stop_at_eos else frozenset()
        #: graphs: CUDA graphs over static caches (tree_forward.GraphedForward); it implies a static cache
        self.graphs = bool(graphs)
        self.static_cache = static_cache or self.graphs
        self.needs_draft = bool(selector is not None and selector.needs_draft)
        self.needs_hidden = bool(selector is not None and selector.needs_hidden)
        if self.needs_hidden and self.graphs:
            raise VerispecError("this policy reads hidden states, which eager forwards keep and graphed ones do not; "
                                "decode without graphs")
        #: whether the draft model runs at all (not for chain:0 alone with a policy that reads nothing of it)
        self.uses_draft = self.needs_draft or self.needs_hidden or any(action.drafts for action in self.actions)
        self.max_nodes = max(action.drafter.max_nodes for action in self.actions)
        self.max_depth = max(action.drafter.depth for action in self.actions)
        #: for a static drafter and verifier (kept for callers that read them)
        self.by_procedure = self.actions[0].by_procedure
        self.user_rule = self.actions[0].user_rule
        self._law_for_drafting = law_for_drafting

    def _models(self, tokens: int) -> tuple[CachedModel, CachedModel]:
        # A static cache holds the sequence, a whole tree and the draft's unseen tokens.
        slots = tokens + self.max_nodes + self.max_depth + 2 if self.static_cache else None
        target = CachedModel(self.pair.target, slots, graphs=self.graphs, hidden=self.needs_hidden)
        draft = CachedModel(self.pair.draft, slots, graphs=self.graphs, hidden=self.needs_hidden)
        return target, draft

    def _prefill(self, target: CachedModel, draft: CachedModel, tokens: list[int]) -> _Sequence:
        """Feed the tokens before the root to both models (to the draft only when it runs at all)."""
        state = _Sequence(list(tokens), [tokens[-1]], [tokens[-1]])
        if len(tokens) > 1:
            logits = target.prefill(tokens[:-1])
            if self.policy is not None:
                state.p_prev = self.sampling.probabilities(logits)
                state.target_hidden = target.last_hidden[-1] if self.needs_hidden else None
            if self.uses_draft:
                logits = draft.prefill(tokens[:-1])
                if self.needs_draft:
                    state.q_tail = self.sampling.probabilities(logits)
                state.draft_hidden = draft.last_hidden[-1] if self.needs_hidden else None
            else:
                state.draft_unseen = list(tokens)
        return state

    def run(self, prompt, max_new_tokens: int, progress=None) -> Generation:
        _check_budget(max_new_tokens)
        prompt_tokens = self.pair.encode(prompt)
        target, draft = self._models(len(prompt_tokens) + max_new_tokens)
        start = time.perf_counter()
        state = self._prefill(target, draft, prompt_tokens)
        _synchronize(self.pair.device)
        generation = Generation(prompt_tokens, [], "", prefill_s=time.perf_counter() - start)
        while len(generation.tokens) < max_new_tokens:
            emitted, record = self._block(target, draft, state)
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
        generation.text = self.pair.decode(generation.tokens)
        return generation

    def first_block_taus(self, context, seeds) -> list[int]:
        """tau of the first block after ``context`` (text or token ids), once per seed: each block is drawn with
        a Generator seeded from that seed, over caches prefilled ONCE and rolled back after every block
        (``CachedModel.rollback``). What real decoding measures against a prediction at that context."""
        if self.policy is not None:
            raise VerispecError("first_block_taus measures one static (tree, verifier); this decoder has a policy")
        tokens = self.pair.encode(context)
        if len(tokens) < 2:
            raise VerispecError("first_block_taus needs a context of at least 2 tokens")
        target, draft = self._models(len(tokens))
        target.prefill(tokens[:-1])
        if self.uses_draft:
            draft.prefill(tokens[:-1])
        taus, run_rng = [], self.rng
        try:
            for seed in seeds:
                self.rng = np.random.default_rng(int(seed))  # the block draws everything from self.rng
                unseen = [tokens[-1]] if self.uses_draft else list(tokens)
                _, record = self._block(target, draft, _Sequence(list(tokens), [tokens[-1]], unseen))
                taus.append(record.accepted)
                target.rollback(len(tokens) - 1)
                if self.uses_draft:
                    draft.rollback(len(tokens) - 1)
        finally:
            self.rng = run_rng  # run() goes on with the decoder's own seed
        return taus

    def _sample_procedure(self, action: _Action, layout: TreeLayout, p, q) -> tuple[int, int]:
        """A rule given only as a sampling procedure runs as written, on the host, with the run's generator
        (its law would come from enumerating every random choice: hopeless at a real vocabulary)."""
        tree = DraftTree.from_topology(int(p.shape[-1]), layout.parent, layout.tokens, layout.child_lists,
                                       p.cpu().numpy(), q.cpu().numpy())
        # the decision cap of exact enumeration (MAX_CHOICES_PER_TRACE) holds here too: a rule that never stops
        # choosing is named instead of decoding forever
        chooser = RandomChooser(self.rng, max_choices=MAX_CHOICES_PER_TRACE, name=action.verifier.name)
        with self._rule_call(action):
            outcome = action.verifier.procedure(tree, chooser)
        return checked_outcome(outcome, tree, action.verifier.name)

    def _rule_call(self, action: _Action):
        """A hard limit of USER_RULE_CALL_SECONDS around one call of a user's rule (nothing for registered ones, nor
        where the command line's --call-timeout limits every call into the user's code already)."""
        if not action.user_rule or budget.calls_limited():
            return contextlib.nullcontext()
        return budget.time_budget(time.monotonic() + USER_RULE_CALL_SECONDS, hard=True,
                                  what=f"one call of the rule '{action.verifier.name}' (at most "
                                       f"{USER_RULE_CALL_SECONDS:g} s per block in decoding)")

    def _catch_up(self, draft: CachedModel, state: _Sequence):
        """Feed the draft every token it has not seen (the root last) in one forward: logits [u, V] and, for a
        policy that reads them, hidden states [u, H]."""
        unseen = state.draft_unseen
        logits = draft.extend(unseen, list(range(-1, len(unseen) - 1)))
        return logits, (draft.last_hidden if self.needs_hidden else None)

    def _choose(self, state: _Sequence, caught_up) -> tuple[int, Any]:
        """The policy's action for this block, from what exists before its draws, and q at the root when the
        policy needed it (drafting reuses it: one sampling law less per block, a top-p sort at Qwen's V)."""
        q_prev = q_root = None
        hidden = None
        if caught_up is not None:
            logits, states = caught_up
            if self.needs_draft:
                q_root = self.sampling.probabilities(logits[-1])
                q_prev = self.sampling.probabilities(logits[-2]) if len(logits) > 1 else state.q_tail
            if self.needs_hidden:
                previous = states[-2] if len(states) > 1 else state.draft_hidden
                hidden = {name: value for name, value in (("target_prev", state.target_hidden),
                                                           ("draft_prev", previous), ("draft_root", states[-1]))
                          if value is not None}
        context = BlockContext(tuple(state.tokens), len(state.tokens), state.p_prev, q_prev, q_root, hidden,
                               self.sampling)
        index = self.policy.choose(context)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.actions):
            raise VerispecError(f"policy {type(self.policy).__name__}.choose returned {index!r:.60}; expected an "
                                f"action index in 0..{len(self.actions) - 1}")
        return int(index), q_root

    def _block(self, target: CachedModel, draft: CachedModel, state: _Sequence):
        """One block from ``state`` (updated to the next block's): the emitted tokens and the block's record."""
        import torch

        device = self.pair.device
        begin = time.perf_counter()
        draft_calls, caught_up, select_s, index, root_law = 0, None, 0.0, None, None
        # 0. the policy's choice, from what exists before the draws (the draft catches up first if it reads q)
        if self.policy is not None:
            if self.needs_draft or self.needs_hidden:
                caught_up = self._catch_up(draft, state)
                draft_calls += 1
                _synchronize(device)
            chosen = time.perf_counter()
            index, root_law = self._choose(state, caught_up)
            select_s = time.perf_counter() - chosen
        action = self.actions[0 if index is None else index]
        times = [time.perf_counter()]
        # 1. drafting: catch the draft up on the accepted tokens it has not seen (the last one is the root), then
        # draw the tree; a tree of the root alone runs no draft forward
        side = None
        if action.drafts:
            if caught_up is None:
                caught_up = self._catch_up(draft, state)
                draft_calls += 1
            logits, states = caught_up
            side = DraftSide(draft, logits[-1], len(state.draft_unseen) - 1, self.sampling, action.drafter.depth,
                             self._law_for_drafting, None if states is None else states[-1], root_law)
            action.drafter.check_problem(side)
            shape = action.drafter.draw(side, RandomChooser(self.rng, max_choices=MAX_CHOICES_PER_TRACE,
                                                            name=action.drafter.spec))
            draft_calls += side.forward_calls
        else:
            shape = TreeBuilder().shape()
        layout = TreeLayout.of_shape(shape)
        _synchronize(device)
        times.append(time.perf_counter())
        # 2. the target: its unseen tokens, then every drafted node, in one forward pass
        unseen = len(state.target_unseen)
        parents = list(range(-1, unseen - 1)) + [unseen - 1 + parent for parent in layout.parent[1:]]
        logits = target.extend(state.target_unseen + list(layout.tokens[1:]), parents)[unseen - 1:]  # [n, V]
        p = self.sampling.probabilities(logits)
        _synchronize(device)
        times.append(time.perf_counter())
        # 3. the verifier's law on the device, then (node, token) drawn from it with the run's generator
        nodes = len(layout.parent)
        q = torch.full_like(p, float("nan"))
        if side is not None:
            for node, children in enumerate(layout.child_lists):
                if children:
                    q[node] = side.law[layout.paths[node]]
        batch = TreeBatch(vocab_size=int(p.shape[-1]), parent=layout.parent, depth=layout.depth,
                          child_lists=layout.child_lists,
                          tokens=torch.tensor([layout.tokens], dtype=torch.int64, device=device),
                          p=p[None], q=q[None], contexts=torch.arange(nodes, device=device)[None])
        name = action.verifier.name
        if action.by_procedure:
            node, token = self._sample_procedure(action, layout, p, q)
        else:
            with self._rule_call(action):
                laws = action.verifier.emission_laws(batch)  # [1, n, V]
            check_emission_laws(name, batch, laws)  # the exact engine's check, on the device
            law = laws[0]
            # a one-node tree (chain:0) draws no node: its token takes the first uniform, as plain sampling's does
            node = 0 if nodes == 1 else _categorical(self.rng, law.sum(dim=-1).cpu().numpy(), f"verifier '{name}'")
            token = _categorical(self.rng, law[node].cpu().numpy(), f"verifier '{name}' at node {node}")
        times.append(time.perf_counter())
        # 4. caches: keep the accepted path, drop the rest of the tree
        path = layout.path_to(node)
        target.commit(list(range(unseen)) + [unseen - 1 + n for n in path])
        accepted = [layout.tokens[n] for n in path]
        emitted = accepted + [token]
        if self.policy is not None:  # the next block's p_prev: the target's law at the accepted node
            state.p_prev = p[node].clone()  # a copy: a view would keep the whole tree's p alive
            if self.needs_hidden:
                state.target_hidden = target.last_hidden[unseen - 1 + node].clone()
        if side is not None:
            fed = [n for n in path if layout.paths[n] in side.node]  # leaves were never fed to the draft
            draft.commit(list(range(len(state.draft_unseen))) + [side.node[layout.paths[n]] for n in fed])
            last = layout.paths[fed[-1]] if fed else ()
            state.q_tail = side.law[last].clone() if self.needs_draft else None
            state.draft_hidden = side.hidden[last].clone() if self.needs_hidden else None
            state.draft_unseen = accepted[len(fed):] + [token]
        elif caught_up is not None:  # chain:0 after a catch-up for the policy: the draft has fed the root
            draft.commit(list(range(len(state.draft_unseen))))
            logits, states = caught_up
            state.q_tail = self.sampling.probabilities(logits[-1]) if self.needs_draft else None
            state.draft_hidden = None if states is None else states[-1]
            state.draft_unseen = [token]
        else:  # the draft did not run: it will catch up on these in one forward when a block drafts
            state.draft_unseen = state.draft_unseen + accepted + [token]
        state.target_unseen = [emitted[-1]]
        state.tokens.extend(emitted)
        _synchronize(device)
        times.append(time.perf_counter())
        record = BlockRecord(accepted=len(path), emitted=len(emitted), tree_size=nodes - 1, target_calls=1,
                             draft_calls=draft_calls, drafting_s=times[1] - begin - select_s,
                             target_s=times[2] - times[1], verify_s=times[3] - times[2],
                             cache_s=times[4] - times[3], action=index, select_s=select_s)
        return emitted, record


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


def generate(pair: ModelPair, prompt: str | Sequence[int], drafter: Drafter | str | None,
             verifier: Verifier | str | None, max_new_tokens: int, sampling: Sampling | None = None, seed: int = 0, *,
             selector: BlockPolicy | None = None, stop_at_eos: bool = True, static_cache: bool = False,
             graphs: bool = False, progress=None) -> Generation:
    """Speculative decoding of ``prompt`` with ``drafter`` (a Drafter or a tree spec such as 'delayed:4,2,2')
    and ``verifier`` (a Verifier or a registry name); see the module docstring. Returns the continuation and
    one ``BlockRecord`` per block. ``seed`` seeds the one numpy Generator every random decision comes from.
    ``selector``: a ``BlockPolicy`` choosing every block's (tree, verifier) among its actions before the block's
    draws (drafter and verifier then None); each record names the action and the seconds spent choosing.
    ``static_cache``: both models keep their KV in a StaticCache allocated once for the whole run (fixed
    tensor addresses) instead of a growing DynamicCache. ``graphs``: every forward of both models replays a CUDA
    graph captured once per input width over a static cache (``tree_forward.GraphedForward``; on a CPU the same
    padded buffers run eagerly), which is what makes small forwards cheap on a GPU."""
    decoder = SpeculativeDecoder(pair, drafter, verifier, sampling, seed, selector=selector, stop_at_eos=stop_at_eos,
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


__all__ = ["BlockContext", "BlockPolicy", "BlockRecord", "DraftSide", "Generation", "ModelError", "SpeculativeDecoder",
           "TreeLayout", "generate", "sample_target"]
