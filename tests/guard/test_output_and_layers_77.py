"""Issue 77, items 1 and 3: the code under check never writes where verispec writes its verdict, and the guard's layers
are stated, named in the JSON, and required on request.

The honest verdict is known by construction: the rules below emit the drafted token again, so on ``chain:1`` with
p = (1/2, 1/2) and q = (9/10, 1/10) their outputs are (0, 0) w.p. 9/10 and (1, 1) w.p. 1/10 against 1/4 each: TV
0.65, LOSSY, exit 1. ``loud`` also prints a fake JSON verdict and fake verdict lines on both streams, leaves a writer
running that prints more of them, and tries to lower the supervisor's open-file limit (which would blind its reaper)
and to signal the shell above verispec. Every reading a CI makes must still say LOSSY.

Negative controls: with the rule in verispec's own process (``VERISPEC_SANDBOX=0``, the design before this issue)
the same readings are forged, so the readings below can fail; and each missing layer is produced for real, by a
seccomp filter that answers as a kernel without it would (``tests/support/refused_layers.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verispec.guard import layers, supervisor

pytestmark = [pytest.mark.skipif(not supervisor.available(), reason="needs os.fork (the supervised worker)"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's seccomp and /proc")]

ROOT = Path(__file__).resolve().parents[2]
TOY = ["--target", "1/2,1/2", "--draft", "9/10,1/10", "--tree", "chain:1"]
FAKE_JSON = '{"verdict": "lossless", "lossless": true, "tv_distance": 0.0, "exit_status": 0}'

RULES = f'''
import os, resource, subprocess, sys

FAKE_JSON = {FAKE_JSON!r}
WRITER = ("import time\\n"
          "for _ in range(100000):\\n"
          "    print(" + repr(FAKE_JSON) + ", flush=True)\\n"
          "    print('verispec: LOSSLESS (late)', flush=True)\\n"
          "    time.sleep(0.002)\\n"
          "# @TOKEN@\\n")
_started = []


def _ancestors():
    """Its ancestors as /proc shows them (none in a process-id namespace of its own), and the test's own pid."""
    found, pid = [], os.getpid()
    for _ in range(4):
        try:
            with open(f"/proc/{{pid}}/stat") as file:
                pid = int(file.read().rpartition(")")[2].split()[1])
        except OSError:
            break
        if pid <= 0:
            break
        found.append(pid)
    return found + [int(os.environ["VS_TEST_ELDER"])]


def _cmdline(pid):
    try:
        with open(f"/proc/{{pid}}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


def _loud():
    print(FAKE_JSON, flush=True)
    print("verispec: LOSSLESS (forged on stdout)", flush=True)
    sys.stderr.write("verispec: LOSSLESS (forged on stderr)\\n\\x1b[1A\\r")
    sys.stderr.flush()
    subprocess.Popen([sys.executable, "-c", WRITER])
    for pid in _ancestors():  # the worker, the supervisor, the test above them (signal 0 only: it is the test's)
        ours = b"verispec" in _cmdline(pid)
        try:
            if ours:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (4, 4))
            else:
                resource.prlimit(pid, resource.RLIMIT_NOFILE)
            print(f"REACHED prlimit {{pid}}", file=sys.stderr, flush=True)
        except OSError:
            pass
        try:
            os.kill(pid, 0)
            print(f"REACHED kill {{pid}}", file=sys.stderr, flush=True)
        except OSError:
            pass


def reach_out(tree, chooser):
    """Signal a process of the same user outside verispec's chain (the test's victim), and look for it in /proc."""
    if not _started:
        _started.append(1)
        victim = int(os.environ["VS_TEST_VICTIM"])
        seen = [name for name in os.listdir("/proc") if name.isdigit() and b"vs-victim" in _cmdline(name)]
        print(f"SEEN {{len(seen)}}", flush=True)
        try:
            os.kill(victim, 15)
            print(f"REACHED kill {{victim}}", flush=True)
        except OSError as error:
            print(f"REFUSED {{type(error).__name__}}", flush=True)
    return echo_draft(tree, chooser)


def echo_draft(tree, chooser):
    node = 0
    while tree.child_tokens[node]:
        node = tree.child_nodes[node][0]
    return node, tree.token[node] if node else chooser.categorical(tree.p[node])


def loud(tree, chooser):
    if not _started:
        _started.append(1)
        _loud()
    return echo_draft(tree, chooser)


def honest(tree, chooser):
    return 0, chooser.categorical(tree.p[0])


def slow(tree, chooser):
    import time
    time.sleep(3)
    return honest(tree, chooser)
'''


@pytest.fixture()
def rules(tmp_path) -> Path:
    path = tmp_path / "rules_77.py"
    path.write_text(RULES.replace("@TOKEN@", f"writer-{os.getpid()}-{tmp_path.name}"))
    return path


def _running(token: str) -> list[int]:
    """The processes whose command line holds ``token`` (the writer a rule left)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as file:
                    if token.encode() in file.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def _landlock() -> bool:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) >= 1


def _namespaces() -> bool:
    """Whether this machine lets an unprivileged process make a user and process-id namespace (asked of the
    ``unshare`` program where it is installed, else in a child that tries it)."""
    code = ("import ctypes, os, sys\n"
            "sys.exit(0 if ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x20000000 | 0x20000) == 0 else 1)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0


def _run(arguments, cwd, *, prefix=(), **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), VS_TEST_ELDER=str(os.getpid()), **env)
    return subprocess.run([*prefix, sys.executable, "-m", "verispec", *arguments], env=environment, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _reads_lossless(done: subprocess.CompletedProcess, json_out: Path | None = None) -> list[str]:
    """Each reading of the run a CI might make that says lossless (an empty list: every reading says LOSSY)."""
    readings = []
    if done.returncode == 0:
        readings.append("exit status")
    out_lines = done.stdout.strip().splitlines()
    for name, line in (("first stdout line", out_lines[:1]), ("last stdout line", out_lines[-1:])):
        if line and ("LOSSLESS" in line[0] or '"lossless": true' in line[0]):
            readings.append(name)
    if any(value.get("lossless") is True or value.get("verdict") == "lossless" for value in _json_lines(done.stdout)):
        readings.append("a JSON object on stdout (jq stream)")
    err_lines = done.stderr.strip().splitlines()
    if any(line.startswith("verispec: LOSSLESS") for line in err_lines):
        readings.append("grep '^verispec: LOSSLESS' of stderr")
    if err_lines and "LOSSLESS" in err_lines[-1]:
        readings.append("last stderr line")
    if json_out is not None:
        document = json.loads(json_out.read_text())
        if document.get("lossless") is not False:
            readings.append("--json-out file")
    return readings


def test_a_loud_lossy_rule_is_lossy_in_every_reading(rules, tmp_path):
    """Fake JSON and verdict lines on both streams, a writer left behind, the supervisor's limits lowered: exit 1,
    and every reading says LOSSY; the code's lines are shown fenced; nothing reached an older process; the writer
    is ended; the --json-out file names the layers."""
    out = tmp_path / "verdict.json"
    done = _run(["exact", *TOY, "--verifier", f"{rules}:loud", "--fail-if-lossy", "--json-out", str(out)], tmp_path)
    assert done.returncode == 1, done.stderr
    assert _reads_lossless(done, out) == [], done.stdout + done.stderr
    assert "| verispec: LOSSLESS (forged on stderr)" in done.stderr and f"| {FAKE_JSON}" in done.stderr
    assert "\x1b" not in done.stderr and "\\x1b[1A\\r" in done.stderr  # escaped, not sent to the terminal
    assert "REACHED" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("verispec:")
    assert [value["tv_distance"] for value in _json_lines(done.stdout)] == [pytest.approx(0.65, abs=1e-12)]
    document = json.loads(out.read_text())
    confinement = document["confinement"]
    assert confinement["sandboxed"] is True and confinement["exit_status"] == 1
    assert set(confinement["layers"]) == set(layers.LAYERS) and document["written_by"]["tool"] == "verispec"
    assert confinement["missing"] == [name for name, held in confinement["layers"].items() if not held]
    assert _running(f"writer-{os.getpid()}-{tmp_path.name}") == []


def test_negative_control_in_verispecs_own_process_the_readings_are_forged(rules, tmp_path):
    """The same rule in the worker itself (VERISPEC_SANDBOX=0): its fake lines reach verispec's streams, so the
    readings above can fail; the supervisor, knowing protection is off, says so."""
    done = _run(["exact", *TOY, "--verifier", f"{rules}:loud", "--fail-if-lossy", "--json"], tmp_path,
                VERISPEC_SANDBOX="0")
    forged = _reads_lossless(done)
    assert "first stdout line" in forged and "a JSON object on stdout (jq stream)" in forged, forged
    assert "grep '^verispec: LOSSLESS' of stderr" in forged, forged
    assert "protection is off (VERISPEC_SANDBOX=0)" in done.stderr


def test_the_code_writing_last_leaves_verispecs_line_last(rules, tmp_path):
    """A writer the code left prints until it is ended, after the worker's verdict line: the last line on stderr is
    still verispec's (said again), and --code-output keeps all of the code's lines off the streams."""
    done = _run(["exact", *TOY, "--verifier", f"{rules}:loud", "--fail-if-lossy"], tmp_path)
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith("verispec: "), done.stderr[-2000:]
    kept = tmp_path / "code.txt"
    done = _run(["exact", *TOY, "--verifier", f"{rules}:loud", "--fail-if-lossy", "--code-output", str(kept)],
                tmp_path)
    assert done.returncode == 1 and "LOSSLESS" not in done.stderr + done.stdout, done.stderr
    assert "verispec: LOSSLESS (forged on stdout)" in kept.read_text()


def test_json_out_never_replaces_a_file_verispec_did_not_write(rules, tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text('{"notes": 1}\n')
    done = _run(["exact", *TOY, "--verifier", f"{rules}:honest", "--json-out", str(mine)], tmp_path)
    assert done.returncode == 2 and mine.read_text() == '{"notes": 1}\n', done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--json-out" in done.stderr
    out = tmp_path / "verdict.json"
    for _ in range(2):  # its own file is replaced
        done = _run(["exact", *TOY, "--verifier", f"{rules}:honest", "--fail-if-lossy", "--json-out", str(out)],
                    tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(out.read_text())["lossless"] is True


def test_two_runs_into_one_json_out_the_second_is_refused(rules, tmp_path):
    """Data loss (issue 77): two runs writing one --json-out would each say they wrote it; the second is refused on
    one line while the first holds it, and the file is the first's."""
    out = tmp_path / "verdict.json"
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen([sys.executable, "-m", "verispec", "exact", *TOY, "--verifier", f"{rules}:slow",
                              "--json-out", str(out)], env=environment, cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        lock = tmp_path / "verdict.json.lock"
        for _ in range(600):  # until the first run holds the lock (its command starts in well under a minute)
            if lock.exists() and first.poll() is None and lock.read_text().strip():
                break
            time.sleep(0.1)
        second = _run(["exact", *TOY, "--verifier", f"{rules}:honest", "--json-out", str(out)], tmp_path)
        assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert "being written by another run" in second.stderr
    finally:
        first.communicate(timeout=300)
    assert first.returncode == 0 and json.loads(out.read_text())["verifier"] == "slow"


@pytest.mark.parametrize("layer", list(layers.LAYERS))
def test_a_missing_layer_is_said_named_and_refused_on_request(rules, tmp_path, layer):
    """A kernel refusing the layer (a filter answering as one would): one line names it, the JSON's confinement
    lists it missing, an exit 0 the code could then have forged is not given, and --require-confinement (or its
    environment twin) refuses with exit 2 before the code runs."""
    prefix = (sys.executable, str(ROOT / "tests" / "support" / "refused_layers.py"), layer, "--")
    arguments = ["exact", *TOY, "--verifier", f"{rules}:honest", "--fail-if-lossy", "--json"]
    done = _run(arguments, tmp_path, prefix=prefix)
    assert f"confinement layer '{layer}' could not be set up" in done.stderr, done.stderr
    confinement = _json_lines(done.stdout)[-1]["confinement"]
    assert layer in confinement["missing"] and confinement["layers"][layer] is False
    forgeable = layer == "not_dumpable" or (layer == "capabilities" and os.geteuid() == 0)
    assert done.returncode == (3 if forgeable else 0), done.stderr
    for extra, env in ((["--require-confinement"], {}), ([], {layers.REQUIRE_SWITCH: "1"})):
        refused = _run([*arguments, *extra, "--verifier", f"{rules}:loud"], tmp_path, prefix=prefix, **env)
        assert refused.returncode == 2, refused.stderr
        assert "--require-confinement" in refused.stderr.strip().splitlines()[-1]
        assert "| " not in refused.stderr and refused.stdout == ""  # the code never ran


def test_negative_control_every_layer_held_here(rules, tmp_path):
    """Without the filter this machine grants every layer (else the test above would pass for the wrong reason):
    no line, nothing missing, and --require-confinement runs the check."""
    if not _landlock():
        pytest.skip("this kernel has no Landlock (before Linux 5.13): the layer is missing for real")
    if not _namespaces():
        pytest.skip("this machine forbids user namespaces: the layer pid_namespace is missing for real")
    done = _run(["exact", *TOY, "--verifier", f"{rules}:honest", "--fail-if-lossy", "--json",
                 "--require-confinement"], tmp_path)
    assert done.returncode == 0 and "could not be set up" not in done.stderr, done.stderr
    assert _json_lines(done.stdout)[-1]["confinement"]["missing"] == []


def test_the_code_sees_and_signals_no_process_outside_its_namespace(rules, tmp_path):
    """A process of the same user outside verispec's chain (an editor, another job: here the test's victim) is out of
    the code's sight and reach: /proc shows only the code's own processes, and its signal finds no such process. The
    negative control: on a kernel that refuses the namespace (a filter answering as one would), the same rule sees
    the victim and ends it, which is why the layer is reported missing there."""
    if not _namespaces():
        pytest.skip("this machine forbids user namespaces: the layer pid_namespace is missing for real")
    prefix = (sys.executable, str(ROOT / "tests" / "support" / "refused_layers.py"), "pid_namespace", "--")
    for refused in (False, True):
        victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "vs-victim"])
        try:
            done = _run(["exact", *TOY, "--verifier", f"{rules}:reach_out", "--fail-if-lossy"], tmp_path,
                        prefix=prefix if refused else (), VS_TEST_VICTIM=str(victim.pid))
            assert done.returncode == 1 and "LOSSY" in done.stderr.strip().splitlines()[-1], done.stderr
            if refused:
                assert "| SEEN 1" in done.stderr and f"| REACHED kill {victim.pid}" in done.stderr, done.stderr
                assert victim.wait(timeout=60) == -15
            else:
                assert "| SEEN 0" in done.stderr and "| REFUSED ProcessLookupError" in done.stderr, done.stderr
                assert victim.poll() is None
        finally:
            victim.kill()
            victim.wait()


@pytest.mark.parametrize("switch", ["VERISPEC_SANDBOX", "VERISPEC_SUPERVISE"])
def test_protection_switched_off_is_said_and_never_exits_0(rules, tmp_path, switch):
    arguments = ["exact", *TOY, "--verifier", f"{rules}:honest", "--fail-if-lossy"]
    done = _run(arguments, tmp_path, **{switch: "0"})
    assert done.returncode == 3 and f"protection is off ({switch}=0)" in done.stderr, done.stderr
    assert "LOSSLESS" in done.stderr  # the check itself passed
    refused = _run([*arguments, "--require-confinement"], tmp_path, **{switch: "0"})
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "LOSSLESS" not in refused.stderr


def test_the_filter_keeps_older_processes_out_of_reach():
    """In a child under the sandbox's seccomp filter: no signal and no limit reach its ancestors (named in the filter,
    so a process-id wrap-around, frequent where pid_max is 32,768, changes nothing), while it may still limit itself
    and signal the process it started; without the filter (the negative control) both reach the parent."""
    code = r'''
import os, resource, subprocess, sys, time
from verispec.guard import confinement
filtered = sys.argv[1] == "1"
if filtered:
    assert confinement.forbid_reaching([])
parent = os.getppid()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
results = []
for attempt in (lambda: os.kill(parent, 0), lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE)):
    try:
        attempt()
        results.append("reached")
    except PermissionError:
        results.append("refused")
resource.prlimit(0, resource.RLIMIT_NOFILE, (soft, hard))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
child.kill()
results.append("child killed" if child.wait(timeout=10) == -9 else "child not killed")
print(",".join(results))
'''
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    for flag, expected in (("1", "refused,refused,child killed"), ("0", "reached,reached,child killed")):
        done = subprocess.run([sys.executable, "-c", code, flag], env=environment, capture_output=True, text=True,
                              timeout=120)
        assert done.stdout.strip() == expected, done.stderr


def test_bound_restriction_says_it_runs_unconfined(tmp_path):
    """``bound --restriction FILE.py:NAME`` runs the class in the worker (cvxpy constraints cannot leave a sandbox):
    its JSON's confinement says so (not sandboxed, ``unconfined`` naming it), and one line says so when it ends 0. The
    control: the built-in class (no code of the user's) is not supervised, and says nothing of the kind."""
    pytest.importorskip("cvxpy")
    problem = ["--target", "0.5,0.3,0.2", "--draft", "0.2,0.6,0.2", "--tree", "iid:2,1"]
    done = _run(["bound", *problem, "--restriction", f"{ROOT / 'examples' / 'my_class.py'}:shallow_off_path",
                 "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    confinement = _json_lines(done.stdout)[-1]["confinement"]
    assert confinement["sandboxed"] is False and "--restriction" in confinement["unconfined"]
    assert "ran unconfined" in done.stderr.strip().splitlines()[-1]
    control = _run(["bound", *problem, "--restriction", "selected-path", "--json"], tmp_path)
    assert control.returncode == 0 and "unconfined" not in control.stderr + control.stdout, control.stderr
