"""``verispec hunt``: search for the simplest problem on which a rule is lossy."""

from __future__ import annotations

import json
import sys

from verispec.cli.common import ContextFreeProblem, get_verifier, parse_tree, plain_json
from verispec.cli.options import _check_problem_output
from verispec.errors import VerispecError
from verispec.io import atomic_write_text
from verispec.verdict import EXIT_INCONCLUSIVE, EXIT_LOSSY, Verdict


def _run_hunt(args) -> int:
    from verispec.hunt import hunt  # imports hypothesis; only this command needs it

    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    if args.output:
        _check_problem_output(args.output, overwrite=args.overwrite)
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
        from verispec.hunt import next_search

        print(f"verispec: {Verdict.INCONCLUSIVE.word}: no lossy problem found for '{verifier.name}' on {drafter.spec} "
              f"(vocabularies up to {args.max_vocab}, threshold {args.threshold:g}); tried {result.describe()}; a "
              f"search proves nothing: to search further, {next_search(result, args.max_examples, args.time_budget)}",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    problem_json = plain_json(witness.problem_json)
    text = json.dumps(problem_json)
    if args.output:
        try:
            if args.output.endswith(".npz"):  # the binary form; the witness's rationals as integer pairs
                from verispec.simulator.problems import problem_from_json, problem_to_npz

                problem_to_npz(problem_from_json(problem_json, exact=True), drafter.depth, args.output,
                               metadata={"description": f"hunt witness for {args.verifier} on {drafter.spec}"})
            else:
                atomic_write_text(args.output, text + "\n")
        except OSError as error:
            print(text)
            raise VerispecError(f"cannot write --output {args.output!r} ({error.strerror or error}); the witness "
                                "was printed on stdout instead") from None
    else:
        print(text)
    kind = "context-free" if witness.context_free else "context-dependent"
    where = args.output or "FILE"
    label = f" (the canonical problem '{witness.label}')" if witness.label else ""
    print(f"verispec: {Verdict.LOSSY.word}: witness V={witness.vocab_size} {kind}{label}, TV distance "
          f"{witness.tv_distance:.6g} after {witness.examples_tried} problems ({witness.seconds:.1f} s); reproduce "
          f"with: verispec exact --problem {where} --tree {drafter.spec} --verifier {args.verifier}", file=sys.stderr)
    return EXIT_LOSSY
