"""``data/MANIFEST`` against the files under ``data/`` (issue 55): every file listed, none listed missing, every
size and sha256 as listed, every line naming a commit of this history and a command (or "not found"); the
fixtures copied from data/ equal their sources. Negative controls on a temporary copy: a changed byte, an
unlisted file, a missing file and a changed size are each caught, by name."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.data_manifest import MANIFEST, check, read, sha256

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = {"tests/fixtures/latency/forward-h100-run1.json": "data/latency/forward-h100-run1.json",
            "tests/fixtures/latency/forward-h100-run2.json": "data/latency/forward-h100-run2.json"}


def test_the_manifest_lists_every_data_file_with_its_size_and_sha256():
    assert check(ROOT) == []


def test_every_line_names_a_commit_of_this_history_and_a_command():
    entries = read(ROOT)
    assert entries and all(entry.command.strip() for entry in entries.values())
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the commits cannot be looked up")
    for entry in entries.values():
        found = subprocess.run(["git", "cat-file", "-e", f"{entry.commit}^{{commit}}"], cwd=ROOT,
                               capture_output=True)
        assert found.returncode == 0, f"{entry.path}: {entry.commit} is not a commit of this history"


def test_the_fixtures_are_copies_of_the_data_they_name():
    entries = read(ROOT)
    for fixture, source in FIXTURES.items():
        assert sha256(ROOT / fixture) == entries[source].sha256, f"{fixture} is no longer a copy of {source}"


def _copy(tmp_path: Path) -> Path:
    """The checkout's data/ under ``tmp_path``, files hard-linked where the file system allows (else copied);
    a control that changes a file replaces its link by a copy first (``_own``), so the checkout is never touched."""
    def link(source, target):
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    shutil.copytree(ROOT / "data", tmp_path / "data", copy_function=link)
    return tmp_path


def _own(path: Path) -> bytes:
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    return data


def _smallest(root: Path) -> str:
    return min(read(root).values(), key=lambda entry: entry.size).path


def test_a_changed_byte_is_caught(tmp_path):
    root = _copy(tmp_path)
    assert check(root) == []  # the copy agrees before it is changed
    name = _smallest(root)
    data = _own(root / name)
    (root / name).write_bytes(data[:5] + bytes([data[5] ^ 1]) + data[6:])
    assert check(root) == [f"{name}: sha256 {sha256(root / name)}, {read(root)[name].sha256} listed"]
    assert (ROOT / name).read_bytes() == data  # the checkout's file unchanged


def test_an_unlisted_file_a_missing_one_and_a_changed_size_are_caught(tmp_path):
    root = _copy(tmp_path)
    (root / "data" / "latency" / "new-run.json").write_text("{}\n")
    name = _smallest(root)
    (root / name).unlink()
    other = next(path for path in sorted(read(root)) if path != name)
    (root / other).write_bytes(_own(root / other) + b"\n")
    size = read(root)[other].size
    assert sorted(check(root)) == sorted([f"data/latency/new-run.json: not listed in {MANIFEST}",
                                          f"{name}: listed in {MANIFEST} but missing",
                                          f"{other}: {size + 1} bytes, {size} listed"])
    assert (ROOT / name).is_file() and not (ROOT / "data" / "latency" / "new-run.json").exists()


def test_a_malformed_line_is_named(tmp_path):
    root = _copy(tmp_path)
    manifest = root / MANIFEST
    text = _own(manifest).decode()
    manifest.write_text(text + "data/x.json\t12\tnot-a-sha\tabc1234\tcmd\t\n")
    with pytest.raises(ValueError, match=r"MANIFEST:\d+: expected 6 tab-separated fields"):
        read(root)
