"""``verispec hunt``: search for the simplest problem on which a rule is lossy."""

from __future__ import annotations

import json
import sys

from verispec.cli.common import plain_json
from verispec.cli.options import (
    add_call_timeout_option,
    add_overwrite_option,
    integer_option,
    number_option,
    witness_output,
)
from verispec.errors import VerispecError
from verispec.guard.limits import DEFAULT_THRESHOLD, MAX_HUNT_VOCAB


def add_parser(subparsers) -> None:
    hunt = subparsers.add_parser("hunt", help="search for the simplest problem on which a verifier is lossy")
    hunt.add_argument("--verifier", required=True, help="verifier name, or FILE.py:NAME for your own rule")
    hunt.add_argument("--tree", required=True, help="draft tree, as for 'exact'")
    hunt.add_argument("--max-vocab", type=integer_option(minimum=2, maximum=MAX_HUNT_VOCAB,
                                                        what=f"an integer from 2 to {MAX_HUNT_VOCAB}"),
                      default=3, help=f"largest vocabulary searched (default 3, at most {MAX_HUNT_VOCAB})")
    hunt.add_argument("--max-examples", type=integer_option(minimum=1, what="an integer >= 1"), default=3000,
                      help="problems tried before giving up (default 3000)")
    hunt.add_argument("--time-budget",
                      type=number_option(minimum=0, strict=True, what="a finite number of seconds > 0"),
                      default=60.0, help="seconds before giving up (default 60)")
    hunt.add_argument("--threshold", type=number_option(minimum=0, strict=False, what="a finite number >= 0"),
                      default=DEFAULT_THRESHOLD, help="TV distance above which a problem is a witness (default 1e-9)")
    hunt.add_argument("--context-free", action="store_true", help="search context-free problems only")
    hunt.add_argument("--output", metavar="FILE",
                      help="write the witness problem here instead of stdout (JSON; FILE.npz: the binary form)")
    add_overwrite_option(hunt, "a problem file")
    add_call_timeout_option(hunt)


def run(args) -> int:
    with witness_output(args):  # one writer of --output at a time
        return _run(args)


def _run(args) -> int:
    from verispec.hunt import hunt, next_search  # imports hypothesis; only this command needs it
    from verispec.simulator import ContextFreeProblem, parse_tree
    from verispec.verdict import EXIT_INCONCLUSIVE, EXIT_LOSSY, Verdict
    from verispec.verifiers import get_verifier

    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    largest = ContextFreeProblem([1] + [0] * (args.max_vocab - 1), [1] + [0] * (args.max_vocab - 1))
    try:
        drafter.check_problem(largest)
    except VerispecError as error:
        raise type(error)(f"{error} (hunt searches vocabularies up to --max-vocab {args.max_vocab})") from None
    from tqdm import tqdm

    def progress(count: int) -> None:
        bar.update(count - bar.n)

    with tqdm(desc="problems tried", unit=" problems", disable=not sys.stderr.isatty(), leave=False) as bar:
        result = hunt(verifier, drafter, max_vocab=args.max_vocab, max_examples=args.max_examples,
                      threshold=args.threshold, time_budget=args.time_budget,
                      context_free=True if args.context_free else None, progress=progress)
    witness = result.witness
    if witness is None:
        print(f"verispec: {Verdict.INCONCLUSIVE.word}: no lossy problem found for '{verifier.name}' on {drafter.spec} "
              f"(vocabularies up to {args.max_vocab}, threshold {args.threshold:g}); tried {result.describe()}; a "
              f"search proves nothing: to search further, {next_search(result, args.max_examples, args.time_budget)}",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    _write_witness(args, drafter, plain_json(witness.problem_json))
    kind = "context-free" if witness.context_free else "context-dependent"
    where = args.output or "FILE"
    label = f" (the canonical problem '{witness.label}')" if witness.label else ""
    print(f"verispec: {Verdict.LOSSY.word}: witness V={witness.vocab_size} {kind}{label}, TV distance "
          f"{witness.tv_distance:.6g} after {witness.examples_tried} problems ({witness.seconds:.1f} s); reproduce "
          f"with: verispec exact --problem {where} --tree {drafter.spec} --verifier {args.verifier}", file=sys.stderr)
    return EXIT_LOSSY


def _write_witness(args, drafter, problem_json: dict) -> None:
    """The witness to --output (JSON, or the binary form for FILE.npz), else on stdout; on stdout too when
    --output cannot be written, so that the search is never lost. The file carries the ``written_by`` marker
    (``verispec.files.provenance``), so that a rerun may replace it; the witness printed carries none."""
    text = json.dumps(problem_json)
    if not args.output:
        print(text)
        return
    from verispec.files.io import atomic_write_text
    from verispec.files.provenance import MARKER_KEY, PROBLEM, written_by

    marker = written_by(PROBLEM, "hunt")

    try:
        if args.output.endswith(".npz"):  # the binary form; the witness's rationals as integer pairs
            from verispec.simulator import problem_from_json
            from verispec.simulator.problem_files import problem_to_npz

            problem_to_npz(problem_from_json(problem_json, exact=True), drafter.depth, args.output,
                           metadata={"description": f"hunt witness for {args.verifier} on {drafter.spec}"},
                           written_by=marker)
        else:
            atomic_write_text(args.output, json.dumps({**problem_json, MARKER_KEY: marker}) + "\n")
    except OSError as error:
        print(text)
        raise VerispecError(f"cannot write --output {args.output!r} ({error.strerror or error}); the witness "
                            "was printed on stdout instead") from None
