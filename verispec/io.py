"""Small file helpers shared by the command line and the experiment scripts."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


class ResultStore:
    """Rows of a long run, keyed, saved atomically after every row so that an interrupted run resumes.

    >>> store = ResultStore("results/bench.json")
    >>> if not store.done(key): store.add(key, row)
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        if self.path.exists():
            data = json.loads(self.path.read_text())
            self.rows = {row["key"]: row for row in data.get("rows", [])}

    def done(self, key: str) -> bool:
        return key in self.rows

    def add(self, key: str, row: dict) -> None:
        self.rows[key] = {"key": key, **row}
        atomic_write_json(self.path, {"rows": list(self.rows.values())})
