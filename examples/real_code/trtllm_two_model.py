"""TensorRT-LLM's PyTorch rejection sampler for two-model speculative decoding, checked as published, through a
thin adapter in verispec's ``chain`` layout with the request's seed.

Upstream (never copied into this repository; put it under ``$VERISPEC_TRTLLM_DIR``, default ``/tmp/trtllm``, at its
path in the repository): NVIDIA/TensorRT-LLM ``tensorrt_llm/_torch/pyexecutor/sampler/two_model_spec_dec.py`` at
commit 00be09f78ecf0691f2b8e15dea518d1d6468679e (2026; git blob 92db1685, 15,909 characters). It is the path
``TorchSampler`` takes when the drafter is a separate engine and the request samples (``TwoModelSpecDecHandler.
_process_draft_tokens_rejection_sampling``), and its two free functions are the whole rule:

* ``get_rejected_indices(draft_probs [N, V], target_probs [N + 1, V], generator, draft_tokens)``: accept draft i
  when ``torch.rand(generator=generator) <= min(1, target/draft)`` (rejected where ``>``), all N at once;
* ``sample_rejected(draft_probs, target_probs, generator, num_accepted)``: ``torch.multinomial`` of
  ``where(target - draft > 0, target - draft, 0)`` (unnormalised; multinomial normalises) with the same generator.

When nothing is rejected, the handler emits the target's own token at position N (``add_token`` from the batch's
sampled tokens, drawn before verification from the target's probabilities with the same generator: ``TorchSampler``
samples every position and keeps ``py_target_probs = softmax[offset:offset + steps]``, a [N + 1, V] view).

Loading the file unmodified needs its imports to resolve without the engine installed (its C++ bindings need CUDA).
The adapter registers placeholder modules for them in ``sys.modules`` - ``tensorrt_llm._utils`` with
``prefer_pinned`` returning False (pinned memory needs CUDA; upstream it is a performance policy only), and the
names the class ``TwoModelSpecDecHandler`` imports (``LlmRequest``, ``add_token``, ``sample``, ...) as objects that
raise if used; the two functions checked never touch them - then imports the file as
``tensorrt_llm._torch.pyexecutor.sampler.two_model_spec_dec``. What the adapter does per sequence (batch rows one at
a time): seeds one ``torch.Generator`` with the request's seed (``TorchSampler.get_generator`` holds one generator
for all requests; a per-request seed is the stricter case for keys), draws the target's N + 1 tokens with it (the
batch sampling that precedes verification), calls ``get_rejected_indices`` and, on a rejection at i,
``sample_rejected(..., num_accepted=i)``, else emits the target's token at N. Check::

    python -m verispec check-external examples/real_code/trtllm_two_model.py:verify --layout chain --tree chain:2 \
        --rng capture --target 0.5,0.3,0.2 --draft 0.2,0.2,0.6 --mode exact
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import sys
import types

import numpy as np
import torch

TRTLLM_DIR_VARIABLE = "VERISPEC_TRTLLM_DIR"
DEFAULT_TRTLLM_DIR = "/tmp/trtllm"
MODULE = "tensorrt_llm._torch.pyexecutor.sampler.two_model_spec_dec"
#: The names the upstream module imports, by module (relative imports resolved), all unused by the two functions.
PLACEHOLDERS = {
    "tensorrt_llm._torch.pyexecutor.llm_request": ("LlmRequest", "get_draft_token_length"),
    "tensorrt_llm._torch.pyexecutor.resource_manager": ("ResourceManager",),
    "tensorrt_llm._torch.pyexecutor.sampler.sampler_common": ("DEFAULT_BEAM_IDX", "FinishReasonsList", "add_token"),
    "tensorrt_llm._torch.pyexecutor.sampler.sampler_features": ("handle_stop_criteria",),
    "tensorrt_llm._torch.pyexecutor.sampler.sampler_strategy": ("GREEDY", "Strategy", "_request_strategy", "sample"),
}


class _Placeholder:
    """Stands for an engine object the checked functions never use; any use raises."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} is a placeholder: the engine's module is not installed")


def _package(name, path=None):
    module = sys.modules.get(name) or types.ModuleType(name)
    if path is not None:
        module.__path__ = [str(path)]
    sys.modules[name] = module
    return module


@functools.cache
def _upstream():
    root = pathlib.Path(os.environ.get(TRTLLM_DIR_VARIABLE, DEFAULT_TRTLLM_DIR))
    path = root.joinpath(*MODULE.split(".")).with_suffix(".py")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; put TensorRT-LLM's two_model_spec_dec.py there or set "
                                f"{TRTLLM_DIR_VARIABLE} (see examples/real_code/README.md)")
    parts = MODULE.split(".")
    for depth in range(1, len(parts)):
        _package(".".join(parts[:depth]), root.joinpath(*parts[:depth]))
    _package("tensorrt_llm._utils").prefer_pinned = lambda: False
    for module_name, names in PLACEHOLDERS.items():
        module = _package(module_name)
        for name in names:
            setattr(module, name, _Placeholder(f"{module_name}.{name}"))
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)
    return module


def _one_sequence(upstream, tokens, draft_probs, target_probs, generator):
    """tokens [N], draft_probs [N, V], target_probs [N + 1, V] -> emitted tokens (list)."""
    target_tokens = torch.multinomial(target_probs, num_samples=1, generator=generator).squeeze(-1)  # [N + 1]
    rejected = upstream.get_rejected_indices(draft_probs, target_probs, generator, tokens.tolist())
    if rejected.numel() == 0:
        return tokens.tolist() + [int(target_tokens[len(tokens)])]
    accepted = int(rejected[0].item())
    return tokens[:accepted].tolist() + [upstream.sample_rejected(draft_probs, target_probs, generator, accepted)]


def verify(draft_tokens, draft_probs, target_probs, seed):
    """The ``chain`` layout with the request's seed: draft_tokens [B, L], draft_probs [B, L, V], target_probs
    [B, L + 1, V] -> emitted tokens [B, L + 1] padded with -1."""
    upstream = _upstream()
    tokens = torch.as_tensor(np.asarray(draft_tokens))
    draft, target = torch.as_tensor(np.asarray(draft_probs)), torch.as_tensor(np.asarray(target_probs))
    out = np.full((tokens.shape[0], tokens.shape[1] + 1), -1, dtype=np.int64)
    for row in range(tokens.shape[0]):
        generator = torch.Generator()
        generator.manual_seed(int(seed))
        emitted = _one_sequence(upstream, tokens[row], draft[row], target[row], generator)
        out[row, :len(emitted)] = emitted
    return out


def verify_float64_uniforms(draft_tokens, draft_probs, target_probs, seed):
    """A control, not the engine as it runs: ``verify`` with torch's default dtype float64, so that
    ``get_rejected_indices``' ``torch.rand`` draws float64 uniforms. Upstream draws float32 ones (multiples of 2^-24,
    0.0 included), and its test ``rand > accept_probs`` accepts with probability (floor(a 2^24) + 1) 2^-24, not a:
    up to 2^-24 more, and 2^-24 for a draft of target probability 0."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return verify(draft_tokens, draft_probs, target_probs, seed)
    finally:
        torch.set_default_dtype(previous)
