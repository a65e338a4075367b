"""``verispec decode``: real speculative decoding with a (target, draft) pair of models, plain sampling, or a tree
chosen per block by a trained selector."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from verispec.cli.options import (
    add_call_timeout_option,
    add_device_options,
    add_pair_options,
    add_sampling_options,
    integer_option,
)
from verispec.cli.pair import check_pair_args, load_pair
from verispec.errors import VerispecError
from verispec.guard.limits import MAX_CONTEXT_FILE_BYTES, MAX_CONTEXT_TOKENS, MAX_PROMPTS_FILE_BYTES


def add_parser(subparsers) -> None:
    decode = subparsers.add_parser("decode", help="real speculative decoding with a (target, draft) pair of models")
    add_pair_options(decode)
    prompts = decode.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", metavar="TEXT", help="one prompt")
    prompts.add_argument("--prompts", metavar="FILE", help="prompts: a .jsonl file (a string or an object with "
                         "'prompt' per line) or a text file with one prompt per line")
    decode.add_argument("--tree", help="draft tree, as for 'exact' (e.g. delayed:4,2,2; chain:0 runs no draft model)")
    decode.add_argument("--verifier", help="verifier name (see 'verispec list'), or FILE.py:NAME")
    decode.add_argument("--selector", metavar="FILE", help="a trained selector ('verispec selector train'): it chooses "
                        "every block's tree and verifier (instead of --tree and --verifier)")
    decode.add_argument("--plain", action="store_true",
                        help="plain sampling from the target alone, one forward per token (the baseline)")
    add_sampling_options(decode)
    decode.add_argument("--max-new-tokens", type=integer_option(minimum=1, maximum=MAX_CONTEXT_TOKENS,
                                                               what=f"an integer from 1 to {MAX_CONTEXT_TOKENS}"),
                        default=64, help=f"tokens to generate per prompt (default 64, at most {MAX_CONTEXT_TOKENS})")
    decode.add_argument("--seed", type=integer_option(minimum=0, what="an integer >= 0"), default=0,
                        help="seed of the generator every random decision comes from (default 0)")
    add_device_options(decode)
    decode.add_argument("--static-cache", action="store_true",
                        help="keep both KV caches in a StaticCache allocated once (fixed addresses)")
    decode.add_argument("--graphs", action="store_true",
                        help="replay one CUDA graph per forward width over static caches (the fast path on a GPU; "
                             "implies --static-cache)")
    decode.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    add_call_timeout_option(decode)


def _read_prompts(args) -> list[str]:
    if args.prompt is not None:
        return [args.prompt]
    from verispec.files.io import read_user_file

    path = Path(args.prompts)
    text = read_user_file(path, limit=MAX_PROMPTS_FILE_BYTES, what="--prompts",
                          why=f"{MAX_PROMPTS_FILE_BYTES // MAX_CONTEXT_FILE_BYTES} prompts as long as the longest "
                              "context")
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise VerispecError(f"{args.prompts} line {number} is not JSON: {error}") from None
            except RecursionError:
                raise VerispecError(f"{args.prompts} line {number} nests JSON too deeply to hold a prompt") from None
            item = item.get("prompt") if isinstance(item, dict) else item
            if not isinstance(item, str):
                raise VerispecError(f"{args.prompts} line {number} holds no prompt string (a JSON string, or an "
                                    "object with 'prompt')")
            prompts.append(item)
        else:
            prompts.append(line)
    if not prompts:
        raise VerispecError(f"--prompts {args.prompts!r} holds no prompt")
    return prompts


def _decode_mode(args) -> str:
    """'plain', 'selector' or 'tree', with one-line errors for options that do not go together."""
    static = [name for name, value in (("--tree", args.tree), ("--verifier", args.verifier)) if value is not None]
    if args.plain:
        given = static + (["--selector"] if args.selector is not None else [])
        if given:
            raise VerispecError(f"--plain samples from the target alone; drop {' and '.join(given)}")
        return "plain"
    if args.selector is not None:
        if static:
            raise VerispecError(f"--selector chooses every block's tree and verifier; drop {' and '.join(static)}")
        return "selector"
    if args.tree is None or args.verifier is None:
        raise VerispecError("give --tree TREE and --verifier NAME, or --selector FILE, or --plain")
    return "tree"


def run(args) -> int:
    check_pair_args(args)
    mode = _decode_mode(args)
    drafter = verifier = policy = None
    if mode == "tree":
        from verispec.simulator import parse_tree
        from verispec.simulator.engine import check_compatible
        from verispec.verifiers import get_verifier

        drafter = parse_tree(args.tree)
        verifier = get_verifier(args.verifier)
        check_compatible(verifier, drafter)
    prompts = _read_prompts(args)
    if mode == "tree":
        from verispec.models.decoding import check_decode_tree

        check_decode_tree(drafter)  # the node limit before any model is loaded; the vocabulary's once it is
    selector = None
    if mode == "selector":
        from verispec.selector import Selector, SelectorPolicy  # only here: models never import the selector

        selector = Selector.load(args.selector)  # before the pair: a bad file costs no model load
    pair, sampling = load_pair(args)
    if selector is not None:
        from verispec.selector.fits import check_pair_fits

        check_pair_fits(selector, pair, sampling, name=f"the selector {args.selector!r}")
        policy = SelectorPolicy(selector)
    from tqdm import tqdm

    from verispec.models import generate, sample_target

    what = {"plain": "plain sampling", "tree": f"{getattr(verifier, 'name', '')} on {getattr(drafter, 'spec', '')}",
            "selector": f"selector {args.selector}"}[mode]
    with tqdm(total=args.max_new_tokens * len(prompts), desc="tokens", unit=" tok", disable=not sys.stderr.isatty(),
              leave=False) as bar:
        for index, prompt in enumerate(prompts):
            options = {"static_cache": args.static_cache, "graphs": args.graphs, "progress": bar}
            if mode == "plain":
                generation = sample_target(pair, prompt, args.max_new_tokens, sampling, args.seed + index, **options)
            else:
                generation = generate(pair, prompt, drafter, verifier, args.max_new_tokens, sampling,
                                      args.seed + index, selector=policy, **options)
            summary = generation.summary()
            if args.json:
                row = {"prompt": prompt, "pair": pair.name, "mode": mode,
                       "tree": drafter.spec if drafter is not None else None,
                       "verifier": verifier.name if verifier is not None else None}
                if policy is not None:
                    row["selector"] = args.selector
                    row["actions"] = [f"{tree} {name}" for tree, name in policy.actions()]
                print(json.dumps({**row, "device": str(pair.device),
                                  "dtype": str(pair.target.dtype).removeprefix("torch."),
                                  "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                                  "seed": args.seed + index, **summary}))
            else:
                print(generation.text)
                rate = f"{summary['tokens_per_s']:.2f}" if summary["tokens_per_s"] else "n/a"
                print(f"# {summary['new_tokens']} tokens in {summary['blocks']} blocks: "
                      f"{summary['tokens_per_target_call']:.3f} tokens per target call, {rate} tokens/s "
                      f"({what}, {pair.device})", file=sys.stderr)
    return 0
