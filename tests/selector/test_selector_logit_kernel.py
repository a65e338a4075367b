"""The compiled kernel of the logit route's moments (``verispec.native``, ``kernels.c``):

* its moments equal a float64 reference written here (scipy's logsumexp, softmax laws, their dot products) to 1e-6
  relative (2e-7 absolute near 0) at sizes around its block of 2,048 entries and at Qwen's V = 151,936, at three
  temperatures; its argmax and argmin are numpy's first ones, ties across blocks included;
* an infinite or NaN logit anywhere gives NaN moments, and the features then come from the kernel of the full laws;
* the features through it equal the numpy route's (``kernels_off``) to the float32 kernel's tolerance;
* a broken build (the controls: a cross term of the wrong row, a block's shift dropped, ``largest`` keeping the
  first entries it sees) fails the self-check and is not used; no compiler, a compiler that fails, or
  ``VERISPEC_KERNELS=0`` leave the numpy and torch routes, with the reason;
* a build is reused across processes (the cache file named by a digest of source, flags, compiler and CPU), and a
  damaged cached build is compiled again.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from verispec import native
from verispec.latency import LatencyModel
from verispec.models.block_context import BlockContext, PositionLaw
from verispec.models.sampling import Sampling
from verispec.selector.actions import SelectorError
from verispec.selector.features import context_features, scalar_features

LATENCY = LatencyModel.from_ratio(20)
VOCAB = 151_936

needs_kernel = pytest.mark.skipif(native.kernel_status().startswith("numpy and torch routes"),
                                  reason="no usable C compiler on this machine")


def _expected(rows, inverse_temperature):
    """The moments in float64, from the definitions: L = logsumexp(y / T), x = exp(y / T - L)."""
    shifted = [row.astype(np.float64) - float(row.max()) for row in rows]
    partitions = [float(logsumexp(y * inverse_temperature)) for y in shifted]
    laws = [np.exp(y * inverse_temperature - partition) for y, partition in zip(shifted, partitions)]
    (xp, xq, xr), (yp, yq, yr) = laws, shifted
    return np.array([*partitions, xp @ yp, xq @ yq, xr @ yr, xp @ yq, xq @ yp, np.minimum(xp, xq).sum(),
                     *(float(np.float32(row.min()) - np.float32(row.max())) for row in rows)])


def _lanes() -> int:
    """The kernels' float32 lanes as kernels.c chooses them under -march=native: 16 with AVX-512, 8 with AVX, else 4
    (read from the CPU's flags; 4, the most terms a lane, where they cannot be read)."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return 4
    return 16 if "avx512f" in flags else 8 if "avx" in flags else 4


def _rows(size, seed, scale=3.0):
    generator = np.random.default_rng(seed)
    return [(generator.normal(size=size) * scale).astype(np.float32) for _ in range(3)]


@needs_kernel
@pytest.mark.parametrize("size", [1, 5, 2047, 2048, 2049, 6000, VOCAB])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.25])
def test_the_kernel_equals_float64_moments(size, temperature):
    rows = _rows(size, size)
    values, where = native.logit_moments(rows, 1 / temperature)
    # float32 exponentials summed in float32 lanes within a block of 2,048 and in double across blocks: a sum of n
    # positive float32 terms is within n * 2^-24 relative (n = 2,048 / lanes terms a lane, plus a few ulps of exp),
    # and L = log s within that much absolutely
    bound = (2048 / _lanes() + 4) * 2.0 ** -24
    np.testing.assert_allclose(values, _expected(rows, 1 / temperature), rtol=bound, atol=bound)
    assert where == [int(row.argmax()) for row in rows] + [int(row.argmin()) for row in rows]


@needs_kernel
def test_first_maxima_and_minima_across_blocks():
    rows = _rows(10_000, 1)
    for row, places in zip(rows, ((3000, 9999), (100, 2048), (4095, 4096))):
        row[list(places)] = row.max() + 2
    rows[0][[1, 7000]] = rows[0].min() - 2
    rows[2][[9998, 9999]] = rows[2].min() - 2
    _, where = native.logit_moments(rows, 1.0)
    assert where == [3000, 100, 4095, 1, int(rows[1].argmin()), 9998]


@needs_kernel
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("row,place", [(0, 0), (1, 2048), (2, 5999)])
def test_a_logit_that_is_not_finite_gives_nan_moments(value, row, place):
    rows = _rows(6000, 2)
    rows[row][place] = value
    values, _ = native.logit_moments(rows, 1.0)
    assert np.isnan(values).all()


@needs_kernel
def test_features_with_a_non_finite_logit_come_from_the_full_laws():
    sampling = Sampling(1.0)
    logits = [torch.from_numpy(row) for row in _rows(VOCAB, 3)]
    logits[1][11] = -math.inf  # a token the draft never takes: its law is 0 there
    laws = [PositionLaw(sampling, logits=row) for row in logits]
    context = BlockContext((1, 2, 3), 3, *laws, None, sampling)
    got = context_features(context, latency=LATENCY)
    kernel = scalar_features(context.p_prev, context.q_prev, context.q_root, context_length=3, sampling=sampling,
                             latency=LATENCY)
    np.testing.assert_array_equal(got, kernel)


def _law_features(p, q, r):
    """The six law features in float64 from float64 laws [V] (no zeros in these tests)."""
    def entropy(x):
        return float(-(x * np.log(x)).sum())

    def divergence(x, y):
        return float((x * (np.log(x) - np.log(y))).sum())

    return np.array([entropy(p), entropy(q), entropy(r), divergence(p, q), divergence(q, p),
                     float(np.abs(p - q).sum())])


@needs_kernel
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("given", [0, 2])
def test_features_through_the_kernel_equal_the_numpy_routes(temperature, given):
    """Both routes equal the float64 features of the laws to the float32 kernel's tolerance (y / T rounded to
    float32 moves log x by up to 2.4e-6 at |y / T| = 40), and each other to that tolerance too (the numpy route's
    float32 BLAS sums lose up to 5e-6 of a KL of 15 nats here, the kernel's blocks summed in double 1e-7)."""
    sampling = Sampling(temperature)
    logits = [torch.from_numpy(row) for row in _rows(VOCAB, 4)]
    laws = [PositionLaw(sampling, logits=row, law=sampling.probabilities(row) if index < given else None)
            for index, row in enumerate(logits)]
    context = BlockContext((1, 2, 3), 3, *laws, None, sampling)
    got = context_features(context, latency=LATENCY)
    with native.kernels_off():
        assert native.logit_moments([row.numpy() for row in logits], 1.0) is None
        numpy_route = context_features(context, latency=LATENCY)
    expected = _law_features(*(sampling.probabilities(row).numpy() for row in logits))
    np.testing.assert_allclose(got[:6], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(numpy_route[:6], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, numpy_route, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(got, numpy_route)  # two computations, not one route twice


@needs_kernel
def test_the_kernel_checks_a_given_law_at_its_argmax_and_argmin():
    sampling = Sampling(1.0)
    logits = [torch.from_numpy(row) for row in _rows(VOCAB, 5)]
    wrong = torch.roll(sampling.probabilities(logits[0]), 1)
    rows = [PositionLaw(sampling, logits=logits[0], law=wrong), *(PositionLaw(sampling, logits=row)
                                                                  for row in logits[1:])]
    with pytest.raises(SelectorError, match="p_prev's law is not the sampling law of its logits"):
        context_features(BlockContext((1, 2, 3), 3, *rows, None, sampling), latency=LATENCY)


def _mutated(tmp_path: Path, old: str, new: str) -> Path:
    source = native.SOURCE.read_text()
    assert source.count(old) == 1
    path = tmp_path / "kernels.c"
    path.write_text(source.replace(old, new))
    return path


@needs_kernel
@pytest.mark.parametrize("old,new", [("apq += ep * yq", "apq += ep * yp"),  # x_p.y_q read as x_p.y_p
                                     ("dots[0] += c[0] * (row[6] + shift[0] * row[3]);",
                                      "dots[0] += c[0] * row[6];"),  # a block's shift to the global maximum dropped
                                     ("if (kept == count && !(value > values[count - 1])) return kept;",
                                      "if (kept == count) return kept;")],  # largest: the first entries kept
                         ids=["cross term", "block shift", "largest keeps the first"])
def test_a_broken_kernel_fails_its_self_check_and_is_not_used(tmp_path, monkeypatch, old, new):
    monkeypatch.setattr(native, "SOURCE", _mutated(tmp_path, old, new))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "cache"))
    assert native.logit_moments(_rows(10, 0), 1.0) is None
    status = native.kernel_status()
    assert status.startswith("numpy and torch routes: the compiled kernels are not usable (the kernel's ")
    assert "\n" not in status


@pytest.mark.parametrize("setting,reason", [({"VERISPEC_KERNELS": "0"}, "are off (VERISPEC_KERNELS=0)"),
                                            ({"VERISPEC_KERNELS": "Off"}, "are off (VERISPEC_KERNELS=off)"),
                                            ({"VERISPEC_KERNELS": "maybe"},
                                             "VERISPEC_KERNELS = 'maybe' is neither on (1) nor off (0)"),
                                            ({"CC": "/nonexistent/cc"},
                                             "$CC = '/nonexistent/cc' is not a program (set CC to a C compiler"),
                                            ({"CC": "false"}, "false failed")])
def test_without_a_usable_compiler_the_features_take_the_numpy_route(tmp_path, monkeypatch, setting, reason):
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path))
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    assert native.logit_moments(_rows(10, 0), 1.0) is None
    assert reason in native.kernel_status() and native.kernel_status().startswith("numpy and torch routes")
    sampling = Sampling(1.0)
    laws = [PositionLaw(sampling, logits=torch.from_numpy(row)) for row in _rows(VOCAB, 6)]
    context = BlockContext((1, 2, 3), 3, *laws, None, sampling)
    kernel = scalar_features(context.p_prev, context.q_prev, context.q_root, context_length=3, sampling=sampling,
                             latency=LATENCY)
    np.testing.assert_allclose(context_features(context, latency=LATENCY), kernel, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_a_build_is_reused_and_a_new_source_builds_anew(tmp_path, monkeypatch):
    compiler, _ = native._compiler()
    first, content, compiled = native._build(compiler, tmp_path)
    stamp = first.stat().st_mtime_ns
    assert compiled and native._build(compiler, tmp_path) == (first, content, False)
    assert first.stat().st_mtime_ns == stamp
    monkeypatch.setattr(native, "SOURCE", _mutated(tmp_path, "#define STATS 11", "#define STATS 11 /* edited */"))
    second, _, compiled = native._build(compiler, tmp_path)
    assert compiled and second != first
    assert sorted(path.name for path in tmp_path.glob("*.so")) == sorted([first.name, second.name])


@needs_kernel
@pytest.mark.parametrize("damage", ["not a library", "a library that fails its check"])
def test_a_damaged_cached_build_is_compiled_again(tmp_path, monkeypatch, damage):
    """A cached build that does not load, or loads and fails the self-check (a file copied from elsewhere), is
    replaced by a fresh build once, and the kernels are used."""
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path))
    compiler, _ = native._compiler()
    path, _, _ = native._build(compiler, tmp_path / "kernels")
    if damage == "not a library":
        path.write_bytes(b"not a shared library")
    else:  # a build of a broken source under the good build's name
        monkeypatch.setattr(native, "SOURCE", _mutated(tmp_path, "apq += ep * yq", "apq += ep * yp"))
        broken, _, _ = native._build(compiler, tmp_path / "broken")
        monkeypatch.undo()
        monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path))
        path.write_bytes(broken.read_bytes())
    monkeypatch.setattr(native, "_loaded", {})
    # the damaged bytes do not match the sha256 recorded at the build: compiled again before anything is loaded
    assert native.kernel_status().startswith(f"compiled kernels {path} (compiled again")
    names = sorted(entry.name for entry in (tmp_path / "kernels").iterdir())
    assert names == sorted([path.name, path.with_suffix(".json").name])  # no copy, no temporary left
    values, _ = native.logit_moments(_rows(VOCAB, 8), 1.0)
    np.testing.assert_allclose(values, _expected(_rows(VOCAB, 8), 1.0), rtol=1e-6, atol=2e-7)
