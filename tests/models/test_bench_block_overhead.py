"""``benchmarks/bench_block_overhead.py`` (issue 56, item 6, prepared for a GPU): its per-block arithmetic against
hand-made block records, a smoke run on the tiny pair at Qwen's vocabulary writing its result file, and its
refusals on one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its sibling modules (measure, bench_forward)
    return load_script("benchmarks/bench_block_overhead.py", "bench_block_overhead_under_test")


def test_the_overhead_is_the_share_of_the_target_step_after_the_first_block(bench):
    from verispec.models.generation import BlockRecord, Generation

    def block(target, verify, cache, select):
        return BlockRecord(accepted=1, emitted=2, tree_size=3, target_calls=1, draft_calls=3, drafting_s=0.5,
                           target_s=target, verify_s=verify, cache_s=cache, select_s=select)

    # the first block pays one-time costs and is left out; the others' shares are 0.2, 0.1 and 0.3
    blocks = [block(1.0, 9.0, 9.0, 9.0), block(1.0, 0.1, 0.05, 0.05), block(2.0, 0.1, 0.1, 0.0),
              block(1.0, 0.2, 0.1, 0.0)]
    row = bench.block_row("m", "s", Generation(prompt_tokens=[0], tokens=[1] * 6, text="", blocks=blocks))
    assert row["blocks"] == 3 and row["overhead_median"] == pytest.approx(0.2, abs=1e-12)
    assert row["overhead_of_sums"] == pytest.approx((0.2 + 0.2 + 0.3) / 4.0, abs=1e-12)
    assert row["target_ms"] == pytest.approx(1000.0) and row["verify_ms"] == pytest.approx(100.0)


def test_a_tiny_run_writes_every_method_and_sampling(bench, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "overhead.json"
    assert bench.main(["--tiny", "--tokens", "6", "--prompt-length", "8", "--static", "specinfer@chain:2",
                       "--static", "globalres@iid:2,1", "--result", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["record"]["command"].startswith("python benchmarks/bench_block_overhead.py --tiny")
    assert result["vocab"] == 151_936 and result["goal"] == 0.10 and result["dtype"] == "float32"
    methods = {(row["sampling"], row["method"]) for row in result["rows"]}
    assert methods == {(sampling, method) for sampling in bench.DEFAULT_SAMPLINGS
                       for method in ("specinfer chain:2", "globalres iid:2,1", "selector")}
    for row in result["rows"]:
        assert row["blocks"] >= 1 and row["target_ms"] > 0 and row["overhead_median"] >= 0


def test_bad_input_is_refused_on_one_line(bench, tmp_path):
    cases = [(["--static", "specinfer"], "VERIFIER@TREE"), (["--tokens", "1"], "--tokens"),
             (["--tiny", "--static", "nosuchrule@chain:2", "--tokens", "4", "--prompt-length", "4", "--selector",
               "none", "--sampling", "temperature=1"], "nosuchrule"),
             (["--tiny", "--sampling", "warmth=3", "--selector", "none"], "warmth")]
    for arguments, expected in cases:
        with pytest.raises(SystemExit) as refused:
            bench.main(arguments)
        message = str(refused.value.code)
        assert "\n" not in message and expected in message and message.startswith("bench_block_overhead:")
