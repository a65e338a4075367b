"""A (target, draft) pair of causal language models on one device, with their shared tokenizer.

Speculative decoding compares the target's and the draft's laws token by token, so the two models must
index one vocabulary: ``load_pair`` refuses tokenizers whose vocabularies or special tokens differ, and
``ModelPair`` refuses models whose output layers have different widths. Loading never reaches a model hub
(``local_files_only``): a name is a local directory, a model id already in the local Hugging Face cache, or
an installed pair (``verispec models install qwen-coder``, then ``load_pair("qwen-coder")``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verispec.errors import ModelError

#: --dtype values and the torch dtypes they name ("auto": float32 on a CPU, bfloat16 on a GPU).
DTYPES = ("auto", "float32", "float64", "bfloat16", "float16")


def resolve_device(device: str | Any = "cpu"):
    """A torch device from 'cpu', 'cuda', 'cuda:1', ...; one-line ModelError when it is not available here."""
    import torch

    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ModelError(f"device {device!r} is not a torch device ({error}); use cpu or cuda") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} asked for, but torch sees no CUDA GPU here; use --device cpu")
    if resolved.type not in ("cpu", "cuda", "mps"):
        raise ModelError(f"device {device!r} is not supported; use cpu or cuda")
    return resolved


def resolve_dtype(dtype: str | Any, device) -> Any:
    """A torch floating dtype from its name (DTYPES) or a torch dtype."""
    import torch

    if not isinstance(dtype, str):
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return dtype
        raise ModelError(f"dtype {dtype!r} is not a floating torch dtype; use one of {', '.join(DTYPES)}")
    if dtype not in DTYPES:
        raise ModelError(f"dtype {dtype!r} is unknown; use one of {', '.join(DTYPES)}")
    if dtype == "auto":
        return torch.float32 if resolve_device(device).type == "cpu" else torch.bfloat16
    return getattr(torch, dtype)


def output_width(model) -> int:
    """The number of logits the model returns per position (its lm_head rows)."""
    return int(model.get_output_embeddings().weight.shape[0])


@dataclass
class ModelPair:
    """A target and a draft causal LM on one device, and the tokenizer they share (None: token ids only).
    ``source``: how ``load_pair`` loaded it (a ``PairSource``), so that worker processes can load it again; None
    for a pair built in memory."""

    target: Any
    draft: Any
    tokenizer: Any = None
    name: str = "pair"
    source: PairSource | None = None

    def __post_init__(self):
        widths = output_width(self.target), output_width(self.draft)
        if widths[0] != widths[1]:
            raise ModelError(f"the target returns {widths[0]} logits per token and the draft {widths[1]}: a pair "
                             "must share one vocabulary (choose a draft from the target's family)")
        if self.target.device != self.draft.device:
            raise ModelError(f"target on {self.target.device} and draft on {self.draft.device}: put both on one "
                             "device")
        self.target.eval()
        self.draft.eval()

    @property
    def vocab_size(self) -> int:
        return output_width(self.target)

    @property
    def weight_bytes(self) -> int:
        """Bytes of both models' parameters and buffers (what each process that loads the pair holds)."""
        return sum(tensor.numel() * tensor.element_size() for model in (self.target, self.draft)
                   for tensors in (model.parameters(), model.buffers()) for tensor in tensors)

    @property
    def device(self):
        return self.target.device

    @property
    def small_batch_linear(self) -> bool:
        """Whether both models' linear layers take ``verispec.models.cpu_linear``'s path for a few rows."""
        from verispec.models.cpu_linear import uses_small_batch_linears

        return uses_small_batch_linears(self.target) and uses_small_batch_linears(self.draft)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Tokens that end a generation: the tokenizer's end of sequence and the target's generation config."""
        ids = set()
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        config = getattr(self.target, "generation_config", None)
        eos = getattr(config, "eos_token_id", None) if config is not None else None
        ids.update([eos] if isinstance(eos, int) else list(eos or []))
        return frozenset(ids)

    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a prompt (a string through the tokenizer, or ids as given)."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ModelError("this pair has no tokenizer: give the prompt as token ids")
            ids = list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ModelError("the prompt is empty: give at least one token")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ModelError(f"prompt token {bad[0]} is outside the vocabulary 0..{self.vocab_size - 1}")
        return ids

    def decode(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, tokens))
        return self.tokenizer.decode(tokens)


def check_tokenizers(target_tokenizer, draft_tokenizer, target_name: str = "target", draft_name: str = "draft"):
    """Refuse (ModelError) two tokenizers that map text to different ids."""
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        differing = sorted(set(target_vocab.items()) ^ set(draft_vocab.items()), key=lambda item: item[1])
        token, index = differing[0]
        raise ModelError(f"the tokenizers of {target_name} and {draft_name} differ ({len(target_vocab)} and "
                         f"{len(draft_vocab)} tokens; e.g. {token!r} -> {index} in only one): speculative "
                         "decoding needs one vocabulary")
    for attribute in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if getattr(target_tokenizer, attribute, None) != getattr(draft_tokenizer, attribute, None):
            raise ModelError(f"the tokenizers of {target_name} and {draft_name} differ in {attribute}: "
                             f"{getattr(target_tokenizer, attribute, None)} and "
                             f"{getattr(draft_tokenizer, attribute, None)}")


def _load_one(name: str, role: str, device, dtype):
    import os
    from pathlib import Path

    import transformers

    # A hub id is 'name' or 'org/name'; anything else that names no directory is a missing directory.
    looks_like_path = name.startswith(("/", ".", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)
    if looks_like_path and not Path(name).expanduser().is_dir():
        raise ModelError(f"the {role} model directory {name!r} does not exist")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelError(f"cannot load the {role} model {name!r} offline: {reason[:200]} (give a local directory, "
                         "a model already in the Hugging Face cache, or run `verispec models install "
                         "qwen-coder` and use --pair qwen-coder)") from None
    return tokenizer, model.to(device).eval()


@dataclass(frozen=True)
class PairSource:
    """Where a pair comes from, as ``load_pair`` takes it: an installed pair's name (``draft`` None) or two local
    model directories (or cached model ids), the device and the dtype, as text. Picklable: a worker process of a
    dataset build loads the pair from it (``load``)."""

    target: str
    draft: str | None
    device: str
    dtype: str
    small_batch_linear: bool = False

    def load(self) -> ModelPair:
        return load_pair(self.target, self.draft, device=self.device, dtype=self.dtype,
                         small_batch_linear=self.small_batch_linear)


def load_pair(target: str, draft: str | None = None, *, device="cpu", dtype="auto",
              small_batch_linear: bool | None = None) -> ModelPair:
    """Load a (target, draft) pair: ``load_pair("qwen-coder")`` for an installed pair, or
    ``load_pair(TARGET, DRAFT)`` with local directories or cached model ids. Never downloads.
    ``small_batch_linear``: on a CPU, both models' linear layers take ``verispec.models.cpu_linear``'s path for a few
    rows (None: as ``VERISPEC_SMALL_BATCH_LINEAR`` says; off when unset); ignored on other devices."""
    from verispec.models.cpu_linear import use_small_batch_linears, wanted

    given_device = str(device)
    device = resolve_device(device)
    small = wanted(small_batch_linear) and device.type == "cpu"
    source = PairSource(str(target), None if draft is None else str(draft), given_device,
                        dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch."), small)
    torch_dtype = resolve_dtype(dtype, device)
    name = target
    if draft is None:
        from verispec.models.install import installed_pair

        target_dir, draft_dir = installed_pair(target)
        target, draft = str(target_dir), str(draft_dir)
    else:
        name = f"{target} + {draft}"
    target_tokenizer, target_model = _load_one(target, "target", device, torch_dtype)
    draft_tokenizer, draft_model = _load_one(draft, "draft", device, torch_dtype)
    check_tokenizers(target_tokenizer, draft_tokenizer, target, draft)
    if small:
        use_small_batch_linears(target_model)
        use_small_batch_linears(draft_model)
    return ModelPair(target_model, draft_model, target_tokenizer, name, source)
