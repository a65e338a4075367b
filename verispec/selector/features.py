"""Scalar features of a block's root, all computed before the block's draws (DDTE, Thomas et al. 2026, arXiv
2602.16994, Appendix E).

At a root (the last token of the sequence so far) the decoder knows p_prev and q_prev, the target's and the
draft's sampling laws at the previous position (the laws the root token was drawn from), and q_root, the
draft's law after the root (the draft catches up on the root before choosing). From them, with natural logs:

* ``entropy_p_prev`` = H(p_prev), ``entropy_q_prev`` = H(q_prev), ``entropy_q_root`` = H(q_root),
  H(x) = -sum_v x_v log x_v with 0 log 0 = 0;
* ``kl_p_q_prev`` = KL(p_prev || q_prev), ``kl_q_p_prev`` = KL(q_prev || p_prev),
  KL(x || y) = sum_(x_v > 0) x_v log(x_v / y_v), clipped to ``KL_CAP`` nats (so +inf, a token that one law
  allows and the other does not, as top-k or top-p filtering makes common, becomes ``KL_CAP``);
* ``l1_p_q_prev`` = sum_v |p_prev,v - q_prev,v| (in [0, 2]; the acceptance rate of one drafted token is
  1 - l1 / 2);
* ``context_length``; the sampling setting ``temperature``, ``top_k`` (0 when off), ``top_p`` (1 when off);
* the latencies ``draft_time`` = t_q and ``target_time`` = t_p(1) of the latency model.

The laws are numpy or torch 1-D arrays over the vocabulary (``scalar_features``) or [B, V] rows
(``scalar_features_batch``), in any float dtype. The six law features are computed in float32, by one kernel for
every input: the network reads its inputs in float32, so float64 would buy digits it drops, and the passes are
memory-bound (0.6 instead of 1.2 MB a law at Qwen's V = 151,936). On one CPU thread the kernel costs 1.2-1.5 ms
a block there, about 1.4x less than the same arithmetic in float64, and 3x less than the previous float64 torch
path (3.5-4.9 ms; ``benchmarks/bench_selector_features.py`` times both side by side). The features agree with
float64 arithmetic to about 1e-6 relative (tested against closed forms); a probability below float32's
smallest subnormal (1.4e-45) counts as 0, in training and in decoding alike since both go through this kernel.
Numpy inputs and torch tensors on the CPU are reduced by numpy (a torch CPU tensor is read without a copy:
numpy's per-call cost is a tenth of torch's, which matters at a dozen reductions a block); a tensor on an
accelerator is reduced by torch on its device and only the scalars come to the host. This module does not
import torch (a torch input means torch is already loaded).
"""

from __future__ import annotations

import numpy as np

from verispec.selector.actions import SelectorError

#: The scalar features, in the order of a feature vector.
SCALAR_FEATURES: tuple[str, ...] = ("entropy_p_prev", "entropy_q_prev", "entropy_q_root", "kl_p_q_prev",
                                    "kl_q_p_prev", "l1_p_q_prev", "context_length", "temperature", "top_k",
                                    "top_p", "draft_time", "target_time")

#: Features that read the draft's laws: a policy using any of them needs the draft at the root before choosing.
DRAFT_FEATURES = frozenset({"entropy_q_prev", "entropy_q_root", "kl_p_q_prev", "kl_q_p_prev", "l1_p_q_prev"})

#: The largest KL divergence reported, in nats (e^-30 is about 1e-13: beyond it the laws are disjoint in
#: practice). +inf (support of x not inside that of y) is reported as this value.
KL_CAP = 30.0

#: How far a row's total may be from one before it is refused (rows within it are used as given).
MASS_TOLERANCE = 1e-4

_LAW_NAMES = ("p_prev", "q_prev", "q_root")

#: Probabilities are clamped to this (float32's smallest subnormal) before their log, so 0 log 0 = 0.
_TINY = float(np.finfo(np.float32).smallest_subnormal)


def _is_torch(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _rows(values, name: str, *, batched: bool):
    """The law as float32 rows [B, V] with the namespace that reduces them: numpy for numpy inputs and CPU
    tensors (read in place when already float32), torch for tensors on an accelerator."""
    if values is None:
        raise SelectorError(f"the feature input {name} is missing (the decoder computed no law there)")
    if _is_torch(values):
        import torch

        values = values.detach()
        if values.device.type == "cpu":
            rows, xp = values.numpy().astype(np.float32, copy=False), np
        else:
            rows, xp = values.to(torch.float32), torch
    else:
        try:
            rows, xp = np.asarray(values, dtype=np.float32), np
        except (TypeError, ValueError):
            raise SelectorError(f"the feature input {name} is not an array of numbers") from None
    wanted = 2 if batched else 1
    if rows.ndim != wanted or rows.shape[-1] == 0:
        expected = "[B, V] array" if batched else "[V] vector"
        raise SelectorError(f"the feature input {name} must be a non-empty {expected}, got shape {tuple(rows.shape)}")
    return (rows if batched else rows.reshape(1, -1)), xp


def _check_rows(rows, xp, name: str) -> bool:
    """Refuse NaN, infinite, negative or massless rows, and rows whose total is more than ``MASS_TOLERANCE``
    from one (two reductions per row: the total, NaN or infinite when any entry is, and the minimum). True when
    some entry is 0 (a filtered law)."""
    if xp is np:
        total, low = rows.sum(-1), rows.min(-1)  # [B], [B]
    else:
        total, low = (column.cpu().numpy() for column in (rows.sum(-1), rows.amin(-1)))
    if not np.isfinite(total).all():
        raise SelectorError(f"the feature input {name} holds NaN or infinite values (an all-masked top-k or top-p "
                            "row gives NaN)")
    if (low < 0).any():
        raise SelectorError(f"the feature input {name} holds negative probabilities")
    if (total <= 0).any():
        raise SelectorError(f"the feature input {name} has a row without mass (an all-masked top-k row)")
    worst = int(np.abs(total - 1).argmax())
    if abs(total[worst] - 1) > MASS_TOLERANCE:
        raise SelectorError(f"the feature input {name} is not a probability law: a row sums to {total[worst]:.6g}")
    return bool((low == 0).any())


def _law_features(p, q, r, xp, zeros=(True, True, True)):
    """H(p), H(q), H(r), KL(p||q), KL(q||p), L1(p, q) per row [B, 6] (float64 numpy), from float32 rows [B, V]
    (numpy, or torch on their device).

    One log per law (over its support when it holds a 0, so 0 log 0 = 0) and sums of products as
    dot products; KL(x || y) is set to +inf where x > 0 = y somewhere, then capped at ``KL_CAP``. ``zeros``
    says which laws may hold a 0 (the others skip the clamp and the support test: a dense law costs less)."""
    if xp is np:
        # a filtered law's log only over its support (0 elsewhere, where the law is 0): half a clamp's cost
        logs = [np.log(law, out=np.zeros_like(law), where=law > 0) if zero else np.log(law)
                for law, zero in zip((p, q, r), zeros)]  # [B, V] each
        dot = np.vecdot  # [B]; BLAS, a tenth of einsum's cost in float32
    else:
        logs = [xp.log(law.clamp_min(_TINY)) if zero else xp.log(law) for law, zero in zip((p, q, r), zeros)]
        dot = xp.linalg.vecdot
    lp, lq, lr = logs  # [B, V] each
    columns = [dot(p, lp), dot(q, lq), dot(r, lr), dot(p, lq), dot(q, lp), xp.abs(p - q).sum(-1)]  # [B] each
    if xp is not np:
        columns = [column.cpu().numpy() for column in xp.stack(columns).unsqueeze(1)]  # one transfer
        p_outside_q = ((p > 0) & (q == 0)).any(-1).cpu().numpy() if zeros[1] else None
        q_outside_p = ((q > 0) & (p == 0)).any(-1).cpu().numpy() if zeros[0] else None
    else:
        p_outside_q = ((p > 0) & (q == 0)).any(-1) if zeros[1] else None
        q_outside_p = ((q > 0) & (p == 0)).any(-1) if zeros[0] else None
    plp, qlq, rlr, plq, qlp, l1 = (np.asarray(column, dtype=np.float64).reshape(-1) for column in columns)
    kl_pq, kl_qp = plp - plq, qlq - qlp  # [B]
    if p_outside_q is not None:
        kl_pq = np.where(p_outside_q, KL_CAP, kl_pq)
    if q_outside_p is not None:
        kl_qp = np.where(q_outside_p, KL_CAP, kl_qp)
    out = np.stack([-plp, -qlq, -rlr, kl_pq, kl_qp, l1], 1)  # [B, 6]
    out[:, 3:5] = out[:, 3:5].clip(0.0, KL_CAP)
    return out


def _setting(sampling) -> tuple[float, float, float]:
    from verispec.models.sampling import Sampling

    if not isinstance(sampling, Sampling):
        raise SelectorError(f"features need the sampling setting (a Sampling), got {type(sampling).__name__}")
    return (float(sampling.temperature), float(sampling.top_k or 0),
            float(sampling.top_p if sampling.top_p is not None else 1.0))


def _latencies(latency) -> tuple[float, float]:
    if not (hasattr(latency, "draft_step") and hasattr(latency, "target_time")):
        raise SelectorError(f"features need a latency model (verispec.latency.LatencyModel), got "
                            f"{type(latency).__name__}")
    return float(latency.draft_step), float(latency.target_time(1))


def scalar_features_batch(p_prev, q_prev, q_root, *, context_length, sampling, latency) -> np.ndarray:
    """The ``SCALAR_FEATURES`` of B roots [B, F] (float64), from p_prev, q_prev, q_root [B, V] (numpy or torch,
    each on its own device); ``context_length`` an int or [B] ints; ``sampling`` one ``Sampling`` or one per
    row; ``latency`` a ``LatencyModel``. A NaN, negative or massless row is a one-line SelectorError naming
    its input."""
    return _features((p_prev, q_prev, q_root), True, context_length, sampling, latency)


def _features(inputs, batched: bool, context_length, sampling, latency) -> np.ndarray:
    laws, zeros = [], []
    for values, name in zip(inputs, _LAW_NAMES):
        rows, xp = _rows(values, name, batched=batched)
        zeros.append(_check_rows(rows, xp, name))
        laws.append((rows, xp))
    (p, xp_p), (q, xp_q), (r, xp_r) = laws
    if not (p.shape == q.shape and q.shape[1] == r.shape[1] and q.shape[0] == r.shape[0]):
        raise SelectorError(f"the feature inputs differ in shape: p_prev {tuple(p.shape)}, q_prev {tuple(q.shape)}, "
                            f"q_root {tuple(r.shape)}")
    if not (xp_p is xp_q is xp_r) or (xp_p is not np and not (p.device == q.device == r.device)):
        raise SelectorError("the feature inputs p_prev, q_prev, q_root must be all numpy or all torch on one device")
    xp, count = xp_p, p.shape[0]
    law_features = _law_features(p, q, r, xp, zeros)  # [B, 6]

    lengths = np.broadcast_to(np.asarray(context_length), (count,)) if np.ndim(context_length) == 0 else \
        np.asarray(context_length)
    if lengths.shape != (count,) or not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any():
        raise SelectorError(f"context_length must be a non-negative integer (or one per row), got "
                            f"{context_length!r}"[:200])
    settings = [sampling] * count if not isinstance(sampling, (list, tuple)) else list(sampling)
    if len(settings) != count:
        raise SelectorError(f"one sampling setting per row: {count} rows, {len(settings)} settings")
    cache = {}
    setting_rows = np.array([cache.setdefault(id(s), _setting(s)) for s in settings], dtype=np.float64)  # [B, 3]
    draft_time, target_time = _latencies(latency)
    out = np.empty((count, len(SCALAR_FEATURES)), dtype=np.float64)  # [B, F]
    out[:, :6] = law_features
    out[:, 6] = lengths
    out[:, 7:10] = setting_rows.reshape(count, 3)
    out[:, 10] = draft_time
    out[:, 11] = target_time
    if not np.isfinite(out).all():
        raise SelectorError("a scalar feature is not finite (check the latency model and the sampling setting)")
    return out


def scalar_features(p_prev, q_prev, q_root, *, context_length: int, sampling, latency) -> np.ndarray:
    """The ``SCALAR_FEATURES`` of one root [F] (float64), from p_prev, q_prev, q_root [V] (numpy or torch).
    See ``scalar_features_batch``."""
    if isinstance(context_length, bool) or not isinstance(context_length, (int, np.integer)):
        raise SelectorError(f"context_length must be a non-negative integer, got {context_length!r}")
    return _features((p_prev, q_prev, q_root), False, int(context_length), sampling, latency)[0]


def feature_index(name: str, names=SCALAR_FEATURES) -> int:
    try:
        return list(names).index(name)
    except ValueError:
        raise SelectorError(f"unknown feature {name!r}; features: {', '.join(names)}") from None


__all__ = ["DRAFT_FEATURES", "KL_CAP", "SCALAR_FEATURES", "feature_index", "scalar_features",
           "scalar_features_batch"]
