"""experiments/engine_releases.py's bookkeeping, without downloading a release: release order, the rows it reads
from check-engine's output (a verdict, a release that has no such entry point, one the adapter does not read, a
release the installed wheel answered for instead), the cache key and the summary. The installed wheel's V2 path is
checked in tests/engines/test_vllm_v2_shipped.py."""

from __future__ import annotations

import json

import pytest

from tests.support.scripts import fake_verispec_command, load_script

script = load_script("experiments/engine_releases.py", "engine_releases_test")


def test_releases_sort_by_their_numbers_not_their_text():
    releases = ["0.9.2", "0.10.1.1", "0.10.1", "0.8.5.post1", "0.20.0", "0.3.3"]
    assert sorted(releases, key=script._version_key) == ["0.3.3", "0.8.5.post1", "0.9.2", "0.10.1", "0.10.1.1",
                                                         "0.20.0"]


def _answer(monkeypatch, stdout: str, stderr: str = "", status: int = 0):
    fake_verispec_command(monkeypatch, stdout, status, stderr)  # the verdict read from --json-out, as the script does


def test_a_row_is_the_commands_verdict_and_a_lossy_one_keeps_its_witness(monkeypatch, tmp_path):
    check = {"check": "v2-seeded", "verdict": "LOSSY", "expected": "lossless", "as_expected": False, "mode": "exact",
             "tv_distance": 0.086, "threshold": 1e-6, "evaluations": 10, "tree": "chain:1",
             "sampling": "temperature=1", "target": [0.59, 0.4, 0.01], "draft": [0.35, 0.01, 0.64], "note": None,
             "discrepancies": {"overproduced": [{"sequence": [1, 0], "rule": 0.29, "target": 0.24}]}}
    _answer(monkeypatch, json.dumps({"release": "0.28.0", "checks": [check]}), status=1)
    row = script.run_check("0.28.0", tmp_path, "v2-seeded", 60, False)
    assert row["verdict"] == "LOSSY" and row["tv_distance"] == 0.086 and row["exit_status"] == 1
    assert row["witness"]["overproduced"]["sequence"] == [1, 0] and row["witness"]["target"] == [0.59, 0.4, 0.01]
    _answer(monkeypatch, json.dumps({"release": "0.33.0", "checks": [check]}), status=1)
    wrong = script.run_check("0.28.0", tmp_path, "v2-seeded", 60, False)  # the installed wheel answered
    assert wrong["verdict"] == "REFUSED" and "not 0.28.0" in wrong["error"]


@pytest.mark.parametrize("error, verdict", [
    ("verispec: error: cannot load 'x': EngineError: this vLLM has no block verification (...)", "ABSENT"),
    ("verispec: error: cannot load 'x': EngineError: ... which the adapter does not read ...", "UNREAD"),
    ("verispec: error: vLLM's sampler fails to import on this machine (ImportError: y)", "REFUSED"),
])
def test_a_release_that_checks_nothing_says_why(monkeypatch, tmp_path, error, verdict):
    _answer(monkeypatch, "", f"WARNING noise\n{error}\n", status=2)
    row = script.run_check("0.21.0", tmp_path, "v2-block", 60, False)
    assert row["verdict"] == verdict and row["error"] == error


def test_the_summary_counts_and_names_what_it_must():
    rows = [{"release": "0.28.0", "check": "v2-seeded", "verdict": "LOSSY", "as_expected": False, "tv_distance": 0.1},
            {"release": "0.29.0", "check": "v2-seeded", "verdict": "LOSSLESS", "as_expected": True},
            {"release": "0.28.0", "check": "v1-min-p", "verdict": "LOSSY", "as_expected": True},
            {"release": "0.20.0", "check": "v2-seeded", "verdict": "UNREAD"},
            {"release": "0.19.1", "check": "v1-seeded", "verdict": "REFUSED"},
            {"release": "0.28.0", "check": "v1-seeds", "verdict": "REPRODUCIBLE", "as_expected": True},
            {"release": "0.29.0", "check": "v1-seeds", "verdict": "IRREPRODUCIBLE", "as_expected": False}]
    summary = script.summarize(["0.19.1", "0.20.0", "0.28.0", "0.29.0"], rows, ["v1-seeded", "v2-seeded"])
    assert summary["lossless"] == 1 and summary["lossy_expected"] == 1 and summary["reproducible"] == 1
    assert summary["irreproducible"] == [{"release": "0.29.0", "check": "v1-seeds"}]
    assert summary["other"] == [("0.19.1", "v1-seeded", "REFUSED")]  # neither reproducibility verdict
    assert summary["lossy_unexpected"] == [{"release": "0.28.0", "check": "v2-seeded", "tv": 0.1}]
    assert summary["unread"] == [("0.20.0", "v2-seeded")] and summary["refused_releases"] == ["0.19.1"]


def test_the_cache_key_changes_with_the_checker(tmp_path, monkeypatch):
    before = script.checker_digest()
    monkeypatch.setattr(script, "CHECKER_FILES", (*script.CHECKER_FILES, "README.md"))
    assert script.checker_digest() != before


def test_the_cache_key_covers_what_a_check_imports_and_not_another_command():
    """The seed check (not a root before), the supervisor (imported inside a function of engines/check.py) and the
    packages above them are covered; the sweep command's engine, which only ``verispec sweep`` runs, is not."""
    files = {str(file.relative_to(script.ROOT)) for file in script.checker_files("vllm")}
    assert {"verispec/engines/seeds.py", "verispec/guard/supervisor.py", "verispec/guard/__init__.py",
            "verispec/cli/sweep.py"} <= files
    assert "verispec/study/sweep.py" not in files and "verispec/engines/transformers.py" not in files
    assert script._imported_modules(script.ROOT / "verispec" / "engines" / "check.py") >= {"verispec.guard.supervisor"}
    assert "verispec.guard.supervisor" not in script._imported_modules(
        script.ROOT / "verispec" / "engines" / "check.py", module_level=True)


@pytest.mark.parametrize("arguments, words", [(["--budget", "0"], "--budget 0 is out of range"),
                                              (["--since", "latest"], "--since 'latest' is not a release"),
                                              (["--checks", "v9-none"], "unknown check v9-none")])
def test_bad_options_are_one_line(arguments, words, capsys):
    assert script.main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and words in error[0], error


def test_the_last_patch_of_each_minor_release_is_kept():
    found = script.last_patch_of_each_minor(["5.0.0", "4.46.1", "4.46.3", "4.46.2", "4.57.6", "5.10.4", "5.10.2",
                                             "5.9.0"])
    assert found == ["4.46.3", "4.57.6", "5.0.0", "5.9.0", "5.10.4"]  # 5.10 after 5.9: by number, not by text


def test_dependencies_are_read_from_the_metadata_without_extras(tmp_path):
    metadata = tmp_path / "METADATA"
    metadata.write_text("Name: transformers\nRequires-Dist: huggingface-hub<1.0,>=0.23.2\n"
                        "Requires-Dist: tokenizers <0.21,>=0.20\nRequires-Dist: numpy>=1.17\n"
                        "Requires-Dist: httpx ; extra == 'serving'\nRequires-Dist: Tokenizers_X>=1\n")
    found = script._requirements(metadata, ("tokenizers", "huggingface-hub", "httpx"))
    assert found == {"huggingface-hub": "huggingface-hub<1.0,>=0.23.2", "tokenizers": "tokenizers<0.21,>=0.20"}


def test_another_engines_adapter_does_not_invalidate_the_rows(monkeypatch):
    """The cache key covers the shared checking code and the engine's own adapter files, not another engine's."""
    vllm, transformers = script.checker_digest("vllm"), script.checker_digest("transformers")
    assert vllm != transformers
    monkeypatch.setitem(script.ENGINE_FILES, "transformers", (*script.ENGINE_FILES["transformers"], "README.md"))
    assert script.checker_digest("vllm") == vllm and script.checker_digest("transformers") != transformers


def test_dependencies_asked_for_later_are_unpacked_beside_a_cached_release(tmp_path, monkeypatch):
    """A release unpacked before its dependencies were asked for (blake3 and setproctitle, which vLLM before 0.17
    imports) gets those its own metadata requires, without downloading the release again; one that has them, or
    does not require them, is left as it is."""
    calls = []

    def fake_unpack(staging, scratch, names, package):
        calls.append(names)
        (staging / "blake3").mkdir()
        return [{"wheel": "blake3-1.0.0-x.whl", "sha256": "0" * 64, "requirement": "blake3"}]

    monkeypatch.setattr(script, "_unpack_dependencies", fake_unpack)
    folder = tmp_path / "vllm-0.16.0"
    (folder / "vllm").mkdir(parents=True)
    (folder / "vllm" / "__init__.py").write_text("")
    (folder / "vllm-0.16.0.dist-info").mkdir()
    (folder / "vllm-0.16.0.dist-info" / "METADATA").write_text("Name: vllm\nRequires-Dist: blake3\n"
                                                                "Requires-Dist: torch==2.9.1\n")
    (folder / "COMPLETE").write_text(json.dumps({"wheel": "vllm-0.16.0-x.whl", "sha256": "1" * 64}) + "\n")
    assert script.unpacked("0.16.0", tmp_path, "vllm", ("blake3", "setproctitle")) == folder
    complete = json.loads((folder / "COMPLETE").read_text())
    assert (folder / "blake3").is_dir() and (folder / "vllm" / "__init__.py").is_file()
    assert complete["sha256"] == "1" * 64 and complete["dependencies"][0]["requirement"] == "blake3"
    assert calls == [("blake3", "setproctitle")]
    script.unpacked("0.16.0", tmp_path, "vllm", ("blake3", "setproctitle"))  # now recorded: nothing to do
    assert len(calls) == 1 and not list(tmp_path.glob(".vllm-0.16.0-*"))


def test_the_result_is_written_one_row_a_line_and_reads_back_the_same():
    result = {"record": {"command": "x", "machine": {"cores": 2}}, "releases": ["0.1.0"], "wheels": {"0.1.0": {"wheel":
              "w.whl", "sha256": "0" * 64}}, "rows": [{"release": "0.1.0", "check": "c", "tv_distance": 0.25},
                                                     {"release": "0.1.0", "check": "d", "witness": {"a": [1, 2]}}],
              "empty": []}
    text = script.compact_json(result)
    assert json.loads(text) == result
    lines = text.splitlines()
    assert sum(line.strip().startswith('{"release": "0.1.0"') for line in lines) == 2  # one line a row
