"""Real language models through ``transformers`` (an optional extra: ``pip install -e '.[models]'``).

So far: the sampling law shared by target and draft (``Sampling``: temperature, top-k and top-p applied
identically to p and q, so that drafting samples exactly from the q a verifier is handed), and
``CachedModel``, which scores every node of a draft tree in ONE forward pass of a causal LM over its KV
cache (tree attention mask and positions) and keeps the cache of the accepted path only.
"""

from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel

__all__ = ["CachedModel", "Sampling"]
