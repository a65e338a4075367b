"""vLLM's sampler output keeps SamplerOutput's padding (issue 76, mutants; ``verispec.engines.vllm.check_padding``,
stated beside the checks so that this test process never imports vLLM: a process that has imported it loses the
crash location of a later sandbox's segfault, tests/cli/test_supervised_exits.py): each row of ``sampled_token_ids``
is its tokens (0 to V - 1), then -1 to its end, as vllm/v1/outputs.py documents and the model runner counts accepted
tokens by. ``parse_output`` reads the sampler module's own constant, so a sampler
whose placeholder moved (the mutant ``PLACEHOLDER_TOKEN_ID = ~1``, i.e. -2, which vLLM's own test kills only through
test_frequency_penalties in some 50 minutes) reads right through it; the check does not.

Hand-made rows: well-formed ones pass (a full row, a padded one, a row of padding alone); a -2, a token past the
vocabulary, and a token after the padding are each refused naming the entry. Where the pinned wheel is installed,
the mutant of the shipped file RAISES on v1-greedy and the shipped file passes (the control)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engines import shipped_sampler_mutant, vllm_release

torch = pytest.importorskip("torch")

from verispec.engines.vllm import PADDING, PaddingContractError, check_padding  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_well_formed_rows_pass():
    assert PADDING == -1  # vllm/v1/outputs.py: "PLACEHOLDER_TOKEN_ID (-1 by default) is used for padding"
    check_padding(torch.tensor([[0, 2, 1], [1, -1, -1], [-1, -1, -1]], dtype=torch.int32), 3)


@pytest.mark.parametrize("rows, found", [
    ([[1, -2, -2]], "wrote -2 at request 0, position 1"),
    ([[0, 1, -1], [3, -1, -1]], "wrote 3 at request 1, position 0"),
    ([[1, -1, 2]], "wrote the token 2 after the padding -1 at request 0, position 2"),
])
def test_rows_that_break_the_padding_are_refused_naming_the_entry(rows, found):
    with pytest.raises(PaddingContractError, match=found) as error:
        check_padding(torch.tensor(rows, dtype=torch.int32), 3)
    assert "\n" not in str(error.value) and "vllm/v1/outputs.py" in str(error.value)


def _greedy(source: Path | None, tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / f"verdict-{'mutant' if source else 'shipped'}.json"
    argv = [sys.executable, "-m", "verispec", "check-engine", "vllm", "--check", "v1-greedy", "--tree", "chain:1",
            "--json-out", str(out)] + (["--source", str(source)] if source else [])
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.returncode, json.loads(out.read_text())


@pytest.mark.skipif(vllm_release() != "0.33.0", reason="the pinned vLLM wheel is not installed here "
                                                         "(verispec/engines/requirements/vllm.txt)")
def test_a_sampler_that_pads_with_minus_two_raises_and_the_shipped_one_passes(tmp_path):
    mutant = shipped_sampler_mutant(tmp_path, "PLACEHOLDER_TOKEN_ID: tl.constexpr = -1",
                                    "PLACEHOLDER_TOKEN_ID: tl.constexpr = ~1")
    status, verdict = _greedy(mutant, tmp_path)
    assert status == 4, verdict
    row = verdict["checks"][0]
    assert row["verdict"] == "RAISES" and not row["as_expected"]
    assert "wrote -2" in json.dumps(row) and "PaddingContractError" in json.dumps(row)
    status, verdict = _greedy(None, tmp_path)  # the control: the shipped file keeps the padding
    assert status == 0 and verdict["checks"][0]["verdict"] == "LOSSLESS", verdict
