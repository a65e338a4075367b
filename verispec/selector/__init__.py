"""The delay selector: choose each block's draft tree (and verifier) from features of its root.

After the DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 5): an action is a delayed tree (K, L1, L2)
(``actions``); the features are scalars of p and q before the block's draws (``features``, its Appendix E);
the model is the paper's network or a baseline (``network``), trained to maximise the expected throughput
ratio to a static action (``train``, its Eq. 12); ``Selector`` holds a trained model and its file, and
``SelectorPolicy`` lets the decoder ask it for an action per block.

Importing this package imports nothing heavy (every name loads its module on first use); ``actions`` and
``features`` do not import torch; the torch-backed names
(``Selector``, ``SelectorPolicy``, ``SelectorNetwork``, ``LinearSelector``, ``LookupSelector``,
``throughput_loss``, ``train_selector``) load on first use.
"""

from __future__ import annotations

from verispec.lazy_names import lazy_names

_LAZY = {
    # numpy-backed: loaded on first use too, so that the command line's parser (verispec.cli.selector) starts
    # without numpy
    **dict.fromkeys(("PAPER_GRID", "Action", "ActionGrid", "SelectorError", "action_times", "max_action_tree"),
                    "verispec.selector.actions"),
    **dict.fromkeys(("SCALAR_FEATURES", "scalar_features", "scalar_features_batch"), "verispec.selector.features"),
    "Selector": "verispec.selector.selector",
    "SelectorPolicy": "verispec.selector.selector",
    "SelectorNetwork": "verispec.selector.network",
    "LinearSelector": "verispec.selector.network",
    "LookupSelector": "verispec.selector.network",
    "throughput_loss": "verispec.selector.train",
    "train_selector": "verispec.selector.train",
    "best_static": "verispec.selector.train",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)

__all__ = ["PAPER_GRID", "SCALAR_FEATURES", "Action", "ActionGrid", "LinearSelector", "LookupSelector", "Selector",
           "SelectorError", "SelectorNetwork", "SelectorPolicy", "action_times", "best_static", "max_action_tree",
           "scalar_features", "scalar_features_batch", "throughput_loss", "train_selector"]
