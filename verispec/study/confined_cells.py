"""A sweep's cells on a cluster's worker (Dask, Ray) when they run code of the user's own: never in the cluster's
worker process itself.

A local sweep's pool is forked from verispec's supervised worker, so each of its processes loads a user's rule in a
sandbox (``verispec.guard.sandbox``). A Dask or Ray worker is nobody's fork: a rule loaded there could rewrite the
rows it returns (a row with TV 0.37 read ``lossless=True``). So ``run_cells_confined`` runs each chunk in a
supervised verispec of its own on that worker (``python -m verispec.study.confined_cells CELLS OUT``): its worker
loads the rule in a sandbox, computes the rows, and prints them as one JSON object, which the supervisor writes to
``OUT`` (its ``--json-out``) once every process of the code has ended, in a place the sandbox cannot write. The task
returns those rows, each with the confinement layers that run missed (``confinement_missing``); a chunk whose
process ended without them returns its cells refused, with the reason.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from verispec.study.cells import MAX_CELL_SECONDS, run_cells

#: Seconds a chunk's process may take beyond its cells' own limits (starting Python and verispec, the sandbox).
START_SECONDS = 120.0


def needs_confinement(cells: list[dict]) -> bool:
    """Whether any cell runs code of the user's own (a rule named ``FILE.py:NAME`` or ``package.module:NAME``)."""
    from verispec.verifiers import is_registered

    return any(":" in str(cell.get("verifier", "")) and not is_registered(str(cell["verifier"])) for cell in cells)


def chunk_seconds(cells: list[dict]) -> float:
    """The longest a chunk's process may run: each cell's own limit (``cell_timeout``, else ``MAX_CELL_SECONDS``)
    with half as much again, and ``START_SECONDS``."""
    return START_SECONDS + 1.5 * sum(cell.get("cell_timeout") or MAX_CELL_SECONDS for cell in cells)


def run_cells_confined(cells: list[dict]) -> list[dict]:
    """The rows of a chunk of cells, computed by a supervised verispec in a process of its own (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="verispec-cells-") as folder:
        source, out = Path(folder) / "cells.pickle", Path(folder) / "rows.json"
        source.write_bytes(pickle.dumps(cells))
        seconds = chunk_seconds(cells)
        try:
            done = subprocess.run([sys.executable, "-m", "verispec.study.confined_cells", str(source), str(out)],
                                  capture_output=True, text=True, timeout=seconds + 60)
            reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            reason = f"the chunk's confined process gave no rows within {seconds + 60:g} s"
        try:
            document = json.loads(out.read_text(encoding="utf-8"))
            rows = document["rows"]
        except (OSError, ValueError, KeyError, TypeError):
            return [{**cell, "status": "refused", "reason": f"ConfinedRunError: {reason}"} for cell in cells]
        missing = (document.get("confinement") or {}).get("missing")
        return [{**row, "confinement_missing": missing} for row in rows]


def _main(argv: list[str]) -> int:
    from verispec.guard import supervisor

    source, out = argv
    cells = pickle.loads(Path(source).read_bytes())  # written by run_cells_confined, verispec's own

    def work() -> int:
        print(json.dumps({"rows": run_cells(cells)}))
        return 0

    if not supervisor.available():
        print("verispec: error: a sweep's rule of your own on a cluster needs a supervised worker (os.fork, and "
              "VERISPEC_SUPERVISE not 0); run the sweep with --backend local or serial", file=sys.stderr)
        return 2
    from verispec.files.provenance import JSON_OUT, written_by

    supervision = supervisor.Supervision(command="verispec sweep with a cluster's chunk", json_output=True,
                                         json_out=out, json_out_marker=written_by(JSON_OUT, "sweep"),
                                         time_limit=chunk_seconds(cells))
    return supervisor.run_supervised(work, supervision)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(_main(sys.argv[1:]))


__all__ = ["START_SECONDS", "chunk_seconds", "needs_confinement", "run_cells_confined"]
