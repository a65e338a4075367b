"""Training a selector with the paper's objective: the expected throughput ratio to a static baseline.

DDTE (Thomas et al. 2026, arXiv 2602.16994, Sec. 5, Eq. 12): a policy pi over actions at root b has
throughput TP_b(pi) = sum_a pi_ba E_ba / sum_a pi_ba T_ba (E = E[tau + 1], T = the block time of Eq. 11); its
ratio to the static baseline action ``base`` is r_b = TP_b(pi) / (E_b,base / T_b,base), and the loss is

    L = -mean_b log r_b + penalty * mean over the worst ceil(alpha B) roots of max(1 - r_b, 0)^2,

the second term penalising the alpha-fraction of roots where the policy loses most against the baseline.

``train_selector`` fits ``kind`` = "mlp" (the paper's network), "linear" (multinomial linear model, same loss) or
"lookup" (bins of one feature, no gradient), from features [N, F], labels E [N, A] and times T [A] or [N, A].
``train_on_dataset`` does the same on a labelled dataset's training roots (``verispec selector train``): the
recorded split, the chosen verifiers' sub-grid, the latency model's times, the hidden states it reads, and the
record a selector file carries (``verispec.selector.fits``).
Randomness is explicit: the weights, the batch order and the dropout masks come from three streams derived
from ``seed`` (``numpy.random.SeedSequence``), each a ``torch.Generator``; on the CPU the same seed gives the
same weights bit for bit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from verispec.errors import VerispecError
from verispec.latency import LatencyModel
from verispec.selector.actions import ActionGrid, SelectorError, policy_action_times
from verispec.selector.features import SCALAR_FEATURES, feature_index, reads_draft
from verispec.selector.fits import training_record
from verispec.selector.network import DROPOUT, HIDDEN_SIZES, PROJECTION, LinearSelector, LookupSelector, SelectorNetwork
from verispec.selector.regimes import dataset_latency, regime_features
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


@dataclass(frozen=True)
class TrainedSelector:
    """A selector trained on a labelled dataset (``train_on_dataset``), not yet saved: the ``selector``, the
    sub-grid ``grid`` of the dataset's actions it chooses among, the split's ``train_roots`` and ``test_roots``,
    and ``summary``, the JSON-ready record of ``verispec selector train --json`` less its "out": kind, verifiers,
    actions, train_roots, test_roots, latency, seconds (training and the held-out choice) and test_actions (the
    actions it chooses at the held-out roots)."""

    selector: Selector
    grid: ActionGrid
    train_roots: int
    test_roots: int
    summary: dict


def recorded_latency(dataset, dataset_name) -> LatencyModel | None:
    """The latency model a dataset's build priced its features with (its metadata's ``latency``), None where it
    records none (a dataset assembled by hand, or by the tests' helpers); one line naming the dataset where the
    record cannot be read."""
    record = dataset.metadata.get("latency")
    if record is None:
        return None
    try:
        return LatencyModel.from_dict(record)
    except VerispecError as error:
        raise VerispecError(f"the dataset {str(dataset_name)!r} records a latency model that cannot be read "
                            f"({' '.join(str(error).split())}); give --cost-ratio or --latency FILE, or rebuild the "
                            "dataset") from None


def train_on_dataset(dataset, *, dataset_name: str, verifiers: str | Sequence[str] | None = None,
                     latency: LatencyModel | None = None, kind: str = "mlp", test_fraction: float = 0.25,
                     split_seed: int = 0, hidden: str | Sequence[str] | None = None, projection: int | None = None,
                     seed: int = 0, epochs: int = 300, device: str = "cpu", penalty: float = DEFAULT_PENALTY,
                     alpha: float = DEFAULT_ALPHA) -> TrainedSelector:
    """A ``kind`` selector trained with the loss of Eq. 12 (DDTE, Thomas et al. 2026, arXiv 2602.16994) on the
    training roots of ``dataset`` (a ``verispec.selector.dataset_file.Dataset``, named ``dataset_name`` in its
    record and refusals): ``Dataset.split(test_fraction, split_seed)`` by group, its actions restricted to
    ``verifiers`` (comma-separated names or a sequence; None: all of the dataset's), priced by ``latency`` (None:
    the dataset's recorded model; another model replaces the draft_time and target_time features, constant over
    the roots) with ``policy_action_times`` (a selector reading the draft's laws pays a draft step on chain:0 too),
    against plain decoding at t_p(1) when the grid holds it. ``hidden`` names the dataset's hidden states the
    network reads ("all", comma-separated names, or a sequence; mlp only), each projected to ``projection``
    dimensions (default ``PROJECTION``). The selector records the dataset's pair, tokenizer, vocabulary, sampling
    settings, latency model and split (``verispec.selector.fits.training_record``). A refusal is one
    ``VerispecError`` line naming the ``verispec selector train`` option at fault."""
    if not 0 < test_fraction < 1:
        raise VerispecError(f"--test-fraction must lie in (0, 1), got {test_fraction:g}")
    train, test = dataset.split(test_fraction, split_seed)
    grid = _verifier_grid(dataset.grid, verifiers)
    columns = [dataset.grid.index(action) for action in grid.actions]
    recorded = recorded_latency(dataset, dataset_name)
    if latency is None:
        if recorded is None:
            raise VerispecError(f"the dataset {str(dataset_name)!r} records no latency model (its metadata has no "
                                "'latency'), so the prices its draft_time and target_time features hold are unknown; "
                                "give the model to train with (--cost-ratio R, --latency FILE), or rebuild the "
                                "dataset with 'verispec selector dataset'")
        latency = recorded
    # its trees priced at the sizes they have under the dataset's sampling setting (one line where it has none)
    latency = dataset_latency(latency, dataset, f"the dataset {str(dataset_name)!r}")
    # the latency features are the model's, constant over the roots
    features = train.features.copy() if latency == recorded else regime_features(train, latency)  # [N, F]
    if tuple(dataset.feature_names) != tuple(SCALAR_FEATURES):
        raise VerispecError(f"{str(dataset_name)!r} holds the features {', '.join(dataset.feature_names)}, not this "
                            "verispec's; rebuild the dataset")
    # as it will decode: reading the draft's laws to choose, the selector pays a draft step on chain:0 too
    times = policy_action_times(grid, latency, reads_draft=reads_draft(dataset.feature_names))  # [A']
    plain = [index for index, action in enumerate(grid.actions) if action.depth == 0]
    names = _hidden_names(dataset, hidden, dataset_name)
    blocks = None if names is None else {name: train.hidden[name] for name in names}
    if projection is not None and (blocks is None or kind != "mlp"):
        raise VerispecError(f"--projection {projection} sizes the hidden-state projections of the mlp "
                            "selector: give --hidden too (and --kind mlp), or leave --projection out")
    start = time.perf_counter()
    selector = train_selector(
        features, train.efficiency[:, columns], times, grid, kind=kind, base=plain[0] if plain else None,
        hidden=blocks, base_time=latency.target_time(1) if plain else None,  # plain decoding runs no draft
        seed=seed, epochs=epochs, device=device, penalty=penalty, alpha=alpha,
        projection=PROJECTION if projection is None else projection,
        metadata={"pair": dataset.metadata.get("pair"), "tokenizer": dataset.metadata.get("tokenizer"),
                  "vocab_size": dataset.metadata.get("vocab_size"), "samplings": dataset.metadata.get("samplings"),
                  "latency": latency, "dataset": str(dataset_name), "dataset_roots": len(dataset),
                  "test_fraction": test_fraction, "split_seed": split_seed,
                  "train_groups": sorted(set(train.group.tolist())),
                  "label_method": dataset.metadata.get("method"), **training_record(dataset, train)})
    chosen = selector.choose_batch(test.features, None if blocks is None else
                                   {name: test.hidden[name] for name in blocks}) if len(test) else []
    summary = {"kind": kind, "verifiers": list(grid.verifiers), "actions": len(grid), "train_roots": len(train),
               "test_roots": len(test), "latency": latency.as_dict(), "seconds": time.perf_counter() - start,
               "test_actions": sorted({grid.actions[int(i)].name for i in chosen})}
    return TrainedSelector(selector, grid, len(train), len(test), summary)


def _verifier_grid(grid: ActionGrid, verifiers: str | Sequence[str] | None) -> ActionGrid:
    """``grid``'s trees under ``verifiers`` (None: all of its verifiers), each of which it must label."""
    from verispec.verifiers import split_names

    names = grid.verifiers if verifiers is None else \
        split_names(verifiers) if isinstance(verifiers, str) else tuple(verifiers)
    unknown = [name for name in names if name not in grid.verifiers]
    if unknown or not names:
        raise VerispecError(f"--verifiers {verifiers!r}: the dataset labels the verifiers "
                            f"{', '.join(grid.verifiers)} only")
    return grid.restricted(names)  # the dataset's recorded actions of those verifiers


def _hidden_names(dataset, hidden: str | Sequence[str] | None, dataset_name: str) -> list[str] | None:
    """The hidden states of ``dataset`` a selector reads: ``hidden`` "all" (every one it holds), comma-separated
    names or a sequence of names; None (or empty text) for none."""
    if not hidden:
        return None
    held = sorted(dataset.hidden or {})
    text = hidden if isinstance(hidden, str) else ",".join(hidden)
    names = held if text.strip() == "all" else [name.strip() for name in text.split(",") if name.strip()]
    missing = [name for name in names if name not in held]
    if not held or missing or not names:
        raise VerispecError(f"--hidden {text}: {str(dataset_name)!r} holds the hidden states "
                            f"{', '.join(held) or 'none'} (build it with 'selector dataset --hidden')")
    return names


__all__ = ["DEFAULT_ALPHA", "DEFAULT_PENALTY", "TrainedSelector", "best_static", "throughput_loss",
           "train_on_dataset", "train_selector"]
