"""``verispec check-engine mlx-lm``: refusals on one line, and, where mlx-lm is installed (MLX's Linux CPU backend),
the shipped ``speculative_generate_step`` read LOSSLESS exactly and a planted copy caught at its closed-form TV.

The planted copy (``tests/engines/mlx_planted.py``) reads the draft's token where the target's sample belongs, so
every draft is kept: at one draft and K + 1 = 2 tokens on a context-free problem, the first token follows the draft
law q and the second the target's p (its sample after the kept draft), so the block's exact TV is TV(p, q).
"""

from __future__ import annotations

import numpy as np
import pytest

from verispec.engines import EngineError
from verispec.engines import mlx_lm as mlx_adapter


def _not_installed() -> str | None:
    """Why mlx-lm cannot be checked here, read without importing it (None: it is installed at a release the adapter
    knows): every test process collects this module, and mlx_lm imports transformers and torch."""
    try:
        mlx_adapter.check_release()
    except EngineError as error:
        return str(error)
    return None


REASON = _not_installed()
needs_mlx = pytest.mark.skipif(REASON is not None, reason=f"mlx-lm cannot be checked here: {REASON}")
P, Q = (0.6, 0.4), (0.3, 0.7)


def _skip_unless_importable() -> None:
    """Skip the calling test where the installed wheel does not import here (MLX's Linux CPU backend missing)."""
    import importlib

    try:
        importlib.import_module("mlx.core")
        importlib.import_module("mlx_lm.generate")
    except Exception as error:  # the wheel's own import
        pytest.skip(f"mlx-lm cannot be checked here: mlx-lm does not import here ({type(error).__name__}: {error})")


def _check(function):
    from verispec.external.check import check_external
    from verispec.simulator import ContextFreeProblem

    return check_external(function, "step", "chain:1", problem=ContextFreeProblem(list(P), list(Q)), mode="exact",
                          name="mlx-lm", time_budget=900, sampling="temperature=1", rng="capture",
                          threshold=mlx_adapter.THRESHOLD)


def test_releases_outside_the_range_are_refused_with_the_range():
    with pytest.raises(EngineError, match=r"mlx-lm 0\.31\.0 is not a release .* knows 0\.32\.2"):
        mlx_adapter.check_release("0.31.0")
    assert mlx_adapter.check_release("0.31.0", any_release=True) == "0.31.0"
    assert mlx_adapter.check_release("0.32.2") == "0.32.2"


@needs_mlx
@pytest.mark.slow  # some 9,000 calls of the step at 2-7 ms
def test_the_shipped_step_is_lossless_exactly():
    _skip_unless_importable()
    from verispec.engines.mlx_lm_step import speculative_generate

    report = _check(speculative_generate)
    assert report.verdict.word == "LOSSLESS" and report.tv_distance < 1e-6  # float32 logits


@needs_mlx
@pytest.mark.slow
def test_a_planted_verification_that_keeps_every_draft_is_caught_at_its_closed_form():
    _skip_unless_importable()
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mlx_planted import keeps_every_draft

    expected = 0.5 * np.abs(np.array(P) - np.array(Q)).sum()
    report = _check(keeps_every_draft)
    assert report.verdict.word == "LOSSY" and abs(report.tv_distance - expected) < 1e-6
