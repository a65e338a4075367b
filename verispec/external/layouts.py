"""Layouts: how verification code written elsewhere takes its arguments, and converters to and from verispec.

A production verification function sees draft tokens, draft and target probabilities and explicit uniform
random numbers, batched over a leading dimension, and returns the emitted tokens. Engines lay those arrays
out differently; each ``Layout`` below states one layout as a contract, builds its arguments for a batch of
verispec draft trees (``TreeBatch``) and a matrix of uniforms, calls the function, and decodes what it
returns into verispec's (node, token) outcome. Every layout returns *emitted tokens, left-aligned, padded
with -1*: the accepted draft tokens in order, then exactly one more token (correction or bonus).

Layouts (V = vocabulary size; B = batch rows; all probability arrays float64, uniforms float64 in [0, 1)):

``chain`` (the contract users' scripts rely on; a single draft path of L tokens):
    f(draft_tokens [B, L] int64, draft_probs [B, L, V], target_probs [B, L+1, V], uniforms [B, L+1])
    -> [B, L+1] int64. Row i of draft_probs is the draft law at the prefix before draft i (the law that drew
    token i under plain sampling); row i of target_probs is the target law at the prefix before position i,
    row L the law after all L drafts.

``padded`` (padded [B, K] chains with per-row lengths, the shape of transformers' ``_speculative_sampling``):
    f(candidate_ids [B, K] int64, candidate_lengths [B] int64, draft_probs [B, K, V], target_probs
    [B, K+1, V], uniforms [B, K+1]) -> [B, K+1] int64. Entries beyond a row's length are padding; the adapter
    fills them with junk (``PADDING``) so that a function that reads them is caught. Uniform column i < length
    belongs to candidate i and column ``length`` to the final draw.

``ragged`` (a flattened ragged batch with cumulative draft counts, the layout of vLLM's rejection sampler):
    f(draft_token_ids [T] int64, cu_num_draft_tokens [B] int64, draft_probs [T, V], target_probs [T, V],
    bonus_token_ids [B] int64, uniform_probs [T], recovered_uniforms [T, V]) -> [B, max_spec_len + 1] int64.
    Request b owns entries cu[b-1]..cu[b]-1. ``recovered_uniforms`` carry one uniform per (draft, token), as
    an exponential race (vLLM's recovered-token sampler) needs. The bonus token is drawn by the adapter from
    the target law after the last draft, by inverse CDF of one more uniform, as the engine's sampler would.
    Filler requests with other draft counts sit between the trees' requests (``RaggedLayout``).

``tree-parent`` and ``tree-sibling`` (token trees; root = node 0, drafted nodes 1..N, a parent before its
children, siblings in drafting order; i.i.d. children that drew the same token are separate nodes):
    f(draft_tokens [B, N], parents [B, N], draft_probs [B, N, V], target_probs [B, N+1, V], uniforms [B, N+1])
    f(draft_tokens [B, N], first_child [B, N+1], next_sibling [B, N+1], tree_mask [B, N+1, N+1] bool,
      draft_probs [B, N, V], target_probs [B, N+1, V], uniforms [B, N+1])
    -> [B, D+1] int64 (D = deepest node's depth). draft_tokens[:, j] and parents[:, j] describe node j + 1;
    draft_probs[:, j] is the draft law at its parent (the law that drew it); target_probs[:, n] is the target
    law at node n; first_child / next_sibling are -1 where there is none; tree_mask[b, i, j] says node j is
    node i or one of its ancestors (the attention mask of tree decoding). Uniform j < N belongs to node
    j + 1, uniform N to the final draw.

``transformers`` (transformers' ``_speculative_sampling`` as it is, ONE sequence per call; chain trees):
    f(candidate_input_ids [1, P + K] int64, candidate_logits [1, K, V], candidate_length K, new_logits
    [1, K+1, V]) -> (valid_tokens [1, m+1] int64, n_matches = m). The ids are a junk prompt of P =
    ``TRANSFORMERS_PROMPT`` tokens, then the K candidates; the logits are log q and log p (log 0 = -inf, which
    softmax turns back into probability 0; every row keeps a finite entry, since it is a law). It draws its
    own randomness (``torch.rand_like``, ``torch.multinomial``), so it takes no uniforms: check it with RNG
    capture (``verispec.external.rng``); the adapter calls it row by row (``one_sequence``). Extra keyword
    arguments (``assistant_ensemble_weight``) are bound with ``functools.partial``.

``gpt-fast`` (gpt-fast's ``speculative_decode`` as it is: a whole block that drafts its own tokens; chain trees):
    f(model, draft_model, cur_token [] int64, input_pos int, speculate_k K) -> emitted tokens [m+1] (or
    [1, m+1]) int. Both models are ``PrefixModel``s backed by the batch's conditionals:
    ``model(x [1, S], input_pos [S]) -> logits [1, S, V]``, the logits at a position being log of the law after
    the block's tokens up to it (fed tokens are remembered by position, as a KV cache holds them). The function
    drafts its K tokens from ``draft_model``, scores them with ``model``, and every draw it makes, drafting
    included, is fed by RNG capture. Its drafts are read from what it fed ``model``; the adapter integrates
    the whole block once and splits the law by the drafts it made: law(outcome | D) = P(D, outcome) / P(D),
    refused where P(D) is not the draft model's Q(D) (the engine weighs tree D by Q(D)). It is checked in exact
    mode only: run on a given draft tree, it would have to draw that tree itself.

``step``, ``step-ragged`` and ``step-tree`` (a whole step from RAW logits under requested sampling; stated in full,
with their checker, in ``verispec.external.step``):
    f(draft_model, target_model, input_ids [1, P], num_draft_tokens K, temperature, top_k, top_p, min_p, seed)
    f(draft_model, target_model, input_ids [B, P], num_draft_tokens [B], temperature [B], top_k [B], top_p [B],
      min_p [B], seeds [B]) -> [B, max K + 1] (request 1 checked; requests 0 and 2 greedy fillers)
    f(draft_model, target_model, input_ids [1, P], parents [N], temperature, top_k, top_p, min_p, seed)
    with ``model(input_ids [B, S]) -> logits [B, S, V]`` backed by the problem's raw conditionals. The code drafts
    its own tokens; its emitted block is checked against the target after the requested sampling.

``step-penalties`` (``step`` with the request's earlier output and vLLM's three penalties; stated in full, with its
law, in ``verispec.external.step_penalties``):
    f(draft_model, target_model, input_ids [1, P], output_ids [1, H], num_draft_tokens K, temperature, top_k, top_p,
      min_p, repetition_penalty, frequency_penalty, presence_penalty, seed)

verispec merges i.i.d. children that drew the same token into one node with a multiplicity; the tree layouts
expand them back into separate nodes, each copy taking its own contiguous block of the merged child list (the
order in which verispec's drafters draw path by path), so the function sees the tree the drafts made.

Arrays go in as numpy or torch (``arrays``), float64; what comes back may be either.

A function that draws its own randomness (RNG capture, ``rng='capture'``) gets the same arguments without the
uniform ones (``uniform_arguments``); the ``ragged`` layout still draws the bonus token itself, from the row's
first uniform (``own_uniforms``). Functions written for one sequence are called one row at a time
(``per_row``): the arguments are built for all rows at once and the function gets each row as a batch of one
(``row_arguments``; the ``ragged`` layout, whose arrays are flattened, is built row by row instead).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from verispec.errors import InvalidTreeError, VerifierError, VerispecError
from verispec.external.tree_arrays import TreeArrays, as_int_matrix, chain_nodes, inverse_cdf
from verispec.guard.limits import EXTERNAL_LAYOUTS
from verispec.simulator.trees import TreeBatch

#: What the ``padded`` layout writes into padding: one junk column of candidate token 0 with a uniform draft
#: law and a target law that is a point mass on token 0.
PADDING = 1

ARRAY_KINDS = ("numpy", "torch")


class Layout(ABC):
    """One production layout: builds a function's arguments and decodes its result."""

    #: Name used on the command line.
    name: str
    #: The function's positional arguments, by name (for messages).
    argument_names: tuple[str, ...] = ()
    #: Positions of the arguments that carry uniforms: left out when the function draws its own (RNG capture).
    uniform_arguments: tuple[int, ...] = ()
    #: The function takes one sequence per call (batch size 1), so it is always called row by row.
    one_sequence: bool = False
    #: Whether every argument array has the trees' rows as its first dimension: one row is then a slice
    #: (``row_arguments``), and a batched call's draws run over the rows first, which RNG capture needs to feed
    #: each row from its own uniforms (not so in a flattened layout, whose arrays and draws run over drafts).
    rows_first: bool = True
    #: The function drafts its own tokens from models it is handed (``gpt-fast``); see ``GptFastLayout``.
    self_drafting: bool = False

    def check_batch(self, batch: TreeBatch) -> None:
        """Raise InvalidTreeError when the layout cannot express this topology."""
        return None

    @abstractmethod
    def num_uniforms(self, batch: TreeBatch) -> int:
        """How many uniforms one tree of this topology is handed (the dimension integrated over)."""

    def own_uniforms(self, batch: TreeBatch) -> int:
        """Uniforms the layout itself draws for one tree when the function draws its own (RNG capture): the last
        ``own_uniforms`` of its ``num_uniforms`` (see ``capture_arguments``)."""
        return 0

    @abstractmethod
    def arguments(self, trees: TreeArrays, rows: np.ndarray, uniforms: np.ndarray) -> tuple:
        """The function's positional arguments (numpy) for ``rows`` [M] of ``trees`` with ``uniforms`` [M, U]."""

    def capture_arguments(self, trees: TreeArrays, rows: np.ndarray, own: np.ndarray) -> tuple:
        """The arguments without the uniform ones, for a function that draws its own randomness; ``own``
        [M, own_uniforms] are the uniforms the layout draws itself, the last of its uniform vector (the others,
        which only the left-out arguments carry, are zeros)."""
        placeholder = np.zeros((len(rows), self.num_uniforms(trees.batch)))
        if own.shape[1]:
            placeholder[:, -own.shape[1]:] = own
        arguments = self.arguments(trees, rows, placeholder)
        return tuple(argument for index, argument in enumerate(arguments) if index not in self.uniform_arguments)

    def capture_argument_names(self) -> tuple[str, ...]:
        return tuple(name for index, name in enumerate(self.argument_names) if index not in self.uniform_arguments)

    def row_arguments(self, arguments: tuple, index: int) -> tuple:
        """Row ``index`` of batched ``arguments`` as a batch of one (views; scalars as they are)."""
        return tuple(argument[index:index + 1] if hasattr(argument, "shape") and len(argument.shape) else argument
                     for argument in arguments)

    def row_matrix(self, result, name: str, width: int) -> np.ndarray:
        """The emitted tokens [1, width] of a call on one tree."""
        return self.own_rows(as_int_matrix(result, name, (self.output_rows(1), width)))

    @abstractmethod
    def width(self, trees: TreeArrays) -> int:
        """Number of columns the function must return."""

    def output_rows(self, count: int) -> int:
        """Rows the function returns for ``count`` trees (more where the layout adds filler requests)."""
        return count

    def own_rows(self, emitted: np.ndarray) -> np.ndarray:
        """The rows of the function's result that belong to the trees (not to filler requests)."""
        return emitted

    def drafted_paths(self, trees: TreeArrays, rows: np.ndarray) -> np.ndarray | None:
        """For messages: [M, D] tokens drafted along a chain (None for trees)."""
        return None


class ChainLayout(Layout):
    name = "chain"
    argument_names = ("draft_tokens", "draft_probs", "target_probs", "uniforms")
    uniform_arguments = (3,)

    def check_batch(self, batch):
        chain_nodes(batch)

    def num_uniforms(self, batch):
        return len(chain_nodes(batch))

    def width(self, trees):
        return trees.depth + 1

    def _chain(self, trees):
        return trees.chain

    def arguments(self, trees, rows, uniforms):
        chain = self._chain(trees)
        drafted, before = chain[1:], chain[:-1]
        draft_tokens = trees.tokens[rows][:, drafted]  # [M, L]
        draft_probs = trees.q[rows][:, before]  # [M, L, V]
        target_probs = trees.p[rows][:, chain]  # [M, L+1, V]
        return draft_tokens, draft_probs, target_probs, np.ascontiguousarray(uniforms, dtype=np.float64)

    def drafted_paths(self, trees, rows):
        return trees.tokens[rows][:, self._chain(trees)[1:]]


class PaddedLayout(ChainLayout):
    name = "padded"
    argument_names = ("candidate_ids", "candidate_lengths", "draft_probs", "target_probs", "uniforms")
    uniform_arguments = (4,)

    def arguments(self, trees, rows, uniforms):
        tokens, draft, target, uniforms = super().arguments(trees, rows, uniforms)
        count, length, size = tokens.shape[0], tokens.shape[1], trees.batch.vocab_size
        junk_draft = np.full((count, PADDING, size), 1.0 / size)
        junk_target = np.zeros((count, PADDING, size))
        junk_target[:, :, 0] = 1.0
        candidate_ids = np.concatenate([tokens, np.zeros((count, PADDING), dtype=np.int64)], axis=1)
        lengths = np.full(count, length, dtype=np.int64)
        draft_probs = np.concatenate([draft, junk_draft], axis=1)  # [M, K, V]
        target_probs = np.concatenate([target, junk_target], axis=1)  # [M, K+1, V]
        padded_uniforms = np.concatenate([uniforms, np.full((count, PADDING), 0.5)], axis=1)  # [M, K+1]
        return candidate_ids, lengths, draft_probs, target_probs, padded_uniforms

    def width(self, trees):
        return trees.depth + 1 + PADDING


class RaggedLayout(ChainLayout):
    """vLLM's layout. Before each tree's request the adapter puts a filler request with a different number of
    drafts (0, 1, .., L-1 in turn; uniform laws, fixed uniforms; its output is ignored), so the batch really is
    ragged and a function that gets the offsets wrong shows it."""

    name = "ragged"
    argument_names = ("draft_token_ids", "cu_num_draft_tokens", "draft_probs", "target_probs", "bonus_token_ids",
                      "uniform_probs", "recovered_uniforms")
    uniform_arguments = (5, 6)
    rows_first = False

    def num_uniforms(self, batch):
        length = len(chain_nodes(batch)) - 1
        return length + length * batch.vocab_size + 1

    def own_uniforms(self, batch):
        return 1  # the bonus token (the last uniform), drawn by the engine's sampler before the function runs

    def output_rows(self, count):
        return 2 * count

    def own_rows(self, emitted):
        return emitted[1::2]

    def arguments(self, trees, rows, uniforms):
        chain = self._chain(trees)
        length, size, count = len(chain) - 1, trees.batch.vocab_size, len(rows)
        tokens = trees.tokens[rows][:, chain[1:]]  # [M, L]
        draft = trees.q[rows][:, chain[:-1]]  # [M, L, V]
        target = trees.p[rows][:, chain]  # [M, L+1, V]
        accept = uniforms[:, :length]  # [M, L]
        recovered = uniforms[:, length:length + length * size].reshape(count, length, size)  # [M, L, V]
        bonus = inverse_cdf(target[:, length], uniforms[:, -1])  # [M]
        fillers = np.arange(count) % max(length, 1)  # drafts of the filler request before each tree
        counts = np.stack([fillers, np.full(count, length)], axis=1).reshape(-1)  # [2M] filler, tree, ...
        own = np.repeat(np.arange(2 * count) % 2 == 1, counts)  # [T] True at the trees' own entries
        total = int(counts.sum())
        flat_tokens = np.zeros(total, dtype=np.int64)
        flat_draft = np.full((total, size), 1.0 / size)
        flat_target = np.full((total, size), 1.0 / size)
        flat_accept = np.full(total, 0.5)
        flat_recovered = np.full((total, size), 0.5)
        flat_tokens[own] = tokens.reshape(-1)
        flat_draft[own] = draft.reshape(-1, size)
        flat_target[own] = target[:, :length].reshape(-1, size)
        flat_accept[own] = accept.reshape(-1)
        flat_recovered[own] = recovered.reshape(-1, size)
        bonus_ids = np.zeros(2 * count, dtype=np.int64)
        bonus_ids[1::2] = bonus
        return (flat_tokens, np.cumsum(counts).astype(np.int64), flat_draft, flat_target, bonus_ids, flat_accept,
                flat_recovered)


@dataclass(frozen=True)
class ExpandedTree:
    """A merged verispec topology expanded into one node per drawn child (see the module docstring)."""

    merged: tuple[int, ...]  # merged node of each expanded node; [0] is the root
    parent: tuple[int, ...]  # expanded parent of each expanded node; -1 at the root

    @classmethod
    def of(cls, batch: TreeBatch) -> ExpandedTree:
        return _expanded(batch.child_lists)


@lru_cache(maxsize=256)
def _expanded(child_lists: tuple[tuple[int, ...], ...]) -> ExpandedTree:
    """The expansion of one merged topology (its child lists); cached, since every call of a function on a batch
    of that topology needs it."""
    merged, parent = [0], [-1]
    copies: dict[int, list[int]] = {0: [0]}
    for node, children in enumerate(child_lists):
        if not children:
            continue
        own = copies.get(node, [])
        if len(children) % len(own):
            raise InvalidTreeError(f"node {node} has {len(own)} copies but {len(children)} children, which do not "
                                   "split into equal blocks; the tree layouts expand i.i.d. duplicates only")
        block = len(children) // len(own)
        for index, copy in enumerate(own):
            for child in children[index * block:(index + 1) * block]:
                copies.setdefault(child, []).append(len(merged))
                merged.append(child)
                parent.append(copy)
    return ExpandedTree(tuple(merged), tuple(parent))


class TreeParentLayout(Layout):
    name = "tree-parent"
    argument_names = ("draft_tokens", "parents", "draft_probs", "target_probs", "uniforms")
    uniform_arguments = (4,)

    def check_batch(self, batch):
        ExpandedTree.of(batch)

    def num_uniforms(self, batch):
        return len(ExpandedTree.of(batch).merged)

    def width(self, trees):
        return trees.depth + 1

    def _common(self, trees, rows):
        tree = ExpandedTree.of(trees.batch)
        merged = np.array(tree.merged)
        parent_merged = merged[np.array(tree.parent[1:], dtype=np.int64)]
        draft_tokens = trees.tokens[rows][:, merged[1:]]  # [M, N]
        draft_probs = trees.q[rows][:, parent_merged]  # [M, N, V]
        target_probs = trees.p[rows][:, merged]  # [M, N+1, V]
        return tree, draft_tokens, draft_probs, target_probs

    def arguments(self, trees, rows, uniforms):
        tree, draft_tokens, draft_probs, target_probs = self._common(trees, rows)
        parents = np.broadcast_to(np.array(tree.parent[1:], dtype=np.int64), draft_tokens.shape).copy()
        return draft_tokens, parents, draft_probs, target_probs, np.ascontiguousarray(uniforms, dtype=np.float64)


class TreeSiblingLayout(TreeParentLayout):
    name = "tree-sibling"
    argument_names = ("draft_tokens", "first_child", "next_sibling", "tree_mask", "draft_probs", "target_probs",
                      "uniforms")
    uniform_arguments = (6,)

    def arguments(self, trees, rows, uniforms):
        tree, draft_tokens, draft_probs, target_probs = self._common(trees, rows)
        count, nodes = len(rows), len(tree.merged)
        first_child = np.full(nodes, -1, dtype=np.int64)
        next_sibling = np.full(nodes, -1, dtype=np.int64)
        last_child: dict[int, int] = {}
        mask = np.eye(nodes, dtype=bool)
        for node in range(1, nodes):
            parent = tree.parent[node]
            if parent in last_child:
                next_sibling[last_child[parent]] = node
            else:
                first_child[parent] = node
            last_child[parent] = node
            mask[node] |= mask[parent]
        return (draft_tokens, np.broadcast_to(first_child, (count, nodes)).copy(),
                np.broadcast_to(next_sibling, (count, nodes)).copy(),
                np.broadcast_to(mask, (count, nodes, nodes)).copy(), draft_probs, target_probs,
                np.ascontiguousarray(uniforms, dtype=np.float64))


class TransformersLayout(ChainLayout):
    """transformers' ``_speculative_sampling`` as it is (see the module docstring): one sequence per call, logits
    in, its own draws (``torch.rand_like``, ``torch.multinomial``) fed by RNG capture."""

    name = "transformers"
    argument_names = ("candidate_input_ids", "candidate_logits", "candidate_length", "new_logits")
    uniform_arguments = ()
    one_sequence = True

    def num_uniforms(self, batch):
        return 0  # it is handed none: every draw is its own

    def arguments(self, trees, rows, uniforms):
        tokens, draft, target, _ = super().arguments(trees, rows, uniforms)
        count, size = tokens.shape[0], trees.batch.vocab_size
        prompt = np.broadcast_to(np.arange(TRANSFORMERS_PROMPT, dtype=np.int64)[::-1] % size, (count,
                                                                                             TRANSFORMERS_PROMPT))
        with np.errstate(divide="ignore"):  # log 0 = -inf: softmax gives it probability 0 again
            return (np.concatenate([prompt, tokens], axis=1), np.log(draft), tokens.shape[1], np.log(target))

    def row_matrix(self, result, name, width):
        if not (isinstance(result, tuple) and len(result) == 2):
            raise VerifierError(f"external function {name} returned {type(result).__name__}; the transformers layout "
                                "expects (valid_tokens [1, n_matches + 1], n_matches)")
        tokens, matches = result
        emitted = _as_int_row(tokens, name)
        if emitted.shape[0] > width:
            raise VerifierError(f"external function {name} returned {emitted.shape[0]} tokens for {width - 1} "
                                f"candidates; at most {width}")
        try:
            matches = int(matches)
        except (TypeError, ValueError, RuntimeError):
            raise VerifierError(f"external function {name} returned n_matches of type {type(matches).__name__}; "
                                "expected an integer") from None
        if matches != emitted.shape[0] - 1:
            raise VerifierError(f"external function {name} returned {emitted.shape[0]} tokens but n_matches = "
                                f"{matches}; the tokens are the accepted candidates and one more")
        return np.concatenate([emitted, np.full(width - emitted.shape[0], -1, dtype=np.int64)])[None, :]


#: Prompt tokens before the candidates in the ``transformers`` layout's ``candidate_input_ids``.
TRANSFORMERS_PROMPT = 2
#: Position of the current token in the ``gpt-fast`` layout (the prompt before it is never fed).
GPT_FAST_START = 5


class PrefixModel:
    """A language model backed by the conditionals of a batch, called as gpt-fast calls its models:
    ``model(x [1, S] int, input_pos [S] int) -> logits [1, S, V]`` (torch float64).

    It remembers the token fed at each position (as a KV cache does), so a draft model fed one token per call
    sees the whole block. The logits at position t are the log of the law after the block's prefix: the tokens
    at positions start+1..t, where ``start`` holds the current token (log 0 = -inf, which softmax turns back
    into 0). A prefix whose law the batch does not hold (a draft model asked past the last draft, to fill its
    cache) gets NaN logits, which no correct function samples from."""

    def __init__(self, laws: dict, start: int, size: int):
        self.laws = laws
        self.start = start
        self.size = size
        self.memory: dict[int, int] = {}

    def __call__(self, x, input_pos):
        import torch

        tokens = [int(t) for t in torch.as_tensor(x).reshape(-1).tolist()]
        positions = [int(t) for t in torch.as_tensor(input_pos).reshape(-1).tolist()]
        if len(tokens) != len(positions):
            raise ValueError(f"{len(tokens)} tokens fed at {len(positions)} positions")
        for position, token in zip(positions, tokens):
            if position < self.start:
                raise ValueError(f"position {position} lies before the current token's ({self.start})")
            self.memory[position] = token
        logits = np.full((len(positions), self.size), np.nan)
        for index, position in enumerate(positions):
            missing = [t for t in range(self.start + 1, position + 1) if t not in self.memory]
            if missing:
                raise ValueError(f"position {missing[0]} was never fed to the model")
            law = self.laws.get(tuple(self.memory[t] for t in range(self.start + 1, position + 1)))
            if law is not None:
                with np.errstate(divide="ignore"):
                    logits[index] = np.log(law)
        return torch.from_numpy(logits)[None]


class GptFastLayout(ChainLayout):
    """gpt-fast's ``speculative_decode`` as it is: a whole block that drafts its own tokens (see the module
    docstring); the adapter splits its joint law of (drafts, emitted tokens) by the drafts it made."""

    name = "gpt-fast"
    argument_names = ("model", "draft_model", "cur_token", "input_pos", "speculate_k")
    uniform_arguments = ()
    one_sequence = True
    self_drafting = True

    def num_uniforms(self, batch):
        return 0  # it is handed none: every draw, its drafting included, is its own

    def arguments(self, trees, rows, uniforms):
        """Fresh arguments for ONE call (whatever ``rows``: the models hold every row's laws): two models with
        empty caches, the current token, its position, K."""
        import torch

        target, draft = trees.laws_by_path
        size = trees.batch.vocab_size
        return (PrefixModel(target, GPT_FAST_START, size), PrefixModel(draft, GPT_FAST_START, size),
                torch.tensor(0, dtype=torch.int64), GPT_FAST_START, len(self._chain(trees)) - 1)

    def drafts_and_emitted(self, result, arguments: tuple, name: str) -> tuple[tuple, tuple]:
        """(the K tokens the function scored with the target model, the tokens it emitted)."""
        model, length = arguments[0], arguments[4]
        emitted = tuple(int(t) for t in _as_int_row(result, name))
        drafts = tuple(model.memory.get(GPT_FAST_START + 1 + index, -1) for index in range(length))
        if -1 in drafts:
            raise VerifierError(f"external function {name} did not score its {length} drafts with the target model "
                                "(model(x, input_pos) with x = [cur_token, drafts...] at positions input_pos..)")
        if not 1 <= len(emitted) <= length + 1 or emitted[:-1] != drafts[:len(emitted) - 1]:
            raise VerifierError(f"external function {name} emitted {list(emitted)} for drafts {list(drafts)}: "
                                "it must return the accepted drafts, then one more token")
        return drafts, emitted


def _as_int_row(result, name: str) -> np.ndarray:
    """A [1, n] (or [n]) integer tensor or array as [n] int64; VerifierError otherwise."""
    if hasattr(result, "detach"):
        result = result.detach().cpu().numpy()
    emitted = np.asarray(result)
    if emitted.dtype.kind not in "iu" or emitted.ndim not in (1, 2) or (emitted.ndim == 2 and emitted.shape[0] != 1):
        raise VerifierError(f"external function {name} returned tokens of dtype {emitted.dtype} and shape "
                            f"{list(emitted.shape)}; expected integers of shape [1, n]")
    return emitted.reshape(-1).astype(np.int64)


_BY_NAME = {layout.name: layout for layout in (
    ChainLayout(), PaddedLayout(), RaggedLayout(), TreeParentLayout(), TreeSiblingLayout(), TransformersLayout(),
    GptFastLayout())}

#: Every layout by its name, in the order of the names the command line offers (``verispec.guard.limits``, which --help
#: reads without importing numpy).
LAYOUTS: dict[str, Layout] = {name: _BY_NAME[name] for name in EXTERNAL_LAYOUTS if name in _BY_NAME}


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise VerispecError(f"unknown layout {name!r}; choose one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name]
