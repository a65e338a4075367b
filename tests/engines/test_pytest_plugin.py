"""verispec's pytest plugin (``verispec/pytest_plugin.py``), run in inner pytest sessions (``pytester``).

Negative controls: a lossy function fails through the fixture and through the marker, with the witness in the
failure message; a lossless one passes both ways. The lossy function is ``token_level_resample_from_target``
(tests/support/external_rules.py: after a rejection it draws from p, not from norm((p - q)+)); on ``chain:1`` its
first token follows min(p, q) + (1 - sum min(p, q)) p and the second the target, so every number asserted about
its message (the TV and the over- and under-produced sequences) is computed here from that closed form.

Also: the entry point and the marker are registered (``--strict-markers`` passes), the plugin imports no heavy
module, ``--verispec-time-budget`` reaches the checks, bad input fails in one line, the engine route refuses an
unknown engine or check before starting a process and, where the pinned vLLM wheel is installed, fails a planted
bug with its witness; and docs/guides/engine_ci.md's test file is tests/engines/test_engine_ci_example.py, verbatim.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import shipped_sampler_mutant, vllm_release

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
P, Q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]

INNER = textwrap.dedent(f"""
    import pytest

    from tests.support.external_rules import token_level, token_level_resample_from_target
    from verispec.simulator import ContextFreeProblem

    PROBLEM = ContextFreeProblem({P}, {Q})


    def test_lossy_by_fixture(verispec_check):
        verispec_check(token_level_resample_from_target, "chain", "chain:1", problems=PROBLEM, mode="exact")


    @pytest.mark.verispec_lossless(layout="chain", tree="chain:1", problems=[PROBLEM], mode="exact")
    def test_lossy_by_marker():
        return token_level_resample_from_target


    def test_lossless_by_fixture(verispec_check):
        reports = verispec_check(token_level, "chain", "chain:1", problems=PROBLEM, mode="exact")
        assert [report["verdict"] for report in reports] == ["lossless"]


    @pytest.mark.verispec_lossless("chain", "chain:1", problems=[PROBLEM], mode="exact")
    def test_lossless_by_marker():
        return token_level
    """)


def _closed_form():
    """(TV, the law of two tokens [V, V]) of the lossy rule on chain:1 at (P, Q), and the target's [V, V]."""
    p, q = np.array(P), np.array(Q)
    overlap = np.minimum(p, q)
    first = overlap + (1 - overlap.sum()) * p
    return 0.5 * np.abs(first - p).sum(), np.outer(first, p), np.outer(p, p)


def _section(output: str, test: str) -> str:
    """The failure section of one inner test in pytest's output."""
    found = re.search(rf"^_+ {test} _+\n(.*?)(?=^_{{3,}} |^={{3,}} |\Z)", output, re.S | re.M)
    assert found, (test, output)
    return found.group(1)


def test_a_lossy_function_fails_with_its_witness_and_a_lossless_one_passes(pytester):
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    tv, rule, target = _closed_form()
    output = result.stdout.str()
    for test in ("test_lossy_by_fixture", "test_lossy_by_marker"):
        section = _section(output, test)
        assert "verispec.testing.assert_lossless: LOSSY" in section
        assert f"exact TV distance {tv:.6g} " in section
        assert not re.search(r"Traceback|During handling|def test_", section)  # the evidence alone (pytrace off)
        difference = rule - target
        worst_over = np.unravel_index(np.argmax(difference), difference.shape)
        worst_under = np.unravel_index(np.argmin(difference), difference.shape)
        for kind, index in (("overproduced", worst_over), ("underproduced", worst_under)):
            line = (f"{kind} {[int(i) for i in index]}: {rule[index]:.6g} against the target's "
                    f"{target[index]:.6g}")
            assert line in section, (line, section)
        witness = json.loads(re.search(r"witness problem \(save it .*?\): (\{.*\})", section).group(1))
        assert witness["target"][""] == P and witness["draft"][""] == Q


def test_markers_are_registered_for_strict_markers(pytester):
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.verispec_lossless(layout, tree, *"])


def test_the_entry_point_is_registered_and_loaded(request):
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert entry == {"verispec": "verispec.pytest_plugin"}
    assert request.config.pluginmanager.has_plugin("verispec"), (
        "the pytest11 entry point is not installed here: pip install -e . (again)")
    assert request.config.pluginmanager.get_plugin("verispec").__name__ == "verispec.pytest_plugin"


def test_the_plugin_imports_no_heavy_module():
    heavy = ("numpy", "scipy", "torch", "vllm", "triton", "cvxpy", "hypothesis", "verispec.testing")
    script = f"import sys, verispec.pytest_plugin; print([m for m in {heavy!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_the_time_budget_option_replaces_the_default(pytester):
    """A function made 0.3 s slower a call, checked on the canonical suite: in a 60 s budget LOSSLESS, in the
    option's 1 s the suite is not finished, INCONCLUSIVE, and the test fails saying so."""
    pytester.makepyfile(test_budget="""
        from tests.support.external_rules import slowed, token_level


        def test_budget(verispec_check):
            assert verispec_check.time_budget == 1.0
            verispec_check(slowed(token_level, 0.3), "chain", "chain:1", mode="exact")
        """)
    result = pytester.runpytest_inprocess("--verispec-time-budget", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "INCONCLUSIVE" in result.stdout.str()
    result = pytester.runpytest_inprocess("--verispec-time-budget=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--verispec-time-budget: must be a positive number of seconds, got '-1'*"])


def test_bad_input_fails_in_one_line(pytester):
    pytester.makepyfile(test_bad="""
        import pytest

        from tests.support.external_rules import token_level


        def test_unknown_layout(verispec_check):
            verispec_check(token_level, "zigzag", "chain:1")


        @pytest.mark.verispec_lossless(tree="chain:1")
        def test_marker_without_layout():
            return token_level


        @pytest.mark.verispec_lossless(layout="chain", tree="chain:1")
        def test_marker_returning_nothing():
            pass


        def test_unknown_engine(verispec_check):
            verispec_check.engine("tgi")


        def test_unknown_engine_check(verispec_check):
            verispec_check.engine("vllm", checks=["v1-seeded", "v9-nothing"])


        def test_half_a_problem(verispec_check):
            verispec_check.engine("vllm", checks=["v1-greedy"], target=[0.5, 0.5])


        def test_negative_budget(verispec_check):
            verispec_check.engine("vllm", checks=["v1-greedy"], time_budget=-1)
        """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=7)
    output = result.stdout.str()
    expected = {
        "test_unknown_layout": r"verispec_check: unknown layout 'zigzag'",
        "test_marker_without_layout": r"test_bad.py::test_marker_without_layout: verispec_lossless needs layout as "
                                      r"text, e.g. @pytest.mark.verispec_lossless\(layout='chain', tree='chain:2'\); "
                                      r"got layout=None",
        "test_marker_returning_nothing": r"test_bad.py::test_marker_returning_nothing is marked verispec_lossless but "
                                         r"returned NoneType None: return the verification function to check",
        "test_unknown_engine": r"verispec_check.engine\('tgi'\): unknown engine 'tgi': verispec has adapters for "
                               r"mlx-lm, transformers, vllm",
        "test_unknown_engine_check": r"verispec_check.engine\('vllm'\): unknown check v9-nothing of vllm: choose from "
                                     r".*v1-greedy",
        "test_half_a_problem": r"verispec_check.engine\('vllm'\): give both target and draft, or neither",
        "test_negative_budget": r"verispec_check.engine\('vllm'\): time_budget must be a positive finite number, "
                                r"got -1$",
    }
    for test, pattern in expected.items():
        lines = [line for line in _section(output, test).splitlines() if line.strip()]
        assert len(lines) == 1 and re.match(pattern, lines[0]), (test, lines)


# -- the engine route, where the pinned vLLM wheel is installed


@pytest.mark.skipif(vllm_release() != "0.33.0", reason="the pinned vLLM wheel is not installed here "
                                                         "(verispec/engines/requirements/vllm.txt)")
def test_a_planted_engine_bug_fails_with_its_witness(pytester, tmp_path):
    """The greedy kernel's argmax load without the request's offset (a planted bug of docs/guides/check_engine.md),
    on chain:2: every request then reads request 0's rows (draft list [0, 0]), whose second row is not the second
    row of every other list (the target is rolled by each prefix, ``verispec.engines.greedy``), so some list emits
    another sequence than the target's argmax decoding, and the message names the list and both sequences."""
    mutant = shipped_sampler_mutant(tmp_path,
                                    "target_argmax_id = tl.load(target_argmax_ptr + start_idx + pos).to(tl.int32)",
                                    "target_argmax_id = tl.load(target_argmax_ptr + pos).to(tl.int32)")
    pytester.makepyfile(test_engine=f"""
        def test_greedy(verispec_check):
            verispec_check.engine("vllm", checks=["v1-greedy"], tree="chain:2", target=[0.2, 0.5, 0.3],
                                  draft=[0.4, 0.4, 0.2], source={str(mutant)!r})
        """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    section = _section(result.stdout.str(), "test_greedy")
    assert "verispec check-engine vllm: exit status 1, a check that should hold the law is LOSSY" in section
    assert re.search(r"v1-greedy +LOSSY \(expected LOSSLESS\) exhaustive, chain:2, greedy", section)
    assert ('witness problem (context-free: the same laws at every prefix) {"target": [0.2, 0.5, 0.3], '
            '"draft": [0.4, 0.4, 0.2]}') in section
    assert (f"reproduce: verispec check-engine vllm --check v1-greedy --tree chain:2 --target 0.2,0.5,0.3 --draft "
            f"0.4,0.4,0.2 --source {mutant}") in section
    found = re.search(r"draft list (\[.*?\]): emitted (\[.*?\]), the target's argmax decoding gives (\[.*?\])",
                      section)
    drafts, emitted, expected = (json.loads(group) for group in found.groups())
    assert emitted != expected == _argmax_decoding([0.2, 0.5, 0.3], drafts)


def _argmax_decoding(p: list[float], drafts: list[int]) -> list[int]:
    """Greedy verification by hand on the check's rolled target (the row after prefix x is p rolled by len(x) +
    sum(x)): accept each draft while it is the row's argmax, then emit the argmax."""
    emitted = []
    for position in range(len(drafts) + 1):
        prefix = drafts[:position]
        best = int(np.argmax(np.roll(p, len(prefix) + sum(prefix))))
        emitted.append(best)
        if position == len(drafts) or drafts[position] != best:
            return emitted


# -- the guide's test file


def test_the_guide_shows_the_example_test_file_verbatim():
    guide = (ROOT / "docs" / "guides" / "engine_ci.md").read_text()
    block = guide.split("<!-- engine-ci-example:start -->")[1].split("<!-- engine-ci-example:end -->")[0]
    code = block.split("```python\n", 1)[1].rsplit("```", 1)[0]
    assert code == (ROOT / "tests" / "engines" / "test_engine_ci_example.py").read_text()


def test_engine_hands_the_context_twin_and_the_neighbours_to_the_checks(monkeypatch):
    """Without an engine: ``engine(...)`` passes ``context_twin`` and ``neighbours`` to the checks' child process as
    ``verispec check-engine --context-twin --neighbours`` do."""
    from verispec import pytest_plugin

    seen = {}

    def child(name, checks, **options):
        seen.update(options)
        return {"engine": name, "release": "0", "exit_status": 0, "checks": []}

    monkeypatch.setattr(pytest_plugin, "_engine_checks", child)
    pytest_plugin.VerispecCheck(None).engine("vllm", ["v1-mixed"], context_twin=True, neighbours="sampled",
                                            time_budget=1)
    assert seen["context_twin"] is True and seen["neighbours"] == "sampled"
