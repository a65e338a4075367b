"""The selector's law features computed a second way, for tests: term by term in float64 over the whole vocabulary."""

from __future__ import annotations

import numpy as np

from verispec.selector.features import KL_CAP


def reference_law_features(p, q, r) -> list[float]:
    """H(p), H(q), H(r), KL(p||q), KL(q||p), L1(p, q), term by term in float64; a KL whose first law puts mass where
    the second has none is KL_CAP (the kernel's convention), and every KL is clipped to [0, KL_CAP]."""
    p, q, r = (np.asarray(x, dtype=np.float64) for x in (p, q, r))

    def entropy(x):
        x = x[x > 0]
        return float(-(x * np.log(x)).sum())

    def kl(x, y):
        if ((x > 0) & (y == 0)).any():
            return KL_CAP
        keep = x > 0
        return min(KL_CAP, max(0.0, float((x[keep] * np.log(x[keep] / y[keep])).sum())))

    return [entropy(p), entropy(q), entropy(r), kl(p, q), kl(q, p), float(np.abs(p - q).sum())]
