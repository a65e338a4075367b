"""Every script under experiments/ that writes refuses, before any work and on one line (exit 2), what it could not
finish or must not do (issue 64): a full disk, a file of the user's at one of its outputs (kept as it was), an
output another run holds, and a number out of its range. Each script's first piece of work is replaced by a sentinel
that fails the test if it is reached; the negative control runs the same full-disk case with the output check
switched off (the old scripts checked their outputs at their first save, after the work) and reaches it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.scripts import load_script
from tests.support.timing import Stopwatch

pytest.importorskip("torch")


class WorkStarted(AssertionError):
    """The script began its work before it refused."""


def _sentinel(*_args, **_kwargs):
    raise WorkStarted("the script's work started before its outputs were checked")


def _patch_work(monkeypatch, script, name: str) -> None:
    """Replace the script's first piece of work (``name``: an attribute of the script, or 'module:attribute')."""
    if ":" in name:
        module, attribute = name.split(":")
        import importlib

        target = importlib.import_module(module)
        if attribute == "Dataset.load":
            monkeypatch.setattr(target.Dataset, "load", staticmethod(_sentinel))
        else:
            monkeypatch.setattr(target, attribute, _sentinel)
    else:
        monkeypatch.setattr(script, name, _sentinel)


#: script -> (its arguments but the output, the output option's value (a file, or a base for multipath_gap), a
#: path of it that a user's file may occupy, its first piece of work, its name in error lines).
SCRIPTS = {
    "label_cost": (["--dataset", "{input}", "--verifiers", "gbv", "--out"], "out.json", "out.json",
                   "verispec.selector.roots:dataset_pair_roots"),
    "real_context_gaps": (["--dataset", "{input}", "--out"], "out.json", "out.json.rows.json",
                          "verispec.selector.roots:dataset_pair_roots"),
    "exact_findings": (["--out"], "out.json", "out.json", "sun_toy"),
    "multipath_gap": (["--seeds", "1", "--out"], "out", "out.md", "run"),
    "delay_sweep": (["--output"], "out.json", "out.md", "random_markov_problem"),
    "lp_sizes": (["--quick", "--output"], "out.json", "out.json", "measure"),
    "lossless_real_decoding": (["--runs", "2", "--output"], "out.json", "out.json", "verispec.models.tiny:tiny_pair"),
    "predict_vs_measure": (["--tiny", "--output"], "out.json", "out.png", "verispec.models.tiny:tiny_pair"),
    "real_decoding": (["--output"], "out.json", "out.summary.json", "humaneval_prompts"),
    "selector_decoding": (["--dataset", "{input}", "--selector", "{input}", "--prompts", "prose", "--output"],
                          "out.json", "out.md", "held_out_plans"),
    "selector_label_quality": (["--dataset", "{input}", "--output"], "out.json", "out.summary.json",
                               "verispec.selector.dataset_file:Dataset.load"),
    "typical_derived": (["--tiny", "--output"], "out.json", "out.md", "verispec.models.tiny:tiny_pair"),
    "ddtree": (["--seeds", "1", "--out"], "out.json", "out.json", "smallest_witness"),
    "lossy_rules": (["--seeds", "1", "--out"], "out.json", "out.json", "random_problems"),
    "layer_verification": (["--seeds", "1", "--out"], "out.json", "out.json", "run"),
    "optimality_claims": (["--seeds", "1", "--out"], "out.json", "out.json", "gbv_rows"),
}


def _arguments(name: str, folder: Path) -> list[str]:
    before, out, _, _ = SCRIPTS[name]
    source = folder / "input.npz"
    source.write_bytes(b"a regular file; never read before the outputs are checked")
    return [part.replace("{input}", str(source)) for part in before] + [str(folder / out)]


def _full_disk(monkeypatch) -> None:
    from verispec.study import script_files

    real = os.statvfs
    monkeypatch.setattr(script_files.os, "statvfs",
                        lambda path: SimpleNamespace(f_bavail=0, f_frsize=real(path).f_frsize))


def _refused(script, arguments: list[str], name: str, words: str, capsys) -> str:
    assert script.main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"{name}: error:") and words in error[0], error
    return error[0]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_full_disk_a_users_file_and_a_held_output_are_refused_before_any_work(name, tmp_path, monkeypatch,
                                                                                 capsys):
    script = load_script(f"experiments/{name}.py", f"{name}_refusing")
    _patch_work(monkeypatch, script, SCRIPTS[name][3])
    arguments = _arguments(name, tmp_path)
    with monkeypatch.context() as patched:
        _full_disk(patched)
        _refused(script, arguments, name, "its file system has 0 bytes free", capsys)
    user = tmp_path / SCRIPTS[name][2]
    user.write_bytes(b"the user's own file\n")
    _refused(script, arguments, name, repr(str(user)) if name != "label_cost" and name != "exact_findings"
             else "is not a result file", capsys)
    assert user.read_bytes() == b"the user's own file\n"
    user.unlink()
    from verispec.files.store_lock import lock_path

    outputs = [path for path in tmp_path.iterdir() if path.name.startswith("out")]
    assert all(path.name.endswith(".lock") for path in outputs), outputs  # nothing written but the lock
    held = lock_path(tmp_path / ("out.json.rows.json" if name in ("label_cost", "real_context_gaps") else
                                 "out.json"))
    handle = os.open(held, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _refused(script, arguments, name, "is being written by another run", capsys)
    finally:
        os.close(handle)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_negative_control_without_the_check_the_work_starts_on_a_full_disk(name, tmp_path, monkeypatch):
    from verispec.study.script_files import RunOutputs

    script = load_script(f"experiments/{name}.py", f"{name}_unchecked")
    _patch_work(monkeypatch, script, SCRIPTS[name][3])
    monkeypatch.setattr(RunOutputs, "claim", lambda self, held: None)
    _full_disk(monkeypatch)
    with pytest.raises(WorkStarted):
        script.main(_arguments(name, tmp_path))


#: script -> (option, value, words) cases out of range: negative, zero, huge, NaN.
RANGES = {
    "label_cost": [("--threads", "100000", "--threads 100000 is out of range: give a whole number from 1 to 1,024"),
                   ("--roots", "-1", "--roots -1"), ("--time-budget", "nan", "--time-budget nan"),
                   ("--time-budget", "1e12", "--time-budget 1000000000000.0"), ("--seed", "-2", "--seed -2"),
                   ("--time-budget", "0", "--time-budget 0.0 is out of range: give a number above 0")],
    "real_context_gaps": [("--threads", "0", "--threads 0"), ("--max-table", "99999999999", "--max-table"),
                          ("--limit", "-5", "--limit -5"), ("--time-budget", "inf", "--time-budget inf")],
    "multipath_gap": [("--seeds", "0", "--seeds 0"), ("--seeds", "10000000", "--seeds 10000000")],
    "delay_sweep": [("--max-k", "100000", "--max-k 100000"), ("--seed", "-1", "--seed -1"),
                    ("--cost-ratio", "nan", "--cost-ratio nan"), ("--max-tail", "-1", "--max-tail -1")],
    "lp_sizes": [("--max-variables", "0", "--max-variables 0"), ("--max-nonzeros", "-1", "--max-nonzeros -1")],
    "lossless_real_decoding": [("--runs", "0", "--runs 0"), ("--runs", "1000000000", "--runs 1000000000")],
    "predict_vs_measure": [("--runs", "1", "--runs 1"), ("--epsilon", "nan", "--epsilon nan"),
                           ("--epsilon", "0", "above 0"), ("--threads", "100000", "--threads 100000"),
                           ("--cut", "-1", "--cut -1")],
    "real_decoding": [("--max-new-tokens", "1000000000000", "--max-new-tokens"), ("--threads", "-2", "--threads -2"),
                      ("--prompts", "0", "--prompts 0")],
    "selector_decoding": [("--max-new-tokens", "0", "--max-new-tokens 0"), ("--threads", "100000", "--threads")],
    "selector_label_quality": [("--samples", "1", "--samples 1"), ("--deadline", "nan", "--deadline nan"),
                               ("--threads", "100000", "--threads 100000")],
    "typical_derived": [("--vocab", "100000", "--vocab 100000"), ("--threads", "0", "--threads 0")],
    "ddtree": [("--seeds", "0", "--seeds 0"), ("--seeds", "100000", "--seeds 100000")],
    "lossy_rules": [("--seeds", "0", "--seeds 0"), ("--vocab", "1", "--vocab 1"), ("--threads", "100000", "--threads")],
    "layer_verification": [("--seeds", "-3", "--seeds -3"), ("--seeds", "1000000", "--seeds 1000000")],
    "optimality_claims": [("--seeds", "0", "--seeds 0"), ("--seeds", "100000", "--seeds 100000")],
}


@pytest.mark.parametrize("name", sorted(RANGES))
def test_a_number_out_of_range_is_one_line_before_any_work(name, tmp_path, monkeypatch, capsys):
    """Each case ends on one line naming the option, the value and the range, nothing written; the control: with
    the range check switched off the same --threads 100000 of label_cost reaches torch (which the old script
    handed 100,000 threads, and crashed)."""
    script = load_script(f"experiments/{name}.py", f"{name}_ranges")
    _patch_work(monkeypatch, script, SCRIPTS[name][3])
    arguments = _arguments(name, tmp_path)
    for option, value, words in RANGES[name]:
        line = _refused(script, [*arguments, option, value], name, words, capsys)
        assert "is out of range: give" in line, line
    assert not [path for path in tmp_path.iterdir() if path.name.startswith("out")]


def test_negative_control_label_cost_hands_torch_the_threads_without_the_range_check(tmp_path, monkeypatch):
    import torch

    from verispec.study import script_files

    script = load_script("experiments/label_cost.py", "label_cost_unranged")
    asked = []
    monkeypatch.setattr(script_files, "check_ranges", lambda ranges: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda count: (asked.append(count), _sentinel()))
    with pytest.raises(WorkStarted):
        script.main(["--threads", "100000", *_arguments("label_cost", tmp_path)])
    assert asked == [100000]


@pytest.mark.parametrize("name", ["label_cost", "real_context_gaps"])
def test_a_dataset_that_is_a_fifo_a_device_or_a_folder_is_refused_at_once(name, tmp_path, capsys):
    """The old scripts opened a FIFO dataset and waited for a writer for ever, past their --time-budget."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = load_script(f"experiments/{name}.py", f"{name}_fifo")
    for dataset, words in ((fifo, "is a FIFO (named pipe), not a regular file"),
                           ("/dev/zero", "is a character device, not a regular file"), (tmp_path, "is a folder")):
        arguments = ["--dataset", str(dataset), "--time-budget", "60", "--out", str(tmp_path / "out.json")] + \
            (["--verifiers", "gbv"] if name == "label_cost" else [])
        with Stopwatch() as watch:
            _refused(script, arguments, name, words, capsys)
        assert watch.within(0, 1), watch  # a refusal's CPU work; the old scripts waited for ever or read for ever


def _late_writer(fifo: Path, after: float, stop):
    """A writer that comes ``after`` seconds in and opens ``fifo`` (without waiting) whenever a reader waits in
    open(), then closes it at once: a reader blocked there reads an empty file, and the test never hangs."""
    import threading
    import time

    def write():
        stop.wait(after)
        while not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # no reader waiting
            time.sleep(0.02)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("name", ["label_cost", "real_context_gaps"])
def test_the_time_budget_runs_from_the_start_and_stops_a_blocked_read(name, tmp_path, monkeypatch, capsys):
    """With the regular-file check switched off, the dataset's read blocks in open() (nobody writes the FIFO): the
    budget, running from the start, stops it at 0.3 s, exit 3 on one line (within the budget and 0.5 s of CPU on an
    idle core, stretched by the load: a budget not kept waits for the writer and exits 2). Negative control: the
    budget started after the dataset was read (the old order: the setup's budget left out) does not stop it; the run
    ends only when a writer comes, 0.8 s in, on the empty file's error (exit 2)."""
    import threading

    from verispec.guard import budget
    from verispec.study import script_files

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(script_files, "check_input", lambda *args, **kwargs: None)
    script = load_script(f"experiments/{name}.py", f"{name}_budget")
    arguments = ["--dataset", str(fifo), "--time-budget", "0.3", "--out", str(tmp_path / "out.json")] + \
        (["--verifiers", "gbv"] if name == "label_cost" else [])

    def run() -> tuple[int, Stopwatch]:
        stop, writer = threading.Event(), None
        try:
            with Stopwatch() as watch:  # the writer's 0.8 s start inside the watch, after its load measurement
                writer = _late_writer(fifo, 0.8, stop)
                status = script.main(arguments)
        finally:
            stop.set()
            if writer is not None:
                writer.join()
        return status, watch

    status, watch = run()
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 3 and watch.within(0.3, 0.5), (status, watch)
    assert len(error) == 1 and "--time-budget 0.3 s reached before the first root" in error[0], error
    real, calls = budget.time_budget, []

    def after_the_read(deadline, **options):  # the first budget is the setup's: the old scripts had none there
        calls.append(deadline)
        return real(None if len(calls) == 1 else deadline, **options)

    monkeypatch.setattr(budget, "time_budget", after_the_read)
    status, watch = run()
    assert status == 2 and watch.seconds >= 0.8, (status, watch)
    assert "cannot read the dataset" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(SCRIPTS) + ["code_lengths"])
def test_an_option_argparse_cannot_read_is_one_line_without_the_usage_block(name, capsys):
    """``--bogus`` (no such option; a script with required options names those first): one line ``NAME: error:
    ...``, status 2. The control: a plain ArgumentParser,
    as the scripts had, prints the usage block above the error (two lines or more)."""
    import argparse

    script = load_script(f"experiments/{name}.py", f"{name}_parser")
    with pytest.raises(SystemExit) as stopped:
        script.main(["--bogus"])
    error = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(error) == 1 and error[0].startswith(f"{name}: error:") and \
        ("--bogus" in error[0] or "the following arguments are required" in error[0]), error
    with pytest.raises(SystemExit):
        argparse.ArgumentParser(prog=name).parse_args(["--bogus"])
    assert len(capsys.readouterr().err.strip().splitlines()) >= 2


def test_code_lengths_names_a_ref_git_cannot_read(capsys):
    """The control: HEAD is measured (status 0)."""
    script = load_script("experiments/code_lengths.py", "code_lengths_ref")
    assert script.main(["--ref", "no-such-ref-64"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--ref 'no-such-ref-64' cannot be read" in error[0], error
    assert script.main(["--ref", "HEAD"]) == 0
