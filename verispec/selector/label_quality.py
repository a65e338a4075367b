"""How good a root's conditional-exact labels are, on roots that also have exact or certified ones (issue 33's
label-quality study, ``experiments/selector_label_quality.py``): bias, spread, coverage of the 95% intervals, and
how many sampled trees the estimate needs to rank the actions as the reference does."""

from __future__ import annotations

import numpy as np

from verispec.errors import VerispecError
from verispec.selector.labels import Z95


def label_quality(conditional, reference, *, times=None, trees=None, repeats: int = 20,
                  seed: int = 0) -> dict:
    """How good conditional-exact labels are, on roots that also have exact or certified labels (the issue's
    "label quality"): ``conditional`` and ``reference`` are sequences of ``LabelSet`` of one grid, root by root
    (the conditional ones with ``per_sample``).

    Returns a JSON-ready dict:
      bias, spread      mean and standard deviation over (root, action) of conditional mean - reference value
      z_within_95       fraction of (root, action) whose |difference| <= 1.96 stderr + half the reference's
                        interval width (about 0.95 when the standard errors are right; stderr 0 rows excluded)
      ranking           for each m in ``trees`` (at most the samples; None: 1, 2, 4, .. below the samples, and
                        the samples themselves): labels from m of the sampled trees
                        (``repeats`` random subsets per root, ``numpy.random.default_rng(seed)``) against the
                        reference: ``best_agrees`` (fraction of (root, subset) whose best action, by E / T with
                        ``times`` [A] or by E without, is the reference's best), ``not_excluded`` (fraction whose
                        chosen action the reference's intervals do not exclude from being the best: its upper
                        score at least every action's lower score; equal to best_agrees for exact references,
                        and the share a certified tie leaves open otherwise), ``regret`` (mean 1 - reference
                        score of the chosen action / the reference's best score) and ``spearman`` (mean rank
                        correlation of the scores over actions)
    """
    conditional, reference = list(conditional), list(reference)
    if not conditional or len(conditional) != len(reference):
        raise VerispecError(f"label_quality needs one reference per conditional label set, got {len(conditional)} "
                            f"and {len(reference)}")
    if any(labels.per_sample is None for labels in conditional):
        raise VerispecError("label_quality needs conditional labels with their per-sample values")
    value = np.stack([labels.efficiency for labels in reference])                    # [R, A]
    half = np.stack([(labels.upper - labels.lower) / 2 for labels in reference])     # [R, A]
    mean = np.stack([labels.efficiency for labels in conditional])                   # [R, A]
    stderr = np.stack([labels.stderr for labels in conditional])                     # [R, A]
    if mean.shape != value.shape:
        raise VerispecError(f"label_quality: conditional labels {mean.shape} and references {value.shape} differ")
    difference = mean - value
    random = stderr > 0
    within = np.abs(difference[random]) <= Z95 * stderr[random] + half[random]
    cost = np.ones(value.shape[1]) if times is None else np.asarray(times, dtype=np.float64)   # [A]
    score = value / cost                                                              # [R, A]
    best = score.argmax(axis=1)                                                       # [R]
    reference_low = np.stack([labels.lower for labels in reference]) / cost          # [R, A]
    reference_high = np.stack([labels.upper for labels in reference]) / cost         # [R, A]
    best_low = reference_low.max(axis=1)                                              # [R]
    rng = np.random.default_rng(seed)
    ranking = []
    available = min(labels.per_sample.shape[0] for labels in conditional)
    if trees is None:
        trees = [2 ** power for power in range(available.bit_length()) if 2 ** power < available] + [available]
    for m in sorted({int(t) for t in trees if 1 <= t <= available}):
        agree, possible, regret, spearman = [], [], [], []
        for root, labels in enumerate(conditional):
            for _ in range(repeats if m < available else 1):
                rows = rng.choice(labels.per_sample.shape[0], size=m, replace=False)
                estimate = labels.per_sample[rows].mean(axis=0) / cost                # [A]
                chosen = int(estimate.argmax())
                agree.append(chosen == best[root])
                possible.append(reference_high[root, chosen] >= best_low[root])
                regret.append(1.0 - score[root, chosen] / score[root, best[root]])
                spearman.append(_spearman(estimate, score[root]))
        ranking.append({"trees": m, "best_agrees": float(np.mean(agree)), "not_excluded": float(np.mean(possible)),
                        "regret": float(np.mean(regret)),
                        "spearman": float(np.nanmean(spearman))})
    return {"roots": len(conditional), "actions": int(value.shape[1]), "bias": float(difference.mean()),
            "spread": float(difference.std()), "z_within_95": float(within.mean()) if within.size else None,
            "ranking": ranking}


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either side is constant."""
    def ranks(values):
        order = np.argsort(values, kind="stable")
        ranked = np.empty(len(values))
        ranked[order] = np.arange(len(values), dtype=np.float64)
        for tied in np.unique(values):  # average the ranks of equal values
            where = values == tied
            ranked[where] = ranked[where].mean()
        return ranked

    a, b = ranks(x), ranks(y)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


__all__ = ["label_quality"]
