"""Real speculative decoding on HumanEval prompts: every verifier at a matched tree budget against plain decoding
of the target and against transformers' assisted generation, on the same pair, prompts, sampling and machine, in
one run.

    python experiments/real_decoding.py --pair qwen-coder --prompts 6 --max-new-tokens 48 --threads 2
    python experiments/real_decoding.py --pair qwen-coder --device cuda --prompts 40 --max-new-tokens 128

Methods (``--methods``; default: all of them):
* ``plain``: verispec's plain sampling from the target (one target forward per token, KV cache);
* ``hf-plain``: transformers' ``generate(do_sample=True)`` of the target; ``hf-static``: the same with a
  static KV cache (``cache_implementation="static"``, the fast plain decoder on a GPU);
* ``hf-assisted``: transformers' ``generate(assistant_model=draft, do_sample=True)`` (its own draft schedule);
* ``VERIFIER=TREE``: ``verispec.models.generate`` with that verifier and draft tree. The default trees spend a
  matched budget of 8 drafted nodes where the draft law allows it (chain:8, delayed:2,2,3, iid:2,4,
  branch:2,1,1,1, dyspec:8; SpecHub's and the greedy drafts' trees are fixed by their rule: hub-tree:2 and
  greedy-tree:2,2 have 6 nodes).

Every (method, prompt) cell is one row of a ``ResultStore`` keyed on the method and the prompt, with the pair,
sampling, budget, seed, device, dtype and threads as the file's parameters: an interrupted run resumes, and a
file written with other settings is refused. The summary (``--summary``, written after every run) gives per
method the mean tokens per target call and its 95% confidence interval over prompts (Student t), tokens/s
(total tokens over total decoding time, prefill excluded) with a 95% interval from the per-prompt rates, and
its ratio to ``plain`` and to ``hf-assisted``; a plot of tokens/s per method (``--plot``) needs matplotlib.
The load average is recorded with every row.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from verispec.errors import VerispecError
from verispec.files.io import ResultStore
from verispec.models.prompts import humaneval_prompts
from verispec.study.script_files import run_script

#: transformers' own decoders: plain sampling, with a static KV cache, and assisted generation.
HF_METHODS = ("hf-plain", "hf-static", "hf-assisted")

DEFAULT_METHODS = ["plain", "hf-plain", "hf-assisted", "naive=chain:8", "bv=chain:8", "nss=delayed:2,2,3",
                   "naivetree=delayed:2,2,3", "specinfer=delayed:2,2,3", "spectr=delayed:2,2,3",
                   "rrsw=branch:2,1,1,1", "traversal=branch:2,1,1,1", "traversal-iid=iid:2,4", "gbv=iid:2,4",
                   "spechub=hub-tree:2", "greedy=greedy-tree:2,2", "traversal=dyspec:8"]


def _hf_sampling(sampling) -> dict:
    """transformers' generate() arguments for exactly this law (the pair's generation config may set its own
    top-k, top-p and repetition penalty; every one is overridden)."""
    if sampling.greedy:
        return {"do_sample": False, "temperature": None, "top_k": None, "top_p": None, "repetition_penalty": 1.0}
    return {"do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k or 0,
            "top_p": sampling.top_p or 1.0, "repetition_penalty": 1.0}


#: The assisted-generation settings ``run_hf(assistant=...)`` may set, as transformers reads them: from the
#: assistant's generation config (``AssistedCandidateGenerator.__init__``, transformers 5.x).
ASSISTANT_OPTIONS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def run_hf(pair, prompt: str, method: str, sampling, max_new_tokens: int, seed: int,
           assistant: dict | None = None) -> dict:
    """transformers' ``generate`` of ``prompt``: plain (``hf-plain``), with a static cache (``hf-static``) or with the
    draft as assistant (``hf-assisted``), then with ``assistant``'s settings (``ASSISTANT_OPTIONS``) on the draft's
    generation config for this call only (transformers reads them there, not from ``generate``'s arguments)."""
    import torch

    ids = torch.tensor([pair.encode(prompt)], device=pair.device)
    extra = {"assistant_model": pair.draft} if method == "hf-assisted" else {}
    if method == "hf-static":
        extra = {"cache_implementation": "static"}
    config = pair.draft.generation_config
    unknown = sorted(set(assistant or {}) - set(ASSISTANT_OPTIONS))
    if unknown:
        raise VerispecError(f"unknown assisted-generation option {unknown[0]!r}; choose from "
                            f"{', '.join(ASSISTANT_OPTIONS)}")
    saved = {name: getattr(config, name, None) for name in (assistant or {})}
    torch.manual_seed(seed)
    if pair.device.type == "cuda":
        torch.cuda.synchronize(pair.device)
    try:
        for name, value in (assistant or {}).items():
            setattr(config, name, value)
        start = time.perf_counter()
        with torch.no_grad():
            output = pair.target.generate(ids, max_new_tokens=max_new_tokens, attention_mask=torch.ones_like(ids),
                                          pad_token_id=pair.tokenizer.eos_token_id, **_hf_sampling(sampling),
                                          **extra)
        if pair.device.type == "cuda":
            torch.cuda.synchronize(pair.device)
        seconds = time.perf_counter() - start
    finally:
        for name, value in saved.items():
            setattr(config, name, value)
    new = output[0, ids.shape[1]:].tolist()
    # transformers reports no count of target calls; the prefill is inside its time.
    return {"new_tokens": len(new), "decode_s": seconds, "target_calls": None, "tokens_per_target_call": None,
            "text": pair.decode(new)}


def run_cell(pair, prompt: str, method: str, sampling, max_new_tokens: int, seed: int,
             static_cache: bool = False, graphs: bool = False) -> dict:
    from verispec.models import generate, sample_target

    if method in HF_METHODS:
        return run_hf(pair, prompt, method, sampling, max_new_tokens, seed)
    if method == "plain":
        generation = sample_target(pair, prompt, max_new_tokens, sampling, seed, static_cache=static_cache,
                                   graphs=graphs)
    else:
        verifier, _, tree = method.partition("=")
        generation = generate(pair, prompt, tree, verifier, max_new_tokens, sampling, seed,
                              static_cache=static_cache, graphs=graphs)
    summary = generation.summary()
    return {key: summary[key] for key in ("new_tokens", "decode_s", "prefill_s", "target_calls", "draft_calls",
                                          "tokens_per_target_call", "mean_accepted", "drafting_s", "target_s",
                                          "verify_s", "cache_s", "text")}


def _interval(values) -> tuple[float, float, float]:
    """Mean and its 95% Student-t interval."""
    from scipy import stats

    values = np.asarray([v for v in values if v is not None], dtype=float)
    if len(values) == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(values.mean())
    if len(values) < 2:
        return (mean, math.nan, math.nan)
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return (mean, mean - half, mean + half)


def summarize(rows: dict, methods: list[str]) -> list[dict]:
    table = []
    for method in methods:
        cells = [row for key, row in rows.items() if key.split("|")[0] == method]
        if not cells:
            continue
        tokens = sum(cell["new_tokens"] for cell in cells)
        seconds = sum(cell["decode_s"] for cell in cells)
        rate = _interval([cell["new_tokens"] / cell["decode_s"] for cell in cells])
        per_call = _interval([cell["tokens_per_target_call"] for cell in cells])
        entry = {"method": method, "prompts": len(cells), "tokens": tokens, "tokens_per_s": tokens / seconds,
                 "tokens_per_s_ci": rate[1:], "tokens_per_target_call": per_call[0],
                 "tokens_per_target_call_ci": per_call[1:]}
        for phase in ("drafting_s", "target_s", "verify_s", "cache_s"):
            if all(phase in cell for cell in cells):
                entry[phase + "_per_token"] = sum(cell[phase] for cell in cells) / tokens
        table.append(entry)
    baselines = {entry["method"]: entry["tokens_per_s"] for entry in table}
    for entry in table:
        for name in ("plain", *HF_METHODS):
            if name in baselines:
                entry[f"vs_{name}"] = entry["tokens_per_s"] / baselines[name]
    return table


def _markdown(table: list[dict], parameters: dict) -> str:
    def fmt(value, digits=2):
        return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"

    lines = [f"# Real decoding: {parameters['pair']} on {parameters['device']} ({parameters['dtype']}, "
             f"{'small-batch linears, ' if parameters.get('small_batch_linear') else ''}"
             f"{parameters['threads']} threads{', static KV caches' if parameters.get('static_cache') else ''})", "",
             f"{parameters['prompts']} HumanEval prompts, {parameters['max_new_tokens']} new tokens, temperature "
             f"{parameters['temperature']}, top-k {parameters['top_k']}, top-p {parameters['top_p']}, seed "
             f"{parameters['seed']}.", "",
             "| method | tokens/target call (95% CI) | tokens/s (95% CI) | vs plain | vs hf-assisted | "
             "draft / target / verify / cache s per token |", "|---|---|---|---|---|---|"]
    for entry in table:
        per_call = (f"{fmt(entry['tokens_per_target_call'])} ({fmt(entry['tokens_per_target_call_ci'][0])}-"
                    f"{fmt(entry['tokens_per_target_call_ci'][1])})")
        rate = (f"{fmt(entry['tokens_per_s'])} ({fmt(entry['tokens_per_s_ci'][0])}-"
                f"{fmt(entry['tokens_per_s_ci'][1])})")
        phases = " / ".join(fmt(entry.get(phase + "_per_token"), 3)
                            for phase in ("drafting_s", "target_s", "verify_s", "cache_s"))
        lines.append(f"| {entry['method']} | {per_call} | {rate} | {fmt(entry.get('vs_plain'))} | "
                     f"{fmt(entry.get('vs_hf-assisted'))} | {phases} |")
    return "\n".join(lines) + "\n"


def _plot(table: list[dict], parameters: dict) -> bytes:
    """The PNG of tokens/s per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [entry["method"] for entry in table]
    rates = np.array([entry["tokens_per_s"] for entry in table])
    low = np.array([entry["tokens_per_s_ci"][0] for entry in table])
    high = np.array([entry["tokens_per_s_ci"][1] for entry in table])
    errors = np.nan_to_num(np.vstack([rates - low, high - rates]), nan=0.0).clip(min=0)
    figure, axis = plt.subplots(figsize=(9, 0.45 * len(names) + 1.5))
    colours = ["0.6" if name == "plain" or name in HF_METHODS else "tab:blue" for name in names]
    axis.barh(range(len(names)), rates, xerr=errors, color=colours, capsize=3)
    axis.set_yticks(range(len(names)), names)
    axis.invert_yaxis()
    axis.set_xlabel("decoding speed (tokens/s, 95% CI over prompts)")
    axis.set_title(f"{parameters['pair']} on {parameters['device']}: {parameters['prompts']} HumanEval prompts, "
                   f"T = {parameters['temperature']}")
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, dpi=120, format="png")
    plt.close(figure)
    return image.getvalue()


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("real_decoding", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder", help="installed pair (default qwen-coder)")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--prompts", type=int, default=6, help="first N HumanEval prompts (default 6)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--static-cache", action="store_true",
                        help="verispec's methods keep their KV caches in a StaticCache (see verispec decode)")
    parser.add_argument("--graphs", action="store_true",
                        help="verispec's methods replay CUDA graphs over static caches (see verispec decode)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="tokens of one untimed generation per method before its first timed cell (captures "
                             "graphs, compiles, fills allocators; default 16 on a GPU, 0 on a CPU)")
    parser.add_argument("--methods", default=";".join(DEFAULT_METHODS),
                        help="';'-separated methods: plain, hf-plain, hf-assisted, VERIFIER=TREE")
    parser.add_argument("--output", default=None, help="rows (default results/real_decoding_<device>.json)")
    parser.add_argument("--summary", default=None, help="markdown table (default next to --output)")
    parser.add_argument("--plot", default=None, help="PNG plot (default next to --output)")
    args = parser.parse_args(argv)
    return run_script("real_decoding", lambda held: _run(args, held))


def _run(args, held) -> int:
    """Check every number and output before any work (writable, room on the disk, the run's own files, one run at a
    time), then decode the cells not yet in the store."""
    from verispec.guard.limits import MAX_CONTEXT_TOKENS, MAX_THREADS
    from verispec.study.script_files import RunOutputs, check_ranges

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_ranges([("--prompts", args.prompts, 1, None),
                  ("--max-new-tokens", args.max_new_tokens, 1, MAX_CONTEXT_TOKENS),
                  ("--seed", args.seed, 0, 2**31 - 1), ("--threads", args.threads, 1, MAX_THREADS),
                  ("--warmup", args.warmup, 0, MAX_CONTEXT_TOKENS)])
    output = Path(args.output or f"results/real_decoding_{args.device.replace(':', '')}.json")
    summary_path = Path(args.summary or output.with_suffix(".md"))
    plot_path = Path(args.plot or output.with_suffix(".png"))
    outputs = RunOutputs("--output", store=output,
                         tables=[summary_path, summary_path.with_suffix(".summary.json"), plot_path])
    outputs.claim(held)
    import torch
    import transformers

    from verispec.models import Sampling, load_pair
    from verispec.models.cpu_linear import store_key

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    methods = [m.strip() for m in args.methods.split(";") if m.strip()]
    for method in methods:
        if method != "plain" and method not in HF_METHODS and "=" not in method:
            raise VerispecError(f"method {method!r} is neither plain, {', '.join(HF_METHODS)} nor VERIFIER=TREE")
    prompts = humaneval_prompts(args.prompts)
    pair = (load_pair(args.target, args.draft, device=args.device, dtype=args.dtype) if args.target
            else load_pair(args.pair, device=args.device, dtype=args.dtype))
    parameters = {"pair": pair.name, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
                  "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
                  "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
                  "threads": torch.get_num_threads(), "static_cache": args.static_cache, "graphs": args.graphs}
    parameters.update(store_key(pair))  # the CPU linear path's version when on: other kernels, other times
    store = ResultStore(output, parameters=parameters)
    cells = [(method, index, task, prompt) for index, (task, prompt) in enumerate(prompts) for method in methods]
    warmup = args.warmup if args.warmup is not None else (16 if pair.device.type == "cuda" else 0)
    warmed: set[str] = set()
    for method, index, task, prompt in tqdm(cells, desc="cells"):
        key = f"{method}|{task}"
        if store.done(key):
            continue
        if warmup and method not in warmed:  # first-call costs (graph capture, compilation) are not decoding
            run_cell(pair, prompt, method, sampling, warmup, args.seed + 10**6, args.static_cache, args.graphs)
            warmed.add(method)
        row = run_cell(pair, prompt, method, sampling, args.max_new_tokens, args.seed + index, args.static_cache,
                       args.graphs)
        row["load_average"] = os.getloadavg()[0]
        store.add(key, row)
    rows = {key: row for key, row in store.rows.items()}
    table = summarize(rows, methods)
    outputs.write_text(store, summary_path, _markdown(table, parameters))
    outputs.write_text(store, summary_path.with_suffix(".summary.json"), json.dumps(table, indent=1) + "\n")
    print(_markdown(table, parameters))
    try:
        outputs.write_bytes(store, plot_path, _plot(table, parameters))
    except ImportError:
        print("real_decoding: matplotlib is not installed; no plot (pip install matplotlib)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
