"""Derived problems: a real context of a model pair as a small-vocabulary problem file every command takes.

``derive_problem(problem, vocab, depth)`` walks the prefixes of a ``ModelProblem`` (a pair at a context, with
its sampling law) to depth L over V derived tokens. At each derived prefix, whose real token path is known:

* derived tokens 0..V-2 are the V-1 real tokens of largest p + q there (ties by smaller token id), best first;
* derived token V-1 is the *other* bucket: its target probability is 1 - (the V-1 tokens' target mass), its
  draft probability likewise 1 - (their draft mass), i.e. the bucket's conditional at this prefix is the
  total mass of every remaining token;
* the conditionals AFTER the bucket are the models' conditionals after the bucket's single likeliest real
  token (largest p + q among the remaining ones): a stand-in, not an average over the bucket.

What that does to block efficiency: merging tokens can only raise the per-node overlap (sum_x min(p, q)
of the merged law is at least that of the original, since min(a + b, c + d) >= min(a, c) + min(b, d)), so
a rule's acceptance of a drafted bucket token is an optimistic stand-in for drafting any one of the tokens in
it; and after the bucket the future is that of one representative token. Both effects vanish as the bucket's
mass goes to zero, which the derived file records per prefix (``other_target``, ``other_draft``) so that a
user sees how much rests on the approximation. With V equal to the pair's vocabulary the bucket holds one token
and the derived problem is the live one with its tokens relabelled at each prefix.
"""

from __future__ import annotations

import json
import math

import numpy as np

from verispec.errors import VerispecError
from verispec.files.io import atomic_write_text
from verispec.simulator.problem_files import problem_to_json, problem_to_npz
from verispec.simulator.problems import Prefix, TabularProblem

#: Most derived prefixes (target rows) a derivation computes: each costs the models' conditionals there.
MAX_DERIVED_PREFIXES = 200_000

#: Prefixes whose conditionals are asked for at once (a model-backed problem: batched forward passes); a level
#: larger than the problem's law cache would otherwise be evicted before it is read.
PREPARE_BATCH = 256


def _split(p: np.ndarray, q: np.ndarray, vocab: int) -> tuple[np.ndarray, int]:
    """The V-1 real tokens kept (best first by p + q, ties by id) and the bucket's representative (the best of
    the rest; V <= the real vocabulary leaves at least one)."""
    score = p + q
    order = np.lexsort((np.arange(len(score)), -score))  # by score decreasing, then id increasing
    return order[: vocab - 1], int(order[vocab - 1])


def check_derive_size(vocab: int, depth: int) -> None:
    """VerispecError, before any model is loaded or run, when deriving V = ``vocab`` to ``depth`` needs more than
    MAX_DERIVED_PREFIXES prefixes (1 + V + .. + V^depth, counted in logs: --depth 10^9 is refused at once)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise VerispecError(f"depth must be a positive integer, got {depth!r}")
    log_count = depth * math.log(vocab)  # V^depth alone, a lower bound on the count
    count = sum(vocab ** length for length in range(depth + 1)) if log_count < 64 else None
    if count is None or count > MAX_DERIVED_PREFIXES:
        shown = f"{count:,}" if count is not None else f"more than 10^{log_count / math.log(10):.1f}"
        raise VerispecError(f"deriving V = {vocab} to depth {depth} needs {shown} prefixes, above "
                            f"{MAX_DERIVED_PREFIXES:,}: lower --vocab or --depth")


def derive_problem(problem, vocab: int, depth: int, *, progress: bool = False) -> tuple[TabularProblem, dict]:
    """The derived problem (see the module docstring) and its provenance: for every derived prefix, the real
    token path it stands for and the mass of its bucket."""
    from tqdm import tqdm

    if isinstance(vocab, bool) or not isinstance(vocab, int) or not 2 <= vocab <= problem.vocab_size:
        raise VerispecError(f"vocab must be an integer in 2..{problem.vocab_size} (V-1 tokens and the bucket), "
                            f"got {vocab!r}")
    check_derive_size(vocab, depth)
    real: dict[Prefix, tuple[int, ...]] = {(): ()}
    batch = max(1, min(PREPARE_BATCH, getattr(problem, "cache_capacity", PREPARE_BATCH)))
    target, draft, other_mass = {}, {}, {}
    level: list[Prefix] = [()]
    for length in tqdm(range(depth + 1), desc="derive levels", disable=not progress, leave=False):
        following: list[Prefix] = []
        for index, prefix in enumerate(level):
            if index % batch == 0:  # batched forwards, never more than the problem's law cache holds
                problem.prepare_drafts([real[prefix] for prefix in level[index:index + batch]])
            p, q = np.asarray(problem.target(real[prefix])), np.asarray(problem.draft(real[prefix]))
            kept, representative = _split(p, q, vocab)
            p_row = np.append(p[kept], max(0.0, 1.0 - float(p[kept].sum())))
            q_row = np.append(q[kept], max(0.0, 1.0 - float(q[kept].sum())))
            target[prefix] = p_row / p_row.sum()
            other_mass[prefix] = (float(p_row[-1]), float(q_row[-1]))
            if length < depth:
                draft[prefix] = q_row / q_row.sum()
                for slot, token in enumerate([int(t) for t in kept] + [representative]):
                    real[prefix + (slot,)] = real[prefix] + (token,)
                    following.append(prefix + (slot,))
        level = following
    table = TabularProblem(vocab, target, draft)
    provenance = {",".join(map(str, prefix)): {"tokens": list(real[prefix]), "other_target": mass[0],
                                                "other_draft": mass[1]}
                  for prefix, mass in other_mass.items()}
    return table, provenance


def write_derived(path, table: TabularProblem, depth: int, provenance: dict, description: str, settings: dict) -> None:
    """A problem file (``load_problem`` reads it) with the derivation's settings and provenance beside it: JSON, or
    the binary form (``problem_to_npz``) when ``path`` ends in .npz; with the ``written_by`` marker of ``verispec
    derive`` (``verispec.files.provenance``), so that a rerun may replace it."""
    from verispec.files.provenance import MARKER_KEY, PROBLEM, written_by

    marker = written_by(PROBLEM, "derive")
    if str(path).endswith(".npz"):
        problem_to_npz(table, depth, path, metadata={"description": description,
                                                     "derived": {**settings, "prefixes": provenance}},
                       written_by=marker)
        return
    data = problem_to_json(table, depth)
    data["description"] = description
    data["derived"] = {**settings, "prefixes": provenance}
    data[MARKER_KEY] = marker
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


__all__ = ["MAX_DERIVED_PREFIXES", "check_derive_size", "derive_problem", "write_derived"]
