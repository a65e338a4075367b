"""Check verification code written elsewhere: production-shape functions as verispec verifiers.

``layouts`` states the layouts (chain, padded, ragged, tree-parent, tree-sibling, transformers, gpt-fast) and
converts to them, over a batch's arrays and back to verispec's outcomes (``tree_arrays``); ``exact`` integrates a
threshold rule exactly over its uniforms; ``blackbox`` tests any rule by stratified sampling at a stated
false-failure rate; ``rng`` feeds the draws of a function that draws its own randomness (torch's, numpy's,
Python's global generators) from the uniforms (the rules in ``rng.rules``, the replacements in ``rng.numpy_draws`` and,
imported only where torch is loaded, ``rng.torch_draws``); ``adapter`` wraps a function as a ``Verifier``, whose calls
``runner`` makes; ``check`` runs a whole check (a given problem, or a witness search) for the ``check-external``
command, and ``check_report`` holds its verdict.
"""
