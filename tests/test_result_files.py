"""Result files follow the one rule for writers: a script writes its result (``--out``, ``--result``) over a file
only when that file is a result file itself (JSON with a ``record`` naming its command), and refuses in one line,
before any work, anything else at that path (``verispec.files.provenance.check_result_output``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verispec.errors import VerispecError
from verispec.files.provenance import check_result_output, run_record

ROOT = Path(__file__).resolve().parents[1]


def test_only_a_result_file_may_be_replaced(tmp_path):
    check_result_output(tmp_path / "absent.json")  # nothing there: written
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"record": run_record("python experiments/x.py"), "value": 1}))
    check_result_output(result)
    for name, content in (("user.json", '{"mine": 1}'), ("notes.txt", "not JSON"), ("list.json", "[1, 2]"),
                          ("no-command.json", '{"record": {}}')):
        (tmp_path / name).write_text(content)
        with pytest.raises(VerispecError, match="is not a result file") as error:
            check_result_output(tmp_path / name)
        assert "\n" not in str(error.value)
    (tmp_path / "link.json").symlink_to(result)  # never through a link, even to a result file
    with pytest.raises(VerispecError, match="is not a result file"):
        check_result_output(tmp_path / "link.json")


def test_a_result_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, monkeypatch):
    """A folder on the way that is a file, a folder that cannot be written (access() says so: for root only on a
    read-only mount, so it is told here), a full file system: each one line, before any work."""
    import os

    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    with pytest.raises(VerispecError, match="is a file, not a folder") as error:
        check_result_output(blocker / "deeper" / "out.json")
    assert "\n" not in str(error.value)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(VerispecError, match="is not writable here"):
        check_result_output(tmp_path / "out.json")
    monkeypatch.undo()
    monkeypatch.setattr(os, "statvfs", lambda path: type("Full", (), {"f_bavail": 3, "f_frsize": 4096})())
    with pytest.raises(VerispecError, match="12,288 bytes free"):
        check_result_output(tmp_path / "out.json")
    monkeypatch.undo()
    check_result_output(tmp_path / "new" / "out.json")  # the control: a folder still to be made is fine


@pytest.mark.parametrize("script", ["engine_bugs", "real_code"])
@pytest.mark.parametrize("budget", ["nan", "-5", "inf"])
def test_an_experiments_budget_out_of_range_is_one_line(script, budget, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / f"{script}.py"), f"--budget={budget}", "--out",
                           str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
    line = done.stderr.strip()
    assert done.returncode == 2 and len(line.splitlines()) == 1, done.stderr
    assert line.startswith(f"{script}: --budget {float(budget):g} is out of range") and "(0, 86400]" in line
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("script", ["experiments/exact_findings.py", "experiments/multipath_gap.py"])
def test_an_experiment_refuses_a_users_file_before_any_work_and_keeps_it(tmp_path, script):
    """The control: the same file, once the output is a result file of the run, is replaced (exact_findings)."""
    user = tmp_path / "out.json"
    user.write_text('{"mine": 1}\n')
    out = ["--out", str(user if "exact" in script else tmp_path / "out")]
    seeds = ["--seeds", "1"] if "gap" in script else []
    completed = subprocess.run([sys.executable, str(ROOT / script), *out, *seeds], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 2 and "is not a result file" in completed.stderr
    assert user.read_text() == '{"mine": 1}\n'
    assert not (tmp_path / "out.md").exists()
    if "exact" in script:
        user.write_text(json.dumps({"record": run_record("python experiments/exact_findings.py")}))
        rerun = subprocess.run([sys.executable, str(ROOT / script), *out], capture_output=True, text=True, timeout=120)
        assert rerun.returncode == 0, rerun.stderr
        assert "sun_toy" in json.loads(user.read_text())


def test_a_runs_own_output_does_not_make_its_checkout_dirty(tmp_path):
    """commit_of marks a checkout -dirty when a tracked file differs from its commit, except the run's own outputs
    (a result file a rerun overwrites): changed alone it leaves the commit clean; any other change still reads dirty,
    beside it or alone."""
    import subprocess

    from verispec.files.provenance import commit_of

    def git(*arguments):
        return subprocess.run(["git", "-C", str(tmp_path), *arguments], capture_output=True, text=True,
                              check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "result.json").write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    head = git("rev-parse", "HEAD")
    (tmp_path / "result.json").write_text('{"rows": []}\n')
    assert commit_of(tmp_path) == head + "-dirty"
    assert commit_of(tmp_path, outputs=[tmp_path / "result.json"]) == head
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json"  # an output outside the checkout changes nothing
    assert commit_of(tmp_path, outputs=[tmp_path / "result.json", outside]) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert commit_of(tmp_path, outputs=[tmp_path / "result.json"]) == head + "-dirty"
