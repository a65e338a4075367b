"""A tiny saved pair, 8 prompts traced into a selector dataset and a specinfer selector trained on it (2 prompts
held out): what the decoding benchmarks' tests run on, in seconds (benchmarks/bench_assisted.py,
bench_latency_model.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.tiny_models import save_tiny_pair


def tiny_selector(folder: Path, *, max_new_tokens: int) -> dict:
    """``{"folder", "target", "draft", "prompts", "dataset", "selector", "arguments"}``: the files made under
    ``folder`` and the held-out decoding arguments a benchmark takes for them."""
    from verispec.cli import main

    target, draft = save_tiny_pair(folder / "pair")
    prompts = folder / "prompts.txt"
    prompts.write_text("\n".join(f"the tiny pair's prompt number {i} goes here" for i in range(8)) + "\n")
    dataset, selector = folder / "d.npz", folder / "specinfer.pt"
    assert main(["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts),
                 "--sampling", "temperature=1,top_k=5", "--every", "4", "--trace-tokens", "4", "--ks", "1-2",
                 "--l1s", "0-1", "--l2s", "0-1", "--verifiers", "specinfer", "--samples", "2", "--out", str(dataset),
                 "--threads", "1"]) == 0
    assert main(["selector", "train", "--dataset", str(dataset), "--verifiers", "specinfer", "--epochs", "5",
                 "--out", str(selector)]) == 0
    return {"folder": folder, "target": target, "draft": draft, "prompts": prompts, "dataset": dataset,
            "selector": selector,
            "arguments": ["--target", target, "--draft", draft, "--dataset", str(dataset), "--selector", str(selector),
                          "--prompts", str(prompts), "--max-new-tokens", str(max_new_tokens), "--threads", "1"]}
