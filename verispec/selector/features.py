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

In decoding (``context_features``, what ``SelectorPolicy`` reads) the same six features come by cheaper routes
with the same conventions, tested equal to the kernel on the full laws to its rounding: with top-k (or top-p, or
greedy) the laws are zero outside a few tokens, so ``support_law_features`` sums over the union of their
supports in float64 (the supports come from one reduction over the logits or the law, ``verispec.models.
block_context``: no [V] array is made); without a filter, ``_logit_law_features`` reads the float32 logits the
laws are the softmax of (log x = y / T - L with y = z - max z: dot products, no log over the vocabulary, no
float64 law at the root). Where the machine has a C compiler that is one compiled pass over the three rows
(``verispec.native``: each row read from memory once, three exponentials an entry, sums in double across
blocks); elsewhere numpy passes into scratch arrays reused from block to block, x itself from the law the decoder
has computed already where it has (p_prev from the verify forward, q_prev from drafting: a cast to float32), from
one exponential of the logits elsewhere. A given law is checked against its logits at their argmax and argmin on
either route. Inside decoding on the Qwen pair at one CPU thread (the models' forwards leave the caches cold) the
whole choice costs 0.53-0.60 ms a block at T = 0.7 top-k 20 top-p 0.8 and 0.69-0.70 ms at T = 1 with the compiled
kernels, 0.59-0.75 and 1.08-1.12 ms without them (0.78-0.86 and 0.94-0.96 ms, 0.87-0.97 and 1.29-1.35 ms with
hidden states; medians of three runs on one box, ``benchmarks/bench_selector_decoding.py --pair qwen-coder
--compare-kernel``).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from verispec.native import logit_moments
from verispec.selector.actions import SelectorError

#: The scalar features, in the order of a feature vector.
SCALAR_FEATURES: tuple[str, ...] = ("entropy_p_prev", "entropy_q_prev", "entropy_q_root", "kl_p_q_prev",
                                    "kl_q_p_prev", "l1_p_q_prev", "context_length", "temperature", "top_k",
                                    "top_p", "draft_time", "target_time")

#: Features that read the draft's laws: a policy using any of them needs the draft at the root before choosing.
DRAFT_FEATURES = frozenset({"entropy_q_prev", "entropy_q_root", "kl_p_q_prev", "kl_q_p_prev", "l1_p_q_prev"})


def reads_draft(feature_names) -> bool:
    """Whether a selector reading ``feature_names`` needs the draft at the root (any of ``DRAFT_FEATURES``), and
    so pays a draft step on a block that drafts nothing (``verispec.selector.actions.policy_action_times``)."""
    return any(name in DRAFT_FEATURES for name in feature_names)


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
    return _with_scalars(_law_features(p, q, r, xp_p, zeros), context_length, sampling, latency)


def _with_scalars(law_features, context_length, sampling, latency) -> np.ndarray:
    """The feature rows [B, F] from the six law features [B, 6] and the root's other scalars."""
    count = law_features.shape[0]
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


# -- decoding: the laws' supports, or their logits ----------------------------------------------------------------

#: A float64 probability at or below 2^-150 rounds to 0 in float32 (half the smallest subnormal rounds to even):
#: the kernel's zeros, which the other routes count as zeros too.
_FLOAT32_ZERO = 2.0 ** -150


#: The most support entries (the three laws together) ``context_features`` sums over; beyond it (top-p alone over a
#: flat law) it uses the kernel on the full laws. Top-k 20 gives at most 60.
MAX_SUPPORT_ENTRIES = 3072


def _support_maps(supports) -> list[dict[int, float]]:
    """Each support (token ids [s], probabilities [s]: Python lists, numpy or torch) as {token id: probability} on
    the host, float32's zeros left out. Refused like the kernel's rows."""
    maps = []
    for (ids, values), name in zip(supports, _LAW_NAMES):
        ids, values = _listed(ids, name, "token ids"), _listed(values, name, "probabilities")
        if len(ids) != len(values) or not all(type(token) is int for token in ids):
            raise SelectorError(f"the support of {name} must be token ids [s] (integers) and probabilities [s]")
        try:
            total = math.fsum(values)
        except (TypeError, ValueError):
            raise SelectorError(f"the support of {name} holds probabilities that are not numbers") from None
        if not math.isfinite(total):
            raise SelectorError(f"the feature input {name} holds NaN or infinite values")
        if values and min(values) < 0:
            raise SelectorError(f"the feature input {name} holds negative probabilities")
        if abs(total - 1) > MASS_TOLERANCE:
            raise SelectorError(f"the feature input {name} is not a probability law: its support sums to {total:.6g}")
        law = dict(zip(ids, values))
        if len(law) != len(ids):
            raise SelectorError(f"the support of {name} names a token twice")
        maps.append({token: value for token, value in law.items() if value > _FLOAT32_ZERO})
    return maps


def _listed(values, name: str, what: str) -> list:
    """A support's token ids or probabilities as a flat Python list (lists pass as they are)."""
    if isinstance(values, list):
        return values
    if _is_torch(values):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.ndim != 1:
        raise SelectorError(f"the support of {name} must hold its {what} as a vector [s], got shape {array.shape}")
    if what == "token ids" and array.size and array.dtype.kind not in "iu":
        raise SelectorError(f"the support of {name} must be token ids [s] (integers), got {array.dtype} values")
    return array.astype(np.int64 if what == "token ids" else np.float64).tolist()


def support_law_features(p_support, q_support, r_support) -> np.ndarray:
    """H(p), H(q), H(r), KL(p||q), KL(q||p), L1(p, q) [6] (float64) from the three laws' supports, each (token ids
    [s], probabilities [s]; Python lists, numpy or torch; in any order): the laws are zero elsewhere, so the sums
    over the union of the supports are the full vocabulary's. The conventions are the kernel's (``scalar_features``): a
    probability at or below 2^-150 (0 in float32) is 0, and KL(x || y) is ``KL_CAP`` where x puts mass outside y's
    support. Summed in float64 by Python over the supports' few entries (microseconds for top-k 20, less than
    the numpy or torch calls it would take); agrees with the float32 kernel on the full laws to its rounding
    (tested)."""
    p, q, r = _support_maps((p_support, q_support, r_support))
    log_p = {token: math.log(value) for token, value in p.items()}
    log_q = {token: math.log(value) for token, value in q.items()}
    entropies = [-sum(value * log_p[token] for token, value in p.items()),
                 -sum(value * log_q[token] for token, value in q.items()),
                 -sum(value * math.log(value) for value in r.values())]
    kl_pq = sum(value * (log_p[token] - log_q[token]) for token, value in p.items()) if p.keys() <= q.keys() \
        else KL_CAP
    kl_qp = sum(value * (log_q[token] - log_p[token]) for token, value in q.items()) if q.keys() <= p.keys() \
        else KL_CAP
    l1 = sum(abs(value - q.get(token, 0.0)) for token, value in p.items()) + sum(
        value for token, value in q.items() if token not in p)
    return np.array([*entropies, min(max(kl_pq, 0.0), KL_CAP), min(max(kl_qp, 0.0), KL_CAP), l1])  # [6]


#: A float64 probability at or below exp(-103.97) = 2^-150 is 0 in float32: the logit route leaves a law whose
#: smallest probability comes within a nat of it (where the kernel reads zeros) to the kernel.
_LOG_FLOAT32_ZERO = -150 * math.log(2)


def _float32_logits(law):
    """A law's logits row [V] as float32: a numpy view of a float32 CPU tensor (no copy), a torch tensor on an
    accelerator."""
    import torch  # loaded already: the logits are a tensor

    logits = law.logits
    if logits.dtype != torch.float32 or logits.requires_grad:
        logits = logits.detach().to(torch.float32)
    return logits.numpy() if logits.device.type == "cpu" else logits


#: Scratch arrays of the logit route on the host, per thread, reused from block to block: three fresh [3, V]
#: float32 arrays a block would each be mapped and faulted in by the allocator, which at V = 151,936 cost more
#: than the arithmetic.
_scratch = threading.local()


def _host_workspace(vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(shifted logits [3, V], exponentials [3, V], one row [V], ones [V]) float32 scratch of this thread for a
    vocabulary of ``vocab``."""
    arrays = getattr(_scratch, "arrays", None)
    if arrays is None or arrays[2].shape[0] != vocab:
        arrays = _scratch.arrays = (np.empty((3, vocab), np.float32), np.empty((3, vocab), np.float32),
                                    np.empty(vocab, np.float32), np.ones(vocab, np.float32))
    return arrays


def _logit_parts(logits, inverse_temperature: float, laws=(None, None, None)) -> np.ndarray:
    """For logits rows z_i [V] (float32; i = p, q, r), with y_i = z_i - max z_i, x_i = exp(y_i / T - L_i) the law
    and L_i = log sum_v exp(y_i,v / T): L_i [3], x_p.y_p, x_q.y_q, x_r.y_r, x_p.y_q, x_q.y_p [5], sum_v min(x_p,v,
    x_q,v) [1] and min_v y_i,v [3], as float64 host numbers [12].

    On the host by the compiled kernel (``verispec.native.logit_moments``: one read of each row, every
    x_i from an exponential of its logits) where this process has it, a given law (``laws[i]``) then only checked
    against the kernel's L_i at the row's argmax and argmin; else into reused scratch (``_host_workspace``): a row
    whose law the decoder has already computed
    (``laws[i]``, its [V] float64 numpy array: p_prev from the verify forward, q_prev from drafting) is cast to
    float32, and L_i = -log x_i at the argmax, with no exponential over the vocabulary (the exponential is most of a
    row's cost: 0.2-0.28 ms at Qwen's V on one CPU thread, warm or inside decoding, against 0.04-0.11 ms for the
    cast); a row without one takes its exponential e_i = exp(y_i / T) and s_i = sum e_i, so x_i = e_i / s_i and
    L_i = log s_i. Then BLAS reductions (a row-by-row order, or chunks of 32,768 tokens that stay in the core's
    cache, measured no faster in decoding's cold caches). A given law that is not the softmax of its logits / T
    (checked at the argmax and the argmin, where x_i is exp(-L_i) and exp(min y_i / T - L_i)) is a one-line
    SelectorError."""
    if isinstance(logits[0], np.ndarray):
        compiled = logit_moments(logits, inverse_temperature)
        if compiled is not None:
            values, where = compiled  # [12], [argmax of each row, argmin of each row]
            for index, law in enumerate(laws):
                if law is not None and not np.isnan(values[0]):
                    _check_given_law(index, law, logits[index], values[index], values[9 + index], where[index],
                                     where[3 + index], inverse_temperature, 1.0)
            return values
        shifted, weights, row, ones = _host_workspace(logits[0].shape[0])
        peaks, lows = [], []
        for z, y, weight, law in zip(logits, shifted, weights, laws):
            top, bottom = int(z.argmax()), int(z.argmin())
            np.subtract(z, z[top], out=y)
            peaks.append(top)
            lows.append(bottom)
            if law is not None:
                np.copyto(weight, law, casting="same_kind")  # float64 -> float32, the kernel's precision
            elif inverse_temperature != 1:
                np.exp(np.multiply(y, inverse_temperature, out=weight), out=weight)
            else:
                np.exp(y, out=weight)
        totals = weights @ ones  # [3]: s_i, or about 1 for a given law
        partitions = []
        for index, (law, total, top, bottom) in enumerate(zip(laws, totals.tolist(), peaks, lows)):
            if law is None:
                partitions.append(math.log(total))
                continue
            partition = -math.log(law[top]) if law[top] > 0 else math.inf
            _check_given_law(index, law, logits[index], partition, float(shifted[index, bottom]), top, bottom,
                             inverse_temperature, total)
            totals[index] = 1.0  # the law itself: its float32 rounding sums to 1 within 1e-6
            partitions.append(partition)
        (yp, yq, yr), (wp, wq, wr) = shifted, weights
        dots = np.array([wp @ yp, wq @ yq, wr @ yr, wp @ yq, wq @ yp], dtype=np.float64)
        dots /= totals[[0, 1, 2, 0, 1]]
        wq *= np.float32(totals[0] / totals[1])
        shared = float(np.minimum(wp, wq, out=row) @ ones) / totals[0]
        least = [float(y[bottom]) for y, bottom in zip(shifted, lows)]
        return np.array([*partitions, *dots, shared, *least], dtype=np.float64)
    import torch

    shifted = torch.stack(logits)  # [3, V] on the logits' device
    shifted -= shifted.amax(dim=1, keepdim=True)
    exponentials = torch.exp(shifted * inverse_temperature)  # [3, V]
    (yp, yq, yr), (ep, eq, er) = shifted, exponentials
    totals = exponentials.sum(dim=1)  # [3]
    dots = torch.stack([ep @ yp, eq @ yq, er @ yr, ep @ yq, eq @ yp]) / totals[[0, 1, 2, 0, 1]]
    shared = (torch.minimum(ep, eq * (totals[0] / totals[1])).sum() / totals[0]).reshape(1)
    return torch.cat([totals.log(), dots, shared, shifted.amin(dim=1)]).double().cpu().numpy()  # one transfer


def _check_given_law(index: int, law, logits, partition: float, least: float, top: int, bottom: int,
                     inverse_temperature: float, total: float) -> None:
    """A one-line SelectorError unless the given law [V] is the softmax of its logits / T where it can be read
    cheaply: at the argmax (exp(-L)) and the argmin (exp(min y / T - L)), and its mass ``total`` (1 where not
    summed)."""
    # logits given wider than float32 were rounded to it: y_i off by up to 2^-24 (|max z| + |min z|) each
    rounding = 2.0 ** -22 * (abs(float(logits[top])) + abs(float(logits[bottom])))
    tolerance = 1e-6 + rounding * inverse_temperature
    if not (abs(total - 1) <= MASS_TOLERANCE and all(
            math.isclose(law[at], math.exp(shift * inverse_temperature - partition), rel_tol=tolerance,
                         abs_tol=1e-300) for at, shift in ((top, 0.0), (bottom, least)))):
        raise SelectorError(f"the feature input {_LAW_NAMES[index]}'s law is not the sampling law of its "
                            "logits (the softmax of logits / T): give the law its own logits, or no law")


def _given_law(law):
    """A ``PositionLaw``'s full law as a float64 numpy array on the host where the decoder has computed it already
    (and the logits are on the host too), else None: the logit route then needs no exponential for that row."""
    import torch  # loaded already: the logits are a tensor

    if not law.materialised or law.logits is None or law.logits.device.type != "cpu":
        return None
    values = law.law()
    if not isinstance(values, torch.Tensor) or values.dtype != torch.float64 or values.device.type != "cpu":
        return None
    return values.detach().numpy()


def _logit_law_features(p, q, r, temperature: float):
    """The six law features [6] of dense laws (``PositionLaw``s with the logits z whose softmax of z / T the law is),
    in float32 from the logits, the kernel's precision (``_law_features``), without a float64 law the decoder has
    not computed: with y = z - max z, L = log sum exp(y / T) and x = exp(y / T - L), log x = y / T - L, so
    H(x) = L - x.y / T (two non-negative terms), KL(p||q) = (x_p.y_p - x_p.y_q) / T - L_p + L_q, and L1 = 2 - 2
    sum_v min(p_v, q_v) (the laws sum to one): per law a maximum and, where the decoder has no law there yet (q at
    the root, a first block's p_prev), an exponential, then dot products and one elementwise minimum
    (``_logit_parts``); no log over the vocabulary, and q at the root needs no float64 law (drafting computes that
    when it drafts). None (use the kernel) where a value is not finite or a law's smallest probability comes within
    a nat of float32's zero (2^-150), where the kernel's zeros and their KL caps would have to be matched entry by
    entry."""
    logits = [_float32_logits(law) for law in (p, q, r)]
    shapes = [tuple(row.shape) for row in logits]
    if len(shapes[0]) != 1 or len(set(shapes)) != 1 or not shapes[0][0]:
        raise SelectorError(f"the feature inputs' logits must be [V] rows of one V, got p_prev {shapes[0]}, q_prev "
                            f"{shapes[1]}, q_root {shapes[2]}")
    given = tuple(_given_law(law) for law in (p, q, r)) if isinstance(logits[0], np.ndarray) else (None,) * 3
    values = _logit_parts(logits, 1 / temperature, given).tolist()
    if not all(map(math.isfinite, values)):
        return None
    partitions, (xpyp, xqyq, xryr, xpyq, xqyp), shared, least = values[:3], values[3:8], values[8], values[9:]
    inverse = 1 / temperature
    log_p, log_q, log_r = partitions
    if any(low * inverse - partition <= _LOG_FLOAT32_ZERO + 1 for low, partition in zip(least, partitions)):
        return None
    kl_pq = (xpyp - xpyq) * inverse - log_p + log_q
    kl_qp = (xqyq - xqyp) * inverse - log_q + log_p
    return [log_p - xpyp * inverse, log_q - xqyq * inverse, log_r - xryr * inverse,
            min(max(kl_pq, 0.0), KL_CAP), min(max(kl_qp, 0.0), KL_CAP), 2 - 2 * shared]  # [6]


def context_features(context, *, latency) -> np.ndarray:
    """The ``SCALAR_FEATURES`` [F] of a decoding ``BlockContext`` (``verispec.models.block_context``), by the
    cheapest route its laws allow, all equal to ``scalar_features`` of the full laws to the kernel's rounding:

    * the sampling filters (top-k, top-p, greedy) and every law's support is small: ``support_law_features`` over
      the supports (from the logits by one reduction for a law not computed yet, ``Sampling.support``; from the
      law by block maxima otherwise), no [V] array made;
    * no filter, and every law has its logits: ``_logit_law_features``, dot products with the logits;
    * otherwise (a context of plain tensors, a float32 zero in a dense law): ``scalar_features`` of the full laws.
    """
    laws = getattr(context, "laws", None)
    values = None
    if laws is not None and all(laws.get(name) is not None for name in _LAW_NAMES):
        p, q, r = (laws[name] for name in _LAW_NAMES)
        if context.sampling.filters:
            supports = [law.support() for law in (p, q, r)]
            if all(support is not None for support in supports) and sum(
                    len(ids) for ids, _ in supports) <= MAX_SUPPORT_ENTRIES:
                values = support_law_features(*supports)
        elif all(law.logits is not None for law in (p, q, r)):
            values = _logit_law_features(p, q, r, float(context.sampling.temperature))
    if values is None:
        return scalar_features(context.p_prev, context.q_prev, context.q_root, context_length=context.context_length,
                               sampling=context.sampling, latency=latency)
    length = context.context_length
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise SelectorError(f"context_length must be a non-negative integer, got {length!r}")
    # one root's row in SCALAR_FEATURES order, as _with_scalars lays out rows (a handful of calls, not a batch's)
    out = np.array([*values, length, *_setting(context.sampling), *_latencies(latency)], dtype=np.float64)  # [F]
    if not np.isfinite(out).all():
        raise SelectorError("a scalar feature is not finite (check the latency model and the sampling setting)")
    return out


def feature_index(name: str, names=SCALAR_FEATURES) -> int:
    try:
        return list(names).index(name)
    except ValueError:
        raise SelectorError(f"unknown feature {name!r}; features: {', '.join(names)}") from None


__all__ = ["DRAFT_FEATURES", "KL_CAP", "SCALAR_FEATURES", "context_features", "feature_index", "reads_draft",
           "scalar_features", "scalar_features_batch", "support_law_features"]
