"""hipfire: DDTree verified with min(1, p/q) though its tree is the deterministic top-K of the draft's
marginals (warpfront/hipfire#483, 2026-06-27).

hipfire's DDTree speculative decoding builds its draft tree from a block drafter's per-position marginals: the
children of a node at depth d are the most probable tokens of the depth-d marginal, chosen, not sampled. Its
temperature > 0 path verified that tree with the chain rule for sampled drafts: each child accepted with
probability min(1, p(c) / q(c)), the residual (p - q)+ taking p's place after a refusal. The PR says this is
"provably biased for these trees (a first candidate proposed w.p. 1 over-accepts)". The fix verifies the tree
as SpecInfer's naive sampling does: draw x from the target at the node, descend if x is one of its children,
else emit x; that is lossless for any tree fixed before the draw.

The re-creation keeps the shape of the step: ``ddtree_marginals`` (the drafter's per-position laws [depth, V]:
here the draft model read along its own greedy path, since a block drafter conditions on the context only),
``build_ddtree_tree`` (each node's children the top-ranked tokens of its depth's marginal, as many as the tree
shape gives it), the target scored at every node, and ``verify_ddtree`` with the two rules, on one torch
generator seeded by the request's seed. Left out: the best-first choice of which prefixes enter the tree (the
shape comes from ``parents``), the cutoff, the SWOR verifier the PR also adds, batching, Rust and HIP. Written for
verispec from the thread's description; no code copied.
"""

import torch

BUG = {
    "repository": "warpfront/hipfire",
    "threads": ["warpfront/hipfire#483"],
    "url": "https://github.com/warpfront/hipfire/pull/483",
    "date": "2026-06-27",
    "title": "deterministic top-K DDTree of per-position marginals verified with min(1, p/q) and (p - q)+",
    "class": "deterministic tree verified as sampled",
    "layout": "step-tree", "tree": "branch:2",
    "target": [0.3, 0.4, 0.3], "draft": [0.6, 0.3, 0.1],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}

NEG = float("-inf")


def sampling_probs(logits, temperature, top_k, top_p, min_p):
    """The request's law of one row of logits [V]: temperature, top-k, top-p, min-p, softmax (float64)."""
    scores = logits / temperature
    if top_k > 0:
        kth = torch.topk(scores, min(int(top_k), scores.shape[-1])).values[-1]
        scores = scores.masked_fill(scores < kth, NEG)
    if top_p < 1.0:
        ordered, index = torch.sort(scores, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[-1] = False
        scores = scores.masked_fill(drop.scatter(0, index, drop), NEG)
    if min_p > 0:
        probs = scores.softmax(-1)
        scores = scores.masked_fill(probs < min_p * probs.max(), NEG)
    return scores.softmax(-1)


def ddtree_marginals(draft_model, input_ids, depth, settings):
    """The block drafter's per-position marginals [depth, V]: one law per depth, conditioned on the context only
    (the draft model read along its own greedy path)."""
    ids, rows = input_ids, []
    for _ in range(depth):
        law = sampling_probs(draft_model(ids)[0, -1], *settings)
        rows.append(law)
        ids = torch.cat([ids, torch.argmax(law).view(1, 1)], dim=1)
    return torch.stack(rows)


def build_ddtree_tree(marginals, parents):
    """Tokens and children of the deterministic tree: node j's children take the top-ranked tokens of the
    marginal at its children's depth, in rank order (node 0 is the root; its token is -1)."""
    num_nodes = len(parents) + 1
    depth_of = [0] * num_nodes
    children = [[] for _ in range(num_nodes)]
    for node, parent in enumerate(parents.tolist(), start=1):
        children[parent].append(node)
        depth_of[node] = depth_of[parent] + 1
    tree_tokens = [-1] * num_nodes
    for node in range(num_nodes):
        if children[node]:
            ranked = torch.argsort(marginals[depth_of[node]], descending=True, stable=True)
            for rank, child in enumerate(children[node]):
                tree_tokens[child] = int(ranked[rank])
    return tree_tokens, children, depth_of


def verify_ddtree(tree_tokens, children, depth_of, marginals, target_probs, generator, as_sampled):
    """Walk the tree from the root; ``target_probs[node]`` is the target's law after the path to ``node``.
    ``as_sampled`` True is the bug: each child accepted with min(1, p/q) against its depth's marginal q, the
    residual (p - q)+ after a refusal, as if the children had been drawn from q. False: draw x ~ p at the node,
    descend if x is a child's token, else emit x."""
    node, out = 0, []
    while True:
        p = target_probs[node]
        if as_sampled:
            q = marginals[depth_of[node]] if children[node] else None
            for child in children[node]:
                x = tree_tokens[child]
                if float(torch.rand(1, dtype=torch.float64, generator=generator)) * float(q[x]) < float(p[x]):
                    out.append(x)
                    node = child
                    break
                residual = torch.clamp(p - q, min=0.0)
                p = residual / residual.sum()
            else:
                return out + [int(torch.multinomial(p, 1, generator=generator))]
        else:
            x = int(torch.multinomial(p, 1, generator=generator))
            landed = [child for child in children[node] if tree_tokens[child] == x]
            out.append(x)
            if not landed:
                return out
            node = landed[0]


def spec_step_ddtree(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed,
                     as_sampled):
    generator = torch.Generator()
    generator.manual_seed(seed)
    settings = (temperature, top_k, top_p, min_p)
    num_nodes = len(parents) + 1
    depth = 0
    depth_of = [0] * num_nodes
    for node, parent in enumerate(parents.tolist(), start=1):
        depth_of[node] = depth_of[parent] + 1
        depth = max(depth, depth_of[node])
    marginals = ddtree_marginals(draft_model, input_ids, depth, settings)  # [depth, V]
    tree_tokens, children, depth_of = build_ddtree_tree(marginals, parents)
    paths = [()] * num_nodes
    for node, parent in enumerate(parents.tolist(), start=1):
        paths[node] = (*paths[parent], tree_tokens[node])
    target_probs = [sampling_probs(target_model(torch.cat([input_ids, torch.tensor([path], dtype=torch.int64)],
                                                          dim=1))[0, -1], *settings) for path in paths]
    return torch.tensor(verify_ddtree(tree_tokens, children, depth_of, marginals, target_probs, generator,
                                      as_sampled))


def buggy(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed):
    return spec_step_ddtree(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed,
                            as_sampled=True)


def fixed(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed):
    return spec_step_ddtree(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed,
                            as_sampled=False)
