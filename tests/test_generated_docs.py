"""Every number of the README's findings and "How fast" and of the findings pages comes from a committed result file
through ``docs/generate.py`` (issue 55): a stale block, a number edited by hand, a number typed outside any marker,
a missing result file and one that states no run record are each caught; the README stays a front page (at most
1,500 words, at most ten findings of at most 60 words each)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verispec.report.generated_docs import (
    VALUE,
    GeneratedDocsError,
    ResultFiles,
    load_result,
    render,
    section,
    stale_markers,
    typed_numbers,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATE = _generator()


def test_every_generated_block_is_fresh():
    completed = subprocess.run([sys.executable, str(ROOT / "docs" / "generate.py"), "--check"],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_a_number_edited_by_hand_is_caught():
    """The negative control: one value of the README's findings changed by hand no longer renders to itself, and
    the check names its key."""
    readme = (ROOT / "README.md").read_text()
    match = next(match for match in VALUE.finditer(readme) if re.search(r"\d", match["body"]))
    edited = readme[:match.start("body")] + re.sub(r"\d", lambda digit: str((int(digit[0]) + 1) % 10),
                                                   match["body"], count=1) + readme[match.end("body"):]
    assert edited != readme
    fresh = render(edited, GENERATE.VALUES, GENERATE.TABLES, ResultFiles(RESULTS))
    assert fresh == readme
    assert match["key"] in stale_markers(edited, fresh)  # (and the findings block that holds it)


def test_a_table_edited_by_hand_is_caught():
    page = (ROOT / "docs" / "findings" / "ddte.md").read_text()
    cell = re.search(r"\| T = 0\.7[^|]*\| x(\d)\.(\d+)", page)
    edited = page.replace(cell[0], cell[0][:-1] + str((int(cell[0][-1]) + 1) % 10), 1)
    fresh = render(edited, GENERATE.VALUES, GENERATE.TABLES, ResultFiles(RESULTS))
    assert fresh == page and stale_markers(edited, fresh) == ["ddte"]


def test_a_number_typed_outside_a_marker_is_caught():
    """No result-like number stands outside a marker in the README's findings and "How fast", nor on a findings
    page; the control: one typed into a claim is found."""
    readme = (ROOT / "README.md").read_text()
    texts = {"README Findings": section(readme, "Findings"), "README How fast": section(readme, "How fast")}
    texts.update({path.name: path.read_text() for path in (ROOT / "docs" / "findings").glob("*.md")})
    for where, text in texts.items():
        assert text.strip(), where
        assert typed_numbers(text, GENERATE.ALLOWED) == [], where
    claim = (ROOT / "docs" / "findings" / "lossy_rules.md").read_text()
    assert typed_numbers(claim.replace("from the target", "from the target (about 0.25)"), GENERATE.ALLOWED) == \
        ["0.25"]
    assert typed_numbers("SpecInfer runs x1.04 [1.03, 1.05] and 5% faster", GENERATE.ALLOWED) == \
        ["x1.04", "1.03", "1.05", "5%"]
    assert typed_numbers("p = (0.5, 0.5), epsilon = 0.09 (arXiv 2401.10774): TV 0.25", GENERATE.ALLOWED) == ["0.25"]


def test_a_missing_result_file_or_one_without_a_record_is_refused(tmp_path):
    readme = (ROOT / "README.md").read_text()
    with pytest.raises(GeneratedDocsError, match="is missing: run the command that writes it"):
        render(readme, GENERATE.VALUES, GENERATE.TABLES, ResultFiles(tmp_path))
    unrecorded = tmp_path / "exact-findings.json"
    unrecorded.write_text(json.dumps(json.loads((RESULTS / "exact-findings.json").read_text()) | {"record": {
        "command": "python experiments/exact_findings.py", "commit": "0" * 40, "date": "2026-11-27",
        "machine": {"cores": 2}, "inputs": {}}}))
    with pytest.raises(GeneratedDocsError, match="machine.threads"):
        load_result(unrecorded)
    with pytest.raises(GeneratedDocsError, match="no generated value named 'nowhere'"):
        render("<!--v:nowhere-->1<!--/v-->", GENERATE.VALUES, GENERATE.TABLES, ResultFiles(RESULTS))


def test_every_result_file_states_its_run():
    """Each JSON result the docs read names its command, commit, date, machine (cores, threads, device, load) and
    the SHA-256 of its inputs; each input it names is the file the repository holds now (a data file's SHA-256 as
    data/MANIFEST lists it, which tests/test_data_manifest.py checks against the file)."""
    from tests.support import data_manifest
    from verispec.files.provenance import sha256_file

    manifest = data_manifest.read(ROOT)
    results = ResultFiles(RESULTS)
    for page in GENERATE.pages():
        GENERATE.generated(page, results)
    assert {"exact-findings.json", "multipath_gap.json", GENERATE.DDTE_STUDY} <= set(results.read)
    for name in results.read:
        record = results(name)["record"]
        assert re.fullmatch(r"[0-9a-f]{40}", record["commit"]), (name, record["commit"])  # made from a commit
        for path, digest in record["inputs"].items():
            now = manifest[path].sha256 if path.startswith("data/") else sha256_file(ROOT / path)
            assert now == digest, f"{name}: its input {path} changed since it was made"


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split()) <= 1500
    claims = GENERATE.claims(ResultFiles(RESULTS))
    assert 1 <= len(claims) <= 10
    for name, claim in claims:
        words = re.sub(r"<!--.*?-->", " ", claim).split()
        assert len(words) <= 60, (name, len(words))
        assert claim in readme, name
    first = next(line for line in section(readme, "Findings").splitlines() if line.startswith("- "))
    assert "docs/findings/ddte.md" in first  # the headline first
    how_fast = [line for line in section(readme, "How fast").splitlines() if line.startswith("| ")]
    assert 2 <= len(how_fast) - 1 <= 11  # a header, a rule line and at most ten rows


#: A value that names a verdict's latency regime and whether verification is in it (``docs/generate.py``).
REGIME_MARKER = re.compile(r"<!--v:verdict\.[^/]+/(?:priced/)?regime-->(.*?)<!--/v-->")


def unregimed_verdicts(text: str) -> list[str]:
    """The findings bullets of ``text`` that state a value of the selector verdict (``verdict.``) without a regime
    value saying how latency was had (modelled or measured) and whether verification is priced."""
    bad = []
    for bullet in (line for line in section(text, "Findings").splitlines() if line.startswith("- ")):
        if "<!--v:verdict." not in bullet:
            continue
        regimes = REGIME_MARKER.findall(bullet)
        if not regimes or not all(("modelled" in words or "measured" in words) and "priced" in words
                                  for words in regimes):
            bad.append(bullet[:80])
    return bad


def test_every_verdict_sentence_of_the_readme_names_its_regime_and_price():
    readme = (ROOT / "README.md").read_text()
    assert unregimed_verdicts(readme) == []
    assert sum("<!--v:verdict." in line for line in section(readme, "Findings").splitlines()) >= 2
    # the values come from the result: the modelled regime unpriced, the measured one priced
    results = ResultFiles(RESULTS)
    assert "unpriced" in GENERATE.VALUES["verdict.T=0.7/regime"](results)
    assert "verification priced" in GENERATE.VALUES["verdict.T=0.7/priced/regime"](results)
    # broken twins: a verdict bullet with no regime, and one whose regime says nothing of the price
    plain = "## Findings\n\n- the best is <!--v:verdict.T=1/best-->`x`<!--/v-->.\n\n## Next\n"
    assert unregimed_verdicts(plain) and unregimed_verdicts(plain.replace(
        "- the", "- in <!--v:verdict.T=1/regime-->modelled latency<!--/v-->, the"))


def test_the_verdict_table_says_whether_the_grid_holds_the_optimum():
    """Issue 78, item 2: each verdict row says which holds, from the best rule's share of selector choices on the
    grid's edge: under 10% the grid holds the optimum, else the optimum lies beyond it (the share given). Hand-made
    entries on both sides of the line; the broken twin reads another rule's share and is caught."""
    def entry(best_share, other_share):
        return {"best": "a", "rules": {"a": {"edge": {"selector": {"any": best_share}}},
                                       "b": {"edge": {"selector": {"any": other_share}}}}}

    assert GENERATE._grid_holds(entry(0.09, 0.5)) == "holds the optimum (9% of choices on its edge)"
    assert GENERATE._grid_holds(entry(0.10, 0.0)) == "optimum beyond it: 10% of choices on its edge"
    assert GENERATE._grid_holds(entry(1.0, 0.0)).startswith("optimum beyond it: 100%")

    def twin(table):  # the first rule's share, not the best's
        return "holds" if next(iter(table["rules"].values()))["edge"]["selector"]["any"] < 0.1 else "beyond"

    table = entry(0.5, 0.0)
    table["rules"] = {"b": table["rules"]["b"], "a": table["rules"]["a"]}
    assert twin(table) == "holds" and GENERATE._grid_holds(table).startswith("optimum beyond it")
    # the committed verdict: every row says one of the two
    results = ResultFiles(RESULTS)
    rows = [line for line in GENERATE.verdict_table(results).splitlines() if line.startswith("| T=")]
    assert rows and all("holds the optimum" in row or "optimum beyond it" in row for row in rows)
    # the priced verdict's row reads its own best's choices, made under the priced throughput
    verdict = results(GENERATE.VERDICT)
    priced = GENERATE.verdict_priced_table(results).splitlines()
    for table in (table for table in verdict["tables"] if table["priced"]["best"] is not None):
        share = table["priced"]["rules"][table["priced"]["best"]]["edge"]["selector"]["any"]
        assert any(table["setting"] in line and f"{share:.0%} of choices on its edge" in line for line in priced)


def test_no_docs_page_is_over_600_lines():
    for path in (ROOT / "docs").rglob("*.md"):
        assert len(path.read_text().splitlines()) <= 600, path


def test_the_release_history_gives_reasons_only_for_rows_that_checked_nothing():
    """A seed check's REPRODUCIBLE row checked something (a reproducibility verdict, not a law): the reasons table
    lists ABSENT and REFUSED rows, not it; the release table shows each verdict as it is."""
    data = {"releases": ["0.1.0", "0.2.0"], "checks": {"v1-seeds": {}, "v2-seeded": {}},
            "rows": [{"release": "0.1.0", "check": "v1-seeds", "verdict": "REPRODUCIBLE"},
                     {"release": "0.2.0", "check": "v1-seeds", "verdict": "IRREPRODUCIBLE"},
                     {"release": "0.1.0", "check": "v2-seeded", "verdict": "ABSENT", "error": "no V2 sampler"},
                     {"release": "0.2.0", "check": "v2-seeded", "verdict": "LOSSY", "tv_distance": 0.25}]}
    reasons = GENERATE.engine_releases_reasons_table(lambda name: data)
    assert "no V2 sampler" in reasons and "REPRODUCIBLE" not in reasons
    table = GENERATE.engine_releases_table(lambda name: data)
    assert "| 0.1.0 | REPRODUCIBLE | ABSENT |" in table
    assert "| 0.2.0 | IRREPRODUCIBLE | LOSSY 0.25 (unexpected) |" in table


def test_the_v1_sentence_counts_only_the_releases_read_and_names_those_refused():
    """A refused release (an import that fails, an entry point not there) checked nothing: it is named, not counted
    as a release where the law failed; a LOSSY one is counted against."""
    rows = [{"release": release, "check": "v1-seeded", "verdict": verdict, "as_expected": verdict == "LOSSLESS"}
            for release, verdict in [("0.8.0", "REFUSED"), ("0.8.1", "LOSSLESS"), ("0.9.0", "REFUSED"),
                                     ("0.9.2", "LOSSLESS"), ("0.10.0", "LOSSY")]]
    data = {"releases": ["0.8.0", "0.8.1", "0.9.0", "0.9.2", "0.10.0"], "checks": {"v1-seeded": {}}, "rows": rows}
    assert GENERATE._engine_releases(lambda name: data, "v1") == "2 of 3"
    assert GENERATE._engine_releases(lambda name: data, "v1-read") == "0.8.1 to 0.10.0; refused: 0.8.0, 0.9.0"
