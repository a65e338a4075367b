"""Tiny randomly initialised (target, draft) pairs built from a config: nothing is downloaded and a forward pass
takes about a millisecond, so real decoding can be checked statistically in seconds (tests, smoke runs, a GPU
check without model files).

The target is a one-layer Qwen2 causal LM with a 16-token vocabulary and weights N(0, 0.5^2), which makes its
next-token laws peaked and context-dependent. The draft is the target with every weight perturbed by
N(0, noise^2), so the two laws overlap partly (0.4-0.8 at noise 0.1): drafts are accepted and rejected.
"""

from __future__ import annotations

VOCAB = 16

#: The tiny tokenizer's words: token i is WORDS[i] (a WordLevel model, split on whitespace).
WORDS = ["<eos>", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "<unk>"]


def tiny_causal_lm(seed: int, *, layers: int = 1, scale: float = 0.5, vocab: int = VOCAB):
    """A Qwen2 causal LM with a 16-token vocabulary (or ``vocab``: 151,936 is Qwen's), float64, weights
    N(0, scale^2), seeded."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=False, initializer_range=scale, eos_token_id=None,
                                      bos_token_id=None, pad_token_id=None)
    return transformers.Qwen2ForCausalLM(config).eval().double()


def tiny_pair(seed: int = 0, *, noise: float = 0.1, layers: int = 1, device="cpu", vocab: int = VOCAB):
    """A ModelPair on ``device``: a tiny target and a draft equal to it plus N(0, noise^2) on every weight."""
    import torch

    from verispec.models.pair import ModelPair, resolve_device

    device = resolve_device(device)
    target = tiny_causal_lm(seed, layers=layers, vocab=vocab)
    draft = tiny_causal_lm(seed, layers=layers, vocab=vocab)
    generator = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(noise * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return ModelPair(target.to(device), draft.to(device), None, f"tiny-{seed}")


def tiny_tokenizer(eos: bool = True):
    """A PreTrainedTokenizerFast over a WordLevel model of WORDS (built offline)."""
    import tokenizers
    import transformers

    model = tokenizers.models.WordLevel({word: index for index, word in enumerate(WORDS)}, unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>",
                                                eos_token="<eos>" if eos else None)


def save_tiny_pair(directory, seed: int = 0) -> tuple[str, str]:
    """Save a tiny pair (float32) with its tokenizer as ``directory/target`` and ``directory/draft``."""
    from pathlib import Path

    pair = tiny_pair(seed)
    tokenizer = tiny_tokenizer()
    paths = []
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        path = Path(directory) / role
        model.float().save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths.append(str(path))
    return paths[0], paths[1]
