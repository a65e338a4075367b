"""Is Triton's interpreter a faithful executor of vLLM's kernels? The shipped V1 ``rejection_sample``, compiled on a
CUDA device and interpreted on the CPU, on the same inputs and the same fed randomness: the tokens must be
bit-identical (issue 76, item 2).

    python experiments/engine_device_parity.py --out /tmp/parity.json      # on a machine with a CUDA GPU
    python experiments/engine_device_parity.py --interpreted-only           # the CPU half alone (no GPU needed)

``verispec check-engine`` runs vLLM's kernels under ``TRITON_INTERPRET=1``; its verdicts hold for the compiled
kernels only as far as the interpreter computes what they compute. This script draws ``--batches`` random batches
(seeded: request count, draft counts, vocabulary, target logits, draft probabilities, per-request temperature with
greedy requests among them) and, for each, the randomness vLLM would draw: the acceptance uniforms (float64, one per
draft token) and the exponential noise of the recovered tokens (one row per request). vLLM's own
``generate_uniform_probs`` and the ``exponential_`` inside ``sample_recovered_tokens`` are replaced, for the call
only, by functions that hand over those numbers, so both executors see the same randomness; nothing else of vLLM is
changed. The interpreted half runs in a child process (``TRITON_INTERPRET=1`` and ``CUDA_VISIBLE_DEVICES=""`` hold
for a whole process), the compiled half in this one, on ``cuda``. The result file lists, per batch, whether the
output tokens are identical, and the first differing request where not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_batches(count: int, seed: int) -> list[dict]:
    """``count`` random batches as plain lists (JSON to the child): every input and every random number."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        requests = int(rng.integers(1, 6))
        vocab = int(rng.choice([3, 5, 17, 1000, 8193]))  # 8193: two blocks of the recovery kernel's vocabulary
        drafts = [int(rng.integers(0, 5)) for _ in range(requests)]
        drafts[int(rng.integers(0, requests))] += 1  # a step with nothing drafted is not verified at all
        tokens = sum(drafts)
        temperature = [0.0 if rng.random() < 0.25 else float(rng.choice([0.5, 1.0, 1.3])) for _ in range(requests)]
        batches.append({
            "num_draft_tokens": drafts, "vocab": vocab, "temperature": temperature,
            "draft_token_ids": rng.integers(0, vocab, tokens).tolist(),
            "target_logits": (rng.standard_normal((tokens + requests, vocab)) * 3).astype(np.float32).tolist(),
            "draft_probs": rng.dirichlet(np.full(vocab, 0.5), max(tokens, 1)).astype(np.float32)[:tokens].tolist(),
            "bonus_token_ids": rng.integers(0, vocab, (requests, 1)).tolist(),
            "uniforms": rng.random(tokens).tolist(),
            "exponentials": rng.exponential(1.0, (requests, vocab)).tolist(),
        })
    return batches


def run_batches(batches: list[dict], device: str) -> list[list[list[int]]]:
    """vLLM's ``rejection_sample`` on each batch on ``device``, fed the batch's randomness -> its output tokens."""
    import torch
    from vllm.v1.sample import rejection_sampler as sampler
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    outputs = []
    for batch in batches:
        drafts, requests = batch["num_draft_tokens"], len(batch["num_draft_tokens"])
        tokens = sum(drafts)
        temperature = torch.tensor([t if t > 0 else float(sampler.GREEDY_TEMPERATURE) for t in batch["temperature"]],
                                   dtype=torch.float32, device=device)
        metadata = SamplingMetadata(
            temperature=temperature, all_greedy=all(t == 0 for t in batch["temperature"]),
            all_random=all(t > 0 for t in batch["temperature"]), top_p=None, top_k=None, generators={},
            max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
            frequency_penalties=torch.zeros(requests), presence_penalties=torch.zeros(requests),
            repetition_penalties=torch.ones(requests), output_token_ids=[[] for _ in range(requests)],
            allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors())
        uniforms = torch.tensor(batch["uniforms"], dtype=torch.float64, device=device)
        noise = torch.tensor(batch["exponentials"], dtype=torch.float64)
        target = torch.tensor(batch["target_logits"], dtype=torch.float32, device=device)[:tokens]
        cu = torch.tensor(list(__import__("itertools").accumulate(drafts)), dtype=torch.int32, device=device)
        original_uniforms, original_exponential = sampler.generate_uniform_probs, torch.Tensor.exponential_
        sampler.generate_uniform_probs = _returning(uniforms)
        torch.Tensor.exponential_ = _filling(noise)
        try:
            out = sampler.rejection_sample(
                torch.tensor(batch["draft_token_ids"], dtype=torch.int64, device=device), drafts,
                max(drafts + [0]), cu,
                torch.tensor(batch["draft_probs"], dtype=torch.float32, device=device) if tokens else None,
                target, torch.tensor(batch["bonus_token_ids"], dtype=torch.int64, device=device), metadata)
        finally:
            sampler.generate_uniform_probs, torch.Tensor.exponential_ = original_uniforms, original_exponential
        outputs.append(out.cpu().tolist())
    return outputs


def _returning(uniforms):
    """``generate_uniform_probs`` handing over the batch's acceptance uniforms."""
    return lambda *args, **kwargs: uniforms


def _filling(noise):
    """``Tensor.exponential_`` filling q [B, V] with the batch's exponential noise (in the tensor's dtype and
    device), the only exponential draw ``rejection_sample`` makes without request seeds."""
    def exponential_(self, *args, **kwargs):
        return self.copy_(noise[: self.shape[0]].to(dtype=self.dtype, device=self.device).reshape(self.shape))

    return exponential_


def interpreted(batches: list[dict], timeout: float) -> list:
    """``run_batches`` on the CPU under Triton's interpreter, in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "batches.json"
        source.write_text(json.dumps(batches))
        env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run([sys.executable, __file__, "--child", str(source)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise SystemExit(f"engine_device_parity: the interpreted run failed: "
                             f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=400.0, help="seconds for the interpreted half")
    parser.add_argument("--interpreted-only", action="store_true", help="run the CPU half alone (no GPU)")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:  # the interpreted half: TRITON_INTERPRET=1 is set by the parent
        print(json.dumps(run_batches(json.loads(args.child.read_text()), "cpu")))
        return 0
    if not 1 <= args.batches <= 10_000:
        print(f"engine_device_parity: --batches {args.batches} is out of range: give 1 to 10000", file=sys.stderr)
        return 2
    batches = make_batches(args.batches, args.seed)
    start = time.monotonic()
    cpu = interpreted(batches, args.timeout)
    seconds_interpreted = time.monotonic() - start
    result = {"batches": args.batches, "seed": args.seed, "interpreted_seconds": round(seconds_interpreted, 1)}
    if args.interpreted_only:
        result["interpreted"] = cpu
    else:
        import torch

        if not torch.cuda.is_available():
            print("engine_device_parity: no CUDA device here: run with --interpreted-only, or on a GPU machine",
                  file=sys.stderr)
            return 2
        start = time.monotonic()
        gpu = run_batches(batches, "cuda")
        result["compiled_seconds"] = round(time.monotonic() - start, 1)
        rows = [{"batch": index, "identical": a == b,
                 "first_difference": None if a == b else next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)}
                for index, (a, b) in enumerate(zip(cpu, gpu))]
        result.update(identical=sum(row["identical"] for row in rows), rows=rows,
                      device=torch.cuda.get_device_name(0))
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({key: value for key, value in result.items() if key not in ("rows", "interpreted")}))
    return 0 if args.interpreted_only or result["identical"] == args.batches else 1


if __name__ == "__main__":
    sys.exit(main())
