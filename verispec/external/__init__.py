"""Check verification code written elsewhere: production-shape functions as verispec verifiers.

``layouts`` states the layouts (chain, padded, ragged, tree-parent, tree-sibling) and converts to and from
them; ``exact`` integrates a threshold rule exactly over its uniforms; ``blackbox`` tests any rule by
stratified sampling at a stated false-failure rate; ``adapter`` wraps a function as a ``Verifier``; ``check``
runs a whole check (a given problem, or a witness search) for the ``check-external`` command.
"""
