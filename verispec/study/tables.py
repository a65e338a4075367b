"""A sweep's outputs: the tidy table (CSV, or Parquet with pyarrow) and its row store, and the checks that keep
them from destroying data.

The table holds the cells of the grid just run, in grid order, rewritten atomically as rows arrive; the rows
are kept in a ``ResultStore`` keyed on every parameter of the cell (``OUTPUT.cells.json``, or one store that
several sweeps share), so that rows of other grids stay in the store only. Before any cell runs,
``check_sweep_output`` refuses an output that is not this tool's unless ``overwrite`` is given, and a path that
cannot be written (a directory, a read-only folder, a path through a regular file), each on one line.

This tool's table is one its row store shows it wrote: a CSV has no place for a marker that every CSV reader
skips, so the store records the SHA-256 of each table it is about to write (``ResultStore.add_many(outputs=)``),
and a table is replaced without ``overwrite`` only when its bytes are ones the store recorded. A file of the
user's, a table edited since, a table whose store was deleted or was written by a verispec before the digests
(even one whose header is the sweep's columns) is refused.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from verispec.errors import ResultStoreError
from verispec.files.io import OutputKind, ResultStore, atomic_write_bytes, check_inside, check_output_file
from verispec.files.provenance import sha256_bytes, sha256_file
from verispec.study.grid import SweepError

#: Columns first in every table (then any others, sorted).
COLUMNS = ("family", "vocab", "vocab_size", "divergence", "temperature", "concentration", "seed", "file_sha256", "tree",
           "depth", "verifier",
           "method", "lp_optimum", "cell_timeout", "status", "reason", "method_used", "block_efficiency",
           "expected_accepted", "tau_law", "acceptance_by_depth", "tv_distance", "lossless", "nodes", "block_time",
           "throughput", "speedup", "optimum", "gap", "optimum_throughput", "latency", "seconds")

#: Columns every sweep table has: a cell's parameters and its status.
REQUIRED_COLUMNS = ("family", "tree", "verifier", "method", "status")


def store_path(output: Path) -> Path:
    return output.with_name(output.name + ".cells.json")


#: The parameters recorded in every sweep's row store (the cells' keys hold everything else).
STORE_PARAMETERS = {"kind": "verispec sweep"}


def check_sweep_output(output: str | Path, *, overwrite: bool = False) -> tuple[ResultStore, str]:
    """(the row store of ``output``, its table format), after refusing on one line, before any cell runs, an
    output that cannot be written or that is not this tool's.

    This tool's output is a table its row store ``OUTPUT.cells.json`` (a ``ResultStore`` of kind 'verispec
    sweep') records writing (its SHA-256), either of them absent on a first run. Anything else at either path
    (a file of the user's, a hand-edited table, a table whose store was deleted, so that a rerun would replace
    its rows, any JSON that is not a sweep's row store, a link in place of the store) is refused unless
    ``overwrite``, which starts over. The caller holds the store's lock (``verispec.files.store_lock``)."""
    output = Path(output)
    table_format = output_format(output)
    check_output_file(output, "output", example="sweep.csv")
    check_inside(output.parent, store_path(output), "the row store")  # a file the user did not name
    store = open_sweep_store(store_path(output), overwrite=overwrite)
    check_sweep_table(output, store, overwrite=overwrite)
    return store, table_format


def check_sweep_table(output: str | Path, store: ResultStore, *, overwrite: bool = False) -> str:
    """The table format of ``output``, after refusing on one line an output that cannot be written, and, unless
    ``overwrite``, an existing file that ``store`` does not record writing (``ResultStore.wrote``: the SHA-256 of
    one of its last two contents): a file of the user's, a sweep table edited since, or one whose row store is
    missing or older than the digests."""
    output = Path(output)
    table_format = output_format(output)
    check_output_file(output, "output", example="sweep.csv")
    if overwrite or not output.exists() or store.wrote(output, sha256_file(output)):
        return table_format
    shown = repr(str(output))
    if is_sweep_table(output, table_format) and not store.path.exists():
        raise SweepError(f"output {shown} is a sweep table without its row store {str(store.path)!r}, so a rerun "
                         "cannot resume it and would replace its rows; pass --overwrite to replace it, or choose "
                         "another output")
    what = ("is a sweep table that its row store " + repr(str(store.path)) + " does not record writing (edited "
            "since, or written by a verispec older than the table digests)") if is_sweep_table(output, table_format) \
        else "is not a verispec sweep table (its row store does not record writing it)"
    raise SweepError(f"output {shown} exists and {what}; choose another path, or pass --overwrite to replace it")


def open_sweep_store(path: str | Path, *, overwrite: bool = False, within: str | Path | None = None) -> ResultStore:
    """The sweep row store at ``path`` (a ``ResultStore`` of kind 'verispec sweep', read once; several tables may
    share it), after refusing on one line a path that cannot be written and, unless ``overwrite`` (which starts
    it over), an existing file that is not a sweep's row store: one whose recorded parameters are not the
    sweep's, or that records none (a file of the user's, ``{"rows": []}``). ``within``: the output folder it
    must stay in (a report's)."""
    check_output_file(path, "the row store")
    try:
        return ResultStore(path, parameters=STORE_PARAMETERS, overwrite=overwrite, within=within)
    except ResultStoreError as error:
        raise SweepError(f"{error} (or pass --overwrite to replace it)") from None


def is_sweep_table(path: str | Path, table_format: str | None = None) -> bool:
    """Whether ``path`` holds a table ``write_table`` wrote: its header is the sweep's columns (the known ones in
    ``COLUMNS`` order, any others after them, sorted), the parameters of a cell among them. Reads the header only."""
    path = Path(path)
    table_format = table_format or output_format(path)
    try:
        if table_format == "parquet":
            names = _parquet_columns(path)
        else:
            with path.open(newline="", encoding="utf-8") as stream:
                names = next(csv.reader([stream.readline(1 << 16)]), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    if names is None:
        return False
    known = [name for name in names if name in COLUMNS]
    extras = names[len(known):]
    return (set(REQUIRED_COLUMNS) <= set(names) and names[:len(known)] == known
            and known == sorted(known, key=COLUMNS.index) and extras == sorted(extras)
            and len(set(names)) == len(names))


def sweep_table_marked(path: str | Path) -> bool:
    """Whether the row store beside ``path`` (``store_path``) records writing the table now there."""
    store = store_path(Path(path))
    try:
        return ResultStore(store).wrote(path, sha256_file(path)) if store.exists() else False
    except ResultStoreError:
        return False


#: What 'verispec sweep --out' writes (``verispec.files.io.check_output``; the table's row store is a ``ResultStore``).
SWEEP_TABLE = OutputKind("verispec sweep table (its row store does not record writing it)", sweep_table_marked,
                         is_sweep_table, "sweep.csv")


def _parquet_columns(path: Path) -> list[str] | None:
    """The column names of a Parquet file, or None where it is not one."""
    import pyarrow
    import pyarrow.parquet

    try:
        return list(pyarrow.parquet.read_schema(path).names)
    except pyarrow.ArrowException:
        return None


def output_format(output: Path) -> str:
    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise SweepError(f"output {str(output)!r} must end in .csv or .parquet")
    if suffix == ".parquet":
        try:
            import pandas  # noqa: F401
            import pyarrow  # noqa: F401
        except ImportError:
            raise SweepError("Parquet output needs pandas and pyarrow: pip install pandas pyarrow, or write .csv") \
                from None
    return suffix[1:]


def _columns(rows: list[dict]) -> list[str]:
    present = set().union(*rows) if rows else set(COLUMNS)
    return [name for name in COLUMNS if name in present] + sorted(present - set(COLUMNS))


def write_table(rows: list[dict], output: Path, table_format: str, *, store: ResultStore | None = None,
                new_rows: dict | None = None, within: str | Path | None = None) -> None:
    """The tidy table, atomically: CSV (lists as JSON text) or Parquet (lists as list columns). With ``store``,
    first ``new_rows`` are added to it together with the table's SHA-256, so that a rerun can show it wrote the
    table (``check_sweep_table``). ``within``: the output folder the table must stay in (a report's)."""
    data = table_bytes(rows, table_format)
    if store is not None:
        store.add_many(new_rows or {}, outputs={output: sha256_bytes(data)})
    atomic_write_bytes(output, data, within=within)


def table_bytes(rows: list[dict], table_format: str) -> bytes:
    """The bytes of the tidy table of ``rows``: CSV (UTF-8) or Parquet."""
    columns = _columns(rows)
    if table_format == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({name: json.dumps(row.get(name)) if isinstance(row.get(name), (list, dict)) else
                             ("" if row.get(name) is None else row.get(name)) for name in columns})
        return buffer.getvalue().encode("utf-8")
    import pandas

    # dicts (the latency model) as JSON text: Parquet structs would not read back as the same dict
    frame = pandas.DataFrame([{name: json.dumps(row.get(name)) if isinstance(row.get(name), dict) else row.get(name)
                               for name in columns} for row in rows], columns=columns)
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def read_table(path: str | Path) -> list[dict]:
    """Rows of a table written by ``write_table`` (CSV cells parsed back to numbers, lists and booleans)."""
    path = Path(path)
    if output_format(path) == "parquet":
        import pandas

        frame = pandas.read_parquet(path)
        return [{name: _from_parquet(value) for name, value in row.items()} for row in frame.to_dict("records")]
    with path.open(newline="") as stream:
        return [{name: _from_csv(value) for name, value in row.items()} for row in csv.DictReader(stream)]


def _from_parquet(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, str) and value.startswith("{"):
        return json.loads(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _from_csv(text: str):
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.startswith(("[", "{")):
        return json.loads(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


__all__ = ["COLUMNS", "SWEEP_TABLE", "check_sweep_output", "check_sweep_table", "is_sweep_table", "open_sweep_store",
           "output_format", "read_table", "store_path", "sweep_table_marked", "table_bytes", "write_table"]
