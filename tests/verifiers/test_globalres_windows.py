"""Global Resolution at a real vocabulary, second round (issue 66, item 5): the expansion's node sums and
coefficients read from its tau sequence in place (``series.window_sums``, ``window_coefficients``: no [T, terms, C]
tables), the node cache's key by NH (UMAC's universal hash, ``series.universal_digest``) and the binned program's
moments over the nodes that cover its own weights (``Nodes.within``). Held to computations written here: the direct
sum of e^(-t w) over tokens and nodes, NH's definition in numpy, and the program's moments over all its nodes. Each
has a broken twin that is caught."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.verifiers.test_globalres_kernels import _caught_then_used
from verispec.lp_analysis.luce_integrals import STEP, TERMS, ChoiceSystem, Expansion, Nodes
from verispec.native import kernels_off, series
from verispec.verifiers.node_cache import NH_FROM, node_key

needs_kernels = pytest.mark.skipif(series.library() is None, reason=f"no series kernels: {series.status()}")


def _windows_case():
    """An expansion over log weights [-5, 4] (11 terms), tokens in it (masses with zeros, clusters left empty at
    both ends) and a node vector with zeros (as e^(-t) underflows)."""
    rng = np.random.default_rng(11)
    nodes = Nodes.covering(-5.0, 4.0, 1)
    expansion = Expansion(nodes, -5.0, 4.0)
    u = rng.uniform(-3.0, 2.0, 700)
    mass = rng.random(700) * (rng.random(700) > 0.2)
    vector = rng.random(nodes.size) * nodes.weight
    vector[-7:] = 0.0
    return nodes, expansion, u, mass, vector


@needs_kernels
def test_the_window_sums_and_coefficients_are_the_direct_sums():
    """Both routes agree bit for bit (the numpy route sums the copied tables in the kernel's order), the node sums
    are sum_x mass_x e^(-t_l w_x) summed directly (1e-13 of the mass) and the coefficients give
    sum_l a_l e^(-t_l w) at the tokens (1e-13 relative)."""
    nodes, expansion, u, mass, vector = _windows_case()
    weight = np.exp(u)

    def route():
        located = expansion.locate(u)
        coefficients = expansion.coefficients(vector, TERMS)
        return expansion.sums(located, mass, TERMS), coefficients, expansion.evaluate(coefficients, located)

    compiled = route()
    with kernels_off():
        reference = route()
    for got, expected in zip(compiled, reference):
        np.testing.assert_array_equal(got, expected)
    decay = np.exp(-np.outer(weight, nodes.t))  # [n, T]
    assert np.abs(compiled[0] - mass @ decay).max() < 1e-13 * mass.sum()
    direct = decay @ vector
    assert np.abs(compiled[2] / direct - 1).max() < 1e-13


def _rows_misaligned(whole):
    def kernel(phases, stride, terms, size, nodes, refine, moments, out):
        return whole(phases, stride, terms, size - 1, nodes, refine, moments, out)  # moments read with a short row
    return kernel


def _nodes_shifted(whole):
    def kernel(sequence, span, terms, size, nodes, refine, vector, work, out):
        return whole(sequence, span, terms, size, nodes - 1, refine, vector + 8, work, out)  # a_(l+1) at node l
    return kernel


@needs_kernels
@pytest.mark.parametrize("name, twin, check", [("window sums", _rows_misaligned, "window sums"),
                                               ("window coefficients", _nodes_shifted, "window coefficients")])
def test_a_broken_window_kernel_fails_the_self_check_and_moves_the_rule(monkeypatch, name, twin, check):
    """Negative controls: node sums that read the moments with rows one cluster short, and coefficients that weigh
    node l by the next node's entry: each fails the
    self-check, naming its part, and, used anyway, changes the weights at the V = 2,500 Zipf grid node."""
    library = dict(series.library())
    library[name] = twin(library[name])
    broken, reference = _caught_then_used(monkeypatch, library, check)
    assert not np.allclose(broken.weights, reference.weights, rtol=1e-9, atol=0)


@needs_kernels
def test_the_node_key_is_nh_under_the_process_key():
    """The key's digest is NH's four sums over p's then q's 32-bit words (NH written here in numpy, under the same
    process key); equal arrays share a key, one ulp or K apart do not; with the kernels off the key is SHA-256's."""
    rng = np.random.default_rng(3)
    p, q = rng.random(1_001), rng.random(1_001)
    key = node_key(p, q, 4)
    words = np.concatenate([p.view(np.uint32), q.view(np.uint32)])
    expected = series.reference_nh(words, series._nh_key(len(words)))
    assert key == ("nh", expected.tobytes(), 1_001, 4)
    assert key == node_key(p.copy(), q.copy(), 4) != node_key(p, q, 3)
    moved = q.copy()
    moved[-1] = np.nextafter(moved[-1], 2.0)
    assert node_key(p, moved, 4) != key
    with kernels_off():
        assert node_key(p, q, 4)[0] == "float"
    # below NH_FROM tokens SHA-256 is the cheaper digest (the kernel call costs more than the whole hash)
    assert node_key(p[:NH_FROM - 1], q[:NH_FROM - 1], 4)[0] == "float"
    assert node_key(p[:NH_FROM], q[:NH_FROM], 4)[0] == "nh"


@needs_kernels
def test_a_broken_nh_kernel_fails_the_self_check_and_collides(monkeypatch):
    """Negative control: an NH kernel that skips the message's last pair of words fails the self-check (naming the
    NH hash) and gives one key to two nodes that differ in q's last entry, which the right kernel tells apart."""
    library = dict(series.library())
    whole = library["nh"]
    library["nh"] = lambda words, n, key, sums: whole(words, n - 2, key, sums)
    with pytest.raises(OSError, match="NH hash"):
        series._self_check(library)
    p, q = np.full(NH_FROM, 1 / NH_FROM), np.full(NH_FROM, 1 / NH_FROM)
    moved = q.copy()
    moved[-1] *= 1.01
    assert node_key(p, q, 2) != node_key(p, moved, 2)
    monkeypatch.setattr(series, "library", lambda: library)
    assert node_key(p, q, 2) == node_key(p, moved, 2)


def _program_case(reject: int):
    """The binned program's measure of 30 bins with their weights in a band (inner: log w in [2, 18]; outer:
    [-14, 0]), on the nodes covering every weight the bounds allow."""
    rng = np.random.default_rng(5 + reject)
    mass = rng.random(30) / 40
    ratio = rng.uniform(0.2, 1.5, 30)
    system = ChoiceSystem(mass=mass, ratio=ratio, drafts=3, reject=reject, fixed=0.1, lower=-60.0, upper=60.0)
    nodes = Nodes.covering(0.0 if reject else -60.0, 60.0 if reject else 0.0, reject)
    log_weight = rng.uniform(2.0, 18.0, 30) if reject else rng.uniform(-14.0, 0.0, 30)
    return system, nodes, mass, log_weight


def _all_nodes_moments(system, nodes, mass, log_weight):
    """The program's objective, gradient and Hessian over every node, written out here from the integrals (the
    module docstring: Frullani objective, E[c e^(-tS)] = K q e^(-tw) G^(K-1), 1/(b + S)^2 = int t e^(-t(b + S)))."""
    K, b, c0, t, h = system.drafts, system.reject, system.fixed, nodes.t, nodes.weight
    weight = np.exp(log_weight)
    table = np.exp(-np.outer(weight, t))  # [B, T]
    free = mass @ table
    whole = c0 + free
    total = (c0 + mass.sum()) ** K - (0.0 if b else c0 ** K)

    def power(n):  # (c0 + free)^n, less c0^n in the outer system: a sum of positive terms (no cancellation)
        return sum(math.comb(n, i) * c0 ** (n - i) * free ** i for i in range(0 if b else 1, n + 1))

    objective = STEP * np.sum(np.exp(-t) * total - np.exp(-b * t) * power(K))
    kernel = h * np.exp(-b * t) * power(K - 1)
    chosen = mass * (system.low + K * weight * (table @ kernel))
    spread = (mass * weight)[:, None] * table
    cross = h * t * np.exp(-b * t) * K * (K - 1) * whole ** (K - 2)
    own = K * mass * weight ** 2 * (table @ (h * t * np.exp(-b * t) * whole ** (K - 1)))
    return objective, chosen, np.diag(chosen - own) - (spread * cross) @ spread.T


@pytest.mark.parametrize("reject", [1, 0])
def test_the_program_sums_over_the_nodes_of_its_weights(reject):
    """The binned program's moments over the nodes that cover its weights equal those over all 413 nodes (1e-14
    of the largest entry), and use fewer of them; negative control: leaving out 100 more nodes (25 in log t) on the
    side that was cut is off by more than 1e-9."""
    system, nodes, mass, log_weight = _program_case(reject)
    live = nodes.within(float(log_weight.min()), float(log_weight.max()), reject)
    assert nodes.size > 400 and live.stop - live.start < 330
    got = system.program(nodes, mass, mass * system.ratio)(log_weight)
    expected = _all_nodes_moments(system, nodes, mass, log_weight)
    for value, wanted in zip(got, expected):
        assert np.abs(np.asarray(value) - wanted).max() <= 1e-14 * np.abs(wanted).max()
    cut = slice(live.start + 100, live.stop) if reject else slice(live.start, live.stop - 100)
    shorter = Nodes(first=nodes.first + cut.start, t=nodes.t[cut], weight=nodes.weight[cut])
    short = _all_nodes_moments(system, shorter, mass, log_weight)
    assert max(np.abs(np.asarray(a) - b).max() / np.abs(b).max() for a, b in zip(short, expected)) > 1e-9
