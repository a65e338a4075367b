"""The greedy check of an engine's verification code: every draft list of a tree's depth in one all-greedy batch,
each request held to the target's argmax decoding (``verispec check-engine``'s exhaustive checks)."""

from __future__ import annotations

import itertools

from verispec.errors import VerispecError

#: The most draft lists one greedy check hands the engine in one batch (V^depth).
MAX_DRAFT_LISTS = 4096
#: How far a returned log-probability may lie from the target's (a float32 log-softmax of log-probabilities).
LOGPROB_TOLERANCE = 1e-5


def greedy_check(function, tree: str, problem) -> dict:
    """Every draft list of the tree's depth at once, all requests greedy: each must emit the target's argmax after
    the accepted drafts (ties to the smallest id), drafts accepted while they are that argmax. On a context-free
    problem every request's rows are alike, so a request reading another's row (an offset bug) would pass: its
    target is then rolled by the prefix (row at prefix x: p rolled by len(x) + sum(x)), so that the argmax moves
    with the context.

    A function that returns logprobs as well, (tokens, logprobs [B, K + 1, 2], ids [B, K + 1, 2]), is held to the
    target's log-probabilities too (``logprob_mismatch``)."""
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
        # logits, not log-probabilities: each row shifted (by 1 + its position), so that code reading logits as
        # log-probabilities, or one row's normaliser for another's, is seen in the logprobs it returns
        rows = [np.log(np.asarray(problem.target(tuple(drafts[:position])), dtype=np.float64)) + 1.0 + position
                for position in range(depth + 1)]
        logits.append(np.stack(rows))
    from verispec.external.calls import FunctionRaised, call_function

    try:  # the engine's code raising on the batch is the check's finding (RAISES, with the line), as check_external's
        output = call_function(function, "the greedy batch", None, (lists, logits))
    except FunctionRaised as error:
        return raises_row(error, f"the greedy batch of {len(lists)} draft lists", "exhaustive")
    logprobs = None
    if isinstance(output, tuple) and len(output) == 3:
        output, logprobs, ids = (np.asarray(part) for part in output)
    output = np.asarray(output)
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
        wrong = None if logprobs is None else logprob_mismatch(problem, drafts, got, logprobs[index], ids[index])
        if wrong:
            return {"verdict": "LOSSY", "mode": "exhaustive", "tv_distance": None,
                    "note": f"draft list {drafts}: {wrong}", "witness": {"drafts": drafts, "emitted": got}}
    also = ("" if logprobs is None else
            f", each with its log-probability and the largest under the target (within {LOGPROB_TOLERANCE:g})")
    return {"verdict": "LOSSLESS", "mode": "exhaustive", "tv_distance": 0.0,
            "note": f"all {len(lists)} draft lists of depth {depth} at V = {size} emit the target's argmax decoding"
                    + also}


def raises_row(error, what: str, mode: str) -> dict:
    """The row of a check the adapter runs itself (greedy, seeds) whose call of the engine raised
    (``FunctionRaised``): RAISES, with what raised, its message and its line."""
    raised = error.to_json()
    return {"verdict": "RAISES", "mode": mode, "tv_distance": None, "raised": raised,
            "note": f"{what} raised {raised['exception']}: {raised['message'][:300]}"
                    + ("" if raised["line"] == "?" else f" (at {raised['line']})")}


def logprob_mismatch(problem, drafts, emitted, logprobs, ids) -> str | None:
    """What is wrong with one request's logprobs (``logprobs`` [K + 1, 2]: each emitted token's, then the largest;
    ``ids`` their token ids), or None: the token at position j has log p(token | drafts[:j]) and the largest is
    max log p(. | drafts[:j]), the target's (the rows handed are its log-probabilities shifted), within
    LOGPROB_TOLERANCE."""
    import numpy as np

    shape = np.shape(logprobs)
    if len(shape) != 2 or shape[0] < len(emitted) or shape[1] < 2 or np.shape(ids) != shape:
        return f"logprobs of shape {list(shape)} and ids of shape {list(np.shape(ids))}: each must be [K + 1, 2]"
    for position, token in enumerate(emitted):
        with np.errstate(divide="ignore"):
            law = np.log(np.asarray(problem.target(tuple(drafts[:position])), dtype=np.float64))
        expected = (law[token], law.max())
        if int(ids[position][0]) != token:
            return f"the logprob at position {position} is of token {int(ids[position][0])}, not the emitted {token}"
        for column, what in ((0, f"token {token}'s"), (1, "the largest")):
            if not np.isclose(float(logprobs[position][column]), expected[column], rtol=0, atol=LOGPROB_TOLERANCE):
                return (f"{what} log-probability at position {position} is {float(logprobs[position][column]):.6g}, "
                        f"the target's is {expected[column]:.6g}")
    return None


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
