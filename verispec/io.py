"""Small file helpers shared by the command line and the experiment scripts."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from verispec.errors import ResultStoreError


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

    ``parameters`` (a JSON-able dict) are everything the rows depend on besides their keys: the problem
    (kind, vocabulary, seed, divergence ...), the verifier, the method. They are recorded in the file with
    the verispec version, and reopening the file with different parameters raises ``ResultStoreError``
    naming what differs, so a run never resumes from, or mixes with, rows computed for another setting.

    >>> store = ResultStore("results/bench.json", parameters={"verifier": "bv", "seed": 0})
    >>> if not store.done(key): store.add(key, row)
    """

    def __init__(self, path: str | Path, parameters: dict | None = None):
        self.path = Path(path)
        self.parameters = None
        if parameters is not None:
            from verispec.version import package_version

            self.parameters = _json_round_trip({**parameters, "verispec": parameters.get("verispec",
                                                                                          package_version())})
        self.rows: dict[str, dict] = {}
        if self.path.exists():
            data = self._read()
            self.rows = {row["key"]: row for row in data.get("rows", [])}
            self._check_parameters(data.get("parameters"))

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ResultStoreError(f"cannot read the result file {str(self.path)!r} ({error}); delete it or "
                                   "choose another output file") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows", []), list) or not all(
                isinstance(row, dict) and "key" in row for row in data.get("rows", [])):
            raise ResultStoreError(f"{str(self.path)!r} is not a result file (expected {{'parameters': ..., "
                                   "'rows': [{'key': ...}, ...]}); delete it or choose another output file")
        return data

    def _check_parameters(self, stored) -> None:
        if self.parameters is None or stored == self.parameters:
            return
        if stored is None:
            if not self.rows:
                return
            raise ResultStoreError(f"{str(self.path)!r} holds {len(self.rows)} rows with no recorded parameters "
                                   "(an older format), so they may belong to another setting; delete it or "
                                   "choose another output file")
        names = sorted(set(stored) | set(self.parameters), key=str)
        differences = ", ".join(f"{name}: {_shown(stored, name)} in the file, {_shown(self.parameters, name)} now"
                                for name in names if stored.get(name, _MISSING) != self.parameters.get(name, _MISSING))
        raise ResultStoreError(f"{str(self.path)!r} holds rows of a run with other parameters ({differences}); "
                               "use another output file, or delete this one to start over")

    def done(self, key: str) -> bool:
        return key in self.rows

    def add(self, key: str, row: dict) -> None:
        self.add_many({key: row})

    def add_many(self, rows: dict[str, dict]) -> None:
        """Add several rows (key -> row) and save once."""
        for key, row in rows.items():
            self.rows[key] = {"key": key, **row}
        data = {"rows": list(self.rows.values())}
        if self.parameters is not None:
            data = {"parameters": self.parameters, **data}
        atomic_write_json(self.path, data)


_MISSING = object()


def _shown(parameters: dict, name: str) -> str:
    return json.dumps(parameters[name]) if name in parameters else "(absent)"


def _json_round_trip(parameters: dict) -> dict:
    """The parameters as they read back from the file (tuples become lists), so that equal runs compare equal."""
    try:
        return json.loads(json.dumps(parameters))
    except (TypeError, ValueError) as error:
        raise ResultStoreError(f"result-store parameters must be JSON values: {error}") from None
