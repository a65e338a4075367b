"""Real speculative decoding: verispec's drafters and verifiers on a (target, draft) pair of language models.

One block of speculative decoding:

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
drafting samples from exactly the q the verifier is handed (trap 8 of docs/guides/reference.md).

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

``sample_target`` (``verispec.models.generation``) is the reference: plain sampling from the target with the
same settings, one target forward per token, over the same cache machinery.

``SpeculativeDecoder._block`` runs the block as named steps (``_select``, ``_draft``, ``_score``, ``_verify``,
``_commit``) and times each one by phase (``generation.StepClock``); the steps themselves hold no timing.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from verispec.errors import VerispecError
from verispec.guard import budget
from verispec.models.block_context import BlockContext, PositionLaw, position_law
from verispec.models.block_tree import MAX_DECODE_NODES, MAX_TREE_LAW_ENTRIES, DraftSide, TreeLayout, check_decode_tree
from verispec.models.generation import (
    BlockRecord,
    Generation,
    StepClock,
    categorical,
    check_max_new_tokens,
    synchronize,
)
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel
from verispec.simulator.chooser import MAX_CHOICES_PER_TRACE, RandomChooser
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import check_compatible
from verispec.simulator.interfaces import Verifier, checked_outcome
from verispec.simulator.laws import check_emission_laws
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import DraftTree, TreeBatch, TreeBuilder
from verispec.verifiers.node_cache import fresh_nodes

#: Seconds one call of a user's rule (a procedure, or a Verifier or NodeSolver of one's own) may take in real
#: decoding, once per block: a hard limit (verispec.guard.budget), since such a rule may loop without ever returning.
#: Registered verifiers run without it.
USER_RULE_CALL_SECONDS = 60.0


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
    #: The target's law after its last fed token (the law of the next root, a PositionLaw), and its hidden state.
    p_prev: Any = None
    target_hidden: Any = None
    #: The draft's law after its last committed token (a PositionLaw), and its hidden state there (q_prev when it
    #: has fed every token but the root).
    q_tail: Any = None
    draft_hidden: Any = None


@dataclass
class _Block:
    """One block's work as its steps fill it in (``SpeculativeDecoder._block``)."""

    #: the (drafter, verifier) the block runs, and its index among the policy's actions (None without a policy)
    action: _Action
    index: int | None = None
    #: forward passes of the draft so far
    draft_calls: int = 0
    #: tokens the run still wants (None: no limit); the tree is drafted no deeper than room - 1
    room: int | None = None
    #: the draft's catch-up forward: (logits [u, V], hidden states [u, H] or None), when it ran
    caught_up: Any = None
    #: q at the root (a PositionLaw) when the policy read it (drafting reuses its law if the policy computed it)
    root_law: Any = None
    #: the drawn tree: its draft side (None when the tree is the root alone) and its node arrays
    side: DraftSide | None = None
    layout: TreeLayout | None = None
    #: tokens the target fed before the tree, its law and its logits at every node [n, V] (torch, on the device)
    unseen: int = 0
    p: Any = None
    logits: Any = None
    #: the drawn (node, token) and the accepted path to the node (node ids, the root excluded)
    node: int = 0
    token: int = 0
    path: list[int] = field(default_factory=list)


class SpeculativeDecoder:
    """Speculative decoding of one sequence with a pair, a drafter and a verifier (batch size one), or with a
    ``BlockPolicy`` (``selector``) choosing each block's (drafter, verifier) among its actions.

    ``run(prompt, max_new_tokens)`` decodes; the decoder keeps no state between runs except the models.
    ``law_for_drafting`` exists for the negative controls in the tests only: a function of the draft's
    logits giving the law the drafter samples from, while the verifier still sees ``sampling``'s q."""

    def __init__(self, pair: ModelPair, drafter: Drafter | str | None = None, verifier: Verifier | str | None = None,
                 sampling: Sampling | None = None, seed: int = 0, *, selector: BlockPolicy | None = None,
                 stop_at_eos: bool = True, static_cache: bool = False, graphs: bool = False, law_for_drafting=None,
                 cut_drafts: bool = True):
        self.pair = pair
        #: draft no deeper than the tokens a run still wants (``_drafter``); checks of a tree's law turn it off
        self.cut_drafts = bool(cut_drafts)
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
        self.rng = _generator(seed)
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
        self.by_procedure = self.actions[0].by_procedure  # a static drafter and verifier's (kept for callers)
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
                state.p_prev = PositionLaw(self.sampling, logits=logits)
                state.target_hidden = target.last_hidden[-1] if self.needs_hidden else None
            if self.uses_draft:
                logits = draft.prefill(tokens[:-1])
                if self.needs_draft:
                    state.q_tail = PositionLaw(self.sampling, logits=logits)
                state.draft_hidden = draft.last_hidden[-1] if self.needs_hidden else None
            else:
                state.draft_unseen = list(tokens)
        return state

    def run(self, prompt, max_new_tokens: int, progress=None) -> Generation:
        return next(self.runs(prompt, max_new_tokens, [None], progress))

    def runs(self, prompt, max_new_tokens: int, seeds, progress=None):
        """One run per seed of ``seeds`` (None: the decoder's own generator), yielded as each ends: the prompt is
        prefilled ONCE and both caches are rolled back to it after each run (``CachedModel.rollback`` keeps the prefix's
        keys and values), so each is ``run`` by a decoder of that seed, token for token; later runs' prefill_s is 0."""
        check_max_new_tokens(max_new_tokens)
        prompt_tokens = self.pair.encode(prompt)
        target, draft = self._models(len(prompt_tokens) + max_new_tokens)
        start = time.perf_counter()
        prefilled = self._prefill(target, draft, prompt_tokens)
        synchronize(self.pair.device)
        prefill_s, lengths = time.perf_counter() - start, (target.committed, draft.committed)
        for index, seed in enumerate(seeds):
            self.rng = self.rng if seed is None else _generator(seed)
            if index:  # back to the caches the prefill left
                target.rollback(lengths[0])
                draft.rollback(lengths[1])
            state = replace(prefilled, tokens=[*prefilled.tokens], target_unseen=[*prefilled.target_unseen],
                            draft_unseen=[*prefilled.draft_unseen], p_prev=copy.copy(prefilled.p_prev),
                            q_tail=copy.copy(prefilled.q_tail))  # laws as the prefill left them, computed or not
            generation = Generation(prompt_tokens, [], "", prefill_s=0.0 if index else prefill_s)
            yield self._decode(target, draft, state, generation, max_new_tokens, progress)

    def _decode(self, target: CachedModel, draft: CachedModel, state: _Sequence, generation: Generation,
                max_new_tokens: int, progress) -> Generation:
        """Blocks from the prefilled ``state`` until ``max_new_tokens`` or a stop token."""
        while len(generation.tokens) < max_new_tokens:
            room = max_new_tokens - len(generation.tokens)
            emitted, record = self._block(target, draft, state, room)
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
        """Feed the draft every token it has not seen (the root last) in one forward: logits [u, V] ([1, V], the
        root's, unless the policy reads q before it) and, for a policy that reads them, hidden states [u, H]."""
        unseen = state.draft_unseen
        # only the root's row of the output layer, unless the policy reads q before the root (at V = 151,936 a row
        # of the output layer is a large part of a small draft's forward on a CPU)
        logits = draft.extend(unseen, list(range(-1, len(unseen) - 1)), last_only=not self.needs_draft)
        return logits, (draft.last_hidden if self.needs_hidden else None)

    def _choose(self, state: _Sequence, caught_up) -> tuple[int, Any]:
        """The policy's action for this block, from what exists before its draws, and q at the root (a PositionLaw)
        when the policy may read it (drafting reuses its law if the policy computed it: one sampling law less per
        block). The laws are computed only as far as the policy reads them (``block_context``)."""
        q_prev = q_root = None
        hidden = None
        if caught_up is not None:
            logits, states = caught_up
            if self.needs_draft:
                q_root = PositionLaw(self.sampling, logits=logits[-1])
                q_prev = PositionLaw(self.sampling, logits=logits[-2]) if len(logits) > 1 else state.q_tail
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

    def _block(self, target: CachedModel, draft: CachedModel, state: _Sequence, room: int | None = None):
        """One block from ``state`` (updated to the next block's): its named steps, each timed here by phase (a
        step's time runs to the end of the GPU work it queued), then the emitted tokens and the block's record.
        ``room``: the tokens the run still wants (``_drafter``)."""
        clock = StepClock(target.device)  # the CachedModel's, read once (a model's own walks its parameters)
        block = _Block(self.actions[0], room=room)
        if self.policy is not None:
            # the policy's choice, from what exists before the draws (the draft catches up first if it reads q)
            if self.needs_draft or self.needs_hidden:
                clock.time("drafting_s", self._catch_up_for_policy, draft, state, block)
            clock.time("select_s", self._select, state, block, wait=False)
        clock.time("drafting_s", self._draft, draft, state, block)
        clock.time("target_s", self._score, target, state, block)
        clock.time("verify_s", self._verify, block, wait=False)
        emitted = clock.time("cache_s", self._commit, target, draft, state, block)
        record = BlockRecord(accepted=len(block.path), emitted=len(emitted), tree_size=len(block.layout.parent) - 1,
                             target_calls=1, draft_calls=block.draft_calls, action=block.index, **clock.seconds)
        return emitted, record

    def _catch_up_for_policy(self, draft: CachedModel, state: _Sequence, block: _Block) -> None:
        """The draft's catch-up forward before the policy chooses (it reads q or the draft's hidden states)."""
        block.caught_up = self._catch_up(draft, state)
        block.draft_calls += 1

    def _select(self, state: _Sequence, block: _Block) -> None:
        """The policy's action for this block (``_choose``)."""
        block.index, block.root_law = self._choose(state, block.caught_up)
        block.action = self.actions[block.index]

    def _draft(self, draft: CachedModel, state: _Sequence, block: _Block) -> None:
        """Drafting: catch the draft up on the accepted tokens it has not seen (the last one is the root), then draw
        the tree and lay it out; a tree of the root alone runs no draft forward."""
        action = block.action
        drafter = self._drafter(action, block.room)
        if drafter.max_nodes == 1:
            block.layout = TreeLayout.of_shape(TreeBuilder().shape())
            return
        if block.caught_up is None:
            block.caught_up = self._catch_up(draft, state)
            block.draft_calls += 1
        logits, states = block.caught_up
        side = DraftSide(draft, logits[-1], len(state.draft_unseen) - 1, self.sampling, drafter.depth,
                         self._law_for_drafting, None if states is None else states[-1],
                         None if block.root_law is None else block.root_law.law())
        drafter.check_problem(side)
        shape = drafter.draw(side, RandomChooser(self.rng, max_choices=MAX_CHOICES_PER_TRACE, name=drafter.spec))
        block.draft_calls += side.forward_calls
        block.side, block.layout = side, TreeLayout.of_shape(shape)

    def _drafter(self, action: _Action, room: int | None) -> Drafter:
        """The action's drafter cut at ``room - 1`` (a block emits at most depth + 1 tokens; deeper drafts could
        never be kept): transformers' assisted generation drafts min(K, tokens left - 1) alike. The cut is kept
        only where the action's verifier takes its trees (``check_compatible``); any valid draft keeps the output
        lossless."""
        drafter = action.drafter
        cut = drafter.cut(room - 1) if self.cut_drafts and room is not None and room - 1 < drafter.depth else None
        if cut is None or cut is drafter:
            return drafter
        try:
            check_compatible(action.verifier, cut)
        except VerispecError:
            return drafter
        return cut

    def _score(self, target: CachedModel, state: _Sequence, block: _Block) -> None:
        """The target: its unseen tokens, then every drafted node, in one forward pass; p at every node."""
        unseen = len(state.target_unseen)
        parents = list(range(-1, unseen - 1)) + [unseen - 1 + parent for parent in block.layout.parent[1:]]
        logits = target.extend(state.target_unseen + list(block.layout.tokens[1:]), parents)[unseen - 1:]  # [n, V]
        block.unseen, block.p, block.logits = unseen, self.sampling.probabilities(logits), logits

    def _verify(self, block: _Block) -> None:
        """The verifier's law on the device, then (node, token) drawn from it with the run's generator (a rule
        written only as a sampling procedure runs as written instead); the accepted path ends at the node."""
        import torch

        action, layout, p, device = block.action, block.layout, block.p, block.p.device
        nodes = len(layout.parent)
        q = torch.full_like(p, float("nan"))
        if block.side is not None:
            for node, children in enumerate(layout.child_lists):
                if children:
                    q[node] = block.side.law[layout.paths[node]]
        batch = TreeBatch(vocab_size=int(p.shape[-1]), parent=layout.parent, depth=layout.depth,
                          child_lists=layout.child_lists,
                          tokens=torch.tensor([layout.tokens], dtype=torch.int64, device=device),
                          p=p[None], q=q[None], contexts=torch.arange(nodes, device=device)[None])
        name = action.verifier.name
        if action.by_procedure:
            node, token = self._sample_procedure(action, layout, p, q)
        else:
            with self._rule_call(action), fresh_nodes():  # each node's (p, q) is new: no memo key
                laws = action.verifier.emission_laws(batch)  # [1, n, V]
            check_emission_laws(name, batch, laws)  # the exact engine's check, on the device
            law = laws[0]
            # a one-node tree (chain:0) draws no node: its token takes the first uniform, as plain sampling's does
            node = 0 if nodes == 1 else categorical(self.rng, law.sum(dim=-1).cpu().numpy(), f"verifier '{name}'")
            token = categorical(self.rng, law[node].cpu().numpy(), f"verifier '{name}' at node {node}")
        block.node, block.token, block.path = node, token, layout.path_to(node)

    def _commit(self, target: CachedModel, draft: CachedModel, state: _Sequence, block: _Block) -> list[int]:
        """Caches: keep the accepted path, drop the rest of the tree; ``state`` becomes the next block's. Returns the
        emitted tokens (the accepted drafts, then the drawn token)."""
        layout, side, path, unseen, token = block.layout, block.side, block.path, block.unseen, block.token
        target.commit(list(range(unseen)) + [unseen - 1 + n for n in path])
        accepted = [layout.tokens[n] for n in path]
        emitted = accepted + [token]
        if self.policy is not None:  # the next block's p_prev: the target's law at the accepted node
            state.p_prev = position_law(self.sampling, block.p[block.node], block.logits[block.node])
            if self.needs_hidden:
                state.target_hidden = target.last_hidden[unseen - 1 + block.node].clone()
        if side is not None:
            fed = [n for n in path if layout.paths[n] in side.node]  # leaves were never fed to the draft
            draft.commit(list(range(len(state.draft_unseen))) + [side.node[layout.paths[n]] for n in fed])
            last = layout.paths[fed[-1]] if fed else ()
            state.q_tail = position_law(self.sampling, side.law[last], side.logits[last]) if self.needs_draft else None
            state.draft_hidden = side.hidden[last].clone() if self.needs_hidden else None
            state.draft_unseen = accepted[len(fed):] + [token]
        elif block.caught_up is not None:  # chain:0 after a catch-up for the policy: the draft has fed the root
            draft.commit(list(range(len(state.draft_unseen))))
            logits, states = block.caught_up
            state.q_tail = block.root_law if self.needs_draft else None  # q at the root, computed once if read
            state.draft_hidden = None if states is None else states[-1]
            state.draft_unseen = [token]
        else:  # the draft did not run: it will catch up on these in one forward when a block drafts
            state.draft_unseen = state.draft_unseen + accepted + [token]
        state.target_unseen = [emitted[-1]]
        state.tokens.extend(emitted)
        return emitted


def _generator(seed) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise VerispecError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng(int(seed))


def _user_rule(verifier: Verifier) -> bool:
    """Whether ``verifier`` is not one of the registered rules (a user's own, or a variant)."""
    from verispec.verifiers import REGISTRY

    return not any(verifier is registered for registered in REGISTRY.values())


def _procedure_only(verifier: Verifier) -> bool:
    from verispec.verifiers import ProcedureSolver, ProcedureVerifier

    return isinstance(verifier, ProcedureVerifier) or isinstance(verifier.node_solver, ProcedureSolver)


def generate(pair: ModelPair, prompt: str | Sequence[int], drafter: Drafter | str | None,
             verifier: Verifier | str | None, max_new_tokens: int, sampling: Sampling | None = None, seed: int = 0, *,
             selector: BlockPolicy | None = None, stop_at_eos: bool = True, static_cache: bool = False,
             graphs: bool = False, progress=None, cut_drafts: bool = True) -> Generation:
    """Speculative decoding of ``prompt`` with ``drafter`` (a Drafter or a tree spec such as 'delayed:4,2,2')
    and ``verifier`` (a Verifier or a registry name); see the module docstring. Returns the continuation and
    one ``BlockRecord`` per block. ``seed`` seeds the one numpy Generator every random decision comes from.
    ``selector``: a ``BlockPolicy`` choosing every block's (tree, verifier) among its actions before the block's
    draws (drafter and verifier then None); each record names the action and the seconds spent choosing.
    ``static_cache``: both models keep their KV in a StaticCache allocated once for the whole run (fixed
    tensor addresses) instead of a growing DynamicCache. ``graphs``: every forward of both models replays a CUDA
    graph captured once per input width over a static cache (``tree_forward.GraphedForward``; on a CPU the same
    padded buffers run eagerly), which is what makes small forwards cheap on a GPU. ``cut_drafts``: the last blocks
    draft no deeper than the tokens still wanted (False: every block drafts its whole tree, as a check of the tree's
    law on the first tokens needs)."""
    decoder = SpeculativeDecoder(pair, drafter, verifier, sampling, seed, selector=selector, stop_at_eos=stop_at_eos,
                                 static_cache=static_cache, graphs=graphs, cut_drafts=cut_drafts)
    return decoder.run(prompt, max_new_tokens, progress)


__all__ = ["MAX_DECODE_NODES", "MAX_TREE_LAW_ENTRIES", "BlockContext", "BlockPolicy", "SpeculativeDecoder",
           "check_decode_tree", "generate"]
