"""The options every command shares about the code under check and what a CI reads (``verispec.guard.output``,
``verispec.guard.layers``):

* ``--json-out FILE`` (every command with ``--json``): the command's JSON, also written to FILE, atomically, by the
  supervisor once every process of the code under check has ended, in a place the code cannot write; it implies
  ``--json``. The file is one JSON document: the command's object (or ``{"objects": [...]}``), each with the run's
  ``confinement``, and verispec's ``written_by`` marker. An existing file verispec did not write is refused.
* ``--code-output FILE`` (every command that can run code of the user's own): the code's own stdout and stderr kept
  in FILE instead of shown fenced on stderr.
* ``--require-confinement`` (and ``VERISPEC_REQUIRE_CONFINEMENT=1``): refuse (exit 2) to run code under check
  where a layer of the guard is missing or switched off.

Without supervision (``VERISPEC_SUPERVISE=0``, or no ``os.fork``) the command runs in one process (``unsupervised``):
it says protection is off, refuses under ``--require-confinement``, and never exits 0 for a run of the user's code.
"""

from __future__ import annotations

import io
import sys

#: The destinations of the options that name code of the user's own (``verispec.cli.user_code_specs``).
USER_CODE_OPTIONS = ("verifier", "verifiers", "function", "restriction", "check")


def add_options(subparsers) -> None:
    """Add the shared options to each command of ``subparsers`` (after the commands added their own)."""
    for command, sub in subparsers.choices.items():
        dests = {action.dest for action in sub._actions}
        if "json" in dests:
            sub.add_argument("--json-out", metavar="FILE", default=None,
                             help="also write the JSON to FILE (implies --json), atomically, once the code under "
                                  "check has ended: a file it cannot reach; what a CI should read")
        if dests & set(USER_CODE_OPTIONS) or command == "check-engine":
            sub.add_argument("--code-output", metavar="FILE", default=None,
                             help="keep the code under check's own stdout and stderr in FILE (default: shown on "
                                  "stderr, each line behind '| ')")
            sub.add_argument("--require-confinement", action="store_true",
                             help="refuse (exit 2) where a confinement layer is missing or protection is off "
                                  "(also VERISPEC_REQUIRE_CONFINEMENT=1)")


def check_outputs(args) -> None:
    """Refuse, before any work, a ``--json-out`` or ``--code-output`` path that cannot be written, or an existing
    ``--json-out`` file verispec did not write; ``--json-out`` turns ``--json`` on."""
    import os

    from verispec.errors import OutputError
    from verispec.files.io import check_output_file, marked_json
    from verispec.files.provenance import JSON_OUT

    if getattr(args, "json_out", None) is not None:
        check_output_file(args.json_out, "--json-out", example="verdict.json")
        if os.path.exists(args.json_out) and not marked_json(JSON_OUT)(args.json_out):  # (never raises)
            raise OutputError(f"--json-out {str(args.json_out)!r} exists and is not a --json-out file verispec "
                              "wrote; choose another path, or remove it first")
        args.json = True
    if getattr(args, "code_output", None) is not None:
        check_output_file(args.code_output, "--code-output", example="code-output.txt")


def json_out_lock(args):
    """The lock of ``--json-out FILE`` for the whole command (``verispec.files.store_lock``), held by this process
    (the supervisor): a second run into the same file is refused on one line; no lock without ``--json-out``."""
    import contextlib

    if getattr(args, "json_out", None) is None:
        return contextlib.nullcontext()
    from verispec.files.store_lock import store_lock

    return store_lock(args.json_out, what="--json-out file")


def unsupervised(args, specs: list[str], run) -> int:
    """Run the command in this process (no supervisor): for code of the user's own, refuse under
    ``--require-confinement``, and once the code ran say that protection is off and turn an exit 0 into 3 (a refusal
    stays one line). With code of the user's own the JSON is held and written at the end with its ``confinement``
    (not supervised, not sandboxed), as the supervisor writes it; ``--json-out`` is written at the end."""
    from verispec.guard import layers
    from verispec.guard.output import with_confinement

    switches = layers.switched_off() or ["VERISPEC_SUPERVISE"]
    if specs and layers.required(getattr(args, "require_confinement", False)):
        print(layers.refusal_line([f"{name}=0 is set" for name in switches]), file=sys.stderr)
        return 2
    json_out = getattr(args, "json_out", None)
    hold = bool(specs) and bool(getattr(args, "json", False))  # the JSON gets its confinement before it is shown
    held = None
    if json_out is not None or hold:
        held, sys.stdout = sys.stdout, (io.StringIO() if hold else _Tee(sys.stdout))
    try:
        status = run()
    finally:
        if held is not None:
            captured, sys.stdout = sys.stdout, held
    if specs and status in (0, 1, 3, 4):  # the code ran (not a refusal, an internal error or a stop): said last
        print(layers.off_line(switches), file=sys.stderr)
        if status == 0:
            print("verispec: INCONCLUSIVE: the check itself passed, but the code under check ran in verispec's own "
                  "process and could have forged that, so the command does not exit 0", file=sys.stderr)
            status = 3
    if held is None:
        return status
    text = captured.getvalue()
    if specs:
        text = with_confinement(text, {**layers.record({}, supervised=False, sandboxed=False), "exit_status": status})
    if hold:
        sys.stdout.write(text)
        sys.stdout.flush()
    if json_out is not None:
        _write_json_out(json_out, text, args)
    return status


class _Tee(io.StringIO):
    """stdout as it was, and a copy of what was written."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def write(self, text):
        self.stream.write(text)
        return super().write(text)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return self.stream.isatty()


def _write_json_out(path: str, text: str, args) -> None:
    from verispec.files.io import atomic_write_text
    from verispec.files.provenance import JSON_OUT, written_by
    from verispec.guard.output import json_out_document

    try:
        atomic_write_text(path, json_out_document(text, written_by(JSON_OUT, args.command)))
    except OSError as error:
        print(f"verispec: warning: could not write --json-out {path!r} ({error}); the JSON is on stdout",
              file=sys.stderr)

