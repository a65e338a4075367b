"""``verispec derive``: a real context of a model pair as a small-vocabulary problem file (top V-1 + other)."""

from __future__ import annotations

import sys

from verispec.cli.options import (
    add_context_options,
    add_device_options,
    add_overwrite_option,
    add_pair_options,
    add_sampling_options,
    check_problem_output,
    integer_option,
)
from verispec.cli.pair import model_problem
from verispec.errors import VerispecError


def add_parser(subparsers) -> None:
    derive = subparsers.add_parser("derive",
                                   help="a real context as a small-vocabulary problem file (top V-1 + other)")
    add_pair_options(derive)
    add_context_options(derive)
    derive.add_argument("--vocab", type=integer_option(minimum=2, what="an integer >= 2"), required=True,
                        help="derived vocabulary: the top V-1 tokens at each prefix and one 'other' bucket")
    derive.add_argument("--depth", type=integer_option(minimum=1, what="a positive integer"), required=True,
                        help="target conditionals to this depth (draft to depth - 1)")
    derive.add_argument("--output", required=True, metavar="FILE",
                        help="the problem file to write (atomically): JSON, or the binary form when FILE ends in .npz")
    add_overwrite_option(derive, "a problem file")
    add_sampling_options(derive)
    add_device_options(derive)


def run(args) -> int:
    from verispec.models.derive import check_derive_size, derive_problem, write_derived

    check_derive_size(args.vocab, args.depth)  # before the models are loaded
    check_problem_output(args.output, overwrite=args.overwrite)
    from verispec.study.script_files import check_free_space

    check_free_space([args.output], "--output")  # a full disk, found before the models load, not at the write
    from verispec.files.store_lock import store_lock

    with store_lock(args.output, what="--output"):  # one writer at a time: a second run is refused
        problem, settings = model_problem(args, args.depth)
        if args.vocab > problem.vocab_size:
            raise VerispecError(f"--vocab {args.vocab} exceeds the pair's vocabulary of {problem.vocab_size} "
                                "tokens")
        table, provenance = derive_problem(problem, args.vocab, args.depth, progress=sys.stderr.isatty())
        description = (f"Derived by verispec derive from {settings['pair']} after a context of "
                       f"{settings['context_tokens']} tokens: at each prefix the top {args.vocab - 1} tokens "
                       f"by p + q and an 'other' bucket (token {args.vocab - 1}) holding the rest of each law; "
                       "after the bucket, the conditionals of its likeliest token.")
        write_derived(args.output, table, args.depth, provenance, description,
                      {**settings, "vocab": args.vocab, "depth": args.depth,
                       "forward_passes": problem.forward_passes})
        worst = max(max(entry["other_target"], entry["other_draft"]) for entry in provenance.values())
        print(f"wrote {args.output}: V = {args.vocab}, depth {args.depth}, {len(provenance)} prefixes, "
              f"{problem.forward_passes} forward passes of each model; largest 'other' mass {worst:.3g}")
        return 0
