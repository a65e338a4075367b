"""Probabilities near the float maximum (1e308, 1e308) sum to inf: the refusal is one line, 'probabilities sum to
inf' (issue 64's small input errors), without numpy's two-line 'RuntimeWarning: overflow encountered in reduce'
printed above it, which `exact --target 1e308,1e308` and `exact --problem` with such a row printed before."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

from verispec.errors import InvalidDistributionError
from verispec.simulator import distributions
from verispec.simulator.distributions import as_distribution, float_rows


def _refusal_and_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InvalidDistributionError) as refused:
            call()
    return str(refused.value), [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_vector_that_sums_past_the_float_range_is_one_line_without_a_warning():
    message, runtime_warnings = _refusal_and_warnings(lambda: as_distribution([1e308, 1e308], name="--target"))
    assert message.startswith("--target: probabilities sum to inf, not 1") and runtime_warnings == []


def test_a_problem_file_row_that_sums_past_the_float_range_is_refused_without_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float_rows(np.array([[0.5, 0.5], [1e308, 1e308]])) is None
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_negative_control_without_the_error_state_numpy_warns(monkeypatch):
    """The sums as they were (no np.errstate around them): numpy's overflow warning comes with the refusal."""
    class OldNumpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def errstate(**kwargs):
            return contextlib.nullcontext()

    monkeypatch.setattr(distributions, "np", OldNumpy())
    message, runtime_warnings = _refusal_and_warnings(lambda: as_distribution([1e308, 1e308], name="--target"))
    assert "sum to inf" in message and len(runtime_warnings) == 1
