"""Real language models through ``transformers`` (an optional extra: ``pip install -e '.[torch,models]'``).

* ``Sampling``: the next-token law (temperature, top-k, top-p) applied identically to target and draft, so
  drafting samples exactly from the q a verifier is handed;
* ``CachedModel``: a causal LM's conditionals at every node of a draft tree in ONE forward pass over its KV
  cache (tree attention mask and positions), keeping only the accepted path;
* ``ModelPair`` and ``load_pair``: a (target, draft) pair on a device and dtype, refusing pairs whose
  tokenizers differ; never downloads;
* ``ModelProblem``: the pair's p and q at every prefix after a real context, batched and cached, as a
  ``Problem`` the exact engine analyses;
* ``generate``: real speculative decoding with any drafter and registered verifier (the verifier's law
  runs on torch tensors on the models' device), or with a ``BlockPolicy`` choosing each block's (tree,
  verifier) from a ``BlockContext``; ``sample_target``: plain sampling, the reference.
"""

from verispec.models.decoding import BlockContext, BlockPolicy, SpeculativeDecoder, generate
from verispec.models.generation import BlockRecord, Generation, sample_target
from verispec.models.pair import ModelPair, load_pair
from verispec.models.problem import ModelProblem
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel

__all__ = ["BlockContext", "BlockPolicy", "BlockRecord", "CachedModel", "Generation", "ModelPair", "ModelProblem",
           "Sampling", "SpeculativeDecoder", "generate", "load_pair", "sample_target"]
