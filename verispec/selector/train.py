"""Training a selector with the paper's objective: the expected throughput ratio to a static baseline.

DDTE (Thomas et al. 2026, arXiv 2602.16994, Sec. 5, Eq. 12): a policy pi over actions at root b has
throughput TP_b(pi) = sum_a pi_ba E_ba / sum_a pi_ba T_ba (E = E[tau + 1], T = the block time of Eq. 11); its
ratio to the static baseline action ``base`` is r_b = TP_b(pi) / (E_b,base / T_b,base), and the loss is

    L = -mean_b log r_b + penalty * mean over the worst ceil(alpha B) roots of max(1 - r_b, 0)^2,

the second term penalising the alpha-fraction of roots where the policy loses most against the baseline.

``train_selector`` fits ``kind`` = "mlp" (the paper's network), "linear" (multinomial linear model, same loss) or
"lookup" (bins of one feature, no gradient), from features [N, F], labels E [N, A] and times T [A] or [N, A].
Randomness is explicit: the weights, the batch order and the dropout masks come from three streams derived
from ``seed`` (``numpy.random.SeedSequence``), each a ``torch.Generator``; on the CPU the same seed gives the
same weights bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from verispec.selector.actions import ActionGrid, SelectorError
from verispec.selector.features import SCALAR_FEATURES, feature_index
from verispec.selector.network import DROPOUT, HIDDEN_SIZES, PROJECTION, LinearSelector, LookupSelector, SelectorNetwork
from verispec.selector.selector import Selector

#: verispec's defaults for the regression penalty of Eq. 12 (the paper does not print its values).
DEFAULT_PENALTY = 1.0
DEFAULT_ALPHA = 0.1


def throughput_loss(logits, efficiency, times, base: int, penalty: float = DEFAULT_PENALTY,
                    alpha: float = DEFAULT_ALPHA, base_time: float | None = None):
    """The loss of Eq. 12 (a scalar tensor) over a batch of B roots.

    logits [B, A]; efficiency [B, A] (E[tau + 1] of each action, > 0); times [A] or [B, A] (T of each action,
    > 0); ``base`` the static baseline's action index, run at ``base_time`` when given (plain decoding at
    t_p(1), while ``times`` prices the selector's own chain:0 with the draft step it pays), else at its entry of
    ``times``; ``penalty`` >= 0 and ``alpha`` in [0, 1]."""
    if not 0 <= alpha <= 1 or not penalty >= 0:
        raise SelectorError(f"the loss needs alpha in [0, 1] and penalty >= 0, got alpha {alpha!r}, "
                            f"penalty {penalty!r}")
    logits = logits.to(torch.float64)
    efficiency = torch.as_tensor(efficiency, dtype=torch.float64, device=logits.device)  # [B, A]
    times = torch.as_tensor(times, dtype=torch.float64, device=logits.device).expand_as(efficiency)  # [B, A]
    if logits.shape != efficiency.shape or not 0 <= base < logits.shape[1]:
        raise SelectorError(f"the loss needs logits and efficiency of one shape [B, A] and a base index below A, got "
                            f"{tuple(logits.shape)}, {tuple(efficiency.shape)}, base {base}")
    policy = torch.softmax(logits, dim=1)  # [B, A]
    throughput = (policy * efficiency).sum(1) / (policy * times).sum(1)  # [B]
    ratio = throughput / (efficiency[:, base] / (times[:, base] if base_time is None else base_time))  # [B]
    loss = -torch.log(ratio).mean()
    worst = math.ceil(alpha * ratio.shape[0])
    if penalty > 0 and worst > 0:
        shortfall = torch.clamp(1 - ratio, min=0) ** 2  # [B]
        loss = loss + penalty * torch.topk(shortfall, worst).values.mean()
    return loss


def best_static(efficiency: np.ndarray, times: np.ndarray) -> int:
    """The static action of best throughput over the roots: argmax_a sum_b E_ba / sum_b T_ba."""
    times = np.broadcast_to(times, efficiency.shape)
    return int(np.argmax(efficiency.sum(0) / times.sum(0)))


def _array(values, what: str, ndim: int) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SelectorError(f"{what} is not an array of numbers") from None
    if array.ndim != ndim or array.size == 0:
        raise SelectorError(f"{what} must be a non-empty {ndim}-D array, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise SelectorError(f"{what} holds NaN or infinite values")
    return array


def _streams(seed: int) -> tuple[int, int, int]:
    """Three independent seeds (weights, batch order, dropout) derived from ``seed``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SelectorError(f"the seed must be a non-negative integer, got {seed!r}")
    words = np.random.SeedSequence(int(seed)).generate_state(3, dtype=np.uint64)
    return tuple(int(word >> np.uint64(1)) for word in words)


def train_selector(features, efficiency, times, grid: ActionGrid, *, hidden=None, kind: str = "mlp",
                   base: int | None = None, seed: int = 0, epochs: int = 200, lr: float = 1e-3,
                   batch_size: int = 256, weight_decay: float = 1e-4, dropout: float = DROPOUT,
                   hidden_sizes=HIDDEN_SIZES, projection: int = PROJECTION, device="cpu",
                   penalty: float = DEFAULT_PENALTY, alpha: float = DEFAULT_ALPHA, feature_names=SCALAR_FEATURES,
                   lookup_feature: str = "l1_p_q_prev", bins: int = 8, metadata: dict | None = None,
                   base_time: float | None = None) -> Selector:
    """A selector trained on N roots: ``features`` [N, F] (named ``feature_names``), ``efficiency`` [N, A] the
    labels E[tau + 1] of ``grid``'s actions, ``times`` [A] or [N, A] their block times; ``hidden`` optional
    hidden-state blocks (a dict name -> [N, d], or a list) for ``kind`` "mlp". ``base`` is the static baseline
    of Eq. 12 (None: the best static action on these roots), at ``base_time`` if given. The selector lives on
    the CPU and records ``metadata`` (pair, tokenizer, vocab_size, samplings, latency: what ``check_fits``
    compares) with kind, seed, verispec version, number of roots and the training settings."""
    from verispec.version import package_version

    features = _array(features, "the features", 2)  # [N, F]
    efficiency = _array(efficiency, "the labels (efficiency)", 2)  # [N, A]
    times = np.asarray(_array(times, "the action times", np.ndim(times)), dtype=np.float64)  # [A] or [N, A]
    count, actions = efficiency.shape
    feature_names = tuple(feature_names)
    if features.shape[0] != count or features.shape[1] != len(feature_names):
        raise SelectorError(f"features {features.shape} do not match {count} labelled roots and "
                            f"{len(feature_names)} feature names")
    if actions != len(grid):
        raise SelectorError(f"the labels hold {actions} actions, the grid {grid.describe()} has {len(grid)}")
    if times.shape not in ((actions,), (count, actions)) or (times <= 0).any():
        raise SelectorError(f"the action times must be positive, of shape ({actions},) or ({count}, {actions}), got "
                            f"shape {times.shape}")
    if (efficiency <= 0).any():
        raise SelectorError("the labels E[tau + 1] must be positive")
    if base is None:
        base = best_static(efficiency, times)
    if isinstance(base, bool) or not isinstance(base, (int, np.integer)) or not 0 <= base < actions:
        raise SelectorError(f"the baseline action must be an index below {actions}, got {base!r}")
    for value, what in ((epochs, "epochs"), (batch_size, "batch_size"), (bins, "bins")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SelectorError(f"{what} must be a positive integer, got {value!r}")
    if not (lr > 0 and weight_decay >= 0):
        raise SelectorError(f"lr must be positive and weight_decay non-negative, got {lr!r}, {weight_decay!r}")
    init_seed, order_seed, dropout_seed = _streams(seed)
    hidden_names, blocks = (), []
    if hidden is not None:
        if kind != "mlp":
            raise SelectorError(f"only the 'mlp' selector reads hidden states, not {kind!r}")
        items = list(hidden.items()) if isinstance(hidden, Mapping) else \
            [(f"hidden{index}", block) for index, block in enumerate(hidden)]
        hidden_names = tuple(name for name, _ in items)
        blocks = [_array(block, f"the hidden states {name!r}", 2) for name, block in items]
        for name, block in zip(hidden_names, blocks):
            if block.shape[0] != count:
                raise SelectorError(f"the hidden states {name!r} have {block.shape[0]} rows, the labels {count}")
    generator = torch.Generator().manual_seed(init_seed)
    if kind == "mlp":
        model = SelectorNetwork(len(feature_names), actions, [block.shape[1] for block in blocks],
                                generator=generator, projection=projection, hidden_sizes=hidden_sizes, dropout=dropout)
    elif kind == "linear":
        model = LinearSelector(len(feature_names), actions)
    elif kind == "lookup":
        model = LookupSelector(len(feature_names), actions, feature=feature_index(lookup_feature, feature_names),
                               bins=bins)
    else:
        raise SelectorError(f"unknown selector kind {kind!r}; kinds: mlp, linear, lookup")
    model.set_standardisation(features)
    final_loss = None
    if kind == "lookup":
        model.fit(features, efficiency, times)
    else:
        final_loss = _fit(model, features, blocks, efficiency, times, base=int(base), device=device, epochs=epochs,
                          lr=lr, batch_size=batch_size, weight_decay=weight_decay, penalty=penalty, alpha=alpha,
                          order_seed=order_seed, dropout_seed=dropout_seed, base_time=base_time)
    model = model.cpu().eval()
    record = dict(metadata or {})
    record.update({"kind": kind, "seed": int(seed), "verispec_version": package_version(),
                   "training_roots": int(count), "verifiers": list(grid.verifiers),
                   "training": {"base": int(base), "base_action": grid.actions[int(base)].name, "epochs": epochs,
                                "base_time": None if base_time is None else float(base_time),
                                "lr": lr, "batch_size": batch_size, "weight_decay": weight_decay,
                                "dropout": dropout if kind == "mlp" else 0.0, "penalty": penalty, "alpha": alpha,
                                "final_loss": final_loss, "device": str(device)}})
    return Selector(model, grid, kind=kind, feature_names=feature_names, hidden_names=hidden_names, metadata=record)


def _fit(model, features, blocks, efficiency, times, *, base, device, epochs, lr, batch_size, weight_decay, penalty,
         alpha, order_seed, dropout_seed, base_time=None) -> float:
    """Adam on the loss of Eq. 12, mini-batches in an order drawn from ``order_seed``; the last epoch's mean
    loss."""
    device = torch.device(device)
    model.to(device).train()
    model.set_generator(torch.Generator(device=device).manual_seed(dropout_seed))
    order_generator = torch.Generator().manual_seed(order_seed)
    scalars = torch.as_tensor(features, dtype=torch.float32, device=device)  # [N, F]
    hidden = [torch.as_tensor(block, dtype=torch.float32, device=device) for block in blocks]  # [N, d_i]
    labels = torch.as_tensor(efficiency, dtype=torch.float64, device=device)  # [N, A]
    per_root = times.ndim == 2
    block_times = torch.as_tensor(times, dtype=torch.float64, device=device)  # [A] or [N, A]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    count = scalars.shape[0]
    epoch_loss = math.nan
    try:
        for _ in range(epochs):
            order = torch.randperm(count, generator=order_generator).to(device)
            total = 0.0
            for start in range(0, count, batch_size):
                rows = order[start:start + batch_size]
                logits = model(scalars[rows], [block[rows] for block in hidden])
                loss = throughput_loss(logits, labels[rows], block_times[rows] if per_root else block_times, base,
                                       penalty, alpha, base_time)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * rows.shape[0]
            epoch_loss = total / count
    finally:
        model.set_generator(None)
        model.eval()
    return epoch_loss


__all__ = ["DEFAULT_ALPHA", "DEFAULT_PENALTY", "best_static", "throughput_loss", "train_selector"]
