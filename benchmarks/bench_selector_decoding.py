"""The delay selector's cost per block INSIDE decoding (``BlockRecord.select_s``: the features of the block's root,
the draft's sampling laws they read, and the network's choice), at Qwen's vocabulary V = 151,936, without and with
hidden states, at T = 0.7 top-k 20 top-p 0.8 (Qwen's recommended setting) and at T = 1.

    python benchmarks/bench_selector_decoding.py --threads 1
    python benchmarks/bench_selector_decoding.py --quick          # fewer tokens
    python benchmarks/bench_selector_decoding.py --pair qwen-coder --tokens 100    # an installed pair
    python benchmarks/bench_selector_decoding.py --pair qwen-coder --tokens 64 --compare-torch-forward
    python benchmarks/bench_selector_decoding.py --pair qwen-coder --tokens 64 --compare-logit-route
    python benchmarks/bench_selector_decoding.py --pair qwen-coder --tokens 64 --compare-projection 32
    python benchmarks/bench_selector_decoding.py --pair qwen-coder --tokens 64 --compare-kernel

The pair is by default the tiny config-built one (``verispec.models.tiny.tiny_pair(vocab=151936)``: random
weights, a one-layer Qwen2 of width 32, cast to float32 as Qwen runs on a CPU): quick, and it needs no install,
but its forwards leave the caches warmer than real models do, so it reads about half of what a real pair pays.
``--pair NAME`` runs an installed pair instead (``verispec.models.install``), the measure that counts (about 4
minutes for ``--pair qwen-coder --tokens 64`` on a 2-core CPU). The selector is the paper's
MLP over a small grid (K 1-2, L1 0-2, L2 0-2, SpecInfer), trained for a few epochs on synthetic features (its
choices only decide which trees run; their draws do not enter ``select_s``). Prints the mean, the median, the 90th
percentile and the largest ``select_s`` over the blocks after each decode's first (which pays one-time costs), in
milliseconds, with the load average before and after: with more runnable processes than cores a block now and then
waits out another process's time slice (a few ms), which lifts the mean and the tail but not the median.
``--compare-torch-forward`` also runs each decode with the selector choosing through its torch modules instead of
its numpy forward (``verispec.selector.network.HostForward``), interleaved seed by seed, and prints the ratio of
the medians; ``--compare-logit-route`` likewise runs the features of unfiltered laws from their logits alone,
ignoring the laws the decoder has computed (p_prev from the verify forward, q_prev from drafting), an exponential
over the vocabulary for each (a difference only on the numpy route: the compiled kernel reads the logits alone
anyway); ``--compare-kernel`` computes the features of unfiltered laws by the numpy route instead of the compiled
kernel (``verispec.native``); ``--compare-projection WIDTH`` runs the hidden-state decodes also with a
network whose projections are WIDTH wide (``selector train --projection``), fewer weights to read a block.
``--threads`` also caps the BLAS under numpy (set before numpy loads, unless the caller set OMP_NUM_THREADS):
numpy's default pool fights any other load.
``--result FILE`` also writes the rows with the run's record (``measure.write_result``): each compared route's row
carries ``now`` the median ``select_s`` (ms) of the selector as it runs (forward "numpy": host forward, compiled
kernel), ``before`` the compared route's (``--compare-kernel``: the numpy route), ``ratio`` before / now; the
selector's own rows carry ``before`` None.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

VOCAB = 151_936
PROMPT = [11, 7, 3, 5, 13, 2, 17, 19]
SAMPLINGS = {"T=0.7 top-k 20 top-p 0.8": (0.7, 20, 0.8), "T=1": (1.0, None, None)}


def build_policy(hidden_dims: dict[str, int], latency, seed: int = 0, projection: int = 128):
    """A ``SelectorPolicy`` over a small grid, trained briefly on synthetic features (and hidden states, each
    projected to ``projection`` dimensions)."""
    import numpy as np

    from verispec.selector import SCALAR_FEATURES, ActionGrid, action_times
    from verispec.selector.selector import SelectorPolicy
    from verispec.selector.train import train_selector

    rng = np.random.default_rng(seed)
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1, 2), l2s=(0, 1, 2))
    count = 256
    features = rng.normal(size=(count, len(SCALAR_FEATURES)))  # [N, F]
    efficiency = 1 + rng.uniform(size=(count, len(grid)))  # [N, A]
    hidden = {name: rng.normal(size=(count, dim)) for name, dim in hidden_dims.items()} or None
    selector = train_selector(features, efficiency, action_times(grid, latency), grid, hidden=hidden, seed=seed,
                              epochs=2, projection=projection, metadata={"latency": latency})
    return SelectorPolicy(selector, latency)


def torch_forward_policy(policy):
    """The same selector choosing through its torch modules instead of ``HostForward`` (the comparison of
    ``--compare-torch-forward``): the same weights, so the same choices but at near-ties."""
    import copy

    from verispec.selector.selector import Selector, SelectorPolicy

    class TorchForwardSelector(Selector):
        def _host_forward(self):
            return None

    twin = copy.copy(policy.selector)
    twin.__class__ = TorchForwardSelector
    return SelectorPolicy(twin, policy.latency)


def logits_only_policy(policy):
    """The same selector reading every unfiltered law from its logits alone (an exponential over the vocabulary for
    each, as before the features used the laws the decoder has: ``--compare-logit-route``); the same features to
    float32's rounding, so the same choices but at near-ties."""
    from verispec.models.block_context import BlockContext, PositionLaw
    from verispec.selector.selector import SelectorPolicy

    class LogitsOnly(SelectorPolicy):
        def features(self, context):
            if context.sampling.filters:
                return super().features(context)
            laws = [None if law is None else PositionLaw(law.sampling, logits=law.logits) if law.logits is not None
                    else law for law in (context.laws[name] for name in ("p_prev", "q_prev", "q_root"))]
            return super().features(BlockContext(context.tokens, context.context_length, *laws, context.hidden,
                                                 context.sampling))

    return LogitsOnly(policy.selector, policy.latency)


def numpy_route_policy(policy):
    """The same selector with the features of unfiltered laws by the numpy route instead of the compiled kernel
    (``verispec.native.kernels_off``: ``--compare-kernel``); the same features to float32's rounding."""
    from verispec import native
    from verispec.selector.selector import SelectorPolicy

    class NumpyRoute(SelectorPolicy):
        def features(self, context):
            with native.kernels_off():
                return super().features(context)

    return NumpyRoute(policy.selector, policy.latency)


def measure(pair, policies: dict, sampling, tokens: int, seeds) -> dict[str, dict]:
    """``select_s`` of every block of one decode per seed and policy (the policies interleaved seed by seed),
    pooled per policy, in milliseconds (each decode's first block left out)."""
    import numpy as np

    from verispec.models.decoding import generate

    blocks = {name: [] for name in policies}
    for seed in seeds:
        for name, policy in policies.items():
            generation = generate(pair, PROMPT, None, None, tokens, sampling, seed, selector=policy,
                                  stop_at_eos=False)
            blocks[name] += generation.blocks[1:]
    rows = {}
    for name, pooled in blocks.items():
        select = np.array([block.select_s for block in pooled]) * 1e3  # [blocks] ms
        total = np.array([block.total_s for block in pooled]) * 1e3
        rows[name] = {"blocks": int(select.size), "select_mean_ms": float(select.mean()),
                      "select_median_ms": float(np.median(select)),
                      "select_p90_ms": float(np.percentile(select, 90)), "select_max_ms": float(select.max()),
                      "block_mean_ms": float(total.mean())}
    return rows


def main(argv=None) -> int:
    from measure import RESULT, ROWS, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--tokens", type=int, default=200, help="new tokens per decode (default 200)")
    parser.add_argument("--quick", action="store_true", help="60 tokens")
    parser.add_argument("--pair", help="an installed pair's name instead of the tiny vocab-151,936 pair")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decodes", type=int, default=2, help="decodes per setting, seeds from --seed (default 2)")
    parser.add_argument("--compare-torch-forward", action="store_true",
                        help="also choose through the selector's torch modules, interleaved, side by side")
    parser.add_argument("--compare-logit-route", action="store_true",
                        help="also read every unfiltered law from its logits alone (no law the decoder has), "
                             "interleaved, side by side")
    parser.add_argument("--compare-kernel", action="store_true",
                        help="also compute the features of unfiltered laws by the numpy route instead of the compiled "
                             "kernel, interleaved, side by side")
    parser.add_argument("--compare-projection", type=int, metavar="WIDTH",
                        help="with hidden states, also choose through a network whose hidden-state projections are "
                             "WIDTH wide instead of the paper's 128 ('selector train --projection'), interleaved, "
                             "side by side")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--result", help="also write the rows and the run's record here (JSON)")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--json", args.json, ROWS), ("--result", args.result, RESULT)],
                  overwrite=args.overwrite)
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, str(args.threads))
    from measure import start_record, write_result  # benchmarks/measure.py

    started = start_record(__file__, argv, threads=args.threads, result=args.result) if args.result else None
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' notice on past_key_values

    from verispec.latency import LatencyModel
    from verispec.models.sampling import Sampling

    torch.set_num_threads(args.threads)
    tokens = 60 if args.quick else args.tokens
    if args.pair:
        from verispec.models.pair import load_pair

        pair = load_pair(args.pair, device=args.device)
    else:
        from verispec.models.tiny import tiny_pair

        pair = tiny_pair(vocab=VOCAB, device=args.device)
        pair.target.float(), pair.draft.float()  # float32 logits, as Qwen's on a CPU (the tiny pair is float64)
    width = pair.target.config.hidden_size, pair.draft.config.hidden_size
    latency = LatencyModel.from_ratio(20)
    load_before = os.getloadavg()
    rows = []
    for hidden_label, dims in (("no hidden states", {}),
                               ("with hidden states", {"target_prev": width[0], "draft_prev": width[1],
                                                       "draft_root": width[1]})):
        policy = build_policy(dims, latency, args.seed)
        policies = {"numpy": policy}
        if args.compare_torch_forward:
            policies["torch"] = torch_forward_policy(policy)
        if args.compare_logit_route:
            policies["logits"] = logits_only_policy(policy)
        if args.compare_kernel:
            policies["nproute"] = numpy_route_policy(policy)
        if args.compare_projection and dims:
            policies[f"proj{args.compare_projection}"] = build_policy(dims, latency, args.seed,
                                                                       args.compare_projection)
        for label, (temperature, top_k, top_p) in SAMPLINGS.items():
            start = time.perf_counter()
            measured = measure(pair, policies, Sampling(temperature, top_k, top_p), tokens,
                               range(args.seed, args.seed + args.decodes))
            for forward, row in measured.items():
                rows.append({"hidden": hidden_label, "sampling": label, "forward": forward, **row,
                             "wall_s": time.perf_counter() - start})
    load_after = os.getloadavg()
    from verispec.native import kernel_status

    print(f"logit route: {kernel_status()}")
    print(f"{pair.name}, V = {pair.vocab_size:,}, {args.threads} torch thread(s), {args.decodes} decodes of {tokens} "
          f"tokens a setting; load average "
          f"(1, 5, 15 min) {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after")
    print(f"{'hidden states':20s} {'sampling':26s} {'forward':7s} {'blocks':>6s} {'select mean':>12s} {'median':>7s} "
          f"{'p90':>7s} {'max':>7s} {'block mean':>11s}  (ms)")
    for row in rows:
        print(f"{row['hidden']:20s} {row['sampling']:26s} {row['forward']:7s} {row['blocks']:6d} "
              f"{row['select_mean_ms']:12.3f} {row['select_median_ms']:7.3f} {row['select_p90_ms']:7.3f} "
              f"{row['select_max_ms']:7.3f} {row['block_mean_ms']:11.2f}")
    for other, words in (("torch", "through torch / through numpy"),
                         ("logits", "from the logits alone / with the decoder's laws"),
                         ("nproute", "numpy route / compiled kernel"),
                         (f"proj{args.compare_projection}", f"projection {args.compare_projection} / 128")):
        base = {(row["hidden"], row["sampling"]): row for row in rows if row["forward"] == "numpy"}
        for row in rows:
            if row["forward"] == other:
                host = base[(row["hidden"], row["sampling"])]
                print(f"{host['hidden']}, {host['sampling']}: median select_s {words} "
                      f"x{row['select_median_ms'] / host['select_median_ms']:.2f}")
    if args.json:
        record = {"pair": pair.name, "vocab": pair.vocab_size, "threads": args.threads, "tokens": tokens,
                  "decodes": args.decodes, "load_average": [load_before, load_after], "rows": rows}
        write_rows(args.json, record)
    if started:
        write_result(args.result, started, result_values(pair, rows, args, tokens, [load_before, load_after]))
    return 0


def result_values(pair, rows: list[dict], args, tokens: int, loads: list) -> dict:
    """The result file's values: every row, those of a compared route with the selector as it runs (forward
    "numpy") as ``now`` and the route as ``before``."""
    from measure import comparison  # benchmarks/measure.py

    base = {(row["hidden"], row["sampling"]): row for row in rows if row["forward"] == "numpy"}
    measured = []
    for row in rows:
        host = base[(row["hidden"], row["sampling"])]
        before = None if row["forward"] == "numpy" else row["select_median_ms"]
        measured.append(comparison(host["select_median_ms"], before, V=pair.vocab_size, **row))
    return {"benchmark": "bench_selector_decoding", "unit": "ms select_s a block (median over the blocks)",
            "pair": pair.name, "vocab": pair.vocab_size, "tokens": tokens, "decodes": args.decodes,
            "now": "the selector as it runs (forward 'numpy': host forward, compiled kernels)",
            "before": {forward: words for forward, words in (
                ("torch", "choosing through torch modules"), ("logits", "unfiltered laws from the logits alone"),
                ("nproute", "the numpy route instead of the compiled kernel"),
                (f"proj{args.compare_projection}", f"projection width {args.compare_projection} instead of 128"))
                if any(row["forward"] == forward for row in rows)},
            "load_average": loads, "rows": measured}


if __name__ == "__main__":
    raise SystemExit(main())
