"""Tiny randomly initialised (target, draft) pairs built from a config: nothing is downloaded, a forward pass
takes about a millisecond. The draft is the target with every weight perturbed by Gaussian noise, so the two
laws overlap partly (drafts are accepted and rejected) and differ from context to context."""

from __future__ import annotations

VOCAB = 16


def tiny_causal_lm(seed: int, *, layers: int = 1, scale: float = 0.5):
    """A Qwen2 causal LM with a 16-token vocabulary, float64, weights N(0, scale^2) (peaked next-token laws)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=False, initializer_range=scale, eos_token_id=None,
                                      bos_token_id=None, pad_token_id=None)
    return transformers.Qwen2ForCausalLM(config).eval().double()


def tiny_pair(seed: int = 0, *, noise: float = 0.1, layers: int = 1):
    """A ModelPair: a tiny target and a draft equal to it plus N(0, noise^2) on every weight."""
    import torch

    from verispec.models import ModelPair

    target = tiny_causal_lm(seed, layers=layers)
    draft = tiny_causal_lm(seed, layers=layers)
    generator = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(noise * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return ModelPair(target, draft, None, f"tiny-{seed}")


#: The tiny tokenizer's words: token i is WORDS[i] (WordLevel, split on whitespace).
WORDS = ["<eos>", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "<unk>"]


def tiny_tokenizer(eos: bool = True):
    """A PreTrainedTokenizerFast over a WordLevel model of the 16 words (built offline)."""
    import tokenizers
    import transformers

    model = tokenizers.models.WordLevel({word: index for index, word in enumerate(WORDS)}, unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>",
                                                eos_token="<eos>" if eos else None)


def save_tiny_pair(directory, seed: int = 0):
    """Save a tiny pair with its tokenizer as two model directories; return (target_dir, draft_dir)."""
    from pathlib import Path

    pair = tiny_pair(seed)
    tokenizer = tiny_tokenizer()
    paths = []
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        path = Path(directory) / role
        model.float().save_pretrained(path)
        model.double()
        tokenizer.save_pretrained(path)
        paths.append(str(path))
    return tuple(paths)


def install_tiny_pair_as(cache, name: str = "qwen-coder", seed: int = 0):
    """Put a tiny pair where ``verispec models install NAME`` puts the real one, with its completion markers, so
    that commands and examples written for the installed pair run in seconds (the README's tests)."""
    import json
    from pathlib import Path

    from verispec.models.install import MARKER, MARKER_FORMAT, PAIRS

    root = Path(cache) / "models" / name
    target_dir, draft_dir = save_tiny_pair(root, seed)
    for source, directory in zip(PAIRS[name].models, (target_dir, draft_dir)):
        marker = {"format": MARKER_FORMAT, "source": {"sha256": source.sha256}, "note": "a tiny stand-in for tests"}
        (Path(directory) / MARKER).write_text(json.dumps(marker))
    return target_dir, draft_dir
