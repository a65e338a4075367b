"""Losslessness of real decoding, checked statistically: the law of the first tokens a decoder emits from a
fixed context, over many seeded runs, against the target's exact law.

``sequence_law`` computes the target's exact law of its first ``length`` tokens after a context by plain
uncached forward passes (one per prefix with positive probability), independently of the KV caches, tree
masks and verifiers that real decoding uses. ``decoding_fit`` runs the decoder ``runs`` times (seeds 0, 1, ...)
and tests the emitted sequences against it with ``verispec.statistics.exact_binomial_test`` (false-failure
rate at most ``alpha``). Meant for small vocabularies (the tiny pairs of ``verispec.models.tiny``).

``STAT_CASES``: each registered verifier on a branching tree it is valid for, with a sampling setting
(filters are applied identically to p and q, so each must stay lossless).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from verispec.errors import VerispecError
from verispec.models.decoding import SpeculativeDecoder
from verispec.models.generation import sample_target
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.statistics import DEFAULT_ALPHA, FitResult, exact_binomial_test

STAT_CASES: dict[str, tuple[str, Sampling]] = {
    "naive": ("chain:2", Sampling(1.0)),
    "bv": ("chain:3", Sampling(0.8, top_k=8)),
    "nss": ("iid:2,2", Sampling(1.0)),
    "naivetree": ("delayed:2,1,1", Sampling(1.0, top_p=0.9)),
    "specinfer": ("delayed:2,1,2", Sampling(1.0)),
    "spectr": ("iid:2,2", Sampling(1.2)),
    "otlp": ("iid:2,1", Sampling(1.0)),
    "khisti": ("iid:2,1", Sampling(1.0, top_k=10)),
    "globalres": ("iid:2,2", Sampling(1.0)),
    "traversal": ("branch:2,2", Sampling(1.0)),
    "traversal-iid": ("iid:2,2", Sampling(0.9)),
    "gbv": ("iid:2,2", Sampling(1.0)),
    "psbv": ("iid:2,2", Sampling(1.0)),
    "rrsw": ("branch:2,1", Sampling(1.0)),
    "spechub": ("hub-tree:2", Sampling(1.0)),
    "greedy": ("greedy-tree:3,2", Sampling(1.0)),
}

#: Most sequences ``sequence_law`` enumerates (V^length grows fast).
MAX_SEQUENCES = 1 << 16


def sequence_law(pair: ModelPair, context: list[int], length: int, sampling: Sampling) -> dict[tuple[int, ...], float]:
    """{(x_1..x_length): P_target(x_1..x_length | context)} by uncached forward passes."""
    import torch

    law = {(): 1.0}
    for _ in range(length):
        if len(law) > MAX_SEQUENCES:  # the sequences of positive mass so far: one forward pass each
            raise VerispecError(f"the exact law of {length} tokens after this context needs {len(law):,} forward "
                                f"passes or more (over {MAX_SEQUENCES:,}); use a tiny pair, a top-k filter or "
                                "fewer tokens")
        grown = {}
        for prefix, mass in law.items():
            with torch.no_grad():
                logits = pair.target(torch.tensor([list(context) + list(prefix)], device=pair.device)).logits[0, -1]
            conditional = sampling.probabilities(logits).cpu().numpy()
            for token in np.flatnonzero(conditional > 0):
                grown[prefix + (int(token),)] = mass * float(conditional[token])
        law = grown
    return law


def decoding_fit(pair: ModelPair, drafter: str | None, verifier: str | None, sampling: Sampling, *,
                 context: list[int], runs: int, length: int = 2, alpha: float = DEFAULT_ALPHA,
                 law_for_drafting=None, progress=None) -> FitResult:
    """Decode ``length`` tokens ``runs`` times (seed = run index) and test the sequences against the target's
    exact law. ``drafter``/``verifier`` None: plain sampling from the target (the reference itself)."""
    law = sequence_law(pair, context, length, sampling)  # first: a law too large to compute refuses at once
    counts: Counter = Counter()
    if drafter is None:
        generations = (sample_target(pair, context, length, sampling, seed, stop_at_eos=False) for seed in range(runs))
    else:
        # whole trees in every block: the first ``length`` tokens must test the tree's law at every depth. One decoder
        # runs every seed over caches prefilled once (``SpeculativeDecoder.runs``: each run is the run of a decoder
        # seeded with it, token for token)
        decoder = SpeculativeDecoder(pair, drafter, verifier, sampling, stop_at_eos=False,
                                     law_for_drafting=law_for_drafting, cut_drafts=False)
        generations = decoder.runs(context, length, range(runs))
    for generation in generations:
        counts[tuple(generation.tokens)] += 1
        if progress is not None:
            progress.update(1)
    return exact_binomial_test(counts, law, alpha=alpha)
