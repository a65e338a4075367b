"""TensorRT-LLM: Eagle3 dynamic-tree rejection sampling verified with the wrong logits slice
(NVIDIA/TensorRT-LLM#15098, #12588, 2026-06-08).

EAGLE3's one-model dynamic tree drafts each node's children as the top-K tokens of the draft at that node, runs
the target once over the flattened tree (one row of logits per node, the law after the path to it) and walks the
tree: at a node, each child in turn is accepted with the target's probability of it among the tokens not yet
tried, and after the last refusal a token is drawn from the target with the tried ones zeroed. PR #15098
("fix output distribution correctness for Eagle3 dynamic-tree rejection sampling") says the verification
"previously used an incorrect logits slice"; the thread does not show which rows. Re-created here as the
off-by-one-level reading: a child was tested against the target row of the child itself (the law one token
later) instead of its parent's row. The fix reads each child's law from its parent's row.

The re-creation keeps TensorRT-LLM's shapes: ``target_logits_tree`` [num_gens * N, V] (N = nodes with the root),
per-row ``temps_exp``/``top_k_exp``/``top_p_exp`` [num_gens * N], ``compute_probs_from_logits`` reshaped to
``target_probs_tree`` [num_gens, N, V], the tree as ``child_nodes_list`` [num_gens, N, max_children] with
``num_child_nodes`` [num_gens, N], and the rejection walk on one torch generator seeded by the request's seed.
Left out: the dynamic choice of which nodes to expand (the tree's shape comes from ``parents``), KV caches,
the CUDA kernels; the target's rows come from one call per node instead of tree attention. PR #15098 also
changed the kernel's residual to the target with the tried siblings zeroed; both twins use that rule, so the
slice is the only difference. Written for verispec from the thread; no code copied.
"""

import torch

BUG = {
    "repository": "NVIDIA/TensorRT-LLM",
    "threads": ["NVIDIA/TensorRT-LLM#15098", "NVIDIA/TensorRT-LLM#12588"],
    "url": "https://github.com/NVIDIA/TensorRT-LLM/pull/15098",
    "date": "2026-06-08",
    "title": "Eagle3 dynamic-tree rejection sampling reads each node's target law from the wrong logits row",
    "class": "wrong slice or offset",
    "layout": "step-tree", "tree": "branch:2",
    "problem": "tensorrt_llm_15098.json",
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}

NEG = float("-inf")


def compute_probs_from_logits(logits, temps, top_k, top_p, min_p=None):
    """Per-row temperature, top-k, top-p (and min-p) in that order, then softmax: logits [R, V] -> probs [R, V]."""
    scores = logits / temps.unsqueeze(1)
    for row in range(scores.shape[0]):
        k = int(top_k[row])
        if k > 0:
            kth = torch.topk(scores[row], min(k, scores.shape[1])).values[-1]
            scores[row] = scores[row].masked_fill(scores[row] < kth, NEG)
        if float(top_p[row]) < 1.0:
            ordered, index = torch.sort(scores[row], descending=False)
            drop = ordered.softmax(-1).cumsum(-1) <= 1 - float(top_p[row])
            drop[-1] = False
            scores[row] = scores[row].masked_fill(drop.scatter(0, index, drop), NEG)
        if min_p is not None and float(min_p[row]) > 0:
            probs = scores[row].softmax(-1)
            scores[row] = scores[row].masked_fill(probs < float(min_p[row]) * probs.max(), NEG)
    return scores.softmax(-1)


def build_dynamic_tree(draft_model, input_ids, parents, temperature):
    """Each node's children are the top-K tokens of the draft at that node (K = its number of children), in
    rank order. Returns draft_tokens [N] (node 0, the root, holds -1), paths (tokens from the root) and
    child_nodes_list [1, N, max_children] with num_child_nodes [1, N]."""
    num_nodes = len(parents) + 1
    children = [[] for _ in range(num_nodes)]
    for node, parent in enumerate(parents.tolist(), start=1):
        children[parent].append(node)
    draft_tokens = torch.full((num_nodes,), -1, dtype=torch.int64)
    paths = [()] * num_nodes
    for node in range(num_nodes):  # a parent is before its children
        if not children[node]:
            continue
        ids = torch.cat([input_ids, torch.tensor([paths[node]], dtype=torch.int64)], dim=1)
        scores = draft_model(ids)[0, -1] / temperature
        top = torch.topk(scores, len(children[node])).indices
        for rank, child in enumerate(children[node]):
            draft_tokens[child] = top[rank]
            paths[child] = (*paths[node], int(top[rank]))
    width = max(len(c) for c in children)
    child_nodes_list = torch.full((1, num_nodes, width), -1, dtype=torch.int64)
    for node, kids in enumerate(children):
        child_nodes_list[0, node, :len(kids)] = torch.tensor(kids, dtype=torch.int64)
    num_child_nodes = torch.tensor([[len(kids) for kids in children]], dtype=torch.int64)
    return draft_tokens, paths, child_nodes_list, num_child_nodes


def dynamic_tree_rejection_sample(draft_tokens, target_probs_tree, child_nodes_list, num_child_nodes, generator,
                                  child_row):
    """The tree walk of one request (gen 0). ``child_row`` True is the bug: a child is tested against the row
    of the child itself, not its parent's. Returns the accepted tokens and the one drawn after them."""
    node, out = 0, []
    while True:
        probs = target_probs_tree[0, node].clone()  # the law after the path to ``node``
        tried = torch.zeros_like(probs, dtype=torch.bool)
        advanced = False
        for j in range(int(num_child_nodes[0, node])):
            child = int(child_nodes_list[0, node, j])
            token = int(draft_tokens[child])
            row = target_probs_tree[0, child] if child_row else probs
            law = row.masked_fill(tried, 0.0)
            total = float(law.sum())
            if total > 0 and float(torch.rand(1, dtype=torch.float64, generator=generator)) * total < float(law[token]):
                out.append(token)
                node, advanced = child, True
                break
            tried[token] = True
        if not advanced:
            residual = probs.masked_fill(tried, 0.0)
            return out + [int(torch.multinomial(residual / residual.sum(), 1, generator=generator))]


def eagle3_dynamic_tree_step(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed,
                             child_row):
    generator = torch.Generator()
    generator.manual_seed(seed)
    draft_tokens, paths, child_nodes_list, num_child_nodes = build_dynamic_tree(draft_model, input_ids, parents,
                                                                                temperature)
    num_nodes = len(paths)
    # The target's row per node: the law after the path to it ([num_gens * N, V], num_gens = 1).
    target_logits_tree = torch.stack([
        target_model(torch.cat([input_ids, torch.tensor([path], dtype=torch.int64)], dim=1))[0, -1]
        for path in paths])
    temps_exp = torch.full((num_nodes,), float(temperature), dtype=torch.float64)
    top_k_exp = torch.full((num_nodes,), int(top_k), dtype=torch.int64)
    top_p_exp = torch.full((num_nodes,), float(top_p), dtype=torch.float64)
    min_p_exp = torch.full((num_nodes,), float(min_p), dtype=torch.float64)
    target_probs_flat = compute_probs_from_logits(target_logits_tree, temps_exp, top_k_exp, top_p_exp, min_p_exp)
    target_probs_tree = target_probs_flat.reshape(1, num_nodes, target_probs_flat.shape[-1])
    return torch.tensor(dynamic_tree_rejection_sample(draft_tokens, target_probs_tree, child_nodes_list,
                                                      num_child_nodes, generator, child_row))


def buggy(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed):
    return eagle3_dynamic_tree_step(draft_model, target_model, input_ids, parents, temperature, top_k, top_p,
                                    min_p, seed, child_row=True)


def fixed(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed):
    return eagle3_dynamic_tree_step(draft_model, target_model, input_ids, parents, temperature, top_k, top_p,
                                    min_p, seed, child_row=False)
