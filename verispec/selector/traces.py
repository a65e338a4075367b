"""The target's traces behind a pair's roots (``verispec.selector.dataset.trace_roots``): plain sampling of each
(prompt, setting) cell from its own seed, decoded several prompts at a time (``verispec.models.batched``: one
target forward per step for a whole batch, each row's tokens those ``sample_target`` draws from its seed) and
kept in a ``ResultStore`` as each batch finishes, so an interrupted build resumes with the traces it lacks."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verispec.files.io import ResultStore
from verispec.guard import budget


def sampled_traces(pair, cells: Sequence[tuple], max_new_tokens: int, *, store: ResultStore | None = None,
                   batch_size: int = 8, progress: bool = False) -> list[tuple[int, list[int]]]:
    """(prompt length, prompt + sampled tokens) of every cell (key, prompt, sampling, seed), in their order.

    A cell whose key ``store`` holds is read back; the others are decoded ``batch_size`` at a time, by setting and
    then by prompt length (``length_batches``: little padding), and each batch's rows ({"prompt_length",
    "tokens"}) are added to ``store`` at once. A key given twice is decoded once. ``progress``: a tqdm bar of
    traces."""
    from tqdm import tqdm

    from verispec.models.batched import length_batches, sample_target_batch

    found = {key: store.rows[key] for key, *_ in cells if store is not None and store.done(key)}
    todo = list({cell[0]: cell for cell in cells if cell[0] not in found}.values())
    by_setting: dict = {}
    for cell in todo:
        by_setting.setdefault(cell[2], []).append(cell)
    with tqdm(total=len(found) + len(todo), initial=len(found), desc="traces", disable=not progress,
              file=sys.stderr) as bar:
        for sampling, group in by_setting.items():
            lengths = [len(pair.encode(prompt)) for _, prompt, _, _ in group]
            for batch in length_batches(lengths, batch_size):
                budget.check("the traces")  # --time-budget of a dataset build: finished traces are kept
                chosen = [group[index] for index in batch]
                generations = sample_target_batch(pair, [prompt for _, prompt, _, _ in chosen], max_new_tokens,
                                                  sampling, [seed for *_, seed in chosen], batch_size=batch_size)
                rows = {key: {"prompt_length": len(generation.prompt_tokens),
                              "tokens": list(generation.prompt_tokens) + list(generation.tokens)}
                        for (key, *_), generation in zip(chosen, generations)}
                found.update(rows)
                if store is not None:
                    store.add_many(rows)
                bar.update(len(chosen))
    return [(found[key]["prompt_length"], list(found[key]["tokens"])) for key, *_ in cells]


__all__ = ["sampled_traces"]
