"""What a decoding policy reads before a block's draws (``BlockContext``), and the sampling law at one position
(``PositionLaw``), computed only as far as its reader asks.

At Qwen's vocabulary (V = 151,936) one full sampling law costs 0.3 ms (temperature 1: a float64 exp per token) to
1.3 ms (top-k and top-p) on a CPU thread, while a policy's features may need much less: with top-k the law is
zero outside k tokens, and the k tokens' probabilities give every entropy, divergence and distance exactly
(``verispec.selector.features``). So a ``PositionLaw`` holds what the decoder has at its position (the logits
row, the full law, or the support) and computes the rest on demand: ``law()`` the full law (for a law computed
from logits, ``Sampling.probabilities``: the very array the decoder computes itself, which drafting reuses when
the policy computed it) and ``support()`` the support (``Sampling.support`` from the logits, by one reduction
over the vocabulary; or ``law_support`` from a full law). A policy reading ``BlockContext.q_root`` gets the full
law, as before; ``BlockContext.laws`` holds the ``PositionLaw``s.

The decoder keeps the next block's p_prev and q_prev (``position_law``) as the support when the sampling filters
(read while the tree's laws are at hand, instead of a copy of the row), else as copies of the law and the logits
(the features of unfiltered laws come from the logits: dot products, no log over the vocabulary).
"""

from __future__ import annotations

from typing import Any

from verispec.errors import VerispecError
from verispec.models.sampling import LARGEST_BLOCK, Sampling

#: The most tokens ``law_support`` gathers from a full law (blocks of ``LARGEST_BLOCK`` holding some mass): beyond
#: it the law is not small, and a reader uses the full law instead.
MAX_SUPPORT_GATHER = 64 * LARGEST_BLOCK

_UNSET = object()


def law_support(law, limit: int = MAX_SUPPORT_GATHER):
    """The nonzero entries of a law [V] (torch): (token ids ascending, probabilities) as Python lists, from one
    reduction over the vocabulary (block maxima over ``LARGEST_BLOCK`` entries) and a gather of the blocks with
    mass; None when those blocks hold more than ``limit`` entries."""
    import torch

    vocab = law.shape[-1]
    blocks = vocab // LARGEST_BLOCK
    split = blocks * LARGEST_BLOCK
    hot = torch.nonzero(law[:split].reshape(blocks, LARGEST_BLOCK).amax(dim=1) > 0).reshape(-1)  # [m] blocks
    if hot.numel() * LARGEST_BLOCK > limit:
        return None
    ids = (hot[:, None] * LARGEST_BLOCK + torch.arange(LARGEST_BLOCK, device=law.device)).reshape(-1)
    if split < vocab:  # the tail after the last whole block
        ids = torch.cat([ids, torch.arange(split, vocab, device=law.device)])
    values = law[ids]  # [m * width + tail]
    inside = values > 0
    return ids[inside].tolist(), values[inside].tolist()


class PositionLaw:
    """The sampling law ``sampling`` gives one position, from what the decoder has there: its logits row [V]
    (``logits``, any float dtype, on the models' device), its full law [V] (torch float64), or its support (token
    ids ascending and probabilities, Python lists: every nonzero entry of a law over ``vocab`` tokens on
    ``device``). ``law()`` is the full law (given; ``Sampling.probabilities`` of the logits; or the support put
    into zeros, which is the law it was read from entry for entry); ``support()`` the support (given; from the
    logits when the sampling filters by top-k or is greedy, ``Sampling.support``; else from the full law,
    ``law_support``), None when the sampling does not filter or the support is not small. Each is computed once."""

    __slots__ = ("sampling", "logits", "vocab", "device", "_law", "_support")

    def __init__(self, sampling: Sampling, *, logits=None, law=None, support=None, vocab: int | None = None,
                 device=None):
        if logits is None and law is None and (support is None or vocab is None):
            raise VerispecError("a PositionLaw needs the logits, the law, or the support and the vocabulary size")
        self.sampling = sampling
        self.logits = logits
        self.vocab = vocab
        source = logits if logits is not None else law
        self.device = device if device is not None else (source.device if source is not None else "cpu")
        self._law = law
        self._support = _UNSET if support is None else support

    @property
    def materialised(self) -> bool:
        """Whether the full law [V] exists (given, or computed by an earlier ``law()``)."""
        return self._law is not None

    def law(self):
        """The full law [V], torch float64 on the models' device."""
        if self._law is None:
            if self.logits is not None:
                self._law = self.sampling.probabilities(self.logits)
            else:
                import torch

                ids, values = self._support
                law = torch.zeros(self.vocab, dtype=torch.float64, device=self.device)
                law[torch.tensor(ids, dtype=torch.int64, device=self.device)] = torch.tensor(
                    values, dtype=torch.float64, device=self.device)
                self._law = law
        return self._law

    def support(self):
        """(token ids ascending, probabilities) of the law's nonzero entries, Python lists; None when the sampling
        does not filter or the support is not small."""
        if self._support is _UNSET:
            found = None
            if self.sampling.filters:
                if self.logits is not None and self._law is None:
                    found = self.sampling.support(self.logits)
                if found is None:
                    found = law_support(self.law())
            self._support = found
        return self._support


def position_law(sampling: Sampling, law_row, logits_row) -> PositionLaw:
    """The ``PositionLaw`` the decoder keeps for the next block from a row of a tree's laws and logits [V]: the law's
    support when the sampling filters and it is small (one pass over the row while it is at hand, and no copy of
    it), else a copy of the row (a view would keep the whole tree's arrays alive), with a copy of the logits where
    a reader can use them (no filter: the features come from the logits, ``verispec.selector.features``)."""
    if sampling.filters:
        support = law_support(law_row)
        if support is not None:
            return PositionLaw(sampling, support=support, vocab=int(law_row.shape[-1]), device=law_row.device)
        return PositionLaw(sampling, law=law_row.clone())
    return PositionLaw(sampling, law=law_row.clone(), logits=logits_row.clone())


def _position(value, sampling: Sampling):
    if value is None or isinstance(value, PositionLaw):
        return value
    return PositionLaw(sampling, law=value)


class BlockContext:
    """What a policy may read before a block's draws (DDTE, arXiv 2602.16994, Appendix E: its features are all
    computed before the block drafts). The root is the last token of ``tokens``; "prev" is the position before
    it, whose law produced the root.

    Laws are ``Sampling``'s law of the model's logits, torch float64 [V] on the models' device, or None where
    not computed: ``p_prev`` (the target's law of the root token: from the previous block's verify forward at
    its accepted node, or from the prompt's prefill; None for a one-token prompt), ``q_prev`` (the draft's law
    there) and ``q_root`` (the draft's law after the root, from the draft's catch-up forward): both only when the
    policy ``needs_draft`` (and ``q_prev`` None for a one-token prompt). Each is computed on its first read;
    ``laws`` holds them as ``PositionLaw``s (by the same names), whose supports and logits a policy may read
    instead of the full laws. ``hidden`` (only when the policy ``needs_hidden``): the last layer's hidden states
    [H], ``"target_prev"`` (the target at the token before the root; the target has not fed the root yet),
    ``"draft_prev"`` and ``"draft_root"``; an entry is absent where the position does not exist (a one-token
    prompt). The laws may be given as tensors or ``PositionLaw``s."""

    __slots__ = ("tokens", "context_length", "laws", "hidden", "sampling")

    def __init__(self, tokens: tuple[int, ...], context_length: int, p_prev: Any, q_prev: Any, q_root: Any,
                 hidden: dict[str, Any] | None, sampling: Sampling):
        #: The whole sequence so far, prompt included; the last token is the root of the block's tree.
        self.tokens = tokens
        self.context_length = context_length
        self.laws: dict[str, PositionLaw | None] = {name: _position(value, sampling) for name, value in
                                                    (("p_prev", p_prev), ("q_prev", q_prev), ("q_root", q_root))}
        self.hidden = hidden
        self.sampling = sampling

    def _law(self, name: str):
        law = self.laws[name]
        return None if law is None else law.law()

    @property
    def p_prev(self):
        return self._law("p_prev")

    @property
    def q_prev(self):
        return self._law("q_prev")

    @property
    def q_root(self):
        return self._law("q_root")


__all__ = ["MAX_SUPPORT_GATHER", "BlockContext", "PositionLaw", "law_support", "position_law"]
