"""EAGLE: after a rejected draft only the rejected token's target probability was adjusted, not the whole residual
(SafeAILab/EAGLE#20, 2023-12-28; an older report, kept because it is a tree verifier's residual).

EAGLE's ``evaluate_posterior`` verifies a draft tree under sampling by walking each depth's candidate children in
turn: child x is accepted when ``r <= px / qx`` (r = ``random.random()``, px the target probability ``gtp[x]``,
qx the draft's), else the target law is adjusted before the next sibling is tried, and the token after the
accepted path is drawn from the adjusted law (``sample_p``) by ``torch.multinomial``. The report: "in other
implementations: like GPT-fast, or lucidrains implementation, the probability (GTP - Q) should be subtracted
elementwisely but not only the rejected element". The maintainer: "The correct approach should be to subtract the
two distributions rather than adjust the value of the rejected elements. We have already adjusted the non-greedy
code. Since sampling without replacement is performed here, a mask is used to adjust the draft distribution." The
old code's lines are in a screenshot the stored thread does not show; the re-creation reads "adjust the value of
the rejected element" as ``gtp[x] = max(gtp[x] - qx, 0)`` then renormalising, which is zero at x whenever x was
rejected (rejection needs px < qx), the rest of gtp left as it was. The fix: ``gtp = norm(max(gtp - q, 0))`` over
the whole vocabulary, and the draft law of the next sibling masked at the rejected token (drafts without
replacement).

The re-creation keeps ``evaluate_posterior``'s walk (candidates tested in order at each depth, ``random.random``
for r, ``adjustflag``, the adjusted law returned as ``sample_p``) and ``update_inference_inputs``' draw of the next
token by ``torch.multinomial(sample_p, 1)``; the tree comes as verispec's parent array (EAGLE flattens it into
``candidates`` paths with ``retrieve_indices``), the draft laws as the layout's rows. Left out: the logits
processors (the laws are handed processed), KV-cache and tree-attention bookkeeping. Written for verispec from the
thread's description; no code copied.

Check: ``branch:2`` (two children of the root drawn without replacement, the drafts EAGLE's fixed code describes),
V = 3, p = (0.3, 0.3, 0.4), q = (0.5, 0.4, 0.1): exact mode gives TV 81/350 = 0.231429 for the old adjustment, equal to
an enumeration of the walk in Fractions (first-token law (13/35, 23/50, 59/350)), and 6e-17 for the fixed one (the
same enumeration gives p exactly).
"""

from __future__ import annotations

import random

import torch

BUG = {
    "repository": "SafeAILab/EAGLE",
    "threads": ["SafeAILab/EAGLE#20"],
    "url": "https://github.com/SafeAILab/EAGLE/issues/20",
    "date": "2023-12-28",
    "title": "rejection adjusts only the rejected token's target probability, not the residual",
    "class": "wrong residual",
    "layout": "tree-parent", "tree": "branch:2",
    "target": [0.3, 0.3, 0.4], "draft": [0.5, 0.4, 0.1],
    "rng": "capture", "arrays": "torch", "per_row": True,
    "mode": "auto",
}


def evaluate_posterior(children, tokens, draft_probs, target_probs, *, whole_residual):
    """Walk from the root: at each node try its children in order. Returns (accepted path of node ids, sample_p:
    the law the next token is drawn from). ``children[n]`` lists node n's children; ``tokens[n]`` is node n's
    token; ``draft_probs[n]`` the draft law that drew node n (at its parent); ``target_probs[n]`` the target law
    after node n's path."""
    node, path = 0, []
    while True:
        gtp = target_probs[node].clone()
        qd = None  # the draft law of the next sibling, masked as siblings are rejected
        adjustflag = False
        accepted = None
        for child in children[node]:
            if qd is None:
                qd = draft_probs[child].clone()
            xi = tokens[child]
            r = random.random()
            px, qx = float(gtp[xi]), float(qd[xi])
            if r <= px / qx:
                accepted = child
                break
            if whole_residual:  # the fix: the residual over the whole vocabulary, the draft masked at xi
                gtp = torch.clamp(gtp - qd, min=0)
                gtp = gtp / gtp.sum()
                qd[xi] = 0
                qd = qd / qd.sum()
            else:  # before the fix: only the rejected element adjusted
                gtp[xi] = max(px - qx, 0.0)
                gtp = gtp / gtp.sum()
            adjustflag = True
        if accepted is None:
            return path, gtp if adjustflag else target_probs[node]
        path.append(accepted)
        node = accepted


def _step(draft_tokens, parents, draft_probs, target_probs, *, whole_residual):
    """One row of the layout: EAGLE's evaluate_posterior, then update_inference_inputs' draw of the next token."""
    count = draft_tokens.shape[1]
    children = [[] for _ in range(count + 1)]
    for j in range(count):
        children[int(parents[0, j])].append(j + 1)
    tokens = [None] + [int(t) for t in draft_tokens[0]]
    laws = [None] + [draft_probs[0, j] for j in range(count)]
    path, sample_p = evaluate_posterior(children, tokens, laws, target_probs[0], whole_residual=whole_residual)
    next_token = int(torch.multinomial(sample_p, 1)[0])
    depth = 0
    for j in range(count):  # the deepest node's depth sizes the output
        d, n = 1, int(parents[0, j])
        while n != 0:
            d, n = d + 1, int(parents[0, n - 1])
        depth = max(depth, d)
    out = torch.full((1, depth + 1), -1, dtype=torch.int64)
    emitted = [tokens[n] for n in path] + [next_token]
    out[0, :len(emitted)] = torch.tensor(emitted)
    return out


def buggy(draft_tokens, parents, draft_probs, target_probs):
    return _step(draft_tokens, parents, draft_probs, target_probs, whole_residual=False)


def fixed(draft_tokens, parents, draft_probs, target_probs):
    return _step(draft_tokens, parents, draft_probs, target_probs, whole_residual=True)
