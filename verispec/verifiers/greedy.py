"""Greedy multi-draft verification (Hu et al. 2025, "Towards Optimal Multi-draft Speculative Decoding",
arXiv 2502.18779, the greedy draft construction), verification of its own draft law.

Draft law (DraftLaw.GREEDY): G = the top K-1 tokens of q (ranked by q decreasing, ties by the smaller
token id; verispec.simulator.ranking), always drafted, best first; the last draft X ~ q~ = q / (1 - q(G))
on V \\ G. Verification: accept X with probability min(1, p(X) / q~(X)); on rejection emit
Y ~ norm((p - q~)+). The drafts are accepted iff Y is in G or Y = X, so tokens of G are never "rejected":
acceptance p(G) + sum_{i not in G} min(p(i), q~(i)).

The rule reads G and X off the child list: G = all children but the last, X = the last, and it checks
that G is the top len(G) tokens of q. Degenerate nodes: when q's support has at most K-1 tokens the
drafter drafts the whole support (ranked) and no X. Read the same way, the last child is then the only
token left outside G, q~(X) = 1, and the rule reduces to Y ~ p, which is exactly the right rule for a
fully drafted support; so no special case and no division by zero (1 - q(G) = q(X) > 0 always).
"""

from __future__ import annotations

from verispec import backend
from verispec.errors import InvalidTreeError
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver
from verispec.simulator.ranking import top_token_batch, top_tokens, without_tokens


def greedy_split(q, children: tuple[int, ...]):
    """(G, X, q~) of one greedy child list; InvalidTreeError when it is not a greedy draft of q."""
    greedy, last = tuple(children[:-1]), children[-1]
    if greedy != top_tokens(q, len(greedy)) or last in greedy:
        raise InvalidTreeError(
            f"greedy needs the top {len(greedy)} tokens of q {top_tokens(q, len(greedy))} followed by one "
            f"other token, got the child list {children}")
    rest = without_tokens(q, greedy)
    return greedy, last, rest / rest.sum()


def _check_greedy_lists(q, children) -> None:
    """InvalidTreeError unless every row of ``children`` [N, m] is a greedy draft of its q [N, V]."""
    xp = backend.namespace(children)
    greedy, last = children[:, :-1], children[:, -1]
    expected = top_token_batch(q, greedy.shape[1])
    wrong = xp.any(greedy != expected, axis=1) | xp.any(greedy == last[:, None], axis=1)
    if bool(xp.any(wrong)):
        row = int(backend.to_numpy(wrong).argmax())
        listed = tuple(int(t) for t in backend.to_numpy(children[row]))
        top = tuple(int(t) for t in backend.to_numpy(expected[row]) if t >= 0)
        raise InvalidTreeError(f"greedy needs the top {greedy.shape[1]} tokens of q {top} followed by one other "
                               f"token, got the child list {listed}")


class GreedySolver(NodeSolver):
    name = "greedy"
    summary = "greedy drafts (the top K-1 tokens of q, then one sampled) verified against their own law"
    citation = "Hu et al. 2025, arXiv 2502.18779"
    valid_for = frozenset({DraftLaw.GREEDY})

    def output_laws(self, p, q, children):
        _check_greedy_lists(q, children)
        size = p.shape[-1]
        last = children[:, -1]
        q_tilde = normalize(backend.where(backend.membership(children[:, :-1], size), backend.zero(q), q))
        accept = backend.minimum_one(backend.take(p, last) / backend.take(q_tilde, last))  # [N]
        picked = backend.where(backend.one_hot(last, size), accept[:, None], backend.zero(p))
        return (1 - accept)[:, None] * residual(p, q_tilde) + picked

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        _, last, q_tilde = greedy_split(q, children)
        if chooser.bernoulli(ratio_min_one(p[last], q_tilde[last])):
            return last
        return chooser.categorical(residual(p, q_tilde))
