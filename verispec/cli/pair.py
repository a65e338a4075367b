"""The model pair of the commands of real models (decode, predict, derive, latency, selector dataset): one-line
errors for its options, loading it offline, and a real context as a problem."""

from __future__ import annotations

import os

from verispec.errors import VerispecError
from verispec.guard.limits import MAX_CONTEXT_FILE_BYTES


def check_pair_args(args) -> None:
    """One-line errors for a missing or doubled model pair, before anything is loaded."""
    if args.pair is not None and (args.target is not None or args.draft is not None):
        raise VerispecError("give either --pair NAME or --target MODEL --draft MODEL, not both")
    if args.pair is None and args.target is None and args.draft is None:
        raise VerispecError("give the models: --pair NAME (e.g. qwen-coder), or --target MODEL --draft MODEL")
    if args.pair is None and (args.target is None or args.draft is None):
        raise VerispecError("give both --target MODEL and --draft MODEL (or --pair NAME)")


def load_pair(args):
    """The pair and the sampling law of the options (offline only; --threads applied first)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may reach a model hub at run time
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        import transformers

        from verispec.models import Sampling
        from verispec.models import load_pair as load_models
    except ImportError as error:
        raise VerispecError(f"a model pair needs torch and transformers ({error}): pip install 'torch==2.13.0' "
                            "-e '.[torch,models]'") from None
    transformers.utils.logging.disable_progress_bar()  # one bar: ours
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    pair = load_models(args.pair, device=args.device, dtype=args.dtype) if args.pair is not None else \
        load_models(args.target, args.draft, device=args.device, dtype=args.dtype)
    return pair, Sampling(args.temperature, args.top_k, args.top_p)


def model_problem(args, horizon: int):
    """The ModelProblem of --pair or --target/--draft at --context or --context-file, and its settings."""
    check_pair_args(args)
    if args.context is None and args.context_file is None:
        raise VerispecError("give the context the block starts after: --context TEXT or --context-file FILE")
    context = args.context
    if args.context_file is not None:
        from verispec.files.io import read_user_file

        context = read_user_file(args.context_file, limit=MAX_CONTEXT_FILE_BYTES, what="--context-file",
                                 why="the models take 32,768 tokens at most, about 128 KiB of text")
    pair, sampling = load_pair(args)
    from verispec.models.problem import ModelProblem

    problem = ModelProblem(pair, context, sampling, horizon=horizon)
    settings = {"pair": pair.name, "context": context, "context_tokens": len(problem.context),
                "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
                "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    return problem, settings
