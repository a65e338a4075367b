"""Tiny model pairs for the tests (verispec.models.tiny), and a tiny pair installed where `verispec models install`
puts the real one, so that commands and examples written for the installed pair run in seconds."""

from __future__ import annotations

from verispec.models.tiny import VOCAB, WORDS, save_tiny_pair, tiny_causal_lm, tiny_pair, tiny_tokenizer

__all__ = ["VOCAB", "WORDS", "install_tiny_pair_as", "save_tiny_pair", "tiny_causal_lm", "tiny_dataset_command",
           "tiny_pair", "tiny_tokenizer"]


def tiny_dataset_command(folder, *extra: str) -> list[str]:
    """``selector dataset`` on a tiny pair saved in ``folder``/pair, two short prompts at T = 1 top-k 3, a grid of
    K 1-2, L1 and L2 0-1 with specinfer and 2 sampled trees a root, then ``extra`` (without --out)."""
    from pathlib import Path

    target, draft = save_tiny_pair(Path(folder) / "pair")
    prompts = Path(folder) / "prompts.txt"
    prompts.write_text("a b c d\ne f g\n")
    return ["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts), "--sampling",
            "temperature=1,top_k=3", "--every", "2", "--trace-tokens", "4", "--ks", "1-2", "--l1s", "0-1", "--l2s",
            "0-1", "--verifiers", "specinfer", "--samples", "2", *extra]


def install_tiny_pair_as(cache, name: str = "qwen-coder", seed: int = 0):
    """A tiny pair in ``cache`` with the completion markers of an install of ``name`` (nothing downloaded)."""
    import json
    from pathlib import Path

    from verispec.models.install import MARKER, MARKER_FORMAT, PAIRS

    root = Path(cache) / "models" / name
    target_dir, draft_dir = save_tiny_pair(root, seed)
    for source, directory in zip(PAIRS[name].models, (target_dir, draft_dir)):
        marker = {"format": MARKER_FORMAT, "source": {"sha256": source.sha256}, "note": "a tiny stand-in for tests"}
        (Path(directory) / MARKER).write_text(json.dumps(marker))
    return target_dir, draft_dir
