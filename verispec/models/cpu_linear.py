"""Linear layers of a few rows on a CPU, as ``(W @ x.T).T`` instead of torch's ``x @ W.T`` (opt-in).

A decoding step feeds a model 1 to a few tokens, so every linear layer multiplies a [rows, in] input by its [out, in]
weight for small ``rows``. On this project's 2-core CPU (AMD EPYC, torch 2.13's CPU build, float32) torch's ``linear``
runs that product for 2-4 rows at 2-3x the cost of one row, and a product taken as ``W @ x.T`` (x row-major, so the
operand is read column-major) costs less than torch's one-row product up to a few rows and less than its own up to 16:
Qwen2.5-Coder's 151,936 x 1,536 output layer takes 47 ms for one row, 107 for two, 160 for three and 134 for sixteen
through ``linear``, and 30, 31, 37 and 94 ms this way (``benchmarks/bench_cpu_linear.py``, side by side;
``docs/results/bench/earlier/bench-cpu-linear.json``). A whole forward of the 1.5B target then costs 0.66x (1 token),
0.35x (2), 0.29x (3), 0.42x (4), 0.66x (5), 0.83x (16) what it did (x0.89-1.04 at 8, 12 and 13), of the 0.5B draft
0.58x, 0.30x, 0.27x, 0.41x, 0.54x and 0.85x (x0.88-0.98 at 8, 12 and 13); from 17 rows torch's own path is taken.
(Until 2026-11-26 the path stopped at 4 rows and took its input as it came: its own outputs are transposed views, so
an MLP's act(gate) * up reached the down projection column-major, where the product took 2.9x as long, and a 2-token
draft forward cost 94 ms against 61 for one; both measured again here.)

``use_small_batch_linears(model)`` gives every ``torch.nn.Linear`` of a model this forward for float32 inputs of
1 to ``MAX_ROWS`` rows on a CPU (a single row goes in twice and 9-15 rows padded with zero rows to 16: the wider
products are the faster ones here, ``product_rows``); anything else
(more rows, another dtype or device) takes torch's ``linear`` unchanged. The values are the same product summed
in another order: they differ from torch's by float32 rounding (logits by at most 2e-4 on Qwen), as two BLAS
kernels do, so a forward's law is the model's to that tolerance, not bit for bit. It is off unless asked for
(``load_pair(..., small_batch_linear=True)`` or ``VERISPEC_SMALL_BATCH_LINEAR=1``): every CPU time measured
before it stays reproducible, and another CPU's BLAS may not gain.
"""

from __future__ import annotations

import os
import types

from verispec.errors import VerispecError

#: Most rows a product takes this path at (measured: at 17 and 24 tokens whole forwards gain nothing).
MAX_ROWS = 16

#: The environment variable that turns the path on for every pair ``load_pair`` loads on a CPU ("1" on, "0" off).
ENVIRONMENT_VARIABLE = "VERISPEC_SMALL_BATCH_LINEAR"

#: The path's version, in the key of every result store that times decoding with it (its timings change with it):
#: 1 was its first form (2026-11-26: up to 4 rows, input taken as it came), 2 the input made row-major and 1-16 rows
#: (9-15 padded to 16).
PATH_VERSION = 2


def product_rows(rows: int) -> int:
    """The rows the product is taken at for ``rows`` input rows (1 to ``MAX_ROWS``): one row as two, 9 to 15 as
    16, the others as they are. Measured on this project's CPU (``benchmarks/bench_cpu_linear.py --unpadded``: whole
    Qwen forwards after a 200-token context, path against torch, interleaved): a 2-row product costs no more than one
    of 1; forwards of 12-15 tokens taken as they come cost 1.18-1.55x torch's own, padded to 16 0.83-0.98x, and at 9-11
    tokens padding costs the same or less (x0.61-0.84 against x0.81-0.95)."""
    if rows == 1:
        return 2
    if 8 < rows < 16:
        return 16
    return rows


def small_batch_linear(module, inputs):
    """``module``'s output (an ``nn.Linear``) for ``inputs`` [..., in]: ``(W @ x.T).T`` for 1 to ``MAX_ROWS`` float32
    rows on a CPU, torch's ``linear`` otherwise."""
    import torch

    weight, bias = module.weight, module.bias
    width = inputs.shape[-1]
    rows = inputs.numel() // width if width else 0
    if (not 1 <= rows <= MAX_ROWS or inputs.device.type != "cpu" or inputs.dtype != torch.float32
            or weight.dtype != torch.float32):
        return torch.nn.functional.linear(inputs, weight, bias)
    # row-major, so that flat.T is the column-major operand the fast product needs: this path's own outputs are
    # transposed views, and an MLP's act(gate) * up of two of them reached the down projection column-major, where
    # the product took 2.9x as long (1.9 against 0.66 ms on Qwen's draft at 2 rows)
    flat = inputs.reshape(rows, width).contiguous()                          # [rows, in]
    padded = product_rows(rows)
    if padded > rows:  # the wider product is the faster one on this BLAS; the rows added are dropped
        flat = torch.cat([flat, flat.new_zeros((padded - rows, width))])
    output = torch.mm(weight, flat.T).T[:rows]                               # [rows, out]
    if bias is not None:
        output = output + bias
    return output.reshape(*inputs.shape[:-1], weight.shape[0])


def use_small_batch_linears(model) -> int:
    """Give every ``nn.Linear`` of ``model`` the ``small_batch_linear`` forward (on the instance, so the class and
    other models keep torch's); returns how many layers took it."""
    import torch

    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = types.MethodType(small_batch_linear, module)
            count += 1
    return count


def use_torch_linears(model) -> int:
    """Undo ``use_small_batch_linears``: every ``nn.Linear`` of ``model`` that has the path takes its class's
    forward again (a forward set on a layer by anything else stays); returns how many layers had the path."""
    import torch

    count = 0
    for module in model.modules():
        own = module.__dict__.get("forward")
        if isinstance(module, torch.nn.Linear) and getattr(own, "__func__", None) is small_batch_linear:
            del module.__dict__["forward"]
            count += 1
    return count


def uses_small_batch_linears(model) -> bool:
    """Whether every ``nn.Linear`` of ``model`` (at least one) has the ``small_batch_linear`` forward."""
    import torch

    layers = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    return bool(layers) and all(getattr(module.forward, "__func__", None) is small_batch_linear for module in layers)


def store_key(pair) -> dict:
    """What a result store that times ``pair``'s decoding adds to its parameters: ``{"small_batch_linear":
    PATH_VERSION}`` when the pair's linears take the path, nothing otherwise (so files written without the path resume
    unchanged, and one timed with another version of it is refused)."""
    return {"small_batch_linear": PATH_VERSION} if getattr(pair, "small_batch_linear", False) else {}


def wanted(small_batch_linear: bool | None) -> bool:
    """The choice for a load: ``small_batch_linear`` when given, else ``VERISPEC_SMALL_BATCH_LINEAR`` ("1" or "0";
    unset is off); anything else is refused on one line."""
    if small_batch_linear is not None:
        if not isinstance(small_batch_linear, bool):
            raise VerispecError(f"small_batch_linear must be True, False or None, got {small_batch_linear!r}")
        return small_batch_linear
    value = os.environ.get(ENVIRONMENT_VARIABLE, "0").strip()
    if value not in ("0", "1"):
        raise VerispecError(f"{ENVIRONMENT_VARIABLE}={value!r:.40}: set it to 1 (linear layers of a few rows as "
                            "W @ x.T on a CPU) or 0 (torch's own), or unset it")
    return value == "1"


__all__ = ["ENVIRONMENT_VARIABLE", "MAX_ROWS", "PATH_VERSION", "product_rows", "small_batch_linear", "store_key",
           "use_small_batch_linears", "use_torch_linears", "uses_small_batch_linears", "wanted"]
