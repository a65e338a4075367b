"""A problem backed by a live model pair: p and q at every prefix after a real context, computed on demand.

``ModelProblem(pair, context, sampling, horizon)`` is an ordinary ``Problem``: ``target(prefix)`` is the
target's sampling law after context + prefix and ``draft(prefix)`` the draft's, both in float64, with the
same ``Sampling`` (temperature, top-k, top-p) as real decoding. The exact engine can analyse it like any
table; at a small vocabulary (the tiny pairs) that gives the exact block efficiency and acceptance law of a
real decoding block at that context, which real runs must reproduce.

Conditionals are computed in batches: ``prepare(prefixes)`` feeds the trie of many prefixes to each model in
one forward pass over the context's KV cache (shared, computed once), reads the laws at the requested nodes,
then drops the trie from the cache; ``prepare(prefixes, target=False)`` (or ``draft=False``) runs one model.
``shared=SharedContext(pair)`` lets successive problems reuse the caches over their common context prefix.
``ProblemPack`` runs several problems' forwards together, their contexts packed side by side in one cache.
``extend_drafts(prefixes)`` is the drafter's path through a tree drawn level by level: the draft keeps the tree
fed so far and is fed only the new nodes, one draft token a node (the selector's labels draw their combs this
way, then ask the target for the whole comb in one pass). ``target``/``draft`` of a prefix not yet computed
prepare it alone;
``prefetch(depth)`` prepares every prefix up to a depth (V^depth of them). Every law is cached, keyed on the
prefix (the pair, context and sampling are fixed per problem); a law that top-k or top-p cuts to a few tokens is
kept as its support and values (``target_compact``/``draft_compact`` read it so, ``target``/``draft`` as the [V]
vector), so the laws of a label build's combs take kilobytes instead of 1.2 MB each at V = 151,936.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from verispec.errors import InvalidProblemError, VerispecError
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel
from verispec.simulator.problems import CompactLaw, Prefix, Problem, compact_law, expand_law

#: Most tree nodes fed in one forward pass by default.
DEFAULT_NODES_PER_FORWARD = 512
#: Most nodes in one pass of a ``ProblemPack`` (its members' nodes together), the default of one problem: a pass's
#: transients grow with its nodes (the [n, V] float32 logits, 0.3 GB at 512 nodes and V = 151,936; the attention
#: scores of a layer), and past a few hundred nodes a pass costs about its tokens on a CPU, so more nodes save only
#: the weights' reads (one t_p(1) a pass). 8 members at 512 each made 4,096-node passes whose 2.5 GB of logits
#: lifted an m = 64 label build over 12 GB (1,024 nodes: 12.1 GB).
MAX_PACKED_PASS_NODES = 512
#: Default bytes of cached laws, half for each model (a dense law is a [V] float64 array, 1.2 MB at V = 151,936; a
#: law that top-k or top-p cuts to a few tokens is kept as its support and values); the least recently used prefixes
#: are dropped past it and recomputed when asked for again.
DEFAULT_CACHE_BYTES = 2 << 30
#: Bytes counted for a law kept as (support, values) on top of 16 a kept token: the two arrays' own headers.
SPARSE_LAW_OVERHEAD = 256
#: Rows of logits turned into float64 laws at once when a pass's laws are stored (a [rows, V] float64 block:
#: 78 MB at V = 151,936, where a 512-node pass at once took 620 MB).
STORE_ROWS = 64

#: Most draft-tree nodes ``extend_drafts`` keeps fed in the draft's cache (each attends to the context and its
#: ancestors; a key and value a layer each).
MAX_PENDING_DRAFT_NODES = 8192

#: Most prefixes ``prefetch`` accepts (each holds two [V] float64 laws).
MAX_PREFETCH = 1 << 20


class SharedContext:
    """The two models' KV caches over one committed sequence, handed from one ``ModelProblem`` to the next: a
    problem whose context shares a prefix with the previous one's (the roots of one trace, or of one prompt under
    two sampling settings) prefills only the tokens after the common prefix (``CachedModel.rollback``, then
    ``prefill``). One problem owns it at a time; an earlier problem that asks for a new law after the caches moved on
    is refused."""

    def __init__(self, pair: ModelPair):
        self.pair = pair
        self.models = (CachedModel(pair.target), CachedModel(pair.draft))
        self.tokens: list[int] = []    # the committed sequence, the same in both caches
        self.owner = None
        #: Tokens prefilled so far (each model): what sharing saves is the sum of the contexts minus this.
        self.prefilled_tokens = 0

    def take(self, owner, tokens: list[int]) -> tuple[CachedModel, CachedModel]:
        """Commit exactly ``tokens`` in both caches (keeping their longest common prefix with the sequence now
        held) and make ``owner`` the one problem that may run the models."""
        tokens = [int(token) for token in tokens]
        common = 0
        for held, token in zip(self.tokens, tokens):
            if held != token:
                break
            common += 1
        for model in self.models:
            model.rollback(common)  # drops any pending tree too
            if len(tokens) > common:
                model.prefill(tokens[common:])
        self.prefilled_tokens += len(tokens) - common
        self.tokens, self.owner = tokens, owner
        return self.models

    def check_owner(self, problem) -> None:
        if self.owner is not problem:
            raise VerispecError("this ModelProblem's shared KV caches now hold another context (a later problem "
                                "took them); compute its laws before creating the next problem on the same "
                                "SharedContext")


class ProblemPack:
    """ModelProblems of one pair whose forwards run together (the selector's labels: a draft level of several roots,
    or the target over several roots' combs, in one pass).

    ``ProblemPack(pair, contexts, samplings)`` makes one ``ModelProblem`` a context (``problems``), each taking its
    context on ``shared`` in turn (a prompt's roots prefill only what they do not share), then puts their committed
    caches side by side in one packed cache per model (``CachedModel.packed``): member i's nodes grow under segment
    i, at the positions they have in its context alone. Each member keeps its own laws, draft tree and counters and
    is used as any ``ModelProblem``; inside ``together()`` the members' forwards are collected and run at its end in
    as few passes as ``nodes_per_forward`` x members allows. On a CPU a pass of a few tokens costs about what one
    token costs (the weights are read once), so a pack of B roots pays a draft level once instead of B times. A
    member's laws equal its own problem's up to the rounding of the larger pass
    (tests/models/test_model_problem.py)."""

    def __init__(self, pair: ModelPair, contexts, samplings, horizon: int | None = None, *,
                 shared: SharedContext | None = None, **options):
        contexts, samplings = list(contexts), list(samplings)
        if not contexts or len(contexts) != len(samplings):
            raise VerispecError(f"a ProblemPack needs one sampling per context and at least one context, got "
                                f"{len(contexts)} contexts and {len(samplings)} samplings")
        shared = shared if shared is not None else SharedContext(pair)
        self.problems: list[ModelProblem] = []
        states: tuple[list, list] = ([], [])
        for context, sampling in zip(contexts, samplings):
            problem = ModelProblem(pair, context, sampling, horizon, shared=shared, **options)
            for taken, model in zip(states, shared.models):
                taken.append(model.snapshot())
            self.problems.append(problem)
        models = tuple(CachedModel.packed(model.model, taken) for model, taken in zip(shared.models, states))
        self._forwards = _Forwards(models, self.problems, packed=True)
        for problem in self.problems:
            problem._forwards = self._forwards
        shared.owner = None  # the shared caches move on to the next problems; these run on the pack

    def __len__(self) -> int:
        return len(self.problems)

    def together(self):
        """A context manager: the members' forwards asked for inside run together at its end."""
        return self._forwards.together()


class ModelProblem(Problem):
    """p(. | context, prefix) and q(. | context, prefix) from a model pair, computed on demand and cached."""

    exact = False

    def __init__(self, pair: ModelPair, context, sampling: Sampling | None = None, horizon: int | None = None, *,
                 nodes_per_forward: int = DEFAULT_NODES_PER_FORWARD, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 shared: SharedContext | None = None):
        if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0):
            raise InvalidProblemError(f"horizon must be a non-negative integer or None, got {horizon!r}")
        if isinstance(nodes_per_forward, bool) or not isinstance(nodes_per_forward, int) or nodes_per_forward < 2:
            raise VerispecError(f"nodes_per_forward must be an integer >= 2, got {nodes_per_forward!r}")
        self.pair = pair
        self.context = pair.encode(context)
        self.sampling = sampling or Sampling()
        self.horizon = horizon
        self.vocab_size = pair.vocab_size
        self.nodes_per_forward = nodes_per_forward
        if shared is None:
            shared = SharedContext(pair)
        elif not isinstance(shared, SharedContext) or shared.pair is not pair:
            raise VerispecError("shared must be a SharedContext of the same pair (SharedContext(pair))")
        self._shared = shared
        shared.take(self, self.context[:-1])
        #: where this problem's forwards run: the shared caches alone, or a ProblemPack's packed caches
        self._forwards = _Forwards(shared.models, [self], shared=shared)
        #: per model (target, draft): prefix -> its law, a dense [V] array or a (support, values) CompactLaw, least
        #: recently used first; at most cache_bytes / 2 of laws a model (_law_bytes)
        self._laws: tuple[OrderedDict[Prefix, object], OrderedDict[Prefix, object]] = (OrderedDict(), OrderedDict())
        self._cache_budget = max(1, int(cache_bytes) // 2)
        self._cache_used = [0, 0]
        self._cache_size = max(1, self._cache_budget // self._largest_law_bytes())
        #: the draft's pending tree kept by ``extend_drafts`` across calls: prefix -> its pending index (in the
        #: packed draft's pending tokens when the problem is in a ProblemPack)
        self._draft_pending: dict[Prefix, int] = {}
        #: target prefixes to compute with the target's next forward (``defer``)
        self._deferred: set[Prefix] = set()
        #: Forward passes (target, draft) and tokens fed to each model so far, the context's prefill not counted.
        self.passes = [0, 0]
        self.forwarded_tokens = [0, 0]

    @property
    def forward_passes(self) -> int:
        """Forward passes so far of the model that ran more often (``prepare`` runs each once a trie)."""
        return max(self.passes)

    @property
    def cache_capacity(self) -> int:
        """Most prefixes whose laws the cache holds (a model's half of cache_bytes over the largest a law of this
        sampling can take: ties at the k-th logit may keep more than top-k tokens, and then fewer fit): callers
        prepare at most this many at once."""
        return self._cache_size

    @property
    def largest_law_entries(self) -> int:
        """Most tokens a law of this sampling keeps (top-k's k, 1 when greedy, else V), ties at the k-th logit
        aside: what a caller sizing arrays of many laws plans for."""
        kept = 1 if self.sampling.greedy else self.sampling.top_k
        return self.vocab_size if kept is None else min(self.vocab_size, kept)

    def _largest_law_bytes(self) -> int:
        dense = 8 * self.vocab_size
        kept = self.largest_law_entries
        return dense if kept == self.vocab_size else min(dense, 16 * kept + SPARSE_LAW_OVERHEAD)

    def _law_bytes(self, law) -> int:
        return 8 * self.vocab_size if isinstance(law, np.ndarray) else 16 * len(law[0]) + SPARSE_LAW_OVERHEAD

    def __repr__(self) -> str:
        return f"ModelProblem({self.pair.name}, context of {len(self.context)} tokens, {self.sampling})"

    def _check(self, prefix) -> Prefix:
        prefix = tuple(int(t) for t in prefix)
        if self.horizon is not None and len(prefix) > self.horizon:
            raise InvalidProblemError(f"prefix of length {len(prefix)} is beyond the problem's horizon {self.horizon}")
        for token in prefix:
            if not 0 <= token < self.vocab_size:
                raise InvalidProblemError(f"prefix {prefix} has token {token} outside the vocabulary "
                                          f"0..{self.vocab_size - 1}")
        return prefix

    def prepare(self, prefixes: Iterable, *, target: bool = True, draft: bool = True) -> None:
        """Compute p (``target``) and q (``draft``) at every prefix not yet cached, in batched forward passes (a
        trie per pass, dropped from the cache after it)."""
        wanted = {self._check(prefix) for prefix in prefixes}
        if target and self._deferred:  # laws asked for ahead ride along with the target's next forward
            wanted |= self._deferred
            self._deferred = set()
        for index, asked in enumerate((target, draft)):
            missing = sorted(wanted - self._laws[index].keys(), key=lambda t: (len(t), t))
            if asked and missing:
                self._prepare_model(index, missing)

    def defer(self, prefixes) -> None:
        """p at ``prefixes`` is wanted, but not yet: it is computed with the target's next forward (a root's p_prev
        with its combs), or when read."""
        self._deferred |= {self._check(prefix) for prefix in prefixes} - self._laws[0].keys()

    def prepare_drafts(self, prefixes) -> None:
        """A drafter's hint (the level it is about to draw): p and q there, as ``prepare`` computes them (the
        engines that draft on a model problem read both)."""
        self.prepare(prefixes)

    def _prepare_model(self, index: int, missing: list[Prefix]) -> None:
        """One model's laws at ``missing`` (sorted by length), tries of at most ``nodes_per_forward`` nodes, each
        fed (node 0 the empty prefix: the context's last token) and dropped from the model's cache after its pass."""
        chunk: dict[Prefix, None] = {}  # trie nodes of this pass, a parent before its children
        wanted: list[Prefix] = []
        for prefix in missing:
            nodes = [prefix[:length] for length in range(len(prefix) + 1) if prefix[:length] not in chunk]
            if chunk and len(chunk) + len(nodes) > self.nodes_per_forward:
                self._forwards.submit(_Feed(self, index, list(chunk), wanted, keep=False))
                chunk, wanted = {}, []
                nodes = [prefix[:length] for length in range(len(prefix) + 1)]
            chunk.update(dict.fromkeys(nodes))
            wanted.append(prefix)
        if wanted:
            self._forwards.submit(_Feed(self, index, list(chunk), wanted, keep=False))

    def _store(self, index: int, wanted: list[Prefix], logits) -> None:
        """The laws at ``wanted`` from their logits [len(wanted), V], a few rows at a time, each kept as its
        ``compact_law`` where that takes fewer bytes than the [V] vector."""
        cache = self._laws[index]
        for first in range(0, len(wanted), STORE_ROWS):
            block = logits[first:first + STORE_ROWS]
            # top-k's laws straight from the k largest logits (no [rows, V] float64 law), else the whole law a row
            laws = self.sampling.compact_probabilities(block)
            if laws is None:
                laws = self.sampling.probabilities(block).cpu().numpy()               # [rows, V] float64
            for prefix, row in zip(wanted[first:first + STORE_ROWS], laws):
                support, values = row if isinstance(row, tuple) else compact_law(row)
                if support is not None and 16 * len(support) + SPARSE_LAW_OVERHEAD < 8 * self.vocab_size:
                    law = (support, values)
                elif isinstance(row, tuple):
                    law = expand_law(row, self.vocab_size)
                else:
                    law = np.array(row)  # its own copy: a view would keep the whole block alive
                for array in (law if isinstance(law, tuple) else (law,)):
                    array.setflags(write=False)
                if prefix in cache:
                    self._cache_used[index] -= self._law_bytes(cache.pop(prefix))
                cache[prefix] = law
                self._cache_used[index] += self._law_bytes(law)
                while self._cache_used[index] > self._cache_budget and len(cache) > 1:
                    self._cache_used[index] -= self._law_bytes(cache.popitem(last=False)[1])

    def extend_drafts(self, prefixes) -> None:
        """q at ``prefixes`` (p is not computed), feeding the draft only the nodes it has not been fed since the
        last call: the draft's tree is kept in its cache across calls, so a tree drawn level by level costs one
        draft token a node (``prepare_drafts`` feeds every ancestor again and runs the target too). Up to
        ``MAX_PENDING_DRAFT_NODES`` nodes are kept; past them the tree starts over."""
        missing = sorted({self._check(prefix) for prefix in prefixes} - self._laws[1].keys(),
                         key=lambda t: (len(t), t))
        fed = [prefix for prefix in missing if prefix in self._draft_pending]
        if fed:  # fed once, its law since evicted: a node cannot be fed twice, so compute it apart
            self._prepare_model(1, fed)
            missing = [prefix for prefix in missing if prefix not in fed]
        new: dict[Prefix, None] = {}
        for prefix in missing:
            new.update(dict.fromkeys(prefix[:length] for length in range(len(prefix) + 1)
                                     if prefix[:length] not in self._draft_pending))
        if not new:
            return
        if len(self._draft_pending) + len(new) > MAX_PENDING_DRAFT_NODES:
            self._forwards.drop_draft_trees()
            return self.extend_drafts(missing)
        trie, asked = list(new), set(missing)
        for start in range(0, len(trie), self.nodes_per_forward):
            chunk = trie[start:start + self.nodes_per_forward]
            self._forwards.submit(_Feed(self, 1, chunk, [prefix for prefix in chunk if prefix in asked], keep=True))

    def prefetch(self, depth: int) -> None:
        """Compute every prefix of length 0..depth (V^depth of them, refused past MAX_PREFETCH)."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise VerispecError(f"depth must be a non-negative integer, got {depth!r}")
        # V^depth alone passes the limit long before the sum is worth computing (depth 10^9 would not finish)
        count = (depth + 1 if self.vocab_size == 1 else sum(self.vocab_size ** length for length in range(depth + 1))
                 if depth * math.log(self.vocab_size) < 64 else math.inf)
        if count > MAX_PREFETCH:
            shown = f"{count:,}" if count < math.inf else f"more than 10^{depth * math.log10(self.vocab_size):.0f}"
            raise VerispecError(f"prefetching depth {depth} needs {shown} prefixes over {self.vocab_size} tokens, "
                                f"above {MAX_PREFETCH:,}; prepare the prefixes you need instead")
        for length in range(depth + 1):
            self.prepare(self.prefixes(length))

    def target(self, prefix: Prefix) -> np.ndarray:
        return self._dense(self._law(0, self._check(prefix)))

    def draft(self, prefix: Prefix) -> np.ndarray:
        return self._dense(self._law(1, self._check(prefix)))

    def target_compact(self, prefix: Prefix) -> CompactLaw:
        return self._compact(self._law(0, self._check(prefix)))

    def draft_compact(self, prefix: Prefix) -> CompactLaw:
        return self._compact(self._law(1, self._check(prefix)))

    def _dense(self, law) -> np.ndarray:
        if isinstance(law, np.ndarray):
            return law
        dense = expand_law(law, self.vocab_size)
        dense.setflags(write=False)
        return dense

    @staticmethod
    def _compact(law) -> CompactLaw:
        # a law is kept dense only where compact_law keeps it dense or the support takes more bytes than the vector
        return compact_law(law) if isinstance(law, np.ndarray) else law

    def _law(self, index: int, prefix: Prefix):
        """The cached law at ``prefix`` (computed first if need be), as stored: a [V] array or a CompactLaw."""
        cache = self._laws[index]
        if prefix not in cache and self._forwards.collecting:
            raise VerispecError("a law was read inside together(), before the forwards collected there ran: read it "
                                "after the block")
        if prefix not in cache:
            if index == 1 and prefix not in self._draft_pending and prefix[:-1] in self._draft_pending:
                self.extend_drafts([prefix])
            else:
                self.prepare([prefix], target=index == 0, draft=index == 1)
        cache.move_to_end(prefix)
        return cache[prefix]


@dataclass(eq=False)
class _Feed:
    """Nodes of one problem fed to one model (``index``: 0 target, 1 draft) in a forward pass, a parent before its
    children (the empty prefix is the context's last token); the laws at ``wanted`` are stored. ``keep``: the nodes
    stay in the model's pending tree (the draft's tree grown level by level, ``extend_drafts``), their parents among
    the problem's pending nodes or this feed; else a trie, dropped from the cache after its pass."""

    problem: ModelProblem
    index: int
    prefixes: list
    wanted: list
    keep: bool


class _Forwards:
    """Runs feeds on the two models (target, draft) of one or several problems (``members``): on one problem's own
    caches (``segments`` None, the ``SharedContext``'s models), or on a pack's packed caches, where member i's nodes
    grow under segment i. Feeds run at once, or, inside ``together()``, are collected and run at its end in as few
    passes as the nodes per forward allow: every member's level in one pass."""

    def __init__(self, models, members: list, *, shared: SharedContext | None = None, packed: bool = False):
        self.models = models
        self.members = members
        self.shared = shared
        self.packed = packed
        self._collected: list[_Feed] | None = None

    @contextmanager
    def together(self):
        """Collect the feeds submitted inside, then run them together."""
        if self._collected is not None:  # nested: the outer block runs them
            yield
            return
        self._collected = []
        try:
            yield
            feeds = self._collected
        finally:
            self._collected = None
        self._run(feeds)

    @property
    def collecting(self) -> bool:
        return self._collected is not None

    def submit(self, feed: _Feed) -> None:
        if self._collected is not None:
            self._collected.append(feed)
        else:
            self._run([feed])

    def drop_draft_trees(self) -> None:
        """Drop the draft's pending tree (every member's, on a pack): each member feeds it anew when it next grows."""
        self.models[1].discard()
        for member in self.members:
            member._draft_pending = {}

    def _run(self, feeds: list[_Feed]) -> None:
        if not feeds:
            return
        if self.shared is not None:
            for feed in feeds:
                self.shared.check_owner(feed.problem)
        limit = min(feed.problem.nodes_per_forward for feed in feeds)
        if self.packed:  # the members' nodes share a pass, up to a size whose transients stay bounded
            limit = max(limit, min(limit * len(self.members), MAX_PACKED_PASS_NODES))
        for index in (1, 0):  # the draft's kept tree first: a draft trie drops it
            for keep in (True, False):
                batch = [feed for feed in feeds if feed.index == index and feed.keep == keep]
                start, size = 0, 0
                for end, feed in enumerate(batch + [None]):
                    if feed is None or (end > start and size + len(feed.prefixes) > limit):
                        if end > start:
                            self._forward(index, batch[start:end])
                        start, size = end, 0
                    if feed is not None:
                        size += len(feed.prefixes)

    def _forward(self, index: int, feeds: list[_Feed]) -> None:
        """One pass of ``model[index]`` over the feeds' nodes; each feed's wanted laws stored in its problem."""
        model = self.models[index]
        trie = not feeds[0].keep
        if trie and index == 1 and any(member._draft_pending for member in self.members):
            self.drop_draft_trees()  # a trie's nodes are counted from the committed end: the kept tree goes
        tokens, parents, segments, stores = [], [], [], []
        for feed in feeds:
            problem = feed.problem
            position = problem._draft_pending if feed.keep else {}
            first = len(tokens)  # this feed's first row of the pass
            for offset, prefix in enumerate(feed.prefixes):
                position[prefix] = model.pending + first + offset
            tokens += [prefix[-1] if prefix else problem.context[-1] for prefix in feed.prefixes]
            parents += [position[prefix[:-1]] if prefix else -1 for prefix in feed.prefixes]
            segments += [self.members.index(problem) if self.packed else 0] * len(feed.prefixes)
            wanted = set(feed.wanted)
            stores.append([(first + offset, prefix) for offset, prefix in enumerate(feed.prefixes) if prefix in wanted])
        logits = model.extend(tokens, parents, segments=segments if self.packed else None)
        if trie:
            model.discard()
        for feed, picked in zip(feeds, stores):
            if picked:
                feed.problem._store(index, [prefix for _, prefix in picked], logits[[row for row, _ in picked]])
        for problem in dict.fromkeys(feed.problem for feed in feeds):
            problem.passes[index] += 1
        for feed in feeds:
            feed.problem.forwarded_tokens[index] += len(feed.prefixes)
