"""Issue 64: a verdict the code under check cannot forge, and a stop the user asked for is the user's.

The code under check runs in a sandbox process (``verispec.guard.sandbox``) that never holds the worker's report pipe
and
cannot reach the worker or the supervisor (``verispec.guard.confinement``). The forgers below try every route found:
they
write a report claiming status 0 into every descriptor they hold and every descriptor of every process above them
they can open (``/proc/PID/fd``), write into those processes' memory (``/proc/PID/mem``), attach to them
(``ptrace``), take their descriptors (``pidfd_getfd``), signal them (SIGTERM, SIGINT, SIGHUP, SIGSTOP, to the
processes and their groups, through libc so no Python hook sees it), set the switches in the environment, and
rewrite verispec's own functions in memory so that the report says 0; then they return the lossy rule's outcome.
The honest verdict is known by construction (the rule emits the drafted token again: on ``chain:1`` with p =
(1/2, 1/2) and q = (9/10, 1/10) its outputs are (0, 0) w.p. 9/10 and (1, 1) w.p. 1/10 against 1/4 each: TV 0.65,
LOSSY, exit 1), and a forger that ends its process through libc's ``_exit(0)`` after forging gets RAISES (4).

Negative controls: with the code in the worker itself (``VERISPEC_SANDBOX=0``, the design before this issue) the
same forgers get exit 0, so these tests catch the old hole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.timing import timed
from verispec.guard import supervisor

pytestmark = [pytest.mark.skipif(not supervisor.available(), reason="needs os.fork (the supervised worker)"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; Linux's seccomp")]

ROOT = Path(__file__).resolve().parents[2]
TOY = ["--target", "1/2,1/2", "--draft", "9/10,1/10"]

FORGERS = '''
import ctypes, json, os, signal, sys

LIBC = ctypes.CDLL(None, use_errno=True)
# a stopped supervisor would hang the negative controls (the code in the worker, no filter): they leave out SIGSTOP
# and ptrace's attach (which stops the process it attaches to)
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) + (() if os.environ.get("FORGERY_NO_STOP") else
                                                            (signal.SIGSTOP,))


def _log(text):
    """What the forger got through to, on its standard error (it may write no file: verispec.guard.confinement)."""
    os.write(2, f"FORGERY: {text}\\n".encode())


def _ancestors():
    """The processes above this one that run verispec (never the test's own processes above them)."""
    found, pid = [], os.getpid()
    for _ in range(3):
        with open(f"/proc/{pid}/stat") as file:
            pid = int(file.read().rpartition(")")[2].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            if pid <= 1 or b"verispec" not in file.read():
                break
        found.append(pid)
    return found


def _reports():
    pids = {os.getpid(), *_ancestors()}
    return [(json.dumps({"pid": pid, "status": 0, "line": "verispec: LOSSLESS (forged)"}) + "\\n").encode()
            for pid in pids]


def _write_everywhere():
    reports = _reports()
    for name in os.listdir("/proc/self/fd"):
        for data in reports:
            try:
                os.write(int(name), data)
            except OSError:
                pass
    for pid in _ancestors():
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError as error:
            _log(f"fd list of {pid} refused: {error.errno}")
            continue
        for name in names:
            try:
                fd = os.open(f"/proc/{pid}/fd/{name}", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            _log(f"OPENED fd {name} of {pid}")
            for data in reports:
                try:
                    os.write(fd, data)
                except OSError:
                    pass
            os.close(fd)


def _reach_memory_and_descriptors():
    for pid in _ancestors():
        try:
            os.open(f"/proc/{pid}/mem", os.O_RDWR)
            _log(f"OPENED mem of {pid}")
        except OSError as error:
            _log(f"mem of {pid} refused: {error.errno}")
        if not os.environ.get("FORGERY_NO_STOP") and LIBC.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            _log(f"ATTACHED to {pid}")
        syscall = LIBC.syscall
        pidfd = syscall(434, pid, 0)  # pidfd_open (x86_64 and aarch64)
        if pidfd >= 0:
            _log(f"PIDFD of {pid}")
            for target in range(3, 64):
                if syscall(438, pidfd, target, 0) >= 0:  # pidfd_getfd
                    _log(f"TOOK fd {target} of {pid}")


def found_groups():
    """Process groups led by a verispec process (the worker's own group): never the test runner's."""
    return {pid for pid in _ancestors() if os.getpgid(pid) == pid}


def _signal_everyone():
    for pid in _ancestors():
        for number in SIGNALS:
            if LIBC.kill(pid, int(number)) == 0:
                _log(f"SIGNALLED {pid} with {number}")
            try:
                group = os.getpgid(pid)
            except OSError:
                continue
            if group in found_groups() and LIBC.kill(-group, int(number)) == 0 and group != os.getpgrp():
                _log(f"SIGNALLED group {group} with {number}")


def _rewrite_verispec():
    os.environ["VERISPEC_SUPERVISE"] = "0"
    os.environ["VERISPEC_SANDBOX"] = "0"
    import verispec.guard.supervisor as supervisor
    from verispec.verdict import Verdict

    real_send = supervisor._send
    supervisor._send = lambda status, line=None, *rest: real_send(0, "verispec: LOSSLESS (forged)")
    for verdict in Verdict:
        try:
            object.__setattr__(verdict, "_value_", Verdict.LOSSLESS.value)
        except Exception:
            pass


def forge():
    _write_everywhere()
    _reach_memory_and_descriptors()
    _signal_everyone()
    _rewrite_verispec()


def forging_rule(tree, chooser):
    """Forge by every route, then behave as the lossy rule: accept the drafted token and emit it again."""
    forge()
    return 1, int(tree.token[1])


def forge_and_exit(tree, chooser):
    forge()
    LIBC._exit(0)


def forging_function(draft_tokens, draft_probs, target_probs, uniforms):
    """check-external's chain layout: forge, then accept every draft and emit the last drafted token again."""
    import numpy as np

    forge()
    tokens = np.asarray(draft_tokens, dtype=np.int64)  # [B, L]
    return np.concatenate([tokens, tokens[:, -1:]], axis=-1)  # [B, L + 1]: every draft, then the last one again


def forge_and_exit_function(draft_tokens, draft_probs, target_probs, uniforms):
    forge()
    LIBC._exit(0)


def joins_the_workers_group(tree, chooser):
    """Moves into the worker's process group, then signals 'its own' group (pid 0): the user's Ctrl-C forged, and a
    stop (found by the hostile tester of issue 64)."""
    try:
        os.setpgid(0, os.getpgid(os.getppid()))
    except OSError as error:
        _log(f"setpgid refused: {error.errno}")
    for number in (signal.SIGINT, signal.SIGTSTP):
        signal.signal(number, signal.SIG_IGN)  # its own process is in the group it signals
    for number in (signal.SIGINT, signal.SIGTSTP):
        if LIBC.kill(0, int(number)) == 0 and os.getpgrp() != os.getpid():
            _log(f"SIGNALLED group 0 with {number}")
    return 1, int(tree.token[1])


def closes_everything(tree, chooser):
    """Closes every descriptor above the standard three (its channel to verispec among them), then goes on."""
    os.closerange(3, 1 << 16)
    return 1, int(tree.token[1])


def _declaring_classes():
    import numpy as np

    from verispec.simulator import DraftLaw, NodeSolver, Verifier
    from verispec.verifiers import get_verifier
    from verispec.verifiers.tree_walk import TopDownVerifier

    specinfer = get_verifier("specinfer").node_solver

    class FirstChild(NodeSolver):
        """Lossy: always emits the first drafted child; declares SpecInfer's sequential tests (a shortcut)."""
        name = "first-child"
        valid_for = frozenset({DraftLaw.IID_CHILDREN})

        def output_laws(self, p, q, children):
            law = np.zeros_like(p)
            law[np.arange(p.shape[0]), children[:, 0]] = 1.0
            return law

        def sample(self, p, q, children, chooser):
            return int(children[0])

        def sequential_tests(self, p, q, draws):
            return specinfer.sequential_tests(p, q, draws)

    class ClaimsSpecInfer(Verifier):
        """Lossy laws (the first child's walk); declares SpecInfer's solver as its node_solver."""
        name = "claims-specinfer"
        valid_for = frozenset({DraftLaw.IID_CHILDREN})
        node_solver = specinfer
        order_free = True

        def emission_laws(self, batch):
            return TopDownVerifier(FirstChild()).emission_laws(batch)

        def procedure(self, tree, chooser):
            return TopDownVerifier(FirstChild()).procedure(tree, chooser)

    return FirstChild(), ClaimsSpecInfer()


DECLARES_SEQUENTIAL_TESTS, DECLARES_A_SOLVER = _declaring_classes()


def raises_a_timeout(tree, chooser):
    from verispec.errors import AnalysisTimeoutError

    raise AnalysisTimeoutError("the rule's own raise")


def rewrites_the_rows(tree, chooser):
    """Rewrites the sweep's rows file (every row lossless) from a detached process while the sweep runs, and now."""
    target = os.environ["FORGERY_TARGET"]

    def forge_file():
        try:
            with open(target) as file:
                text = file.read()
            if ",False," in text:  # (copies of it racing each other read the file empty while another rewrites it)
                with open(target, "w") as file:
                    file.write(text.replace(",False,", ",True,"))
                _log(f"REWROTE {target}")
        except OSError as error:
            _log(f"rewrite refused: {error.errno}")

    forge_file()
    if os.fork() == 0:
        os.setsid()
        import time

        for _ in range(40):
            forge_file()
            time.sleep(0.05)
        os._exit(0)
    return 1, int(tree.token[1])


def correct_but_slow(tree, chooser):
    """Token-level verification that first sleeps: the user stops it."""
    import time

    time.sleep(1000)
'''


@pytest.fixture
def forgers(tmp_path):
    path = tmp_path / "forgers.py"
    path.write_text(FORGERS)
    return path


def _run(arguments, tmp_path, **env):
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    done = subprocess.run([sys.executable, "-m", "verispec", *arguments], env=environment, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    with open(tmp_path / "forgery.log", "a") as log:  # what the forgers said they reached, for _escapes
        log.write("".join(line[len("FORGERY: "):] + "\n" for line in done.stderr.splitlines()
                          if line.startswith("FORGERY: ")))
    return done


def _exact(forgers, name, tmp_path, *extra, **env):
    return _run(["exact", *TOY, "--tree", "chain:1", "--verifier", f"{forgers}:{name}", "--fail-if-lossy", *extra],
                tmp_path, **env)


def _escapes(tmp_path) -> list[str]:
    """What the forgers got through to (the log's capitalised lines)."""
    log = tmp_path / "forgery.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if line.split()[0].isupper()]


def test_a_rule_that_forges_by_every_route_is_still_lossy(forgers, tmp_path):
    done = _exact(forgers, "forging_rule", tmp_path)
    assert done.returncode == 1, done.stderr
    assert "LOSSY" in done.stderr and "TV 0.65" in done.stderr
    assert _escapes(tmp_path) == []  # no descriptor, memory or signal of verispec's reached


def test_a_rule_that_forges_then_exits_zero_is_raises(forgers, tmp_path):
    done = _exact(forgers, "forge_and_exit", tmp_path, "--json")
    assert done.returncode == 4, done.stderr
    assert "RAISES: the process running the code under check exited with status 0" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["verdict"] == "raises"


@pytest.mark.parametrize("name", ["DECLARES_SEQUENTIAL_TESTS", "DECLARES_A_SOLVER"])
def test_a_shortcut_the_code_declares_is_not_taken_on_trust(forgers, tmp_path, name):
    """A lossy rule declaring a lossless rule's shortcut (SpecInfer's sequential tests, or its solver as node_solver)
    is LOSSY on its own laws (found by this issue's hostile tester: exit 0 on the walk's dynamic program before). The
    control: the same rule in the worker itself (VERISPEC_SANDBOX=0, the declaration taken) reads LOSSLESS, which the
    supervisor, knowing protection is off, does not turn into exit 0 (issue 77 item 3)."""
    arguments = ["exact", "--target", "1/2,3/10,1/5", "--draft", "1/5,1/5,3/5", "--tree", "iid:2,1", "--verifier",
                 f"{forgers}:{name}", "--fail-if-lossy"]
    done = _run(arguments, tmp_path)
    assert done.returncode == 1 and "LOSSY" in done.stderr, done.stderr
    done = _run(arguments, tmp_path, VERISPEC_SANDBOX="0")
    assert done.returncode == 3 and "LOSSLESS" in done.stderr, done.stderr
    assert "protection is off (VERISPEC_SANDBOX=0)" in done.stderr and "does not exit 0" in done.stderr


def test_verispecs_own_error_class_raised_by_the_code_is_the_codes_raise(forgers, tmp_path):
    """An AnalysisTimeoutError the rule raises itself is its failure (exit 2, named), not verispec's time limit
    (INCONCLUSIVE, exit 3, as before: the class alone decided)."""
    done = _exact(forgers, "raises_a_timeout", tmp_path)
    assert done.returncode == 2 and "raised AnalysisTimeoutError: the rule's own raise" in done.stderr, done.stderr
    done = _exact(forgers, "raises_a_timeout", tmp_path, VERISPEC_SANDBOX="0")
    assert done.returncode == 3 and "INCONCLUSIVE" in done.stderr


def test_code_that_joins_the_workers_group_cannot_signal_it(forgers, tmp_path):
    done = _exact(forgers, "joins_the_workers_group", tmp_path)
    assert done.returncode == 1 and "LOSSY" in done.stderr, done.stderr
    assert _escapes(tmp_path) == []


def test_code_that_closes_its_channel_is_raises_at_once(forgers, tmp_path):
    done, watch = timed(_exact, forgers, "closes_everything", tmp_path)
    assert done.returncode == 4 and "closed or broke its channel to verispec" in done.stderr, done.stderr
    # not the 60 s call timeout (over the bound below a stretch of 12; that would end INCONCLUSIVE, status 3, besides):
    # a fresh interpreter's start-up and the check, 5 s of CPU on an idle core, stretched by the load
    assert watch.within(0, 5), watch


def test_check_external_and_hunt_keep_their_verdicts_against_forgers(forgers, tmp_path):
    done = _run(["check-external", f"{forgers}:forging_function", "--layout", "chain", "--tree", "chain:1", *TOY],
                tmp_path)
    assert done.returncode == 1 and "LOSSY" in done.stdout + done.stderr, done.stdout + done.stderr
    done = _run(["check-external", f"{forgers}:forge_and_exit_function", "--layout", "chain", "--tree", "chain:1",
                 *TOY], tmp_path)
    assert done.returncode == 4 and "exited with status 0" in done.stderr, done.stderr
    done = _run(["hunt", "--verifier", f"{forgers}:forging_rule", "--tree", "chain:1", "--time-budget", "30"], tmp_path)
    assert done.returncode == 1, done.stderr
    assert _escapes(tmp_path) == []


def test_a_sweeps_local_pool_runs_the_rule_in_sandboxes_too(forgers, tmp_path):
    """A sweep's local pool forks the worker; each fork loads the rule in a sandbox of its own (before, the pool's
    processes ran it themselves, with the worker's descriptors in reach): no escape, every row lossy."""
    import csv

    done = _run(["sweep", "--families", "context-free", "--vocab", "2,3", "--divergence", "0.2", "--seeds", "0-1",
                 "--trees", "chain:2", "--verifiers", f"{forgers}:forging_rule", "--backend", "local", "--jobs", "2",
                 "--out", "rows.csv"], tmp_path)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "rows.csv") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 4 and all(row["lossless"] == "False" for row in rows)
    assert _escapes(tmp_path) == []
    # negative control: the sandbox only in the worker itself, each cell loading the rule anew (before): the pool's
    # processes run it themselves and open the worker's descriptors
    script = ("import sys, verispec.guard.sandbox as s, verispec.guard.supervisor as sup, verispec.verifiers as v; "
              "s.enabled = sup.in_worker; v._SANDBOXED = type('NoCache', (dict,), {'__contains__': lambda *a: False, "
              "'__setitem__': lambda *a: None, '__getitem__': lambda *a: None})(); "
              "from verispec.cli import main; sys.exit(main(sys.argv[1:]))")
    environment = dict(os.environ, PYTHONPATH=str(ROOT), FORGERY_NO_STOP="1")
    control = subprocess.run([sys.executable, "-c", script, "sweep", "--families", "context-free", "--vocab", "2",
                              "--divergence", "0.2", "--seeds", "0-1", "--trees", "chain:2", "--verifiers",
                              f"{forgers}:forging_rule", "--backend", "local", "--jobs", "2", "--out", "control.csv"],
                             env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert any(line.startswith(("FORGERY: OPENED", "FORGERY: TOOK")) for line in control.stderr.splitlines())


def test_the_code_cannot_rewrite_verispecs_output_behind_its_back(forgers, tmp_path):
    """The sandbox may write in no folder but its own (Landlock, verispec.guard.confinement): a rule that rewrites the
    sweep's rows as lossless, and a file of the user's, at once and from a detached process, changes neither (found by
    this issue's hostile tester: every row lossless=True, exit 0). The control gives the sandbox the folder
    (VERISPEC_SANDBOX_WRITABLE): the user's file is rewritten."""
    import csv

    if not _landlock():
        pytest.skip("Landlock is not available on this kernel")
    notes = tmp_path / "notes.csv"
    notes.write_text("a,False,b\n")
    arguments = ["sweep", "--families", "context-free", "--vocab", "2", "--divergence", "0.2", "--seeds", "0-3",
                 "--trees", "chain:2", "--verifiers", f"{forgers}:rewrites_the_rows", "--out", "rows.csv"]
    for target in ("rows.csv", "notes.csv"):
        done = _run(arguments, tmp_path, FORGERY_TARGET=str(tmp_path / target))
        with open(tmp_path / "rows.csv") as file:
            rows = list(csv.DictReader(file))
        assert done.returncode == 0 and len(rows) == 4 and all(row["lossless"] == "False" for row in rows), done.stderr
        assert notes.read_text() == "a,False,b\n"
        assert not [line for line in _escapes(tmp_path) if line.startswith("REWROTE")]
    _run([*arguments[:-1], "control.csv"], tmp_path, FORGERY_TARGET=str(notes), VERISPEC_SANDBOX_WRITABLE=str(tmp_path))
    assert notes.read_text() == "a,True,b\n"


def _landlock() -> bool:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) >= 1


@pytest.mark.parametrize("name", ["forging_rule", "forge_and_exit"])
def test_negative_control_the_code_in_the_worker_forges_a_pass(forgers, tmp_path, name):
    """The design before issue 64 (the code runs in the worker, which holds the report pipe): both forgers forge the
    worker's report. Since issue 77 the supervisor, which knows the sandbox is off, gives no exit 0 for it."""
    done = _exact(forgers, name, tmp_path, VERISPEC_SANDBOX="0", FORGERY_NO_STOP="1")
    assert "LOSSLESS (forged)" in done.stderr, done.stderr
    assert done.returncode == 3 and "protection is off (VERISPEC_SANDBOX=0)" in done.stderr, done.stderr


def _start(arguments, tmp_path, **env) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    command = subprocess.Popen([sys.executable, "-m", "verispec", *arguments], env=environment, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_the_sandbox(command)
    return command


def _wait_for_the_sandbox(command: subprocess.Popen) -> None:
    """Until the command's worker has started its sandbox (a grandchild), then a moment for the rule to be called."""
    from verispec.guard.processes import descendants

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(descendants({command.pid})) < 3:
        time.sleep(0.05)
    time.sleep(1.0)


STOPPED = [
    ["exact", *TOY, "--tree", "chain:1", "--verifier", "{rules}:correct_but_slow", "--fail-if-lossy"],
    ["hunt", "--verifier", "{rules}:correct_but_slow", "--tree", "chain:1", "--time-budget", "100"],
]


@pytest.mark.parametrize("template", STOPPED, ids=["exact", "hunt"])
def test_a_sigterm_to_verispec_is_the_users_stop_not_a_verdict(forgers, tmp_path, template):
    arguments = [part.format(rules=forgers) for part in template]
    command = _start(arguments, tmp_path)
    command.send_signal(signal.SIGTERM)
    out, err = command.communicate(timeout=30)
    assert command.returncode == 128 + signal.SIGTERM, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGTERM" in lines[0] and "RAISES" not in err, err


def test_a_sigterm_stops_check_external_too(tmp_path):
    function = tmp_path / "slow.py"
    function.write_text("import time\n\ndef verify(draft_tokens, draft_probs, target_probs, uniforms):\n"
                        "    time.sleep(1000)\n")
    command = _start(["check-external", f"{function}:verify", "--layout", "chain", "--tree", "chain:1", *TOY],
                     tmp_path)
    command.send_signal(signal.SIGTERM)
    _, err = command.communicate(timeout=30)
    assert command.returncode == 143 and "stopped by SIGTERM" in err and "RAISES" not in err, err


def test_negative_control_the_old_supervisor_blames_the_rule(forgers, tmp_path):
    """The supervisor before issue 64 (no stop of the user's own: the worker's death is the code's) says RAISES."""
    script = ("import sys, verispec.guard.supervisor as s; s.Watch._user_stop = lambda self, report: None; "
              "from verispec.cli import main; sys.exit(main(sys.argv[1:]))")
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    command = subprocess.Popen([sys.executable, "-c", script, "exact", *TOY, "--tree", "chain:1", "--verifier",
                                f"{forgers}:correct_but_slow"], env=environment, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_the_sandbox(command)
    command.send_signal(signal.SIGTERM)
    _, err = command.communicate(timeout=30)
    assert command.returncode == 4 and "killed by signal SIGTERM" in err, err


def test_the_codes_own_signal_to_the_supervisor_is_ignored(forgers, tmp_path):
    """Where the sandbox is off (the code runs in the worker) and a signal bypasses Python (libc's kill), the
    supervisor still tells the code's signal from the user's by its sender: the check goes on to its verdict."""
    rules = tmp_path / "signaller.py"
    rules.write_text("import ctypes, os, signal\n\ndef rule(tree, chooser):\n"
                     "    ctypes.CDLL(None).kill(os.getppid(), int(signal.SIGTERM))\n"
                     "    return 1, int(tree.token[1])\n")
    done = _run(["exact", *TOY, "--tree", "chain:1", "--verifier", f"{rules}:rule", "--fail-if-lossy"], tmp_path,
                VERISPEC_SANDBOX="0")
    assert done.returncode == 1 and "LOSSY" in done.stderr, done.stderr
    assert "sent SIGTERM to verispec's supervisor; ignored" in done.stderr


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_without_a_worker_is_one_line_too(forgers, tmp_path, number):
    """Without supervision (VERISPEC_SUPERVISE=0) or while the command line loads, SIGTERM and SIGHUP end the
    command with one line and 128 + N (was the signal's silent default action: the status alone)."""
    command = _start_plain(["exact", *TOY, "--tree", "chain:1", "--verifier", f"{forgers}:correct_but_slow"], tmp_path,
                           VERISPEC_SUPERVISE="0")
    command.send_signal(number)
    _, err = command.communicate(timeout=30)
    assert command.returncode == 128 + number and err.strip().splitlines() == [
        f"verispec: interrupted: stopped by {signal.Signals(number).name} (a signal to verispec's own process); "
        "no verdict"], err


def _start_plain(arguments, tmp_path, **env) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    command = subprocess.Popen([sys.executable, "-m", "verispec", *arguments], env=environment, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # loading done, the rule asleep
    return command
