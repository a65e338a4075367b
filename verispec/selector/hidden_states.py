"""Hidden states of a pair's roots for the delay selector (``selector dataset --hidden``): the last layer's states
that decoding hands a policy (``verispec.models.decoding.BlockContext.hidden``), computed per root and kept in
their own row store ``OUT.hidden.json`` (so a labelled build gains them without labelling again)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from verispec.errors import ResultStoreError
from verispec.io import ResultStore
from verispec.selector.dataset_file import DatasetError

#: The hidden states a dataset may hold, as ``verispec.models.decoding.BlockContext.hidden`` names them.
HIDDEN_NAMES = ("target_prev", "draft_prev", "draft_root")


def root_hidden(root, pair) -> dict[str, np.ndarray]:
    """The last layer's hidden states [d] (float32 numpy) at a pair's root, as decoding gives a policy that reads
    them: ``target_prev``, the target after feeding the context up to the token before the root (the state
    whose logits gave p_prev); ``draft_prev`` and ``draft_root``, the draft at that token and at the root."""
    import torch

    from verispec.models.tree_forward import CachedModel

    if root.pair is None or pair is None or pair.name != root.pair:
        raise DatasetError(f"hidden states come from the root's model pair; the root of group {root.group!r} comes "
                           f"from {root.pair or 'a synthetic problem'!r}")
    context = list(root.context)
    with torch.inference_mode():
        target = CachedModel(pair.target, hidden=True)
        target.prefill(context[:-1])
        target_prev = target.last_hidden[-1]  # [d_target]
        draft = CachedModel(pair.draft, hidden=True)
        draft.prefill(context)
        draft_prev, draft_root = draft.last_hidden[-2], draft.last_hidden[-1]  # [d_draft] each
    return {name: value.detach().float().cpu().numpy() for name, value in
            zip(HIDDEN_NAMES, (target_prev, draft_prev, draft_root))}




def collect_hidden_states(keys: list[str], keyed: dict, pair, out: Path, overwrite: bool, progress: bool) -> dict:
    """{name: [N, d]} of the roots' hidden states, computed where ``OUT.hidden.json`` does not hold them yet."""
    from tqdm import tqdm

    try:
        store = ResultStore(out.with_name(out.name + ".hidden.json"),
                            parameters={"pair": pair.name, "dtype": str(pair.target.dtype)}, overwrite=overwrite)
    except ResultStoreError as error:
        raise DatasetError(f"{error} (or pass overwrite to start over)") from None
    for key in tqdm([key for key in keys if not store.done(key)], desc="hidden states", disable=not progress,
                    file=sys.stderr):
        store.add(key, {name: block.tolist() for name, block in root_hidden(keyed[key], pair).items()})
    return {name: np.array([store.rows[key][name] for key in keys], dtype=np.float32) for name in HIDDEN_NAMES}


__all__ = ["HIDDEN_NAMES", "collect_hidden_states", "root_hidden"]
