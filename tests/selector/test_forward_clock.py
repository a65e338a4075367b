"""benchmarks/forward_clock.py's steady state: the cut after the first block that the decoding benchmarks take for
transformers' ``generate`` and verispec's decoders alike (issue 66, items 1-2). transformers feeds the whole prompt
in its first target forward, verispec prefills all of it but its last token first; both first blocks are the target
forward that feeds the prompt's last token."""

from __future__ import annotations

import time

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_models import save_tiny_pair

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _clock_module():
    return load_script("benchmarks/forward_clock.py", "forward_clock_under_test")


def _clock(spans: dict):
    clock = _clock_module().ForwardClock.__new__(_clock_module().ForwardClock)
    clock.spans = spans
    return clock


def test_the_window_starts_after_the_forward_that_feeds_the_prompts_last_token():
    """Hand-made calls, the window and its counts worked out by hand: a 10-token prompt (its last token at 9)."""
    verispec = {"target": [(0.0, 3.0, 0, 8), (3.5, 4.5, 9, 12), (5.0, 6.0, 12, 15), (6.5, 7.5, 13, 16)],
                "draft": [(3.1, 3.2, 9, 9), (4.6, 4.7, 12, 12), (6.1, 6.2, 13, 13)]}
    window = _clock(verispec).steady(10, 9, end=8.0)
    # after 4.5: the second block fed from 12 (the first made 12 - 9 = 3 tokens), 9 - 3 = 6 tokens in 2 blocks
    assert window == {"steady_s": 3.5, "steady_tokens": 6, "steady_blocks": 2,
                      "steady_forward_s": pytest.approx(0.1 + 1.0 + 0.1 + 1.0)}
    # transformers: no prefill, the first target forward feeds the prompt and the first drafts (0..12)
    hf = {"target": [(0.5, 3.0, 0, 12), (3.5, 4.5, 11, 14)], "draft": [(0.0, 0.4, 0, 9), (3.1, 3.2, 11, 11)]}
    window = _clock(hf).steady(10, 5, end=5.0)
    assert window == {"steady_s": 2.0, "steady_tokens": 5 - (11 - 9), "steady_blocks": 1,
                      "steady_forward_s": pytest.approx(1.1)}
    # a generation that ended in its first block has an empty steady state; no forward of the prompt is refused
    assert _clock({"target": [(0.0, 1.0, 0, 12)], "draft": []}).steady(10, 3, end=1.5)["steady_tokens"] == 0
    with pytest.raises(Exception, match="no first block: none of 1 target forwards fed position 9"):
        _clock({"target": [(0.0, 1.0, 0, 8)], "draft": []}).steady(10, 3, end=1.5)


def _plain_windows(monkeypatch=None, broken=False):
    """Plain sampling of 8 tokens from the tiny target, by transformers' ``generate`` and verispec's
    ``sample_target``: each one's steady state (with ``broken``, a twin that starts the window after the first
    target forward, whatever it fed)."""
    import tempfile
    from pathlib import Path

    from verispec.models import Sampling, load_pair, sample_target

    forward_clock = _clock_module()
    real_decoding = load_script("experiments/real_decoding.py", "real_decoding_under_test")
    target, draft = save_tiny_pair(Path(tempfile.mkdtemp()) / "pair")
    pair = load_pair(target, draft)
    if broken:
        def first_call(self, prompt_length, new_tokens, end):
            start, later = self.spans["target"][0][1], self.spans["target"][1:]
            return {"steady_s": end - start, "steady_tokens": new_tokens - 1, "steady_blocks": len(later),
                    "steady_forward_s": 0.0}
        monkeypatch.setattr(forward_clock.ForwardClock, "steady", first_call)
    prompt = "the tiny pair's prompt goes here"
    length, windows = len(pair.encode(prompt)), {}
    with forward_clock.ForwardClock(pair) as clock:
        row = real_decoding.run_hf(pair, prompt, "hf-plain", Sampling(1.0, 5, None), 8, 0)
        windows["hf"] = (row["new_tokens"], clock.steady(length, row["new_tokens"], time.perf_counter()))
    with forward_clock.ForwardClock(pair) as clock:
        tokens = sample_target(pair, prompt, 8, Sampling(1.0, 5, None), 0).summary()["new_tokens"]
        windows["verispec"] = (tokens, clock.steady(length, tokens, time.perf_counter()))
    return windows


def test_both_decoders_plain_sampling_is_cut_alike_one_token_a_block_after_the_first():
    """One token a target forward: after the first block, tokens - 1 tokens in tokens - 1 forwards, for both, however
    each fed its prompt (transformers in one forward, verispec's prefill and then the last token)."""
    for tokens, window in _plain_windows().values():
        assert tokens >= 1
        assert window["steady_tokens"] == window["steady_blocks"] == tokens - 1
        assert window["steady_s"] > 0


def test_a_cut_after_the_first_target_forward_is_caught_counting_verispecs_first_block(monkeypatch):
    """Negative control: starting after the first target forward counts verispec's first block (its first forward is
    the prefill) but not transformers': the check above fails on it."""
    windows = _plain_windows(monkeypatch, broken=True)
    tokens, window = windows["verispec"]
    assert window["steady_blocks"] == tokens != tokens - 1
    with pytest.raises(AssertionError):
        for tokens, window in windows.values():
            assert window["steady_tokens"] == window["steady_blocks"] == tokens - 1
