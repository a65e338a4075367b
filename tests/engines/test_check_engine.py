"""``verispec check-engine``: refusals on one line (no vLLM needed), the greedy checker and the exit status on
hand-made rows, and, where the pinned vLLM wheel is installed (``.ci/run`` installs it), the shipped sampler checked
unmodified and planted bugs in copies of its file caught.

Every number asserted is derived here: the greedy rule by hand on the problem's argmaxes; a dropped temperature's
TV from the closed form of the first token's law (the step's first token follows p^(1/T) normalised, or p itself
when the verification rows lose T, while the bonus token keeps it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import vllm_release
from verispec.cli import check_engine
from verispec.engines import EngineError, adapter
from verispec.engines import vllm as vllm_adapter
from verispec.engines.greedy import greedy_check
from verispec.errors import VerispecError
from verispec.simulator import ContextFreeProblem

ROOT = Path(__file__).resolve().parents[2]


def _verispec(*args, env=None, timeout=900):
    """``verispec ARGS`` in a process of its own: (status, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "verispec", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout, done.stderr


def _last_line(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.startswith("verispec:")][-1]


# -- refusals, without vLLM


def test_unknown_engine_is_refused_on_one_line():
    status, out, err = _verispec("check-engine", "tgi")
    assert status == 2 and out == ""
    assert _last_line(err) == ("verispec: error: unknown engine 'tgi': verispec has adapters for mlx-lm, transformers, "
                               "vllm")


def test_unsupported_release_names_the_supported_range():
    with pytest.raises(EngineError, match=r"vLLM 0\.19\.1 is not a release .* knows 0\.20\.0 to 0\.33\.0"):
        vllm_adapter.check_release("0.19.1")
    assert vllm_adapter.check_release("0.19.1", any_release=True) == "0.19.1"
    assert vllm_adapter.check_release("0.20.0") == "0.20.0"
    assert vllm_adapter.check_release("0.33.0") == "0.33.0"


def test_missing_engine_is_refused_on_one_line(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(EngineError, match=r"vLLM is not installed: pip install --no-deps vllm==0\.33\.0"):
        vllm_adapter.release()


def test_unknown_check_is_refused():
    class Args:
        engine, check = "vllm", "v1-seeded,v9-nothing"

    with pytest.raises(Exception, match=r"unknown check v9-nothing of vllm: choose from .*v1-greedy"):
        check_engine.checks_to_run(Args)


def test_a_module_is_probed_without_ending_the_import_where_its_package_is_missing():
    """``module_present``: the V2 adapter probes modules of newer releases (DFlash2's package, release 0.28 on) from
    every release; ``importlib.util.find_spec`` raises for a missing parent package (the negative control below),
    which ended the adapter's import for releases 0.20-0.27 (their v2 rows read REFUSED)."""
    import importlib.util

    from verispec.engines import module_present

    assert module_present("json.decoder") and not module_present("json.no_such_module")
    assert not module_present("no_such_package_of_verispec.speculator")
    with pytest.raises(ModuleNotFoundError):
        importlib.util.find_spec("no_such_package_of_verispec.speculator")


def test_every_check_names_a_function_of_the_adapter_modules():
    """The adapter's checks point into verispec.engines.vllm_v1 or vllm_v2 by name (read without importing vLLM)."""
    import ast

    defined = {}
    for stem in ("vllm_v1", "vllm_v2"):
        tree = ast.parse((ROOT / "verispec" / "engines" / f"{stem}.py").read_text())
        names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        names |= {target.id for node in tree.body if isinstance(node, ast.Assign) for target in node.targets
                  if isinstance(target, ast.Name)}
        defined[f"verispec.engines.{stem}"] = names
    for check in adapter("vllm").checks():
        module, name = check.function.split(":")
        assert name in defined.get(module, ()), check.function
        if check.seeds:  # a reproducibility check, not a law
            assert check.expect == "reproducible" and check.layout == "step-ragged" and not check.exhaustive
            continue
        assert check.expect in ("lossless", "lossy") and (check.expect == "lossless" or check.why)


def test_status_is_the_worst_finding():
    def row(verdict, expected=True):
        return {"verdict": verdict, "as_expected": expected}

    assert check_engine._status([row("LOSSLESS"), row("LOSSY")]) == 0  # a documented loss, as expected
    assert check_engine._status([row("LOSSLESS"), row("LOSSY", False), row("RAISES", False)]) == 1
    assert check_engine._status([row("RAISES", False), row("UNRUNNABLE", False)]) == 4
    assert check_engine._status([row("UNRUNNABLE", False), row("INCONCLUSIVE", False)]) == 2
    assert check_engine._status([row("INCONCLUSIVE", False), row("LOSSLESS")]) == 3
    # a lossy-by-design check whose law is not its reference rule's (``reference_matches`` False), either verdict
    assert check_engine._status([row("LOSSLESS", False), row("LOSSY")]) == 1
    # a reference rule whose law was not compared (black-box mode): nothing proven of it, inconclusive
    unseen = {**row("LOSSY"), "reference": "fly", "reference_matches": None}
    assert check_engine._status([row("LOSSLESS"), unseen]) == 3
    assert check_engine._status([row("LOSSLESS"), {**unseen, "reference_matches": True}]) == 0


# -- a lossy-by-design entry point against verispec's own rule (Check.reference)

#: FLy at window 1 on V = 2, chain:2, p = (0.6, 0.4), q = (0.3, 0.7), derived by hand: a first draft accepted natively
#: with min(p, q) = M = (0.3, 0.4); a rejected first draft (only token 1, mass 0.3; p's entropy 0.67 nats passes the
#: 0.3 gate, p(1) > 0, the window fits) kept when the second draft passes natively (probability 0.7), else the
#: residual (p - q)+ = token 0; the second position has no room for a window; every draft accepted: y ~ p.
FLY_P, FLY_Q, FLY_M = np.array([0.6, 0.4]), np.array([0.3, 0.7]), np.array([0.3, 0.4])
FLY_TABLES = [np.array([0.3 * 0.3, 0.0]),                                          # (0): rejected, not kept
              np.outer(FLY_M, [0.3, 0.0]),                                        # (x1, 0): second draft rejected
              np.einsum("a,b,c->abc", np.array([0.3, 0.4 + 0.3]), FLY_M, FLY_P)]  # (x1, x2, y): x1 = 1 kept too
#: The lossless rule's law on the same problem (a first draft 1 rejected goes to the residual, token 0): its broken
#: twin as FLy, at TV 0.21 from it (0.21 more on (0), 0.21 less on the blocks that start with 1 and run to the end).
SD_TABLES = [np.array([0.3, 0.0]), np.outer(FLY_M, [0.3, 0.0]), np.einsum("a,b,c->abc", FLY_M, FLY_M, FLY_P)]


@pytest.mark.parametrize("tables, distance", [(FLY_TABLES, 0.0), (SD_TABLES, 0.21)])
def test_an_engines_law_is_compared_with_its_reference_rules_at_a_closed_form(tables, distance):
    from types import SimpleNamespace

    from verispec.engines import Check
    from verispec.engines.check import reference_comparison

    assert abs(sum(table.sum() for table in FLY_TABLES) - 1) < 1e-12
    check = Check("fly", "entry", "m:f", "FLy", layout="step", tree="chain:2", target=tuple(FLY_P),
                  draft=tuple(FLY_Q), expect="lossy", reference="fly(theta=0.3,window=1)")
    problem = ContextFreeProblem(list(FLY_P), list(FLY_Q))
    report = SimpleNamespace(mode="exact", block_tables=tables)
    found = reference_comparison(check, report, problem, "chain:2", False, 1e-6)
    assert found["reference"] == check.reference and abs(found["reference_tv"] - distance) < 1e-12
    assert found["reference_matches"] is (distance == 0.0)
    # no exact law of the given problem: said, never a match
    for unseen, twin in ((SimpleNamespace(mode="blackbox", block_tables=tables), False), (report, True)):
        assert reference_comparison(check, unseen, problem, "chain:2", twin, 1e-6)["reference_matches"] is None


# -- one sandbox a run


#: In a supervised worker: two functions loaded by one run's ``SharedLoader``, a third that cannot be loaded, and the
#: same refusal from ``load_function``, which starts a sandbox of its own.
SHARED = """
import json, os
from verispec.guard import supervisor
from verispec.guard.watch import Supervision


def run():
    from verispec.engines.check import SharedLoader
    from verispec.errors import UnknownVerifierError
    from verispec.external.adapter import load_function

    specs = ["tests.support.engines:sandbox_process", "tests.support.engines:sandbox_ids",
             "tests.support.no_such_module:function"]
    load = SharedLoader(specs)
    process, ids = load(specs[0]), load(specs[1])
    worker = f"{os.readlink('/proc/self/ns/pid')}/{os.getpid()}"
    found = {"worker": worker, "worker_pid": os.getpid(), "process": [process(), process()], "ids": ids(),
             "again": load(specs[0])()}
    for name, loader in (("refused", load), ("alone", load_function)):
        try:
            loader(specs[2])
        except UnknownVerifierError as error:
            found[name] = str(error)
    print(json.dumps(found))
    return 0


raise SystemExit(supervisor.run_supervised(run, Supervision(command="the shared-sandbox test")))
"""


def test_the_functions_of_a_run_share_one_sandbox_and_each_is_refused_at_its_own_load():
    """``run_engine_checks``'s ``SharedLoader`` (``verispec.engines.check``): the functions of one run are
    called in one sandbox, a process that is not the worker but its child (so the engine is imported once a run),
    and one that cannot be loaded is refused when it is loaded, with the line a sandbox of its own gives."""
    done = subprocess.run([sys.executable, "-c", SHARED], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    sandbox = found["process"][0]
    # one child of the worker: in a process-id namespace of its own, the child of that namespace's init
    namespace, parent = sandbox.rpartition("/")[0], found["ids"][1]
    assert sandbox != found["worker"] and found["ids"][0] == sandbox
    assert parent == found["worker_pid"] if namespace == found["worker"].rpartition("/")[0] else parent == 1
    assert found["process"] == [sandbox, sandbox] and found["again"] == sandbox
    assert found["refused"] == found["alone"] and "tests.support.no_such_module" in found["refused"]


# -- the greedy checker, on functions written here

PROBLEM = ContextFreeProblem([0.2, 0.5, 0.3], [0.4, 0.4, 0.2])  # argmax 1 at every prefix


def _greedy_reference(draft_lists, target_logits):
    """Accept drafts while each is the row's argmax, then emit the argmax (bonus after all)."""
    out = np.full((len(draft_lists), len(draft_lists[0]) + 1), -1)
    for index, (drafts, logits) in enumerate(zip(draft_lists, target_logits)):
        for position in range(len(drafts) + 1):
            best = int(np.argmax(logits[position]))
            out[index, position] = best
            if position == len(drafts) or drafts[position] != best:
                break
    return out


def _greedy_off_by_one(draft_lists, target_logits):
    """Reads the argmax one row late (the bonus row's for the last draft)."""
    return _greedy_reference(draft_lists, [np.roll(logits, -1, axis=0) for logits in target_logits])


def test_greedy_checker_passes_the_rule_and_catches_a_broken_one():
    good = greedy_check(_greedy_reference, "chain:2", PROBLEM)
    assert good["verdict"] == "LOSSLESS" and "all 9 draft lists" in good["note"]
    # context-free: the rows are rolled by the prefix, so reading a neighbour's row is caught too
    assert greedy_check(_greedy_off_by_one, "chain:2", PROBLEM)["verdict"] == "LOSSY"

    def accepts_everything(draft_lists, target_logits):
        return np.array([list(drafts) + [int(np.argmax(logits[-1]))]
                         for drafts, logits in zip(draft_lists, target_logits)])

    bad = greedy_check(accepts_everything, "chain:2", PROBLEM)
    assert bad["verdict"] == "LOSSY"
    # rolled rows: at prefix () the target is p = (0.2, 0.5, 0.3), argmax 1, so drafts [0, 0] stop at once; the
    # function emits both drafts and the argmax of the row at (0, 0), p rolled by 2: (0.5, 0.3, 0.2), argmax 0
    assert bad["witness"] == {"drafts": [0, 0], "emitted": [0, 0, 0], "expected": [1]}


def test_a_greedy_batch_that_raises_is_its_checks_finding():
    """The engine's code raising on the batch (vLLM's sampler breaking its output's padding, say) is the check's
    RAISES with the exception, not an internal error of verispec's; a refusal of verispec's own still refuses."""
    def raising(draft_lists, target_logits):
        raise ValueError("the sampler wrote -2")

    row = greedy_check(raising, "chain:1", PROBLEM)
    assert row["verdict"] == "RAISES" and row["raised"]["exception"] == "ValueError"
    assert "raised ValueError: the sampler wrote -2" in row["note"] and "\n" not in row["note"]

    def refusing(draft_lists, target_logits):
        raise VerispecError("refused")

    with pytest.raises(VerispecError, match="refused"):
        greedy_check(refusing, "chain:1", PROBLEM)


def _with_logprobs(normalise: bool):
    """``_greedy_reference`` with each emitted token's log-probability and the largest (``v1_greedy_logprobs``'s
    return): the row's log-softmax, or (``normalise`` False: the broken twin) the raw logits read as
    log-probabilities."""
    def function(draft_lists, target_logits):
        tokens = _greedy_reference(draft_lists, target_logits)
        logprobs = np.full(tokens.shape + (2,), np.nan)
        ids = np.full(tokens.shape + (2,), -1)
        for index, logits in enumerate(target_logits):
            for position, token in enumerate(tokens[index]):
                if token < 0:
                    break
                row = np.asarray(logits[position], dtype=np.float64)
                if normalise:
                    row = row - np.log(np.exp(row).sum())
                logprobs[index, position] = (row[token], row.max())
                ids[index, position] = (token, int(np.argmax(row)))
        return tokens, logprobs, ids

    return function


def test_greedy_checker_holds_returned_logprobs_to_the_targets():
    good = greedy_check(_with_logprobs(True), "chain:2", PROBLEM)
    assert good["verdict"] == "LOSSLESS" and "log-probability" in good["note"]
    bad = greedy_check(_with_logprobs(False), "chain:2", PROBLEM)
    # the rows handed are log p shifted by 1 + position: at draft list [0, 0] the first emitted token is 1, whose
    # logit is log 0.5 + 1 where its log-probability is log 0.5
    assert bad["verdict"] == "LOSSY" and bad["witness"]["drafts"] == [0, 0]
    assert f"is {np.log(0.5) + 1:.6g}, the target's is {np.log(0.5):.6g}" in bad["note"]


def test_greedy_checker_refuses_too_many_draft_lists():
    with pytest.raises(VerispecError, match=r"3\^8 = 6,561 .* more than 4,096"):
        greedy_check(_greedy_reference, "chain:8", PROBLEM)


def test_greedy_checker_refuses_output_of_the_wrong_shape():
    with pytest.raises(VerispecError, match=r"must return integers of shape \[9, 3\]"):
        greedy_check(lambda lists, logits: np.zeros((9, 1), dtype=np.int64), "chain:2", PROBLEM)


def test_greedy_checker_sees_context():
    """On a context-dependent problem a function reading the wrong row is caught."""
    from verispec.simulator import TabularProblem

    target = {(): [0.2, 0.5, 0.3], (0,): [0.6, 0.3, 0.1], (1,): [0.1, 0.2, 0.7], (2,): [0.3, 0.3, 0.4]}
    draft = {(): [1 / 3] * 3}
    problem = TabularProblem(3, {prefix: np.array(p) for prefix, p in target.items()},
                             {prefix: np.array(q) for prefix, q in draft.items()})
    assert greedy_check(_greedy_reference, "chain:1", problem)["verdict"] == "LOSSLESS"
    assert greedy_check(_greedy_off_by_one, "chain:1", problem)["verdict"] == "LOSSY"


# -- the shipped sampler (the pinned vLLM wheel)


RELEASE = vllm_release()
needs_vllm = pytest.mark.skipif(RELEASE not in vllm_adapter.SUPPORTED,
                                reason=f"the pinned vLLM wheel is not installed here ({RELEASE})")


def _mutant(tmp_path, old: str, new: str) -> Path:
    """A copy of the installed vllm/v1/sample/rejection_sampler.py with ``old`` (once) replaced by ``new``."""
    from importlib.util import find_spec

    source = Path(find_spec("vllm").submodule_search_locations[0]) / "v1" / "sample" / "rejection_sampler.py"
    text = source.read_text()
    assert text.count(old) == 1, old
    copy = tmp_path / "rejection_sampler.py"
    copy.write_text(text.replace(old, new))
    return copy


#: The problem of both temperature runs (V = 2, one draft), and the check's temperature, read from the adapter.
P, Q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
PROBLEM_ARGS = ("--target", "0.6,0.4", "--draft", "0.3,0.7")


@needs_vllm
def test_a_dropped_temperature_and_drafts_left_out_of_the_penalties_are_caught_at_their_closed_forms(tmp_path):
    """Two bugs planted in one copy of the shipped file, each invisible to the other's check (one vLLM process).

    The verification rows' temperature dropped (V = 2, one draft, at v1-temperature's T): the first token is the
    draft (drawn from q at T) accepted with min(1, p(x)/q(x)), else a draw from (p - q)+: p itself; the bonus token
    and the continuation keep T, so the block's exact TV is the first token's, TV(p, p^(1/T) normalised). v1-penalties
    samples at T = 1, where the dropped division changes nothing.

    The spec tokens never joining the output history (``_combine_outputs_with_spec_tokens`` repeats the output alone;
    v1-penalties: V = 2, chain:2, history (1, 1), drafts the draft's argmax 1 without draft probs): the second
    position is verified against the target penalised without the first draft, while the first position and the
    bonus token (penalised by the Sampler's own file) are right. Without draft probs a draft x is accepted with
    probability t(x), else the residual is drawn, so each position emits the law it verifies against: the block's
    TV is t0(1) TV(a1, t1(. | 1)), with a1 the law after the history alone (``_penalised_law``, the support's own
    penalties). v1-temperature samples without penalties, where the combining never runs.

    The greedy kernel, which reads neither, stays LOSSLESS on every draft list of chain:1 at V = 2. All under
    VLLM_TARGET_DEVICE=cpu (as vLLM's own tests on a CPU set it), which would send the sampler to vllm._C's compiled
    CPU operators, absent from a CUDA wheel: the adapter checks the GPU path, whose kernels are Triton's, regardless
    (the closed forms are the Triton path's). The unmodified file's laws at T = 1 are LOSSLESS in
    tests/engines/test_engine_ci_example.py, its greedy offset bug caught in tests/engines/test_pytest_plugin.py;
    ``--fail-fast`` is tested without vLLM below."""
    checks = {check.name: check for check in vllm_adapter.checks()}
    temperature = float(checks["v1-temperature"].sampling.split("=")[1])
    assert (checks["v1-penalties"].tree, checks["v1-penalties"].target) == ("chain:2", tuple(P))
    assert checks["v1-penalties"].sampling == "temperature=1"
    sharpened = P ** (1 / temperature) / (P ** (1 / temperature)).sum()
    history, draft = [1, 1], int(np.argmax(Q))
    left_out = _penalised_law(history)[draft] * 0.5 * np.abs(
        _penalised_law(history) - _penalised_law(history + [draft])).sum()
    mutant = _mutant(tmp_path, "logits.div_(temperature.unsqueeze(-1))", "logits.div_(1.0)")
    text = mutant.read_text()
    assert text.count("result.append([*result[-1], spec[i]])") == 1
    mutant.write_text(text.replace("result.append([*result[-1], spec[i]])", "result.append(list(out))"))
    status, out, err = _verispec("check-engine", "vllm", "--check", "v1-greedy,v1-temperature,v1-penalties",
                                 *PROBLEM_ARGS, "--source", str(mutant), "--json", env={"VLLM_TARGET_DEVICE": "cpu"})
    assert status == 1, err
    greedy, dropped, penalties = json.loads(out)["checks"]
    assert greedy["verdict"] == "LOSSLESS" and greedy["mode"] == "exhaustive" and "all 2 draft lists" in greedy["note"]
    assert dropped["verdict"] == "LOSSY" and dropped["mode"] == "exact"
    assert abs(dropped["tv_distance"] - 0.5 * np.abs(P - sharpened).sum()) < 1e-6
    assert penalties["verdict"] == "LOSSY" and penalties["mode"] == "exact" and left_out > 0.01
    assert abs(penalties["tv_distance"] - left_out) < 1e-6  # vLLM penalises float32 logits


@needs_vllm
def test_a_ban_left_unapplied_to_the_draft_rows_is_caught_at_its_closed_form(tmp_path):
    """Two bans planted in one copy of the shipped file, each invisible to the other's check: the allowed-ids mask
    and the bad words left off the draft rows (the Sampler's own file still bans the bonus row). v1-allowed-ids and
    v1-bad-words give token 2 no mass and the rows' largest logit, 0 (``vllm_v1.BANNED_LOGIT``), so a draft row
    left unbanned verifies the one draft against p' = softmax(log 0.6, log 0.4, 0) = (0.3, 0.2, 0.5), exactly
    (drafts with draft probs), and the token after it comes from the banned target p = (0.6, 0.4, 0) whether the
    draft was accepted (the bonus) or not (the continuation): the block's TV is TV(p', p) = 0.5."""
    checks = {check.name: check for check in vllm_adapter.checks()}
    target = np.array(checks["v1-allowed-ids"].target)
    assert checks["v1-bad-words"].target == checks["v1-allowed-ids"].target and target[2] == 0
    unbanned = np.array([target[0], target[1], 1.0]) / (target[0] + target[1] + 1.0)
    mutant = _mutant(tmp_path, 'logits.masked_fill_(token_mask, float("-inf"))', "pass")
    call = "apply_bad_words_with_drafts(\n                logits, bad_words_token_ids, output_token_ids"
    text = mutant.read_text()
    assert text.count(call) == 1
    mutant.write_text(text.replace(call, "(lambda *unused: None)(\n                logits, bad_words_token_ids, "
                                         "output_token_ids"))
    status, out, err = _verispec("check-engine", "vllm", "--check", "v1-allowed-ids,v1-bad-words", "--source",
                                 str(mutant), "--json")
    assert status == 1, err
    for row in json.loads(out)["checks"]:
        assert row["verdict"] == "LOSSY" and row["mode"] == "exact"
        assert abs(row["tv_distance"] - 0.5 * np.abs(unbanned - target).sum()) < 1e-6


@needs_vllm
def test_seeds_and_greedy_synthetic_acceptance_pass_unmodified_and_their_planted_bugs_are_caught(tmp_path):
    """v1-seeds and v1-synthetic-greedy on the shipped file (REPRODUCIBLE; LOSSY as documented, and the law verispec's
    synthetic rule's), then on a copy with two bugs, each invisible to the other's check (one vLLM process each):

    - a request's slice of the uniforms left empty when its offset and its draft count share a bit (cosmic-ray's
      mutant 737 of vLLM 0.33, ``start_idx | n``): in v1-seeds' batch (1, 1 and 0 drafts) request 1's acceptance
      uniform then comes from torch's global generator, which keeps the law and breaks the seed;
    - the greedy kernel's synthetic rate replaced by 0.5 at every position: on v1-synthetic-greedy's point masses
      (draft token 0, the target's argmax 1, chain:2) the rule's conditional rates (a1, a2 / a1) emit (0, 0, 1),
      (0, 1), (1) with a2, a1 - a2, 1 - a1, the twin with 1/4, 1/4, 1/2: TV 0.5 (|a2 - 1/4| + |a1 - a2 - 1/4| +
      |1/2 - a1|) between the laws."""
    a1, a2 = vllm_adapter.SYNTHETIC_RATES
    status, out, err = _verispec("check-engine", "vllm", "--check", "v1-seeds,v1-synthetic-greedy", "--json")
    assert status == 0, err
    reproducible, synthetic = json.loads(out)["checks"]
    assert reproducible["verdict"] == "REPRODUCIBLE" and reproducible["as_expected"]
    assert synthetic["verdict"] == "LOSSY" and synthetic["as_expected"] and synthetic["reference_matches"]
    assert abs(synthetic["tv_distance"] - a1) < 1e-6  # the target emits 1 first; the draft 0 is accepted with a1
    mutant = _mutant(tmp_path, "end_idx = start_idx + n", "end_idx = start_idx | n")
    text = mutant.read_text()
    assert text.count("accepted = (uniform_prob < rate) and draft_token_id >= 0") == 1  # the greedy kernel's
    mutant.write_text(text.replace("accepted = (uniform_prob < rate) and draft_token_id >= 0",
                                   "accepted = (uniform_prob < 0.5) and draft_token_id >= 0"))
    status, out, err = _verispec("check-engine", "vllm", "--check", "v1-seeds,v1-synthetic-greedy", "--source",
                                 str(mutant), "--json")
    assert status == 1, err
    reproducible, synthetic = json.loads(out)["checks"]
    assert reproducible["verdict"] == "IRREPRODUCIBLE" and reproducible["witness"]["request"] == 1
    assert synthetic["verdict"] == "LOSSY" and not synthetic["as_expected"]
    expected = 0.5 * (abs(a2 - 0.25) + abs(a1 - a2 - 0.25) + abs(0.5 - a1))
    assert abs(synthetic["reference_tv"] - expected) < 1e-6


def test_fail_fast_stops_after_the_first_check_that_fails(monkeypatch):
    """``fail_fast`` (check-engine's ``--fail-fast``): the rows end at the first check whose status is not 0, and
    without it every check runs; on checks written here, without vLLM."""
    from types import SimpleNamespace

    from verispec.engines import Check
    from verispec.engines import check as engine_check

    engine = SimpleNamespace(check_release=lambda any_release=False: "9.9", SAMPLER_MODULE="fake.sampler",
                             SOURCE_VARIABLE="VERISPEC_FAKE_SOURCE")
    listed = [Check(name, "entry", "fake.module:function", "a check written here") for name in "abc"]
    verdicts = {"a": "LOSSLESS", "b": "LOSSY", "c": "LOSSLESS"}
    monkeypatch.setattr(engine_check, "select_checks", lambda name, names: (engine, listed))
    monkeypatch.setattr(engine_check, "run_check", lambda module, check, **options: {
        "check": check.name, "verdict": verdicts[check.name], "as_expected": verdicts[check.name] == "LOSSLESS"})
    fast = engine_check.run_engine_checks("fake", fail_fast=True)
    assert [row["check"] for row in fast["checks"]] == ["a", "b"] and fast["exit_status"] == 1
    every = engine_check.run_engine_checks("fake")
    assert [row["check"] for row in every["checks"]] == ["a", "b", "c"] and every["exit_status"] == 1
    seen = {}  # the command hands --fail-fast to the run
    monkeypatch.setattr(engine_check, "run_engine_checks", lambda *args, **options: seen.update(options) or {
        "engine": "fake", "release": "9.9", "source": None, "exit_status": 1, "checks": []})
    from verispec.cli.parser import build_parser

    args = build_parser().parse_args(["check-engine", "fake", "--fail-fast", "--json"])
    assert check_engine.run(args) == 1 and seen["fail_fast"] is True


def _penalised_law(history: list) -> np.ndarray:
    """The step-penalties target at V = 2 after ``history`` (the request's output so far), from the support's own
    penalties (written from their definitions): raw logits log P + 1 (the layout's shift), prompt 3 tokens 0."""
    import torch

    from tests.support.step_penalties_rules import penalised

    logits = torch.log(torch.tensor(P, dtype=torch.float64)) + 1.0
    return torch.softmax(penalised(logits, [0, 0, 0], history, 1.5, 0.5, 0.25), -1).numpy()


@needs_vllm
def test_a_kernel_the_interpreter_cannot_run_is_said_and_not_lossless(tmp_path):
    """Inline assembly has no interpreter: a greedy kernel that uses it fails the adapter's first call of every
    route, so nothing is checked: one line naming the interpreter's refusal and exit 2, never a LOSSLESS."""
    mutant = _mutant(tmp_path, "target_argmax_id = tl.load(target_argmax_ptr + start_idx + pos).to(tl.int32)",
                     "target_argmax_id = tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', "
                     "[tl.load(target_argmax_ptr + start_idx + pos).to(tl.int32)], dtype=tl.int32, is_pure=True, "
                     "pack=1)")
    status, out, err = _verispec("check-engine", "vllm", "--check", "v1-greedy", "--source", str(mutant), "--json")
    assert status == 2 and out == "", err
    assert "interpreter cannot run a kernel" in _last_line(err) and "inline_asm not supported" in _last_line(err)


@needs_vllm
def test_a_source_is_refused_for_checks_that_do_not_run_its_module(tmp_path):
    """--source replaces vllm/v1/sample/rejection_sampler.py; the V2 checks run other modules, so with a source
    they would check the installed code under the mutant's name: refused in one line, before any check runs."""
    copy = tmp_path / "rejection_sampler.py"
    copy.write_text("# a mutant\n")
    status, out, err = _verispec("check-engine", "vllm", "--check", "v2-seeded", "--source", str(copy))
    assert status == 2 and out == ""
    assert "which v2-seeded does not run" in _last_line(err)


def test_an_engine_not_installed_names_how_to_install_it_and_the_releases_known():
    from verispec.engines import installed_release, version_key

    with pytest.raises(EngineError, match=r"^no-such-engine-xyz is not installed: pip install it; verispec's adapter "
                                          r"knows releases 1\.0 to 2\.0$"):
        installed_release("no-such-engine-xyz", "pip install it", "1.0 to 2.0")
    assert version_key("5.10.4") > version_key("5.9.0") and version_key("0.10.1.1") == (0, 10, 1, 1)
