"""Global Resolution's compiled token passes (``verispec.native.series``, issue 66, item 5): the cluster series
(locate, moments, evaluation, the final law's scaling) and the grid's carrying and Hermite interpolation in C are
held to the numpy route bit for bit (they do its arithmetic operation for operation), the series to a direct sum of
e^(-t w) over the tokens (an independent computation), and the whole rule to the same answer with the kernels off.
The points' safeguarded Newton (two fused passes a step, numpy's exponentials and logarithms between them) is held
to the numpy route's steps the same way. Broken twins (a kernel with its last term dropped, a final law off by one
part in 10^12, a Newton step that ignores the slope of J) are caught."""

from __future__ import annotations

import numpy as np
import pytest

from tests.verifiers.test_globalres_fast_paths import small_node
from tests.verifiers.test_globalres_near_equal import pair_sum_law
from verispec import native
from verispec.lp_analysis import luce_solver
from verispec.lp_analysis.global_resolution import resolve
from verispec.lp_analysis.luce_integrals import TERMS, Expansion, Nodes
from verispec.native import kernels_off, series

needs_kernels = pytest.mark.skipif(series.library() is None, reason=f"no series kernels: {series.status()}")


def _expansion_case(seed: int, count: int):
    """An expansion over log weights [-6, 3] and ``count`` tokens in it (ties of cluster, exact cluster centres,
    both ends, zeros of mass)."""
    rng = np.random.default_rng(seed)
    nodes = Nodes.covering(-6.0, 3.0, 1)
    expansion = Expansion(nodes, -6.0, 3.0)
    u = rng.uniform(-6.0, 3.0, count)
    u[:4] = [-6.0, 3.0, 0.0, 0.0625]
    mass = rng.random(count) * (rng.random(count) > 0.2)
    return nodes, expansion, u, mass


@needs_kernels
@pytest.mark.parametrize("count", [9, 3_000])
def test_the_series_kernels_are_the_numpy_route_bit_for_bit(count):
    """Located tokens, sums at the nodes, values with slopes and the final law's lo + K w J(w): equal to the numpy
    route's (kernels off) to the last bit, and the sums within 1e-13 of sum_x mass_x e^(-t_l w_x) summed directly."""
    nodes, expansion, u, mass = _expansion_case(count, count)
    coefficients = expansion.coefficients(np.random.default_rng(1).random(nodes.size) * nodes.weight, TERMS)
    weight = np.exp(u)

    def route():
        located = expansion.locate(u)
        return (located.index, located.eps, expansion.sums(located, mass, TERMS),
                *expansion.evaluate(coefficients, located, derivative=True),
                expansion.chosen(coefficients, located, weight, 3, 0.125))

    compiled = route()
    with kernels_off():
        reference = route()
    for got, expected in zip(compiled, reference):
        np.testing.assert_array_equal(got, expected)
    direct = mass @ np.exp(-np.outer(weight, nodes.t))
    assert np.abs(compiled[2] - direct).max() < 1e-13 * max(mass.sum(), 1.0)


@needs_kernels
def test_a_kernel_with_a_term_dropped_fails_the_self_check_and_the_comparison(monkeypatch):
    """Negative controls: the moments kernel with its last term dropped fails the check run before the library is
    used (an OSError naming the moments), and its cluster moments differ from sum mass eps^k computed here (the
    comparison the first test makes through the numpy route), which the right kernel's equal bit for bit."""
    library = dict(series.library())
    whole = library["moments"]
    library["moments"] = lambda index, eps, mass, n, size, terms, out: whole(index, eps, mass, n, size, terms - 1, out)
    with pytest.raises(OSError, match="moments"):
        series._self_check(library)
    _, expansion, u, mass = _expansion_case(3, 500)
    located = expansion.locate(u)
    expected = np.array([np.bincount(located.index, mass * located.eps ** k, minlength=expansion.size)
                         for k in range(TERMS)])
    right = series.moments(located.index, located.eps, mass, expansion.size, TERMS)
    np.testing.assert_allclose(right, expected, rtol=1e-13, atol=1e-300)
    monkeypatch.setattr(series, "library", lambda: library)
    wrong = series.moments(located.index, located.eps, mass, expansion.size, TERMS)
    assert np.abs(wrong - expected).max() > 1e-20 and not np.allclose(wrong, expected, rtol=1e-13, atol=1e-300)


def _zipf_node(size: int, seed: int):
    rng = np.random.default_rng(seed)
    logits = -1.1 * np.log(rng.permutation(size) + 1.0)
    p, q = np.exp(logits), np.exp(0.8 * logits + 0.5 * rng.standard_normal(size))
    return p / p.sum(), q / q.sum()


@needs_kernels
def test_the_rule_is_the_same_with_the_kernels_off(monkeypatch):
    """Small nodes (V = 7: ties, p = 0, q = 0, top-k; K = 2, 3) and a grid node (V = 2,500 Zipf, K = 2: more than
    GRID_POINTS solved, so the carrying and Hermite kernels run, and more than BINS tokens): weights and p_I equal
    with and without the kernels, bit for bit, and the grid node's p_I the direct pair sum of its weights (1e-12 in
    L1). The kernels did run (their calls counted). Negative control: the final law's kernel off by one part in
    10^12 is caught."""
    calls = dict.fromkeys(("evaluate", "carry", "hermite", "classes", "bins", "newton", "buckets", "light", "logit",
                           "window_sums", "window_coefficients"), 0)
    for name in calls:
        original = getattr(series, f"_run_{name}")
        monkeypatch.setattr(series, f"_run_{name}", lambda *a, _f=original, _n=name: calls.__setitem__(
            _n, calls[_n] + 1) or _f(*a))
    rng = np.random.default_rng(68)
    nodes = [(*small_node(rng), 2 + index % 2) for index in range(8)] + [(*_zipf_node(2_500, 5), 2)]
    for p, q, num_drafts in nodes:
        compiled = resolve(p, q, num_drafts, method="integrals")
        with kernels_off():
            reference = resolve(p, q, num_drafts, method="integrals")
        np.testing.assert_array_equal(compiled.weights, reference.weights)
        np.testing.assert_array_equal(compiled.intermediate, reference.intermediate)
    assert min(calls.values()) > 0, calls
    assert compiled.inner.sum() > luce_solver.GRID_POINTS
    exact = pair_sum_law(q, compiled.weights, compiled.inner)
    assert np.abs(compiled.intermediate - exact).sum() < 1e-12
    evaluate = series._run_evaluate

    def perturbed(library, coefficients, index, eps, derivative, weight, *rest):
        found = evaluate(library, coefficients, index, eps, derivative, weight, *rest)
        return found if weight is None else found * (1 + 1e-12)  # the final law's values only

    monkeypatch.setattr(series, "_run_evaluate", perturbed)
    broken = resolve(p, q, num_drafts, method="integrals")
    assert not np.array_equal(broken.intermediate, reference.intermediate)


@needs_kernels
def test_a_newton_step_without_the_slope_fails_the_self_check_and_moves_the_weights(monkeypatch):
    """Negative control of the fused Newton steps: a step kernel that reads dJ/du as 0 (dy/du = span / rest, the
    slope term dropped) fails the self-check (an OSError naming the Newton step) and, used anyway, gives other
    weights on the V = 2,500 Zipf grid node than the numpy route, whose weights the right kernel gives bit for bit
    (the test above)."""
    library = dict(series.library())
    whole, zeros = library["newton"], np.zeros(10_000)

    def no_slope(points, log_chosen, log_rest, value, slope, rest, span, count, tolerance, u, low, high):
        return whole(points, log_chosen, log_rest, value, zeros.ctypes.data, rest, span, count, tolerance, u, low,
                     high)

    library["newton"] = no_slope
    broken, reference = _caught_then_used(monkeypatch, library, "Newton step")
    assert not np.array_equal(broken.weights, reference.weights)


def _caught_then_used(monkeypatch, library, check: str):
    """The broken ``library`` fails the self-check naming ``check``; then the V = 2,500 Zipf grid node resolved with
    it anyway and with the numpy route: (broken, reference)."""
    with pytest.raises(OSError, match=check):
        series._self_check(library)
    p, q = _zipf_node(2_500, 5)
    with kernels_off():
        reference = resolve(p, q, 2, method="integrals")
    monkeypatch.setattr(series, "library", lambda: library)
    return resolve(p, q, 2, method="integrals"), reference


def _swapped_masses(whole):
    def kernel(log_ratio, p, q, n, low, scale, count, bucket, mass_q, mass_p):
        return whole(log_ratio, p, q, n, low, scale, count, bucket, mass_p, mass_q)
    return kernel


def _last_light_dropped(whole):
    def kernel(solved, n, heavy, m, y, light, extent):
        return whole(solved, n, heavy, m, y, light, extent) - 1
    return kernel


def _rest_ignored(whole):
    zeros = np.zeros(10_000)

    def kernel(ratio, n, low, high, value, rest):
        return whole(ratio, n, low, high, value, zeros.ctypes.data)
    return kernel


@needs_kernels
@pytest.mark.parametrize("name, twin, check", [("buckets", _swapped_masses, "scan masses"),
                                               ("light", _last_light_dropped, "light tokens"),
                                               ("logit finish", _rest_ignored, "logit")])
def test_a_broken_scan_light_or_logit_kernel_fails_the_self_check_and_moves_the_rule(monkeypatch, name, twin,
                                                                                     check):
    """Negative controls of the H* scan's bucket pass (q and p masses swapped), the grid's light tokens (the last
    one dropped) and the logit (log(hi - r) not subtracted): each fails the self-check, naming its part, and, used
    anyway, changes the rule at the V = 2,500 Zipf grid node (H* or the weights), which the right kernels give bit
    for bit (the test above)."""
    library = dict(series.library())
    library[name] = twin(library[name])
    broken, reference = _caught_then_used(monkeypatch, library, check)
    assert not (np.array_equal(broken.inner, reference.inner) and np.array_equal(broken.weights, reference.weights))


def test_the_series_status_names_its_route():
    """The status says whether the compiled series or numpy's route runs, and why."""
    text = series.status()
    assert text.startswith("compiled kernels") or text.startswith("numpy and torch routes")
    assert (series.library() is None) == text.startswith("numpy")
    assert native.kernel_status()  # the selector's kernels are built and kept apart from these
