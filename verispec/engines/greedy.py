"""The greedy check of an engine's verification code: every draft list of a tree's depth in one all-greedy batch,
each request held to the target's argmax decoding (``verispec check-engine``'s exhaustive checks)."""

from __future__ import annotations

import itertools

from verispec.errors import VerispecError

#: The most draft lists one greedy check hands the engine in one batch (V^depth).
MAX_DRAFT_LISTS = 4096


def greedy_check(function, tree: str, problem) -> dict:
    """Every draft list of the tree's depth at once, all requests greedy: each must emit the target's argmax after
    the accepted drafts (ties to the smallest id), drafts accepted while they are that argmax. On a context-free
    problem every request's rows are alike, so a request reading another's row (an offset bug) would pass: its
    target is then rolled by the prefix (row at prefix x: p rolled by len(x) + sum(x)), so that the argmax moves
    with the context."""
    import numpy as np

    from verispec.simulator.tree_specs import parse_tree

    depth = parse_tree(tree).depth
    size = problem.vocab_size
    if size ** depth > MAX_DRAFT_LISTS:
        raise VerispecError(f"the greedy check runs every draft list at once: {size}^{depth} = {size ** depth:,} at "
                            f"V = {size}, --tree of depth {depth}, more than {MAX_DRAFT_LISTS:,}; use fewer drafts or "
                            "a smaller vocabulary")
    from verispec.simulator import ContextFreeProblem

    if isinstance(problem, ContextFreeProblem):
        problem = rolled(problem, depth + 1)
    lists = [list(drafts) for drafts in itertools.product(range(size), repeat=depth)]
    logits = []
    for drafts in lists:
        rows = [np.log(np.asarray(problem.target(tuple(drafts[:position])), dtype=np.float64))
                for position in range(depth + 1)]
        logits.append(np.stack(rows))
    output = np.asarray(function(lists, logits))
    if (output.ndim != 2 or output.shape[0] != len(lists) or output.shape[1] < depth + 1
            or output.dtype.kind not in "iu"):
        raise VerispecError(f"the greedy batch returned {output.dtype} of shape {list(output.shape)}: it must return "
                            f"integers of shape [{len(lists)}, {depth + 1}] (each request's tokens, padded with -1)")
    for index, drafts in enumerate(lists):
        expected = []
        for position in range(depth + 1):
            best = int(np.argmax(problem.target(tuple(drafts[:position]))))
            expected.append(best)
            if position == depth or drafts[position] != best:
                break
        got = [int(token) for token in output[index] if int(token) >= 0]
        if got != expected:
            return {"verdict": "LOSSY", "mode": "exhaustive", "tv_distance": None,
                    "note": f"draft list {drafts}: emitted {got}, the target's argmax decoding gives {expected}",
                    "witness": {"drafts": drafts, "emitted": got, "expected": expected}}
    return {"verdict": "LOSSLESS", "mode": "exhaustive", "tv_distance": 0.0,
            "note": f"all {len(lists)} draft lists of depth {depth} at V = {size} emit the target's argmax decoding"}


def rolled(problem, depth: int):
    """``problem``'s context-free target rolled by each prefix (len + sum of its tokens), to ``depth``."""
    import numpy as np

    from verispec.simulator import TabularProblem

    p, q = np.asarray(problem.target(()), dtype=np.float64), np.asarray(problem.draft(()), dtype=np.float64)
    size = len(p)
    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(size), repeat=length):
            target[prefix] = np.roll(p, length + sum(prefix))
            draft[prefix] = q
    return TabularProblem(size, target, draft)
