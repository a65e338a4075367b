"""The commands of real models: ``decode``, ``models``, ``derive``, ``predict`` and ``latency``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from verispec.cli.common import check_compatible, get_verifier, load_problem, parse_tree
from verispec.cli.options import (
    MAX_CONTEXT_FILE_BYTES,
    MAX_DECODE_NODES,
    MAX_PROMPTS_FILE_BYTES,
    _check_problem_output,
    _command_budget,
    _list_option,
)
from verispec.errors import VerispecError
from verispec.verdict import EXIT_INCONCLUSIVE


def _read_prompts(args) -> list[str]:
    if args.prompt is not None:
        return [args.prompt]
    from verispec.io import read_user_file

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


def _check_pair_args(args) -> None:
    """One-line errors for a missing or doubled model pair, before anything is loaded."""
    if args.pair is not None and (args.target is not None or args.draft is not None):
        raise VerispecError("give either --pair NAME or --target MODEL --draft MODEL, not both")
    if args.pair is None and args.target is None and args.draft is None:
        raise VerispecError("give the models: --pair NAME (e.g. qwen-coder), or --target MODEL --draft MODEL")
    if args.pair is None and (args.target is None or args.draft is None):
        raise VerispecError("give both --target MODEL and --draft MODEL (or --pair NAME)")


def _load_pair(args):
    """The pair and the sampling law of the options (offline only; --threads applied first)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may reach a model hub at run time
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        import transformers

        from verispec.models import Sampling, load_pair
    except ImportError as error:
        raise VerispecError(f"a model pair needs torch and transformers ({error}): pip install 'torch==2.13.0' "
                            "-e '.[torch,models]'") from None
    transformers.utils.logging.disable_progress_bar()  # one bar: ours
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, device=args.device, dtype=args.dtype) if args.pair is not None else \
        load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
    return pair, Sampling(args.temperature, args.top_k, args.top_p)


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


def _run_decode(args) -> int:
    _check_pair_args(args)
    mode = _decode_mode(args)
    drafter = verifier = policy = None
    if mode == "tree":
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
    pair, sampling = _load_pair(args)
    if selector is not None:
        selector.check_fits(pair=pair.name, vocab_size=pair.vocab_size, sampling=sampling)
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


def _run_models(args) -> int:
    from verispec.models.install import PAIRS, install_pair, installed_pair

    if args.action == "install":
        result = install_pair(args.name, cache=args.cache, progress=True, keep_gguf=args.keep_gguf)
        print(f"installed {args.name}: target {result['target_dir']}, draft {result['draft_dir']}")
        return 0
    for name, pair in sorted(PAIRS.items()):
        try:
            target_dir, _ = installed_pair(name, args.cache)
            state = f"installed in {target_dir.parent}"
        except VerispecError:
            state = f"not installed (verispec models install {name})"
        print(f"{name}: {pair.description}; {state}")
    return 0


def _model_problem(args, horizon: int):
    """The ModelProblem of --pair or --target/--draft at --context or --context-file, and its settings."""
    _check_pair_args(args)
    if args.context is None and args.context_file is None:
        raise VerispecError("give the context the block starts after: --context TEXT or --context-file FILE")
    context = args.context
    if args.context_file is not None:
        from verispec.io import read_user_file

        context = read_user_file(args.context_file, limit=MAX_CONTEXT_FILE_BYTES, what="--context-file",
                                 why="the models take 32,768 tokens at most, about 128 KiB of text")
    pair, sampling = _load_pair(args)
    from verispec.models.problem import ModelProblem

    problem = ModelProblem(pair, context, sampling, horizon=horizon)
    settings = {"pair": pair.name, "context": context, "context_tokens": len(problem.context),
                "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
                "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    return problem, settings


def _run_derive(args) -> int:
    from verispec.models.derive import check_derive_size, derive_problem, write_derived

    check_derive_size(args.vocab, args.depth)  # before the models are loaded
    _check_problem_output(args.output, overwrite=args.overwrite)
    problem, settings = _model_problem(args, args.depth)
    if args.vocab > problem.vocab_size:
        raise VerispecError(f"--vocab {args.vocab} exceeds the pair's vocabulary of {problem.vocab_size} tokens")
    table, provenance = derive_problem(problem, args.vocab, args.depth, progress=sys.stderr.isatty())
    description = (f"Derived by verispec derive from {settings['pair']} after a context of "
                   f"{settings['context_tokens']} tokens: at each prefix the top {args.vocab - 1} tokens by p + q "
                   f"and an 'other' bucket (token {args.vocab - 1}) holding the rest of each law; after the "
                   "bucket, the conditionals of its likeliest token.")
    write_derived(args.output, table, args.depth, provenance, description,
                  {**settings, "vocab": args.vocab, "depth": args.depth, "forward_passes": problem.forward_passes})
    worst = max(max(entry["other_target"], entry["other_draft"]) for entry in provenance.values())
    print(f"wrote {args.output}: V = {args.vocab}, depth {args.depth}, {len(provenance)} prefixes, "
          f"{problem.forward_passes} forward passes of each model; largest 'other' mass {worst:.3g}")
    return 0


def _run_predict(args) -> int:
    with _command_budget(args, "the prediction"):
        return _predict(args)


def _predict(args) -> int:
    from verispec.simulator.certified import DEFAULT_MAX_ROWS, certify

    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    check_compatible(verifier, drafter)
    sources = [args.pair is not None, args.target is not None or args.draft is not None, args.problem is not None]
    if sum(sources) != 1:
        raise VerispecError("give one source: --pair NAME, --target MODEL --draft MODEL, or --problem FILE")
    if args.problem is not None:
        if args.context is not None or args.context_file is not None:
            raise VerispecError("--context belongs with a model pair; a problem file holds its own conditionals")
        problem = load_problem(args.problem)
        source = {"problem": args.problem}
    else:
        problem, source = _model_problem(args, drafter.depth)
    # under --time-budget (set by _run_predict) the walk returns the interval of its last complete round
    result = certify(problem, drafter, verifier, args.epsilon, max_rows=args.max_rows or DEFAULT_MAX_ROWS,
                     progress=sys.stderr.isatty())
    status = 0 if result.reached else EXIT_INCONCLUSIVE  # the interval is as narrow as asked, or not (yet)
    if args.json:
        print(json.dumps({**source, **result.as_dict()}))
        return status
    print(f"E[tau+1] of {verifier.name} on {drafter.spec}: [{result.lower:.6f}, {result.upper:.6f}] "
          f"(width {result.width:.2e}, epsilon {args.epsilon:g}{'' if result.reached else ', NOT reached'})")
    for depth, (low, high) in enumerate(zip(result.acceptance_lower, result.acceptance_upper), start=1):
        print(f"  P(tau >= {depth}) in [{low:.6f}, {high:.6f}]")
    passes = "" if result.forward_passes is None else f", {result.forward_passes} forward passes of each model"
    print(f"# {result.method}: {result.prefixes_expanded} prefixes expanded, {result.rows_evaluated} rows "
          f"evaluated{passes}, {result.seconds:.1f} s")
    if result.note:
        print(f"# {result.note}", file=sys.stderr)
    return status


def _run_latency(args) -> int:
    from verispec.io import atomic_write_json, check_output
    from verispec.latency import LATENCY_FILE
    from verispec.models.latency import measure_latency

    _check_pair_args(args)
    sizes = _list_option(args.sizes, int, "a tree size")
    wrong = [size for size in sizes if not 1 <= size <= MAX_DECODE_NODES]
    if wrong:
        raise VerispecError(f"--sizes {args.sizes!r}: a tree size must be an integer from 1 to {MAX_DECODE_NODES} (the "
                            f"most nodes a decoded tree has), got {wrong[0]}")
    check_output(args.out, LATENCY_FILE, what="--out", overwrite=args.overwrite)
    args.temperature, args.top_k, args.top_p = 1.0, None, None  # no sampling here
    pair, _ = _load_pair(args)
    model = measure_latency(pair, context_length=args.context_length, sizes=sizes, repeats=args.repeats)
    atomic_write_json(args.out, {**model.as_dict(), "load_average": os.getloadavg()[0]})
    print(f"t_q = {model.draft_step:.3f} ms; t_p(n) = " + ", ".join(
        f"{n}: {time_:.3f}" for n, time_ in zip(model.target_sizes, model.target_times))
        + f" ms; {model.source}; wrote {args.out}")
    return 0
