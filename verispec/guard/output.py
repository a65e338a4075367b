"""What the supervisor writes, apart from what the code under check writes (``verispec.guard.watch``).

The code under check never writes where verispec writes its verdict. Its sandbox's standard output and error (file
descriptors 1 and 2, and so those of every process it starts) are one pipe of the supervisor's own, never the
command's streams (``verispec.guard.sandbox_process``). The supervisor shows what comes through it on stderr, each
line behind ``| `` with its control characters escaped and a header line before the first (``CodeOutput``), or keeps
it in a file (``--code-output FILE``), written once every process of the code has been ended.

A command's JSON (``--json``, ``--json-out FILE``) is held by the supervisor until the worker has reported and every
process the code started has been ended; then each JSON object gets the run's ``confinement`` object
(``verispec.guard.layers.record``), and goes to stdout and, atomically, to the ``--json-out`` file, a file the code
cannot reach (the sandbox may write only in a folder of its own; ``verispec.guard.confinement``). So a CI may trust
the exit status, the ``--json-out`` file, the JSON lines on stdout, and the lines on stderr that begin with
``verispec:``; the last line on stderr is always verispec's (``Watch.verdict`` says it again after the code's last
line). Standard library only, but for the atomic write.
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import tempfile

#: The most bytes of the code's output shown on stderr; the rest is counted (``--code-output FILE`` keeps it all).
SHOWN_BYTES = 64 * 1024
#: The most bytes of the code's output kept for ``--code-output FILE``; the rest is counted there too.
KEPT_BYTES = 64 * 1024 * 1024
#: What each line of the code's output is shown behind.
FENCE = "| "


def shown_line(text: str) -> str:
    """One line of the code's output as stderr shows it: behind ``FENCE``, control characters escaped (a carriage
    return or an escape sequence cannot overwrite verispec's own lines on a terminal)."""
    return FENCE + "".join(char if char.isprintable() or char == "\t" else repr(char)[1:-1] for char in text)


class CodeOutput:
    """The code's output as it comes: shown fenced on stderr through ``write(stream, text)`` line by line, or kept for
    a file. ``spoke_last`` says whether a line of the code's came after verispec's last line on stderr."""

    def __init__(self, write, keep_for: str | None):
        self.write, self.keep_for = write, keep_for
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = ""
        self.total = 0
        self.shown = 0
        self.kept: list[bytes] = []
        self.kept_bytes = 0
        self.spoke_last = False
        self.headed = False

    def take(self, data: bytes) -> None:
        self.total += len(data)
        if self.keep_for is not None:
            room = KEPT_BYTES - self.kept_bytes
            if room > 0:
                self.kept.append(data[:room])
                self.kept_bytes += min(room, len(data))
            return
        if self.shown >= SHOWN_BYTES:
            return
        text = self.pending + self.decoder.decode(data[:SHOWN_BYTES - self.shown])
        self.shown += min(len(data), SHOWN_BYTES - self.shown)
        *lines, self.pending = text.split("\n")
        self._show(lines)

    def _show(self, lines: list[str]) -> None:
        if not lines:
            return
        header = "" if self.headed else (
            "verispec: output of the code under check follows, each line behind '| ' (not verispec's; "
            "--code-output FILE keeps it out of these streams)\n")
        self.headed = True
        self.write("stderr", header + "".join(shown_line(line) + "\n" for line in lines))
        self.spoke_last = True

    def verispec_spoke(self) -> None:
        """verispec wrote a line on stderr after the code's last."""
        self.spoke_last = False

    def finish(self) -> None:
        """The end of the run (every process of the code ended): the last partial line, what was not shown, or the
        file."""
        if self.keep_for is not None:
            self._write_file()
            return
        rest = self.pending + self.decoder.decode(b"", final=True)
        self.pending = ""
        self._show([rest] if rest else [])
        if self.total > self.shown:
            self.write("stderr", f"verispec: note: {self.total - self.shown:,} more bytes of the code under check's "
                                 "output were not shown; --code-output FILE keeps them\n")
            self.spoke_last = False

    def _write_file(self) -> None:
        data = b"".join(self.kept)
        try:
            atomic_write(self.keep_for, data)
        except OSError as error:
            self.write("stderr", f"verispec: warning: could not write --code-output {self.keep_for!r} ({error}); the "
                                 "code's output is lost, the verdict stands\n")
            return
        if self.total > self.kept_bytes:
            self.write("stderr", f"verispec: note: --code-output {self.keep_for} keeps the first {self.kept_bytes:,} "
                                 f"of the {self.total:,} bytes the code under check wrote\n")


def with_confinement(text: str, confinement: dict) -> str:
    """The command's JSON lines with ``confinement`` added to each JSON object; any other line as it was."""
    out = []
    for line in text.splitlines(keepends=True):
        try:
            value = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if isinstance(value, dict):
            if "exit_status" in value and "exit_status" in confinement:  # the status the command really ends with
                value["exit_status"] = confinement["exit_status"]
            line = json.dumps({**value, "confinement": confinement}) + "\n"
        out.append(line)
    return "".join(out)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it, synced, then renamed over it (the
    guard's own writer, standard library only; ``verispec.files.io``'s is above it on the ground floor)."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def json_out_document(text: str, marker: dict) -> str:
    """The ``--json-out`` file of a run whose JSON lines are ``text``: one JSON document, the command's one object
    (or ``{"objects": [...]}`` for a command that printed several), with verispec's ``written_by`` ``marker``
    (``verispec.files.provenance``, made by the caller), so that a later run may replace it and never a file of the
    user's (``verispec.cli.confined``)."""
    objects = []
    for line in text.splitlines():
        try:
            objects.append(json.loads(line))
        except ValueError:
            continue
    document = objects[0] if len(objects) == 1 and isinstance(objects[0], dict) else {"objects": objects}
    return json.dumps({**document, "written_by": marker}) + "\n"


def run_checked(argv: list[str], *, cwd, timeout: float, env=None) -> tuple[int | None, dict | None, str]:
    """Run a verispec command line (``argv``: the interpreter, ``-m``, ``verispec``, the command and its options) the
    way a script that records its verdict must: with ``--json-out`` in a fresh folder of its own, reading the verdict
    from that file, never from stdout (the code under check cannot write it; ``verispec.guard.output``). Returns the
    exit status (None past ``timeout`` seconds), the file's JSON document (None where the command wrote none: a
    refusal, a time limit), and stderr."""
    with tempfile.TemporaryDirectory(prefix="verispec-verdict-") as folder:
        path = os.path.join(folder, "verdict.json")
        try:
            done = subprocess.run([*argv, "--json-out", path], cwd=cwd, capture_output=True, text=True,
                                  timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return None, None, f"no answer within {timeout:g} s"
        try:
            with open(path, encoding="utf-8") as file:
                document = json.load(file)
        except (OSError, ValueError):
            document = None
        return done.returncode, document if isinstance(document, dict) else None, done.stderr


__all__ = ["FENCE", "KEPT_BYTES", "SHOWN_BYTES", "CodeOutput", "atomic_write", "json_out_document", "run_checked",
           "shown_line", "with_confinement"]
