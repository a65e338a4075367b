"""Hierarchical Speculative Decoding's verifier (Zhou et al., "Overcoming Joint Intractability with Lossless
Hierarchical Speculative Decoding", https://github.com/ZhouYuxuanYX/Hierarchical-Speculative-Decoding), checked as
published, through a thin adapter in verispec's ``transformers`` layout (its function has transformers' call shape).

Upstream files (never copied into this repository; put them in ``$VERISPEC_HSD_DIR``, default ``/tmp/hsd``):

* ``algorithm_clean.py`` at commit 89745108cd6c2eab5e4939fd4f78bb12610046c9 (2025-08-11, "Add files via upload"),
  the last version of that file: it was deleted in 177c8a58ff197b1adc84a094160845a5edc80a94 (2025-09-28) and is
  absent from the head b8575e2ad42bcf2b32d0c6f3481eb49099453f33 (2026-04-14). Its
  ``_speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, is_done_candidate,
  HSD=False, return_probs=False, hist_lengths=[0], approxi=False)`` runs HSD with ``HSD=True`` and its "naive"
  capped branch with ``HSD=False``; it imports only torch and draws with ``torch.rand_like`` (float64, since it
  takes ``softmax().double()`` off MPS) and ``torch.multinomial``.
* ``algorithm.py`` at the head (last changed in 436676d3896312361d4fc36a105c02c5a60a18d3, 2025-09-28, minutes after
  ``algorithm_clean.py`` was deleted): the rewrite. Its ``_speculative_sampling`` reads ``new_candidate_input_ids``,
  ``hist_length`` and ``ind`` without assigning them, so every call raises NameError.

Get them as ``examples/real_code/README.md`` shows (``git show <commit>:<file>`` into ``$VERISPEC_HSD_DIR``).

What the adapter converts, and nothing else: verispec's arrays become torch tensors; ``is_done_candidate`` (read
only when the head's rewrite reaches its EOS branch) is handed all False, since verispec's blocks hold no EOS; the
returned ``n_matches`` (an int the function sets to the number of drafts accepted) is replaced by
``len(valid_tokens) - 1``, the layout's convention. They differ on one branch: where the resampling law
``p_primes[:, n]`` is all zero, HSD accepts draft n + 1 as well and stops, emitting n + 1 drafts and no further
token while returning n + 1; the emitted tokens are what the step outputs, so they are what is checked (verispec
continues the block with the target). Checks::

    python -m verispec check-external examples/real_code/hsd.py:hsd --layout transformers --tree chain:2 \
        --rng capture --target 0.5,0.3,0.2 --draft 0.2,0.2,0.6 --mode exact
    python -m verispec check-external examples/real_code/hsd.py:hsd_naive ...        # HSD=False
    python -m verispec check-external examples/real_code/hsd.py:hsd_head ...         # algorithm.py at the head
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib

import torch

#: Where the upstream files lie (never inside this repository).
HSD_DIR_VARIABLE = "VERISPEC_HSD_DIR"
DEFAULT_HSD_DIR = "/tmp/hsd"


@functools.cache
def _upstream(file_name: str):
    """The upstream module ``file_name`` from ``$VERISPEC_HSD_DIR``, imported as it is."""
    path = pathlib.Path(os.environ.get(HSD_DIR_VARIABLE, DEFAULT_HSD_DIR)) / file_name
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; put HSD's {file_name} there or set {HSD_DIR_VARIABLE} "
                                "(see examples/real_code/README.md)")
    spec = importlib.util.spec_from_file_location(f"hsd_upstream_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call(file_name, candidate_input_ids, candidate_logits, candidate_length, new_logits, **options):
    ids = torch.as_tensor(candidate_input_ids)
    valid_tokens, _ = _upstream(file_name)._speculative_sampling(
        ids, torch.as_tensor(candidate_logits), int(candidate_length), torch.as_tensor(new_logits),
        torch.zeros(ids.shape[0], dtype=torch.bool), **options)
    return valid_tokens, valid_tokens.shape[-1] - 1


def hsd(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """``algorithm_clean.py``'s ``_speculative_sampling`` with ``HSD=True``: the hierarchical rule."""
    return _call("algorithm_clean.py", candidate_input_ids, candidate_logits, candidate_length, new_logits, HSD=True)


def hsd_naive(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """``algorithm_clean.py``'s ``_speculative_sampling`` with ``HSD=False`` (its default)."""
    return _call("algorithm_clean.py", candidate_input_ids, candidate_logits, candidate_length, new_logits)


def hsd_head(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """``algorithm.py`` at the repository's head, the rewrite of ``algorithm_clean.py``."""
    return _call("algorithm.py", candidate_input_ids, candidate_logits, candidate_length, new_logits)
