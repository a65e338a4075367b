"""Hidden states of a pair's roots for the delay selector (``selector dataset --hidden``): the last layer's states
that decoding hands a policy (``verispec.models.decoding.BlockContext.hidden``), one forward of each model for all
the roots of a prompt's trace, kept in their own row store ``OUT.hidden.json`` (so a labelled build gains them
without labelling again)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from verispec.errors import ResultStoreError
from verispec.files.io import ResultStore
from verispec.selector.dataset_file import DatasetError

#: The hidden states a dataset may hold, as ``verispec.models.decoding.BlockContext.hidden`` names them.
HIDDEN_NAMES = ("target_prev", "draft_prev", "draft_root")


def _check_pair(root, pair) -> None:
    if root.pair is None or pair is None or pair.name != root.pair:
        raise DatasetError(f"hidden states come from the root's model pair; the root of group {root.group!r} comes "
                           f"from {root.pair or 'a synthetic problem'!r}")


def root_hidden(root, pair) -> dict[str, np.ndarray]:
    """The last layer's hidden states [d] (float32 numpy) at a pair's root, as decoding gives a policy that reads
    them: ``target_prev``, the target after feeding the context up to the token before the root (the state
    whose logits gave p_prev); ``draft_prev`` and ``draft_root``, the draft at that token and at the root."""
    return chain_hidden([root], pair)[0]


def chain_hidden(roots, pair) -> list[dict[str, np.ndarray]]:
    """``root_hidden`` of each of ``roots`` whose contexts are all prefixes of the longest one (the roots of one
    prompt's trace), from one forward of each model over that context: the models are causal, so the state at a
    position depends on the tokens up to it alone (equal to a root's own forward to float32's rounding: tested)."""
    import torch

    from verispec.models.tree_forward import CachedModel

    for root in roots:
        _check_pair(root, pair)
    longest = list(max((root.context for root in roots), key=len))
    for root in roots:
        if len(root.context) < 2 or tuple(longest[:len(root.context)]) != tuple(root.context):
            raise DatasetError(f"the roots of one hidden-state forward must share their contexts' prefixes and hold "
                               f"two tokens or more; the root of group {root.group!r} does not")
    with torch.inference_mode():
        target = CachedModel(pair.target, hidden=True)
        target.prefill(longest[:-1])
        target_states = target.last_hidden  # [n - 1, d_target]: position i after feeding tokens 0..i
        draft = CachedModel(pair.draft, hidden=True)
        draft.prefill(longest)
        draft_states = draft.last_hidden  # [n, d_draft]
        found = []
        for root in roots:
            end = len(root.context)
            found.append({name: value.detach().float().cpu().numpy() for name, value in zip(
                HIDDEN_NAMES, (target_states[end - 2], draft_states[end - 2], draft_states[end - 1]))})
    return found


def hidden_chains(roots) -> list[list[int]]:
    """The roots' indices cut into chains: each chain's contexts are prefixes of its first (longest) one, so one
    forward of each model gives them all (``chain_hidden``). Longest first; a root joins the first chain whose
    longest context it begins."""
    order = sorted(range(len(roots)), key=lambda index: -len(roots[index].context))
    chains: list[list[int]] = []
    heads: dict[tuple, list[int]] = {}  # (pair, first token ...) of a chain's head -> chain indices
    for index in order:
        context = tuple(roots[index].context)
        for chain in heads.get((roots[index].pair, context[:1]), []):
            head = roots[chains[chain][0]].context
            if tuple(head[:len(context)]) == context:
                chains[chain].append(index)
                break
        else:
            heads.setdefault((roots[index].pair, context[:1]), []).append(len(chains))
            chains.append([index])
    return chains


#: Seconds between saves of the hidden-state store (each save rewrites the file: about 45 KB a root).
SAVE_EVERY_S = 60.0


def collect_hidden_states(keys: list[str], keyed: dict, pair, out: Path, overwrite: bool, progress: bool) -> dict:
    """{name: [N, d]} of the roots' hidden states, computed where ``OUT.hidden.json`` does not hold them yet: one
    forward of each model a chain of roots (``hidden_chains``), the rows packed (``pack_floats``) and saved at
    least every ``SAVE_EVERY_S`` seconds and at the end, so a killed run loses at most that much."""
    import time

    from tqdm import tqdm

    from verispec.files.io import pack_floats, unpack_floats

    try:
        store = ResultStore(out.with_name(out.name + ".hidden.json"),
                            parameters={"pair": pair.name, "dtype": str(pair.target.dtype)}, overwrite=overwrite)
    except ResultStoreError as error:
        raise DatasetError(f"{error} (or pass overwrite to start over)") from None
    pending = list(dict.fromkeys(key for key in keys if not store.done(key)))
    roots = [keyed[key] for key in pending]
    pending_rows, saved = {}, time.monotonic()
    with tqdm(total=len(pending), desc="hidden states", disable=not progress, file=sys.stderr) as bar:
        for chain in hidden_chains(roots):
            for index, states in zip(chain, chain_hidden([roots[index] for index in chain], pair)):
                pending_rows[pending[index]] = {name: pack_floats(block) for name, block in states.items()}
            bar.update(len(chain))
            if time.monotonic() - saved >= SAVE_EVERY_S:
                store.add_many(pending_rows)
                pending_rows, saved = {}, time.monotonic()
    if pending_rows:
        store.add_many(pending_rows)
    return {name: np.array([unpack_floats(store.rows[key][name]) for key in keys], dtype=np.float32)
            for name in HIDDEN_NAMES}


__all__ = ["HIDDEN_NAMES", "SAVE_EVERY_S", "chain_hidden", "collect_hidden_states", "hidden_chains", "root_hidden"]
