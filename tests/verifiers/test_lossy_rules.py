"""The lossy rules engines are merging (issue 67, item 3): FLy, MARS, ASD, static ensemble verification, and the
lenience / min-p / eta rules, each lossy by design like ``typical``.

* each rule's law against an enumeration written here in rationals: every draft list and every vector of native
  coins, each rule's decision spelled out again (the negative control: a broken twin's enumeration, which differs);
* the sampling procedure against the exact law by the exact binomial test at false-failure rate 1e-6, and the
  lossless twin's samples caught by the same test;
* a TV > 0 witness derived by hand for each rule, and TV = 0 in rationals at each lossless limit;
* the names, parameters and refusals: kept out of ``all`` (a lossy rule put there is refused on one line, exit 2),
  bad parameters refused on one line.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from fractions import Fraction as F

import numpy as np
import pytest

from verispec.cli import main
from verispec.errors import UnknownVerifierError
from verispec.simulator import ContextFreeProblem, TabularProblem, analyze, parse_tree, random_problem
from verispec.simulator.chooser import RandomChooser
from verispec.statistics import exact_binomial_test
from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY, get_verifier, lossless_rules

RULES = ("fly", "mars", "asd", "ensemble", "lenience", "minp", "eta")
NODE_RULES = ("mars(margin=0.5)", "ensemble(weight=0.5)", "lenience(lenience=0.5)", "minp(ratio=0.5)", "eta(eta=0.25)")
P, Q = [F(1, 2), F(1, 3), F(1, 6)], [F(3, 5), F(1, 5), F(1, 5)]


def exact_problem(size: int, depth: int, seed: int) -> TabularProblem:
    """A context-dependent problem in rationals: an independent (p, q) pair per prefix, some entries zero."""
    rng = random.Random(seed)

    def law():
        weights = [rng.randint(0, 4) for _ in range(size)]
        weights[rng.randrange(size)] += 1
        return [F(w, sum(weights)) for w in weights]

    prefixes = [prefix for length in range(depth + 1) for prefix in itertools.product(range(size), repeat=length)]
    return TabularProblem(size, {s: law() for s in prefixes}, {s: law() for s in prefixes}, exact=True, horizon=depth)


def residual(r, q):
    """norm((r - q)+) in rationals."""
    left = [max(a - b, F(0)) for a, b in zip(r, q)]
    return [v / sum(left) for v in left]


def entropy(p) -> float:
    return -sum(float(v) * math.log(float(v)) for v in p if v > 0)


# ---- each node-local rule spelled out again ----

def node_rule(name: str):
    """(law the coins test, lenience, override predicate on (p, x), allowed-set predicate or None)."""
    def never(p, x):
        return False

    if name.startswith("ensemble"):
        return (lambda p, q: [F(1, 2) * a + F(1, 2) * b for a, b in zip(p, q)]), F(1), never, None
    if name.startswith("lenience"):
        return (lambda p, q: list(p)), F(1, 2), never, None
    if name.startswith("minp"):  # truncation: accepted iff p(x) >= m max p, no coin
        return None, None, None, (lambda p, x: p[x] >= F(1, 2) * max(p))
    if name.startswith("eta"):
        return None, None, None, (lambda p, x: float(p[x]) >= min(0.25, math.exp(-entropy(p))))
    top = sorted(range(len(P)), key=lambda v: (-P[v], v))[:2]  # mars: the top two of p and their log-margin
    return (lambda p, q: list(p)), F(1), (lambda p, x: x in top and math.log(p[top[0]] / p[top[1]]) < 0.5), None


def truncation_output(allowed, p, drafts, broken: bool) -> dict:
    """The first draft inside the allowed set, else p restricted to it (``broken``: p itself)."""
    inside = [x for x in drafts if allowed(p, x)]
    if inside:
        return {inside[0]: F(1)}
    kept = [value if (broken or allowed(p, v)) else F(0) for v, value in enumerate(p)]
    return {v: value / sum(kept) for v, value in enumerate(kept)}


def node_output(name: str, p, q, drafts, *, broken: bool = False) -> dict:
    """The output token's law at a node with drafts x_1..x_k, over every vector of the k native coins. ``broken``:
    the override read as a second coin of probability 1/2 instead of a sure acceptance (truncation rules: the
    rejection resampled from p instead of the truncated p)."""
    verified, scale, override, allowed = node_rule(name)
    if allowed is not None:
        return truncation_output(allowed, p, drafts, broken)
    chain = [verified(p, q)]
    for _ in drafts:
        chain.append(residual(chain[-1], q))
    law = Counter()
    for coins in itertools.product((True, False), repeat=len(drafts)):
        weight, rest = F(1), F(1)
        for j, (x, heads) in enumerate(zip(drafts, coins)):
            accept = min(F(1), chain[j][x] / (scale * q[x]))
            weight *= accept if heads else 1 - accept
        for x, heads in zip(drafts, coins):
            taken = heads or override(p, x)
            if taken and broken and not heads:
                law[x] += weight * rest / 2
                rest /= 2
                continue
            if taken:
                law[x] += weight * rest
                rest = F(0)
                break
        for y, value in enumerate(chain[-1]):
            law[y] += weight * rest * value
    return law


def node_block_law(name: str, drafts: int, **options) -> dict:
    """The emitted block of a context-free problem on iid:K,1: the output token, then the bonus from p when it is a
    drafted token."""
    law = Counter()
    for tuple_ in itertools.product(range(len(P)), repeat=drafts):
        chance = math.prod(Q[x] for x in tuple_)
        for y, mass in node_output(name, P, Q, tuple_, **options).items():
            if y in tuple_:
                for bonus, value in enumerate(P):
                    law[(y, bonus)] += chance * mass * value
            else:
                law[(y,)] += chance * mass
    return {key: value for key, value in law.items() if value}


@pytest.mark.parametrize("name", NODE_RULES)
@pytest.mark.parametrize("drafts", [1, 2])
def test_node_rules_equal_their_enumeration_in_rationals(name, drafts):
    result = analyze(ContextFreeProblem(P, Q, exact=True), parse_tree(f"iid:{drafts},1"), get_verifier(name))
    law = {sequence: value for sequence, value in result.output_law.items()}
    assert law == node_block_law(name, drafts)
    if not name.startswith(("ensemble", "lenience")):  # negative control: a broken override or resampling told apart
        assert law != node_block_law(name, drafts, broken=True)
    else:  # negative control: the verified law or the lenience dropped is told apart
        assert law != {s: v for s, v in analyze(ContextFreeProblem(P, Q, exact=True), parse_tree(f"iid:{drafts},1"),
                                                get_verifier("specinfer")).output_law.items()}


# ---- the chain rules: every draft path and every vector of native coins ----

def chain_walk(name: str, coins, accept, gates, regrets, length: int):
    """Where the rule stops (the number of drafts kept) and whether it stopped on a rejection, given the coins."""
    i, spent, used, window = 0, 0.0, 0, 2 if name == "fly2" else 1
    while i < length:
        if coins[i]:
            i += 1
        elif name.startswith("fly") and gates[i] and i + window < length and all(coins[i + 1:i + 1 + window]):
            i += 1 + window  # the window's coins all pass
        elif name == "asd" and regrets[i] / (length - i) <= 0.5 and spent + regrets[i] <= 1.5 + 1e-9 and used < 1:
            spent, used, i = spent + regrets[i], used + 1, i + 1
        else:
            return i, True
    return i, False


def chain_block_law(name: str, problem: TabularProblem, length: int) -> dict:
    """fly(theta=0.955,window=1), fly2 (window 2) or asd(budget=1.5,rate=0.5,count=1) on chain:L, by enumeration."""
    law = Counter()
    size = problem.vocab_size
    for path in itertools.product(range(size), repeat=length):
        p = [problem.target(path[:i]) for i in range(length + 1)]
        q = [problem.draft(path[:i]) for i in range(length)]
        chance = math.prod(q[i][path[i]] for i in range(length))
        if not chance:
            continue
        accept = [min(F(1), p[i][path[i]] / q[i][path[i]]) for i in range(length)]
        gates = []
        for i in range(length):
            top = sorted((float(v) for v in p[i]), reverse=True)[:3]  # FLy's top-3 entropy, not renormalised
            gates.append(entropy(top) >= (0.5 if name == "fly2" else 0.955) and p[i][path[i]] > 0)
        regrets = [math.log(max(p[i]) / p[i][path[i]]) if p[i][path[i]] else math.inf for i in range(length)]
        for coins in itertools.product((True, False), repeat=length):
            weight = math.prod((a if c else 1 - a) for a, c in zip(accept, coins))
            if not weight:
                continue
            kept, rejected = chain_walk(name, coins, accept, gates, regrets, length)
            emitted = residual(p[kept], q[kept]) if rejected else p[kept]
            for y, value in enumerate(emitted):
                if value:
                    law[path[:kept] + (y,)] += chance * weight * value
    return dict(law)


@pytest.mark.parametrize("name,spec", [("fly", "fly(theta=0.955,window=1)"), ("fly2", "fly(theta=0.5,window=2)"),
                                       ("asd", "asd(budget=1.5,rate=0.5,count=1)")])
def test_chain_rules_equal_their_enumeration_in_rationals(name, spec):
    problem = exact_problem(4, 3, 4)  # V = 4: the top-3 entropy is not the entropy, nor its renormalised form
    result = analyze(problem, parse_tree("chain:3"), get_verifier(spec))
    law = {sequence: value for sequence, value in result.output_law.items()}
    assert law == chain_block_law(name, problem, 3) and result.tv_distance > 0
    # negative control: the same enumeration of another rule (a different override) is told apart
    assert law != chain_block_law({"fly": "fly2", "fly2": "asd", "asd": "fly"}[name], problem, 3)


# ---- the sampling procedures by the exact binomial test ----

TWINS = {"fly(theta=0,window=1)": "naive", "mars(margin=2)": "specinfer", "asd(budget=3,rate=3,count=2)": "naive",
         "ensemble(weight=0.2)": "specinfer", "lenience(lenience=0.2)": "specinfer", "minp(ratio=0.2)": "specinfer",
         "eta(eta=0.3)": "specinfer"}


def _sample(verifier, tree, draws: int, seed: int) -> Counter:
    chooser = RandomChooser(np.random.default_rng(seed))
    return Counter(verifier.procedure(tree, chooser) for _ in range(draws))


@pytest.mark.parametrize("name", sorted(TWINS))
def test_the_procedure_follows_the_law_and_the_lossless_twin_does_not(name):
    verifier, twin = get_verifier(name), get_verifier(TWINS[name])
    spec = "chain:3" if twin.name == "naive" else "iid:2,2"
    problem = random_problem(3, 3, seed=2, concentration=0.6, divergence=0.9)
    trees = [tree for tree, _ in parse_tree(spec).outcomes(problem)]
    tree = max(trees, key=lambda t: np.abs(np.asarray(verifier.emission_law(t), float) -
                                           np.asarray(twin.emission_law(t), float)).sum())
    law = np.asarray(verifier.emission_law(tree), float)  # [n, V]
    exact = {(node, token): law[node, token] for node, token in zip(*np.nonzero(law))}
    fit = exact_binomial_test(_sample(verifier, tree, 2000, 1), exact, alpha=1e-6)
    assert not fit.rejected, fit.describe()
    control = exact_binomial_test(_sample(twin, tree, 2000, 1), exact, alpha=1e-6)
    assert control.rejected, control.describe()


# ---- TV > 0 witnesses by hand, TV = 0 at the lossless limits ----

HALF = ([F(3, 4), F(1, 4)], [F(1, 4), F(3, 4)])


@pytest.mark.parametrize("name,laws,spec,tv", [
    # the first token has law v = (1/2, 1/2): TV (1 - w) TV(p, q) = 1/2 * 1/2
    ("ensemble(weight=0.5)", HALF, "chain:1", F(1, 4)),
    # min(q, 2p) = (1/4, 1/2), then norm((p - q/2)+) = (1, 0) with the rest 1/4: law (1/2, 1/2)
    ("lenience(lenience=0.5)", HALF, "chain:1", F(1, 4)),
    # both tokens lie in the min-p set (p >= 1/4 * 3/4): every draft is accepted, the first token has law q
    ("minp(ratio=0.25)", HALF, "chain:1", F(1, 2)),
    # m = 1 keeps only the argmax: draft 0 accepted (1/4), draft 1 rejected and resampled from p on {0}: law (1, 0)
    ("minp(ratio=1)", HALF, "chain:1", F(1, 4)),
    # the threshold min(0.1, exp(-0.562)) = 0.1 < 1/4: both tokens are allowed, the first token has law q
    ("eta(eta=0.1)", HALF, "chain:1", F(1, 2)),
    # eta = 1: threshold exp(-H) = 0.570 allows token 0 only; draft 1 (1/8) is rejected and resampled on {0}: (1, 0)
    ("eta(eta=1)", ([F(3, 4), F(1, 4)], [F(7, 8), F(1, 8)]), "chain:1", F(1, 4)),
    # the margin log 3 = 1.099 < 1.2: the runner-up is always accepted, the law is q
    ("mars(margin=1.2)", HALF, "chain:1", F(1, 2)),
    # regret log 3 <= budget 2, <= rate 2 times the value 1: the law is q
    ("asd(budget=2,rate=2,count=1)", HALF, "chain:1", F(1, 2)),
])
def test_each_rule_moves_the_law_by_its_closed_form(name, laws, spec, tv):
    result = analyze(ContextFreeProblem(*laws, exact=True), parse_tree(spec), get_verifier(name))
    assert result.tv_distance == tv
    lossless = analyze(ContextFreeProblem(*laws, exact=True), parse_tree(spec), get_verifier("naive"))
    assert lossless.tv_distance == 0 != tv  # negative control: the lossless rule on the same problem


def test_fly_moves_the_first_token_by_its_closed_form():
    """p = (1/2, 1/2), q = (1/4, 3/4) at every prefix, chain:2, window 1: position 1's gate is open (top-3 entropy
    log 2 >= 0.5). The first token is 1 when x_1 = 1 is accepted natively (2/3) or overridden and x_2 passes
    (1/3 * sum min(p, q) = 1/3 * 3/4): 3/4 * 11/12 = 11/16; every other outcome emits 0."""
    problem = ContextFreeProblem([F(1, 2), F(1, 2)], [F(1, 4), F(3, 4)], exact=True)
    result = analyze(problem, parse_tree("chain:2"), get_verifier("fly(theta=0.5,window=1)"))
    first = sum(value for sequence, value in result.output_law.items() if sequence[0] == 1)
    assert first == F(11, 16) and result.tv_distance >= F(3, 16)
    closed = analyze(problem, parse_tree("chain:2"), get_verifier("fly(theta=0.7,window=1)"))  # log 2 < 0.7
    assert closed.tv_distance == 0  # negative control: the gate shut


@pytest.mark.parametrize("name,spec", [("fly(theta=0,window=3)", "chain:3"), ("mars(margin=0)", "iid:2,2"),
                                       ("asd(budget=0)", "chain:3"), ("asd(rate=0)", "chain:3"),
                                       ("asd(count=0)", "chain:3"), ("ensemble(weight=1)", "iid:2,2"),
                                       ("lenience(lenience=1)", "iid:2,2")])
def test_the_lossless_limits_are_exactly_lossless(name, spec):
    problem = exact_problem(3, 2 if spec.startswith("iid") else 3, 9)
    result = analyze(problem, parse_tree(spec), get_verifier(name))
    lossless = analyze(problem, parse_tree(spec), get_verifier("naive" if spec.startswith("chain") else "specinfer"))
    assert result.tv_distance == 0 and result.block_efficiency == lossless.block_efficiency


@pytest.mark.parametrize("name", RULES)
def test_batched_law_equals_the_enumerated_procedure(name):
    problem = random_problem(3, 2, seed=6, concentration=0.5, divergence=0.8)
    verifier = get_verifier(name)
    for spec in ("chain:2", "iid:2,2"):
        drafter = parse_tree(spec)
        if not drafter.draft_laws & verifier.valid_for:
            continue
        for tree, _ in list(drafter.outcomes(problem))[:30]:
            np.testing.assert_allclose(np.asarray(verifier.emission_law(tree), float),
                                       np.asarray(verifier.enumerated_emission_law(tree), float), atol=1e-12)


# ---- names, parameters, refusals ----

def test_the_rules_are_lossy_by_design_and_out_of_all():
    assert set(RULES) <= set(LOSSY_BY_DESIGN) and not set(RULES) & set(REGISTRY)
    assert lossless_rules() == sorted(REGISTRY)
    rule = get_verifier("fly(theta=0.2,window=1)")
    assert (rule.theta, rule.window, rule.name) == (0.2, 1, "fly(theta=0.2,window=1)")
    assert get_verifier("asd(count=1)").name == "asd(budget=8,rate=0.25,count=1)"
    assert get_verifier("ensemble").weight == 0.5 and get_verifier("ensemble(weight=1)").name == "ensemble(weight=1)"


def test_a_lossy_rule_put_inside_all_is_refused_on_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(REGISTRY, "fly", LOSSY_BY_DESIGN["fly"])
    with pytest.raises(UnknownVerifierError, match="'fly' is lossy by design and cannot be part of 'all'"):
        lossless_rules()
    out = tmp_path / "rows.csv"
    assert main(["sweep", "--trees", "chain:1", "--verifiers", "all", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert "cannot be part of 'all'" in error and len(error.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("name,match", [("fly(window=1.5)", "whole number"), ("fly(window=0)", "whole number"),
                                        ("fly(theta=-1)", r"\[0, inf\]"), ("mars(margin=nan)", "mars's margin"),
                                        ("asd(count=-1)", "whole number"), ("asd(budget=inf)", "asd's budget"),
                                        ("ensemble(weight=0)", r"\(0, 1\]"), ("lenience(lenience=1.5)", r"\(0, 1\]"),
                                        ("minp(ratio=0)", r"\(0, 1\]"), ("eta(eta=2)", r"\(0, 1\]"),
                                        ("eta(gamma=1)", "takes eta= and delta="),
                                        ("ensemble(weight=x)", "must be a number")])
def test_bad_parameters_are_one_line_errors(name, match):
    with pytest.raises(UnknownVerifierError, match=match) as caught:
        get_verifier(name)
    assert "\n" not in str(caught.value)


# ---- experiments/lossy_rules.py ----

def test_the_experiment_prices_every_setting_against_the_lossless_rule(tmp_path):
    import json

    from tests.support.scripts import load_script

    module = load_script("experiments/lossy_rules.py")
    out = tmp_path / "lossy.json"
    assert module.main(["--seeds", "2", "--vocab", "3", "--out", str(out)]) == 0
    trees = json.loads(out.read_text())["by_vocab"]["3"]["trees"]
    problems = [random_problem(3, 3, seed, divergence=0.5) for seed in range(2)]
    row = trees["chain:3"]["settings"]["ensemble(weight=0.8)"]
    tvs = [float(analyze(problem, parse_tree("chain:3"), get_verifier("ensemble(weight=0.8)")).tv_distance)
           for problem in problems]
    assert row["tv_mean"] == pytest.approx(sum(tvs) / 2, abs=1e-12) and row["tv_max"] == pytest.approx(max(tvs))
    for tree in trees.values():
        settings = tree["settings"]
        for name, entry in settings.items():  # the frontier, recomputed: nothing (the lossless rule too) dominates
            points = [(other["tv_mean"], other["ratio_mean"]) for key, other in settings.items() if key != name]
            dominated = any(tv <= entry["tv_mean"] and ratio >= entry["ratio_mean"]
                            and (tv < entry["tv_mean"] or ratio > entry["ratio_mean"])
                            for tv, ratio in points + [(0.0, 1.0)])
            assert entry["frontier"] == (not dominated), name
    assert "fly(theta=0,window=1)" in trees["chain:3"]["settings"] and "fly" not in str(trees["iid:2,2"]["settings"])
    # negative control: min-p at m = 0.9 is slower than the lossless rule and lossy, so dominated by it
    assert not trees["chain:3"]["settings"]["minp(ratio=0.9)"]["frontier"]
