"""``verispec latency``: measure a pair's draft step and target forward times, the latency model of throughput."""

from __future__ import annotations

import os

from verispec.cli.options import (
    add_device_options,
    add_overwrite_option,
    add_pair_options,
    integer_option,
    list_option,
)
from verispec.cli.pair import check_pair_args, load_pair
from verispec.errors import VerispecError
from verispec.guard.limits import MAX_CONTEXT_TOKENS, MAX_DECODE_NODES, MAX_LATENCY_REPEATS


def add_parser(subparsers) -> None:
    latency = subparsers.add_parser("latency", help="measure a pair's draft step and target forward times (JSON)")
    add_pair_options(latency)
    latency.add_argument("--sizes", default="1,2,4,8,16,32",
                         help=f"tree sizes n at which t_p(n) is measured (each at most {MAX_DECODE_NODES})")
    latency.add_argument("--draft-sizes", default="1,2,4",
                         help="widths w at which the draft forward t_q(w) is measured (1 always; a delayed tree's "
                              f"path steps feed K tokens at once; each at most {MAX_DECODE_NODES}; default 1,2,4)")
    latency.add_argument("--repeats", type=integer_option(minimum=1, maximum=MAX_LATENCY_REPEATS,
                                                          what=f"an integer from 1 to {MAX_LATENCY_REPEATS}"),
                         default=5)
    latency.add_argument("--context-length", type=integer_option(minimum=1, maximum=MAX_CONTEXT_TOKENS,
                                                                 what=f"an integer from 1 to {MAX_CONTEXT_TOKENS}"),
                         default=200, help="committed tokens before each timed forward (default 200)")
    latency.add_argument("--out", required=True, metavar="FILE", help="the latency model to write (atomically)")
    add_overwrite_option(latency, "a latency model")
    add_device_options(latency)


def run(args) -> int:
    from verispec.files.io import atomic_write_json, check_output
    from verispec.latency import LATENCY_FILE
    from verispec.models.latency import measure_latency

    check_pair_args(args)
    sizes = _sizes(args.sizes, "--sizes", "a tree size")
    draft_sizes = _sizes(args.draft_sizes, "--draft-sizes", "a draft width")
    check_output(args.out, LATENCY_FILE, what="--out", overwrite=args.overwrite)
    from verispec.study.script_files import SMALL_FILE_ROOM, check_free_space

    check_free_space([args.out], "--out", SMALL_FILE_ROOM)  # a full disk, found before the measuring, not at the write
    from verispec.files.store_lock import store_lock

    with store_lock(args.out, what="--out"):  # one writer at a time: a second run is refused
        args.temperature, args.top_k, args.top_p = 1.0, None, None  # no sampling here
        import dataclasses
        import shlex
        import time

        from verispec.files.provenance import run_record

        # the run, recorded before it loads the box (its load is the box's own): a verdict that prices verification
        # beside these forwards says whether both were timed in one run (issue 78, item 3)
        record = run_record(shlex.join(args.command_line), threads=args.threads,
                            device=str(args.device or "cpu"), outputs=[args.out])
        start = time.monotonic()
        pair, _ = load_pair(args)
        model = measure_latency(pair, context_length=args.context_length, sizes=sizes, repeats=args.repeats,
                                draft_sizes=draft_sizes)
        model = dataclasses.replace(model, measured={**record, "seconds": round(time.monotonic() - start, 1)})
        from verispec.files.provenance import LATENCY, MARKER_KEY, written_by

        # the marker lets a rerun replace the file (verispec.files.provenance); LatencyModel.load reads its own keys
        # only
        atomic_write_json(args.out, {**model.as_dict(), "load_average": os.getloadavg()[0],
                                     MARKER_KEY: written_by(LATENCY, "latency")})
        draft = ", ".join(f"{w}: {time_:.3f}" for w, time_ in zip(model.draft_sizes, model.draft_times))
        target = ", ".join(f"{n}: {time_:.3f}" for n, time_ in zip(model.target_sizes, model.target_times))
        print(f"t_q(w) = {draft} ms; t_p(n) = {target} ms; {model.source}; wrote {args.out}")
        return 0


def _sizes(text: str, option: str, what: str) -> list[int]:
    sizes = list_option(text, int, what)
    wrong = [size for size in sizes if not 1 <= size <= MAX_DECODE_NODES]
    if wrong:
        raise VerispecError(f"{option} {text!r}: {what} must be an integer from 1 to {MAX_DECODE_NODES} (the most "
                            f"nodes a decoded tree has), got {wrong[0]}")
    return sizes
