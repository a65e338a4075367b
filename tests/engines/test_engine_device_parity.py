"""The CPU half of experiments/engine_device_parity.py: vLLM's shipped ``rejection_sample``, interpreted on the CPU
with its randomness fed, emits exactly the tokens its rule gives on that randomness, computed here independently
(numpy, from vLLM's documented rule: a draft d at a position is accepted when q(d) > 0 and p(d) / q(d) >= u, the
first rejection emits argmax((p - q)+ / E) over the request's exponential row E, first block and first index on
ties, all accepted adds the bonus token; a greedy request accepts while d is the target's argmax). The GPU half,
compiled against interpreted, is the same script on a CUDA machine."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

from tests.support.scripts import load_script

if find_spec("vllm") is None or find_spec("torch") is None:
    pytest.skip("vLLM is not installed: pip install --no-deps -r verispec/engines/requirements/vllm.txt",
                allow_module_level=True)

script = load_script("experiments/engine_device_parity.py", "engine_device_parity_test")


def _expected(batch: dict) -> list[list[int]]:
    import torch

    drafts, vocab = batch["num_draft_tokens"], batch["vocab"]
    tokens = sum(drafts)
    logits = torch.tensor(batch["target_logits"], dtype=torch.float32)[:tokens]
    p = logits.softmax(dim=-1, dtype=torch.float32).numpy()  # [T, V]
    q = np.array(batch["draft_probs"], dtype=np.float32).reshape(tokens, vocab)
    u = np.array(batch["uniforms"], dtype=np.float64)
    inv_e = (1 / np.array(batch["exponentials"], dtype=np.float64).astype(np.float32)).astype(np.float32)
    width = max(drafts) + 1
    out, start = [], 0
    for request, count in enumerate(drafts):
        row = [-1] * width
        greedy = batch["temperature"][request] == 0
        for position in range(count):
            index = start + position
            draft = batch["draft_token_ids"][index]
            if greedy:
                best = int(np.argmax(logits[index].numpy()))
                accepted, emitted = draft == best, best
            else:
                accepted = q[index, draft] > 0 and float(p[index, draft] / q[index, draft]) >= u[index]
                score = np.maximum(p[index] - q[index], np.float32(0)) * inv_e[request]
                emitted = int(np.argmax(score))
            row[position] = draft if accepted else emitted
            if not accepted:
                break
        else:
            row[count] = batch["bonus_token_ids"][request][0]
        out.append(row)
        start += count
    return out


def test_the_interpreted_kernels_emit_the_rules_tokens_on_the_fed_randomness():
    batches = script.make_batches(8, seed=3)
    outputs = script.interpreted(batches, timeout=300)
    assert len(outputs) == len(batches)
    for batch, output in zip(batches, outputs):
        assert output == _expected(batch), batch["num_draft_tokens"]
    # the batches exercise what they must: greedy and random requests, rejections, bonus tokens, two vocab blocks
    flat = [token for output in outputs for row in output for token in row]
    assert any(t == 0 for batch in batches for t in batch["temperature"])
    assert any(batch["vocab"] > 8192 for batch in batches) and -1 in flat
