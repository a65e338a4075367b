"""verispec's compiled kernels (``verispec.native``) against the routes they replace, side by side in one run at
Qwen's vocabulary V = 151,936, with the rows warm in the caches and cold (a 64 MB buffer touched before each call,
as a model's forward leaves them):

* the logit route's moments (what the selector's features read without a sampling filter): the kernel, one read of
  each row, against the numpy route (``features._logit_parts`` inside ``native.kernels_off()``: a dozen passes
  over [V] rows), at T = 1 and T = 0.7, with no law given and with p_prev's law given (the decoder has it from the
  verify forward);
* the 21 largest logits of a float32 row (top-k 20's support, ``verispec.models.sampling.largest``): the kernel's
  one pass against the torch route (block maxima, two ``topk`` calls).

    python benchmarks/bench_native_kernels.py --threads 1
    python benchmarks/bench_native_kernels.py --quick     # fewer repeats

Medians of ``--repeats`` calls in microseconds, the ratio other route / kernel, the load average before and after.
``--result FILE`` also writes the rows with the run's record (``measure.write_result``): ``now`` the kernel's us,
``before`` the other route's, ``ratio`` before / now.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

VOCAB = 151_936


def main(argv=None) -> int:
    from measure import RESULT, ROWS, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads under numpy (default 1)")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="40 repeats")
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
    import numpy as np
    from measure import comparison, median_us, start_record, write_result  # benchmarks/measure.py; loads numpy

    started = start_record(__file__, argv, threads=args.threads, result=args.result) if args.result else None

    from verispec import native
    from verispec.selector.features import _logit_parts

    repeats = 40 if args.quick else args.repeats
    print(native.kernel_status())
    generator = np.random.default_rng(0)
    rows = [(generator.normal(size=VOCAB) * 3).astype(np.float32) for _ in range(3)]
    buffer = np.ones(64 * 2**20 // 8)  # [8 Mi] float64: 64 MB, twice a large L3

    def evict():
        buffer[::8] += 1.0  # one write a cache line

    load_before = os.getloadavg()
    results = []
    for temperature in (1.0, 0.7):
        shifted = rows[0].astype(np.float64) - rows[0].max()
        law = np.exp(shifted / temperature)
        law /= law.sum()  # [V] float64, p_prev's law as the decoder holds it
        for given_label, given in (("no law given", (None, None, None)), ("p_prev's law given", (law, None, None))):
            def kernel(inverse=1 / temperature, given=given):
                return _logit_parts(rows, inverse, given)

            def numpy_route(inverse=1 / temperature, given=given):
                with native.kernels_off():
                    return _logit_parts(rows, inverse, given)

            for caches, evicting in (("warm", None), ("cold", evict)):
                times = {name: median_us(call, repeats, evicting) for name, call in
                         (("kernel", kernel), ("other", numpy_route))}  # one after the other, same conditions
                results.append({"measure": "logit moments", "temperature": temperature, "laws": given_label,
                                "caches": caches, "kernel_us": times["kernel"], "other_us": times["other"]})
    import torch

    from verispec.models.sampling import largest

    logits = torch.from_numpy(rows[0])  # [V] float32, a model's logits on the CPU

    def torch_route():
        with native.kernels_off():
            return largest(logits, 21, listed=True)

    for caches, evicting in (("warm", None), ("cold", evict)):
        times = {name: median_us(call, repeats, evicting) for name, call in
                 (("kernel", lambda: largest(logits, 21, listed=True)), ("other", torch_route))}
        results.append({"measure": "largest 21", "temperature": None, "laws": "-", "caches": caches,
                        "kernel_us": times["kernel"], "other_us": times["other"]})
    load_after = os.getloadavg()
    print(f"V = {VOCAB:,}, {args.threads} thread(s), {repeats} repeats; load average (1, 5, 15 min) "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after")
    print(f"{'measure':14s} {'T':>4s} {'laws':20s} {'caches':6s} {'kernel':>9s} {'other route':>12s} "
          f"{'other / kernel':>15s}  (us; other: numpy for the moments, torch for largest)")
    for row in results:
        temperature = "-" if row["temperature"] is None else f"{row['temperature']:.1f}"
        print(f"{row['measure']:14s} {temperature:>4s} {row['laws']:20s} {row['caches']:6s} {row['kernel_us']:9.1f} "
              f"{row['other_us']:12.1f} {row['other_us'] / row['kernel_us']:15.2f}")
    if args.json:
        write_rows(args.json, {"vocab": VOCAB, "threads": args.threads, "repeats": repeats,
                               "status": native.kernel_status(), "rows": results,
                               "load_average": [load_before, load_after]})
    if started:
        write_result(args.result, started, {
            "benchmark": "bench_native_kernels", "unit": f"us a call (median of {repeats})", "vocab": VOCAB,
            "now": "the compiled kernel (verispec.native)",
            "before": "the route it replaces, same run: numpy for the logit moments, torch for the largest 21",
            "status": native.kernel_status(), "load_average": [load_before, load_after],
            "rows": [comparison(row["kernel_us"], row["other_us"], V=VOCAB, **row) for row in results]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
