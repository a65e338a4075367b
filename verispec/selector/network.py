"""The selector's models: the paper's network and two baselines it has to beat.

* ``SelectorNetwork``: the DDTE network (Thomas et al. 2026, arXiv 2602.16994, Sec. 5 and Appendix E): each
  hidden-state block (e.g. the target's state at the previous token, the draft's at the previous token and at
  the root) is projected to 128 dimensions and layer-normed; the projections are concatenated with the
  standardised scalar features; an MLP with hidden sizes 512 and 32, GELU and dropout gives |A| logits. With no
  hidden blocks it is an MLP on the scalars.
* ``LinearSelector``: a multinomial linear model on the standardised scalars (logits = W x + b).
* ``LookupSelector``: bins of one scalar feature (by default the L1 distance between p and q at the previous
  token); in each bin the action of best throughput on the training set.

Every model maps (scalars [B, F], hidden blocks [B, d_i]) to logits [B, A] and carries its own feature
standardisation (buffers ``scalar_mean``, ``scalar_scale``), so a saved state dict is the whole model.
Randomness comes in from outside: weights are drawn from a ``torch.Generator`` passed to the constructor, and
dropout draws its masks from a generator set by the trainer (``set_generator``), never from torch's global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from scipy.special import erf
from torch import nn

from verispec.selector.actions import SelectorError

#: Width of each hidden-state projection, and the MLP's hidden sizes (the paper's).
PROJECTION = 128
HIDDEN_SIZES = (512, 32)
DROPOUT = 0.1


def _linear(fan_in: int, fan_out: int, generator: torch.Generator) -> nn.Linear:
    """nn.Linear with torch's default initialisation (Kaiming-uniform weights, uniform bias in
    +-1/sqrt(fan_in)), drawn from ``generator`` instead of the global RNG."""
    layer = torch.nn.utils.skip_init(nn.Linear, fan_in, fan_out)
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return layer


class SeededDropout(nn.Module):
    """Dropout whose masks come from an explicit generator (``generator``, set by the trainer); identity in
    eval mode."""

    def __init__(self, p: float):
        super().__init__()
        if not 0 <= p < 1:
            raise SelectorError(f"dropout must lie in [0, 1), got {p!r}")
        self.p = float(p)
        self.generator: torch.Generator | None = None

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        if self.generator is None:
            raise SelectorError("dropout in training needs a generator (SelectorNetwork.set_generator)")
        keep = torch.rand(x.shape, generator=self.generator, device=x.device, dtype=x.dtype) >= self.p
        return x * keep / (1 - self.p)


class _Standardised(nn.Module):
    """Holds the scalar standardisation: x -> (x - mean) / scale."""

    def __init__(self, num_scalars: int):
        super().__init__()
        if isinstance(num_scalars, bool) or not isinstance(num_scalars, int) or num_scalars < 1:
            raise SelectorError(f"a selector needs at least one scalar feature, got {num_scalars!r}")
        self.num_scalars = num_scalars
        self.register_buffer("scalar_mean", torch.zeros(num_scalars, dtype=torch.float32))
        self.register_buffer("scalar_scale", torch.ones(num_scalars, dtype=torch.float32))

    def set_standardisation(self, features: np.ndarray) -> None:
        """Mean and standard deviation of the training features [N, F] (a constant feature keeps scale 1)."""
        mean = features.mean(axis=0)
        scale = features.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        self.scalar_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.scalar_scale.copy_(torch.as_tensor(scale, dtype=torch.float32))

    def standardise(self, scalars):
        if scalars.ndim != 2 or scalars.shape[1] != self.num_scalars:
            raise SelectorError(f"the selector reads {self.num_scalars} scalar features per root, got shape "
                                f"{tuple(scalars.shape)}")
        return (scalars.to(self.scalar_mean.dtype) - self.scalar_mean) / self.scalar_scale  # [B, F]

    def set_generator(self, generator: torch.Generator | None) -> None:
        for module in self.modules():
            if isinstance(module, SeededDropout):
                module.generator = generator


class SelectorNetwork(_Standardised):
    """The paper's selector network: logits [B, A] from scalars [B, F] and hidden blocks [B, d_i]."""

    def __init__(self, num_scalars: int, num_actions: int, hidden_dims: Sequence[int] = (), *,
                 generator: torch.Generator, projection: int = PROJECTION, hidden_sizes: Sequence[int] = HIDDEN_SIZES,
                 dropout: float = DROPOUT):
        super().__init__(num_scalars)
        self.config = {"num_scalars": num_scalars, "num_actions": int(num_actions),
                       "hidden_dims": [int(d) for d in hidden_dims], "projection": int(projection),
                       "hidden_sizes": [int(h) for h in hidden_sizes], "dropout": float(dropout)}
        if num_actions < 1 or projection < 1 or any(d < 1 for d in hidden_dims) or any(h < 1 for h in hidden_sizes):
            raise SelectorError(f"a selector network needs positive sizes, got {self.config}")
        self.projections = nn.ModuleList(
            nn.Sequential(_linear(int(d), projection, generator), nn.LayerNorm(projection)) for d in hidden_dims)
        layers, width = [], num_scalars + projection * len(hidden_dims)
        for size in hidden_sizes:
            layers += [_linear(width, int(size), generator), nn.GELU(), SeededDropout(dropout)]
            width = int(size)
        layers.append(_linear(width, int(num_actions), generator))
        self.mlp = nn.Sequential(*layers)

    def forward(self, scalars, hidden: Sequence | None = None):
        parts = [self.standardise(scalars)]
        hidden = list(hidden or ())
        if len(hidden) != len(self.projections):
            raise SelectorError(f"the selector reads {len(self.projections)} hidden-state blocks, got {len(hidden)}")
        if self.training:
            for block, projection in zip(hidden, self.projections):
                parts.append(projection(block.to(parts[0].dtype)))  # [B, 128]
            return self.mlp(torch.cat(parts, dim=1))  # [B, A]
        # evaluation (a decoder's choice per block): the same layers' own forwards, without the module-call
        # machinery around each (hooks: about a quarter of a one-root forward's cost on a CPU)
        for block, (linear, norm) in zip(hidden, self.projections):
            block = block if block.dtype == parts[0].dtype else block.to(parts[0].dtype)
            parts.append(norm.forward(linear.forward(block)))  # [B, 128]
        x = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        for layer in self.mlp:
            x = layer.forward(x)
        return x  # [B, A]


class LinearSelector(_Standardised):
    """Multinomial linear model: logits = W standardise(x) + b [B, A]. It starts at W = 0, b = 0, the uniform
    policy, as multinomial logistic regression does (no randomness): from a random start the ratio loss of
    Eq. 12 leaves a linear model stuck with a never-best action dominating a whole range (observed on the
    synthetic families of tests/selector/test_selector_core.py: 63-73% accuracy against 91-96% from zero)."""

    def __init__(self, num_scalars: int, num_actions: int):
        super().__init__(num_scalars)
        self.config = {"num_scalars": num_scalars, "num_actions": int(num_actions)}
        self.linear = torch.nn.utils.skip_init(nn.Linear, num_scalars, int(num_actions))
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.zero_()

    def forward(self, scalars, hidden: Sequence | None = None):
        if hidden:
            raise SelectorError("the linear selector reads no hidden states")
        return self.linear(self.standardise(scalars))  # [B, A]


class LookupSelector(_Standardised):
    """Bins of one scalar feature (``feature``: its index), the best action per bin. Logits are 0 for the bin's
    action and -1 elsewhere. ``fit`` sets the bins and the table."""

    def __init__(self, num_scalars: int, num_actions: int, *, feature: int, bins: int):
        super().__init__(num_scalars)
        if not 0 <= feature < num_scalars or bins < 1:
            raise SelectorError(f"a lookup needs a feature index below {num_scalars} and at least one bin, got "
                                f"feature {feature}, bins {bins}")
        self.config = {"num_scalars": num_scalars, "num_actions": int(num_actions), "feature": int(feature),
                       "bins": int(bins)}
        self.register_buffer("edges", torch.zeros(bins - 1, dtype=torch.float64))  # [bins - 1], interior edges
        self.register_buffer("table", torch.zeros(bins, dtype=torch.int64))  # [bins], action per bin

    def fit(self, features: np.ndarray, efficiency: np.ndarray, times: np.ndarray) -> None:
        """Quantile bins of the feature over the training roots; in each bin the action a maximising
        sum_b E_ba / sum_b T_ba (the throughput of the static action a on the bin's roots); an empty bin takes
        the best action over all roots."""
        column = features[:, self.config["feature"]]  # [N]
        bins = self.config["bins"]
        edges = np.quantile(column, np.arange(1, bins) / bins) if bins > 1 else np.zeros(0)
        times = np.broadcast_to(times, efficiency.shape)  # [N, A]
        overall = int(np.argmax(efficiency.sum(0) / times.sum(0)))
        which = np.searchsorted(edges, column, side="right")  # [N] bin of each root
        table = np.full(bins, overall, dtype=np.int64)
        for index in range(bins):
            rows = which == index
            if rows.any():
                table[index] = int(np.argmax(efficiency[rows].sum(0) / times[rows].sum(0)))
        self.edges.copy_(torch.as_tensor(edges, dtype=torch.float64))
        self.table.copy_(torch.as_tensor(table))

    def forward(self, scalars, hidden: Sequence | None = None):
        if hidden:
            raise SelectorError("the lookup selector reads no hidden states")
        self.standardise(scalars)  # the shape check
        column = scalars[:, self.config["feature"]].to(torch.float64).contiguous()  # [B]
        which = torch.bucketize(column, self.edges, right=True)  # [B]
        logits = torch.full((scalars.shape[0], self.config["num_actions"]), -1.0, device=scalars.device)
        logits[torch.arange(scalars.shape[0], device=scalars.device), self.table[which]] = 0.0
        return logits  # [B, A]


class HostForward:
    """A model's evaluation forward in numpy float32 on the host, from a copy of its weights: logits [B, A] from
    scalars [B, F] and hidden blocks [B, d_i] (numpy). The same layers as the module's forward (standardisation;
    per hidden block a linear map and LayerNorm; linear layers and exact GELU, 0.5 x (1 + erf(x / sqrt 2)); a
    lookup's bins), equal to its logits to float32's rounding (tested). Inside decoding, where the models' forwards
    leave the caches cold, a dozen torch calls cost 0.3-0.7 ms a block on this CPU at Qwen's sizes and the same
    arithmetic by numpy about 0.1-0.3 ms (``benchmarks/bench_selector_decoding.py``), so a selector on the CPU
    chooses through this, in decoding and in evaluation alike (one forward, the same choices)."""

    def __init__(self, model):
        def host(tensor, dtype=np.float32):
            return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=dtype)

        self.kind = type(model).__name__
        self.mean, self.scale = host(model.scalar_mean), host(model.scalar_scale)  # [F] each
        self.projections, self.layers, self.lookup, self.norm = [], [], None, ()
        if isinstance(model, SelectorNetwork):
            # weights transposed [in, out], so a row times them is one BLAS call; the blocks' biases, gains and
            # shifts stacked [blocks, 1, 128], so their LayerNorms run as one set of numpy calls
            self.projections = [host(linear.weight).T.copy() for linear, _ in model.projections]
            if model.projections:
                self.norm = tuple(np.stack([host(part)[None] for part in parts]) for parts in zip(
                    *((linear.bias, norm.weight, norm.bias) for linear, norm in model.projections)))
                epsilons = {float(norm.eps) for _, norm in model.projections}
                if len(epsilons) != 1:
                    raise SelectorError("the host forward norms every hidden block with one epsilon")
                self.eps = np.float32(epsilons.pop())
            self.layers = [(host(layer.weight).T.copy(), host(layer.bias)) if isinstance(layer, nn.Linear) else "gelu"
                           for layer in model.mlp if not isinstance(layer, SeededDropout)]
            if any(isinstance(layer, nn.GELU) and layer.approximate != "none" for layer in model.mlp):
                raise SelectorError("the host forward computes exact GELU; this network uses an approximation")
        elif isinstance(model, LinearSelector):
            self.layers = [(host(model.linear.weight).T.copy(), host(model.linear.bias))]
        elif isinstance(model, LookupSelector):
            self.lookup = (model.config["feature"], host(model.edges, np.float64), host(model.table, np.int64),
                           model.config["num_actions"])
        else:
            raise SelectorError(f"no host forward for a {type(model).__name__}")

    def __call__(self, scalars: np.ndarray, hidden=()) -> np.ndarray:
        if self.lookup is not None:
            feature, edges, table, actions = self.lookup
            logits = np.full((scalars.shape[0], actions), -1.0, dtype=np.float32)  # [B, A]
            logits[np.arange(scalars.shape[0]), table[np.searchsorted(edges, scalars[:, feature], side="right")]] = 0
            return logits
        if len(hidden) != len(self.projections):
            raise SelectorError(f"the selector reads {len(self.projections)} hidden-state blocks, got {len(hidden)}")
        x = (scalars.astype(np.float32) - self.mean) / self.scale  # [B, F]
        if self.projections:
            # inside decoding each numpy call costs 5-12 us with its code cold, so the blocks' LayerNorms share
            # one set of calls: a third of the calls of one set a block
            bias, gain, shift = self.norm  # [blocks, 1, 128] each
            projected = np.stack([block.astype(np.float32, copy=False) @ weight for block, weight in
                                  zip(hidden, self.projections)])  # [blocks, B, 128]
            projected += bias
            projected -= projected.mean(axis=2, keepdims=True)
            variance = np.square(projected).mean(axis=2, keepdims=True)  # biased, as LayerNorm's
            variance += self.eps
            projected /= np.sqrt(variance, out=variance)
            projected *= gain
            projected += shift
            x = np.concatenate([x, *projected], axis=1)  # [B, F + 128 * blocks]
        for layer in self.layers:
            if layer == "gelu":
                x = 0.5 * x * (1 + erf(x * np.float32(math.sqrt(0.5))))
            else:
                x = x @ layer[0] + layer[1]
        return x  # [B, A]


#: kind -> model class, for save and load.
MODELS = {"mlp": SelectorNetwork, "linear": LinearSelector, "lookup": LookupSelector}


def build_model(kind: str, config: dict, generator: torch.Generator | None = None):
    """A model of ``kind`` from its ``config`` (as the model records it)."""
    if kind not in MODELS:
        raise SelectorError(f"unknown selector kind {kind!r}; kinds: {', '.join(MODELS)}")
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    config = dict(config)
    num_scalars, num_actions = config.pop("num_scalars"), config.pop("num_actions")
    if kind == "mlp":
        hidden_dims = config.pop("hidden_dims")
        return SelectorNetwork(num_scalars, num_actions, hidden_dims, generator=generator, **config)
    if kind == "linear":
        return LinearSelector(num_scalars, num_actions, **config)
    return LookupSelector(num_scalars, num_actions, **config)


__all__ = ["MODELS", "HostForward", "LinearSelector", "LookupSelector", "SeededDropout", "SelectorNetwork",
           "build_model"]
