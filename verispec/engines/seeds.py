"""The seed check of an engine's verification code: a seeded request's tokens are a function of its own seed.

Engines promise it: vLLM's ``generate_uniform_probs`` says that "the requests with their own seeds will use the
provided ``torch.Generator`` for reproducibility", and its own tests draw a batch twice with the same seeds. A step
that reads a seeded request's uniform from torch's global generator, or from a neighbour's generator, keeps the law
(a uniform is a uniform), so no law check sees it; a user who replays a seeded request sees it at once.

``seeds_check`` calls the engine's ``step-ragged`` function (``verispec.external.step``) with all three requests
sampling, each with a seed of its own, outside any capture (the engine's generators and torch's global one draw for
real). For each of ``SEEDS`` seed triples and each request, ``REPEATS`` calls keep that request's seed and give the
other two fresh seeds; torch's global generator moves on between calls, as it does in an engine. The request must
emit the same tokens in every call. The check runs the engine's code, no capture and no law: a false alarm needs a
step that is not a function of its seeds, which is the finding; its power is stated for the fault it was built for
(``miss_probability``).
"""

from __future__ import annotations

import time

from verispec.errors import VerispecError

#: Seed triples a check tries, and calls per (triple, held request).
SEEDS = 24
REPEATS = 4
#: The first seed handed (each request's seeds then count up from it, all distinct).
FIRST_SEED = 7_000_001


def miss_probability(problem, seeds: int = SEEDS, repeats: int = REPEATS) -> float:
    """The probability that the check misses a step that reads the checked request's first acceptance uniform from
    another stream (torch's global generator, a neighbour's), on a context-free ``problem``: for each seed the draft
    x comes from the request's own generator (law q) and is accepted with r = min(1, p(x) / q(x)); the ``repeats``
    calls agree only where their foreign uniforms all fall on one side of r: r^R + (1 - r)^R. Over independent
    seeds: (sum_x q(x) (r_x^R + (1 - r_x)^R))^seeds."""
    p, q = problem.target(()), problem.draft(())
    agree = 0.0
    for target, draft in zip(p, q):
        if draft > 0:
            ratio = min(1.0, float(target) / float(draft))
            agree += float(draft) * (ratio ** repeats + (1.0 - ratio) ** repeats)
    return agree ** seeds


def seeds_check(function, tree: str, problem, sampling: str, *, time_budget: float,
                seeds: int = SEEDS, repeats: int = REPEATS) -> dict:
    """The check's row fields (module docstring): REPRODUCIBLE where every request emitted the same tokens in every
    call that kept its seed, IRREPRODUCIBLE with the witness otherwise, RAISES where the engine raised, INCONCLUSIVE
    where ``time_budget`` ran out first; VerispecError on one line for a tree that is not a chain or a sampling that
    is greedy."""
    import torch

    from verispec.engines.greedy import raises_row
    from verispec.external.calls import FunctionRaised, call_function
    from verispec.external.step import STEP_LAYOUTS
    from verispec.models.sampling import Sampling
    from verispec.simulator.tree_specs import parse_tree

    if not tree.startswith("chain:"):
        raise VerispecError(f"the seed check drafts one path (step-ragged): --tree {tree!r} is not a chain; use "
                            "chain:K")
    depth = parse_tree(tree).depth
    sampling = Sampling.parse(sampling)
    layout = STEP_LAYOUTS["step-ragged"]
    start, calls = time.monotonic(), 0
    next_seed = FIRST_SEED
    for _ in range(seeds):
        base = [next_seed + request for request in range(3)]
        next_seed += 3
        for held in range(3):
            first = None
            for repeat in range(repeats):
                if time.monotonic() - start > time_budget:
                    return {"verdict": "INCONCLUSIVE", "mode": "seeds", "tv_distance": None,
                            "note": f"the time budget of {time_budget:g} s ran out after {calls} calls, every "
                                    "seeded request reproducible so far: raise --time-budget"}
                handed = list(base)
                if repeat:  # the other requests' seeds fresh; the held one's kept
                    for other in range(3):
                        if other != held:
                            handed[other], next_seed = next_seed, next_seed + 1
                # fresh arguments each call (a step that wrote into its inputs would carry state to the next)
                arguments = list(layout.arguments(problem, sampling, depth, None, neighbours={0: sampling,
                                                                                                 2: sampling}))
                arguments[-1] = torch.tensor(handed, dtype=torch.int64)
                try:
                    result = call_function(function, "the seeded batch", None, tuple(arguments))
                except FunctionRaised as error:
                    return raises_row(error, "the seeded batch", "seeds")
                calls += 1
                tokens = layout.blocks(result, "the seeded batch", depth)[held]
                if first is None:
                    first = (tokens, list(handed))
                elif tokens != first[0]:
                    return _irreproducible(held, first, (tokens, handed))
    return {"verdict": "REPRODUCIBLE", "mode": "seeds", "tv_distance": None,
            "note": f"{calls} calls of a batch of three seeded sampling requests: each request emitted the same "
                    f"tokens in all {repeats} calls that kept its seed ({seeds} seeds each), the others' seeds and "
                    "torch's global generator changed between them; a step reading the checked request's first "
                    "acceptance uniform from another stream would have been missed with probability "
                    f"{miss_probability(problem, seeds, repeats):.2g}"}


def _irreproducible(held: int, first: tuple, then: tuple) -> dict:
    (before, seeds_before), (after, seeds_after) = first, then
    return {"verdict": "IRREPRODUCIBLE", "mode": "seeds", "tv_distance": None,
            "note": f"request {held} with seed {seeds_before[held]} emitted {list(before)} in one call and "
                    f"{list(after)} in another (the batch's seeds {seeds_before}, then {seeds_after}; torch's global "
                    "generator moved on between them): a seeded request's tokens must be a function of its own seed",
            "witness": {"request": held, "seeds": [seeds_before, seeds_after], "emitted": [list(before), list(after)]}}

