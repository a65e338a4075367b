"""Issue 31, two classes of hostile input.

Declared sizes are checked before they are trusted: a vocabulary, an archive member's uncompressed size, an array
header's shape, a seed range, an action grid, a token or thread count. Each is refused in one line (exit 2) in well
under a second, before anything proportional to it is allocated: the run is timed, and its allocations (Python's
and numpy's, through tracemalloc) are bounded far below the declared size; one case also runs under ``ulimit -v``.

One rule for every file a command writes: an existing file that is not this tool's output of that kind is refused
untouched unless --overwrite; with --overwrite it is replaced; the tool's own output of that kind (the file carries
verispec's written_by marker, issue 54: being of the format is not enough) is replaced on a rerun; missing parent
folders are created for every writer.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import verispec.selector.dataset as dataset_module
import verispec.selector.dataset_file as dataset_file_module
import verispec.simulator.problem_files as problem_files_module
from tests.support.timing import Stopwatch
from tests.support.traced import traced_main
from verispec.cli import main
from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.simulator.generators import random_problem
from verispec.simulator.problem_files import MAX_NPZ_ARRAY_BYTES, is_problem_file, problem_to_npz
from verispec.sizes import MAX_TABLE_ENTRIES, check_vocab_size
from verispec.study.grid import SweepGrid, parse_seeds

MIB = 1 << 20
FOREIGN = "my notes, not verispec's\n"
TOY = ["--target", "0.5,0.5", "--draft", "0.5,0.5"]


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Import what the commands run, so that the timed, traced runs below measure the refusal, not imports."""
    import verispec.bounds.gaps
    import verispec.selector.actions
    import verispec.simulator.engine  # noqa: F401
    from verispec.verifiers import REGISTRY  # noqa: F401 - the registry loads every verifier module


def _refused(capsys, argv, *, seconds: float = 1.0, megabytes: float = 32) -> str:
    """The one stderr line of ``verispec argv`` run in this process, after checking exit status 2, one line, that it
    took under ``seconds`` of CPU on an idle core (stretched by the load measured around it: the work a missing check
    would do is CPU too, stretched alike) and that its traced allocations peaked under ``megabytes``."""
    with Stopwatch() as watch:
        code, _, err, _, peak = traced_main(capsys, argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("verispec: error: "), err
    assert watch.within(0, seconds), f"refused after {watch}: {lines[0]}"
    assert peak < megabytes * MIB, f"peak {peak / MIB:.0f} MB before refusing: {lines[0]}"
    return lines[0]


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npy_header(shape, dtype) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                                  "shape": tuple(shape)})
    return buffer.getvalue()


def _zero_bomb(path: Path, member: str, megabytes: int, extra: dict | None = None) -> None:
    """A .npz whose float64 member ``member`` is ``megabytes`` MiB of zeros, deflated (about 1000:1), beside
    ``extra`` small arrays."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, array in (extra or {}).items():
            archive.writestr(f"{name}.npy", _npy(array))
        rows = megabytes * MIB // 16
        with archive.open(f"{member}.npy", "w") as stream:
            stream.write(_npy_header((rows, 2), "<f8"))
            for _ in range(megabytes):
                stream.write(bytes(MIB))


VERISPEC_NPZ = {"format": np.asarray(problem_files_module.NPZ_FORMAT), "vocab_size": np.asarray(2, dtype=np.int64)}


# --- class 1: declared sizes ------------------------------------------------------------------------------------


@pytest.fixture
def huge_vocabulary(tmp_path):
    """81 bytes declaring a vocabulary of 10^9 (the issue's file): it once made exact allocate 7.7 GB."""
    path = tmp_path / "huge.json"
    path.write_text('{"vocab_size": 1000000000, "target": {"": [1]}, "draft": {"": [1]}, "comment": "hostile"}')
    assert len(path.read_bytes()) == 89
    return path


@pytest.mark.parametrize("command", [
    ["exact", "--tree", "chain:1", "--verifier", "specinfer"],
    ["exact", "--exact", "--tree", "chain:1", "--verifier", "specinfer"],
    ["predict", "--tree", "chain:1", "--verifier", "specinfer"],
    ["bound", "--tree", "chain:1"],
    ["compare"],
])
def test_a_declared_vocabulary_of_a_billion_is_refused_at_once(capsys, huge_vocabulary, command):
    line = _refused(capsys, [*command, "--problem", huge_vocabulary])
    assert str(huge_vocabulary) in line and "1,000,000,000 tokens" in line and f"{MAX_TABLE_ENTRIES:,}" in line


def test_the_vocabulary_refusal_holds_under_a_small_address_space(huge_vocabulary):
    """The whole command, in a process that may map 1.5 GB: the 8 GB the vocabulary asked for would fail here."""
    command = (f"ulimit -v 1500000; exec {sys.executable} -m verispec exact --problem {huge_vocabulary} "
               "--tree chain:1 --verifier specinfer")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "1,000,000,000 tokens" in lines[0], result.stderr


def test_the_vocabulary_limit_is_one_vector_of_two_to_the_22_and_v_plus_one_for_markov():
    check_vocab_size(2 ** 22, "here")  # a single vector of 2^22 entries: within the table limit
    with pytest.raises(ProblemTooLargeError, match="4,194,305 tokens"):
        check_vocab_size(2 ** 22 + 1, "here")
    # Markov: V + 1 vectors of V: 2047 x 2048 = 4,192,256 <= 2^22 = 4,194,304 < 2048 x 2049 = 4,196,352
    check_vocab_size(2047, "here", markov=True)
    with pytest.raises(ProblemTooLargeError, match="at most 2,047 tokens"):
        check_vocab_size(2048, "here", markov=True)
    SweepGrid(families=("markov",), vocab_sizes=(2047,))  # the grid accepts the largest
    with pytest.raises(ProblemTooLargeError):
        SweepGrid(families=("markov",), vocab_sizes=(2048,))


@pytest.mark.parametrize("argv", [
    ["sweep", "--vocab", "1000000000", "--backend", "serial"],
    ["sweep", "--families", "markov", "--vocab", "100000", "--backend", "serial"],
    ["sweep", "--families", "context-free,markov", "--vocab", "3,2048", "--backend", "serial"],
])
def test_sweep_vocabularies_are_refused_before_any_problem_is_built(capsys, tmp_path, argv):
    line = _refused(capsys, [*argv, "--out", tmp_path / "s.csv"])
    assert "--vocab" in line and "tokens" in line
    assert not (tmp_path / "s.csv").exists()


def test_a_zip_bomb_problem_is_refused_from_the_archive_directory(capsys, tmp_path, monkeypatch):
    """A 64 MiB member of zeros (about 64 KB on disk) against a limit of 1 MiB: refused from the archive's
    directory, the member never decompressed (the traced peak stays far below 64 MiB)."""
    path = tmp_path / "bomb.npz"
    _zero_bomb(path, "target_values", 64, VERISPEC_NPZ)
    assert path.stat().st_size < 2 * MIB
    monkeypatch.setattr(problem_files_module, "MAX_NPZ_ARRAY_BYTES", MIB)
    line = _refused(capsys, ["exact", "--problem", path, "--tree", "chain:1", "--verifier", "specinfer"], megabytes=8)
    # 64 MiB of rows and the array's header (128 bytes): '64.0001 MiB' and, with the small arrays, '64.0004 MiB'
    assert re.search(r"expands to 64\.000\d MiB uncompressed \('target_values.npy' alone 64\.0001 MiB\)", line)
    assert "above the 1 MiB" in line


def test_an_array_header_declaring_more_than_it_stores_is_refused(capsys, tmp_path):
    path = tmp_path / "lying.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in VERISPEC_NPZ.items():
            archive.writestr(f"{name}.npy", _npy(array))
        archive.writestr("target_lengths.npy", _npy_header((10 ** 12,), "<i8") + bytes(16))
    line = _refused(capsys, ["exact", "--problem", path, "--tree", "chain:1", "--verifier", "specinfer"])
    # 10^12 int64 entries are 8 x 10^12 bytes = 7450.58 GiB; 16 bytes are stored
    assert "'target_lengths' declares shape (1000000000000,) of int64 (7450.58 GiB) but stores 16 bytes" in line


def test_the_npz_limit_admits_the_largest_generated_table(tmp_path):
    """The arrays of random_problem(2, 19) (the largest table a generator builds: 2^20 - 1 prefixes) fit the limit,
    counted from the form: per law, int64 lengths [n], int64 tokens [n, longest] and float64 rows [n, 2]; the
    formula is checked against a file written at depth 3."""
    def arrays_bytes(depth: int) -> int:
        target, draft = 2 ** (depth + 1) - 1, 2 ** depth - 1  # prefixes of length 0..depth, 0..depth - 1
        return 8 * (target * (1 + depth + 2) + draft * (1 + (depth - 1) + 2))

    path = tmp_path / "p.npz"
    problem_to_npz(random_problem(2, 3, 0), 3, path)
    with np.load(path) as archive:
        written = sum(archive[name].nbytes for name in archive.files if name.startswith(("target_", "draft_")))
    assert written == arrays_bytes(3)
    assert arrays_bytes(19) <= MAX_NPZ_ARRAY_BYTES < 3 * arrays_bytes(19)


def test_a_dataset_bomb_is_refused_before_training(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import verispec.selector.selector
    import verispec.selector.train  # noqa: F401

    path = tmp_path / "bomb.npz"
    _zero_bomb(path, "features", 64, {"metadata": np.asarray("{}")})
    monkeypatch.setattr(dataset_file_module, "MAX_DATASET_BYTES", MIB)
    line = _refused(capsys, ["selector", "train", "--dataset", path, "--out", tmp_path / "s.pt"],
                    megabytes=8)
    assert re.search(r"expands to 64\.000\d MiB uncompressed", line) and not (tmp_path / "s.pt").exists()


def test_a_selector_file_bomb_is_refused_before_torch_reads_it(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import verispec.selector.selector as selector_module
    from verispec.selector.actions import SelectorError

    path = tmp_path / "bomb.pt"
    _zero_bomb(path, "archive/data/0", 64)
    monkeypatch.setattr(selector_module, "MAX_SELECTOR_FILE_BYTES", MIB)
    tracemalloc.start()
    try:
        with pytest.raises(SelectorError, match=r"expands to 64\.0001 MiB uncompressed"):
            selector_module.Selector.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB


@pytest.mark.parametrize("argv", [
    ["sweep", "--seeds", "0-100000000", "--backend", "serial"],
    ["selector", "dataset", "--family", "context-free", "--seeds", "0-100000000"],
    ["sweep", "--seeds", "0-600000,0-600000", "--backend", "serial"],
])
def test_seed_ranges_are_counted_before_they_are_expanded(capsys, tmp_path, argv):
    line = _refused(capsys, [*argv, "--out", tmp_path / "out.npz" if "selector" in argv else tmp_path / "s.csv"])
    assert "seeds, above the limit of 1,000,000" in line


def test_seed_lists_within_the_limit_parse_as_before():
    assert parse_seeds("0-2,7,1") == (0, 1, 2, 7)
    assert len(parse_seeds("0-999999")) == 10 ** 6  # 0..999,999: exactly the limit
    with pytest.raises(VerispecError, match="1,000,001 seeds"):
        parse_seeds("0-1000000")


def test_an_action_grid_is_counted_before_its_actions_are_listed(capsys, tmp_path):
    line = _refused(capsys, ["selector", "dataset", "--family", "context-free", "--seeds", "0", "--method", "exact",
                             "--ks", "1-64", "--l1s", "0-64", "--l2s", "0-64", "--out", tmp_path / "d.npz"])
    assert "270,400 actions (64 K x 65 L1 x 65 L2 x 1 verifiers)" in line  # 64 x 65 x 65 = 270,400


@pytest.mark.parametrize("argv, message", [
    (["decode", *TOY, "--prompt", "x", "--plain", "--max-new-tokens", "1000000000000"], "--max-new-tokens"),
    (["decode", *TOY, "--prompt", "x", "--plain", "--threads", "1000000000"], "--threads"),
    (["latency", *TOY, "--context-length", "1000000000", "--out", "l.json"], "--context-length"),
    (["latency", *TOY, "--sizes", "1,1000000000", "--out", "l.json"], "--sizes '1,1000000000'"),
    (["latency", *TOY, "--draft-sizes", "2,0", "--out", "l.json"], "--draft-sizes '2,0'"),
    (["latency", *TOY, "--repeats", "1000000000000", "--out", "l.json"], "--repeats"),
    (["bound", *TOY, "--tree", "chain:1", "--max-variables", "10" + "0" * 30], "--max-variables"),
])
def test_model_and_solver_counts_are_bounded_before_anything_loads(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert message in _refused(capsys, argv)
    assert not (tmp_path / "l.json").exists()


@pytest.mark.parametrize("spec, message", [
    ("prose-small:13", "asks for 13 prompts but prose-small holds 12"),
    ("prose-small:" + "9" * 5000, "prompts but prose-small holds 12"),
    ("prose:²", "N a positive integer"),
    ("prose:" + "9" * 5000, "prompts but prose holds"),
])
def test_prompt_counts_beyond_the_set_are_refused(capsys, tmp_path, spec, message):
    from importlib import resources

    from verispec.selector.prompt_sets import PROSE_SMALL

    prose = resources.files("verispec.selector").joinpath(*PROSE_SMALL)  # package data
    assert sum(1 for line in prose.read_text(encoding="utf-8").splitlines() if line.strip()) == 12
    line = _refused(capsys, ["selector", "dataset", *TOY, "--prompts", spec, "--out", tmp_path / "d.npz"])
    assert message in line


# --- class 3: one rule for every writer -------------------------------------------------------------------------


def _foreign(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FOREIGN)
    return path


def _guard_refuses(capsys, argv, path: Path, content: bytes = FOREIGN.encode()) -> None:
    """``argv`` writing ``path`` over a file that is not its kind (by default one of the user's): one line naming
    the path and --overwrite, exit 2, the file untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    line = _refused(capsys, argv, seconds=5, megabytes=64)
    assert str(path) in line and ("is not a verispec" in line or "without the written_by marker" in line) \
        and "--overwrite" in line
    assert path.read_bytes() == content


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dataset") / "d.npz"
    assert main(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-7", "--ks", "1",
                 "--l1s", "0-1", "--l2s", "0-1", "--backend", "serial", "--out", str(path)]) == 0
    return path


HUNT = ["hunt", "--verifier", "typical", "--tree", "chain:1", "--output"]  # typical is lossy: a witness at once
EXTERNAL_RULES = Path(__file__).resolve().parents[1] / "support" / "external_rules.py"
CHECK = ["check-external", f"{EXTERNAL_RULES}:token_level_resample_from_target",
         "--layout", "chain", "--tree", "chain:1", "--output"]


@pytest.mark.parametrize("argv, name, status", [
    (HUNT, "witness.json", 1),
    (HUNT, "witness.npz", 1),
    (CHECK, "witness.json", 1),
])
def test_witness_writers_follow_the_rule(capsys, tmp_path, argv, name, status):
    path = tmp_path / name
    _guard_refuses(capsys, [*argv, path], path)
    assert main([*argv, str(path), "--overwrite"]) == status and is_problem_file(path)
    assert main([*argv, str(path)]) == status and is_problem_file(path)  # its own output (its marker): replaced
    hand_written = json.dumps({"vocab_size": 2, "target": {"": [1, 0]}, "draft": {}})
    # a problem file without verispec's marker (issue 54: it used to be replaced, being of the format): refused
    _guard_refuses(capsys, [*argv, path], path, hand_written.encode())
    nested = tmp_path / "new" / "deeper" / name
    assert main([*argv, str(nested)]) == status and is_problem_file(nested)  # missing parents are created


def test_sweep_save_problems_follows_the_rule(capsys, tmp_path):
    """--save-problems (and --out, whose refusals tests/cli/test_outputs.py covers) under the one rule."""
    from verispec.study.tables import is_sweep_table

    folder = tmp_path / "new" / "problems"
    table = tmp_path / "other" / "deeper" / "s.csv"
    name = "context-free-V3-div0.5-temp1-conc1-seed0.npz"  # problem_file_name of the default grid's one problem
    argv = ["sweep", "--trees", "chain:1", "--verifiers", "bv", "--backend", "serial", "--out", table,
            "--save-problems", folder]
    assert main([str(part) for part in argv]) == 0 and is_problem_file(folder / name)  # parents created
    assert is_sweep_table(table)
    assert main([str(part) for part in argv]) == 0  # its own problem file: replaced on a rerun
    _guard_refuses(capsys, argv, folder / name)
    assert main([str(part) for part in [*argv, "--overwrite"]]) == 0 and is_problem_file(folder / name)


def test_selector_train_follows_the_rule(capsys, tmp_path, dataset_file):
    from verispec.selector.selector import is_selector_file

    argv = ["selector", "train", "--dataset", dataset_file, "--epochs", "2", "--out"]
    path = tmp_path / "s.pt"
    _guard_refuses(capsys, [*argv, path], path)
    assert main([str(part) for part in [*argv, path, "--overwrite"]]) == 0 and is_selector_file(path)
    assert main([str(part) for part in [*argv, path]]) == 0  # its own kind
    other = tmp_path / "other.pt"  # a verispec file of another kind (the dataset) is not a selector either
    _guard_refuses(capsys, [*argv, other], other, dataset_file.read_bytes())
    nested = tmp_path / "new" / "deeper" / "s.pt"
    assert main([str(part) for part in [*argv, nested]]) == 0 and is_selector_file(nested)


def test_selector_dataset_refuses_a_foreign_file_beside_a_row_store(capsys, tmp_path):
    """A file of the user's at --out with a row store beside it (the store alone used to let it through)."""
    out = tmp_path / "d.npz"
    argv = ["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0", "--ks", "1", "--l1s",
            "0", "--l2s", "0-1", "--backend", "serial", "--out"]
    assert main([str(part) for part in [*argv, out]]) == 0
    assert dataset_file_module.is_dataset_file(out) and dataset_module.store_path(out).exists()
    assert main([str(part) for part in [*argv, out]]) == 0  # its own dataset: a rerun
    _guard_refuses(capsys, [*argv, out], out)
    nested = tmp_path / "new" / "deeper" / "d.npz"
    assert main([str(part) for part in [*argv, nested]]) == 0 and dataset_file_module.is_dataset_file(nested)


@pytest.mark.parametrize("argv, name", [
    (["derive", *TOY, "--context", "a b", "--vocab", "3", "--depth", "1", "--output"], "d.json"),
    (["latency", *TOY, "--sizes", "1", "--out"], "l.json"),
])
def test_model_writers_refuse_a_foreign_file_before_loading_a_model(capsys, tmp_path, argv, name):
    """Refused before the (here nonexistent) models are looked for: the path check comes first."""
    path = tmp_path / name
    _guard_refuses(capsys, [*argv, path], path)


@pytest.mark.slow
def test_model_writers_replace_their_own_kind_and_create_parents(tmp_path):
    pytest.importorskip("transformers")
    from tests.support.tiny_models import save_tiny_pair
    from verispec.latency import is_latency_file

    target, draft = save_tiny_pair(tmp_path / "pair", 0)
    pair = ["--target", str(target), "--draft", str(draft)]
    for command, check, name in (
            (["derive", *pair, "--context", "a b", "--vocab", "3", "--depth", "1", "--output"], is_problem_file,
             "d.json"),
            (["latency", *pair, "--sizes", "1", "--repeats", "1", "--context-length", "8", "--out"], is_latency_file,
             "l.json")):
        nested = tmp_path / "new" / "deeper" / name
        assert main([*command, str(nested)]) == 0 and check(nested)  # parents created
        assert main([*command, str(nested)]) == 0 and check(nested)  # its own kind, replaced
        _foreign(nested)
        assert main([*command, str(nested)]) == 2 and nested.read_text() == FOREIGN
        assert main([*command, str(nested), "--overwrite"]) == 0 and check(nested)
