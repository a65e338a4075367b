"""A trained selector, its file, and the decoding policy that asks it for an action per block.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 5) acts by argmax: at each block the action of
largest logit. ``Selector`` holds the model (which carries its feature standardisation), the action grid, the
feature names, and what it was trained for (``metadata``): pair, tokenizer, vocabulary size, verifiers, latency
model, sampling settings, kind, seed, verispec version, number of training roots. ``check_fits`` refuses, in
one line naming both, a pair or setting it was not trained for.

The file is one ``torch.save`` of plain tensors, dicts, lists and strings, read back with ``weights_only=True``
(no pickled code runs) and written atomically (``verispec.files.io.atomic_output``).

``SelectorPolicy`` is the per-block decoding policy of ``verispec.models.decoding`` (its ``BlockPolicy``
protocol): it computes the scalar features from the block's context (p and q at the previous token, q at the
root: all known before the block's draws, so the choice keeps the target's law) and returns the argmax action.
"""

from __future__ import annotations

import dataclasses
import math
import stat
from pathlib import Path

import numpy as np
import torch

from verispec.errors import VerispecError, describe
from verispec.files.io import OutputKind, atomic_output
from verispec.native import kernel_status
from verispec.selector.actions import Action, ActionGrid, SelectorError
from verispec.selector.features import SCALAR_FEATURES, context_features, reads_draft
from verispec.selector.network import MODELS, HostForward, build_model
from verispec.selector.roots import sampling_text

#: The file's format tag and version.
FORMAT = "verispec-selector"
FORMAT_VERSION = 2

#: The format versions ``Selector.load`` reads: 1 (the grid's parameters alone; its actions those they meant then,
#: ``ActionGrid.under_format_1``) and 2 (the action list recorded, "actions": the network's logits in order).
READ_FORMAT_VERSIONS = (1, 2)

#: Largest selector file read, and the most its archive's members may take uncompressed (checked before torch
#: reads it): a selector is a small network; an MLP over 324 actions with three 128-wide projections of
#: 8,192-wide hidden states takes about 13 MB.
MAX_SELECTOR_FILE_BYTES = 256 << 20

#: The metadata keys ``check_fits`` compares (a missing key: the selector was not trained for any such thing).
FIT_KEYS = ("pair", "tokenizer", "vocab_size", "verifiers", "grid", "samplings", "latency")


def sampling_dict(sampling) -> dict:
    """A ``Sampling`` as the selector records it: {temperature, top_k, top_p} (None when off)."""
    if isinstance(sampling, dict):
        return {"temperature": float(sampling["temperature"]), "top_k": sampling.get("top_k"),
                "top_p": None if sampling.get("top_p") is None else float(sampling["top_p"])}
    return {"temperature": float(sampling.temperature), "top_k": sampling.top_k,
            "top_p": None if sampling.top_p is None else float(sampling.top_p)}


def plain_metadata(value, where: str = "metadata"):
    """``value`` as plain Python (str, int, float, bool, None, lists and str-keyed dicts), which
    ``torch.load(weights_only=True)`` and JSON both read: numpy numbers become Python numbers, a ``Sampling``
    its dict, a ``LatencyModel`` or ``ActionGrid`` its ``as_dict``. Anything else is a SelectorError."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [plain_metadata(item, where) for item in value]
    if isinstance(value, dict):
        return {str(key): plain_metadata(item, f"{where}[{key!r}]") for key, item in value.items()}
    if hasattr(value, "as_dict"):
        return plain_metadata(value.as_dict(), where)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain_metadata(dataclasses.asdict(value), where)
    raise SelectorError(f"{where} holds a {type(value).__name__}; a selector records plain values only")


class Selector:
    """A trained selector: ``choose(features) -> action index`` over ``grid.actions``."""

    def __init__(self, model, grid: ActionGrid, *, kind: str, feature_names=SCALAR_FEATURES, hidden_names=(),
                 metadata: dict | None = None):
        if kind not in MODELS or not isinstance(model, MODELS[kind]):
            raise SelectorError(f"a {kind!r} selector needs a {MODELS.get(kind, object).__name__} model")
        if model.config["num_actions"] != len(grid):
            raise SelectorError(f"the model has {model.config['num_actions']} logits, the grid {len(grid)} actions")
        if model.config["num_scalars"] != len(feature_names):
            raise SelectorError(f"the model reads {model.config['num_scalars']} scalars, {len(feature_names)} "
                                "feature names were given")
        self.model = model.eval()
        self.grid = grid
        self.kind = kind
        self.feature_names = tuple(feature_names)
        self.hidden_names = tuple(hidden_names)
        self.metadata = plain_metadata(dict(metadata or {}))
        self._host: HostForward | None = None

    @property
    def uses_hidden(self) -> bool:
        return bool(self.hidden_names)

    @property
    def device(self) -> torch.device:
        return self.model.scalar_mean.device

    def to(self, device) -> Selector:
        self.model.to(device)
        self._host = None
        return self

    # -- choosing ----------------------------------------------------------------------------------------------
    def _host_forward(self) -> HostForward | None:
        """The model's forward in numpy (``HostForward``, built once from the weights: a selector's model is fixed
        once trained, and ``to`` builds it again) when the model is on the CPU; None on an accelerator (the torch
        forward there)."""
        if self.device.type != "cpu":
            return None
        if self._host is None:
            self._host = HostForward(self.model)
        return self._host

    def _hidden(self, hidden, count: int, host: bool):
        """The hidden blocks in the selector's order, each [count, d_i]: float32 numpy for the host forward, torch on
        the model's device otherwise (None when the selector reads none)."""
        if not self.uses_hidden:
            if hidden:
                raise SelectorError("this selector reads no hidden states")
            return None
        if hidden is None:
            raise SelectorError(f"this selector reads the hidden states {', '.join(self.hidden_names)}")
        if isinstance(hidden, dict):
            missing = [name for name in self.hidden_names if name not in hidden]
            if missing:
                raise SelectorError(f"hidden states missing: {', '.join(missing)}")
            hidden = [hidden[name] for name in self.hidden_names]
        if len(hidden) != len(self.hidden_names):
            raise SelectorError(f"this selector reads {len(self.hidden_names)} hidden-state blocks "
                                f"({', '.join(self.hidden_names)}), got {len(hidden)}")
        widths = self.model.config.get("hidden_dims", ())
        blocks = []
        for block, name, width in zip(hidden, self.hidden_names, widths):
            if host:
                if isinstance(block, torch.Tensor):  # decoding's float32 CPU rows are read in place (one call)
                    block = block.numpy() if block.device.type == "cpu" and not block.requires_grad else \
                        block.detach().cpu().numpy()
                block = np.asarray(block, dtype=np.float32)  # no copy when it is so
            else:
                block = torch.as_tensor(block, dtype=torch.float32, device=self.device)
            if block.ndim == 0 or block.shape[-1] != width or math.prod(block.shape) != count * width:
                raise SelectorError(f"the hidden state {name} must be {width} values a root ({count} root(s)), got "
                                    f"shape {tuple(block.shape)}")
            blocks.append(block.reshape(count, width))  # [B, d]
        return blocks

    def _checked(self, features, batched: bool) -> np.ndarray:
        array = np.asarray(features, dtype=np.float64)
        width = len(self.feature_names)
        if not batched and array.ndim != 1:
            raise SelectorError(f"choose() takes one root's features [F], got shape {array.shape}")
        shape = array.shape if batched else (1, *array.shape)
        if len(shape) != 2 or shape[1] != width:
            raise SelectorError(f"the selector reads features [N, {width}], got shape {shape}")
        if not np.isfinite(array).all():
            raise SelectorError("the selector's features hold NaN or infinite values")
        return array.reshape(shape)

    def _logits(self, array: np.ndarray, hidden):
        """Logits [N, A] of checked features [N, F]: float32 numpy on the host, else a torch tensor on the device."""
        host = self._host_forward()
        if host is not None:
            return host(array, self._hidden(hidden, array.shape[0], True) or ())
        with torch.inference_mode():
            scalars = torch.as_tensor(array, dtype=torch.float32, device=self.device)
            return self.model(scalars, self._hidden(hidden, array.shape[0], False))

    def logits(self, features, hidden=None) -> np.ndarray:
        """Logits [N, A] (float32) of features [N, F] (hidden: blocks [N, d_i], a list or a dict by name)."""
        logits = self._logits(self._checked(features, True), hidden)
        return logits if isinstance(logits, np.ndarray) else logits.float().cpu().numpy()

    def choose_batch(self, features, hidden=None) -> np.ndarray:
        """The argmax action index of each root [N] (int64; ties go to the first action)."""
        return np.argmax(self.logits(features, hidden), axis=1).astype(np.int64)

    def choose(self, features, hidden=None) -> int:
        """The argmax action index for one root's features [F] (hidden blocks [d_i]): ``choose_batch`` of one row
        (the first maximum), with no copy of the logits to the host when the model is on an accelerator."""
        logits = self._logits(self._checked(features, False), hidden)[0]
        return int(logits.argmax())

    def action(self, features, hidden=None) -> Action:
        return self.grid.actions[self.choose(features, hidden)]

    # -- what it was trained for -------------------------------------------------------------------------------
    def check_fits(self, *, pair=None, vocab_size=None, verifiers=None, grid=None, sampling=None,
                   latency=None) -> None:
        """Refuse (one-line SelectorError naming both) a use the selector was not trained for: another model
        pair (name), vocabulary size, verifier (each given one must be among the grid's), action grid, sampling
        setting (must be one it was trained on) or latency model. Arguments left None are not checked."""
        meta = self.metadata

        def refuse(what, given, trained):
            raise SelectorError(f"the selector does not fit: {what} {given}, but it was trained for {trained}; use a "
                                f"selector trained for this {what} ('verispec selector dataset' with it, then "
                                "'selector train')")

        if pair is not None:
            name = getattr(pair, "name", pair)
            if meta.get("pair") != name:
                refuse("pair", repr(name), repr(meta["pair"]) if meta.get("pair") else "no model pair (synthetic "
                       "problems)")
        if vocab_size is not None and meta.get("vocab_size") != int(vocab_size):
            refuse("vocabulary size", int(vocab_size), meta.get("vocab_size", "no vocabulary (not recorded)"))
        if verifiers is not None:
            wanted = [verifiers] if isinstance(verifiers, str) else list(verifiers)
            unknown = [name for name in wanted if name not in self.grid.verifiers]
            if unknown:
                refuse("verifier", ", ".join(unknown), "verifiers " + ", ".join(self.grid.verifiers))
        if grid is not None and grid != self.grid:
            refuse("action grid", grid.describe(), self.grid.describe())
        if sampling is not None:
            given = sampling_dict(sampling)
            trained = meta.get("samplings") or []
            if given not in [sampling_dict(s) for s in trained]:
                refuse("sampling", sampling_text(given),
                       "; ".join(sampling_text(sampling_dict(s)) for s in trained) or "no sampling (not recorded)")
        if latency is not None:
            given = plain_metadata(latency.as_dict())
            trained = meta.get("latency")
            if trained != given:
                refuse("latency model", repr(given.get("source") or given),
                       repr((trained or {}).get("source") or trained) if trained else "no latency model (not recorded)")

    # -- the file ----------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """The file's content: plain tensors, dicts, lists and strings; ``written_by``, the marker that lets a
        rerun of 'verispec selector train' replace the file (``verispec.files.provenance``; ``load`` ignores it)."""
        from verispec.files.provenance import MARKER_KEY, SELECTOR, written_by

        return {MARKER_KEY: written_by(SELECTOR, "selector train"), "format": FORMAT, "format_version": FORMAT_VERSION,
                "kind": self.kind,
                "config": plain_metadata(self.model.config), "grid": self.grid.as_dict(),
                "actions": self.grid.action_names(),
                "feature_names": list(self.feature_names), "hidden_names": list(self.hidden_names),
                "metadata": self.metadata,
                "state_dict": {name: tensor.detach().cpu().clone() for name, tensor in self.model.state_dict().items()}}

    def save(self, path: str | Path) -> None:
        """Write the selector to ``path`` atomically (readers see the old file or the whole new one)."""
        with atomic_output(path) as temporary:
            torch.save(self.state(), temporary)

    @classmethod
    def load(cls, path: str | Path, *, device="cpu") -> Selector:
        """Read a selector file; a missing, truncated or foreign file is a one-line SelectorError."""
        shown = repr(str(path))
        try:
            data = _read_state(path, shown)
        except FileNotFoundError:
            raise SelectorError(f"cannot read the selector {shown}: no such file") from None
        except IsADirectoryError:
            raise SelectorError(f"cannot read the selector {shown}: it is a folder") from None
        except PermissionError:
            raise SelectorError(f"cannot read the selector {shown}: permission denied") from None
        except SelectorError:
            raise
        except Exception as error:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on a bad file
            raise SelectorError(f"cannot read the selector {shown}: not a verispec selector file, or truncated "
                                f"({type(error).__name__})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SelectorError(f"{shown} is not a verispec selector file")
        version = data.get("format_version")
        if version not in READ_FORMAT_VERSIONS:
            raise SelectorError(f"{shown} is a selector file of format version {describe(version)}; this verispec "
                                f"reads versions {', '.join(map(str, READ_FORMAT_VERSIONS))}")
        try:  # the logits are the recorded actions, not those the grid's parameters derive now
            grid = ActionGrid.from_dict(data["grid"]).under_format_1() if version == 1 else \
                ActionGrid.from_dict(data["grid"], data["actions"])
            model = build_model(data["kind"], data["config"])
            model.load_state_dict(data["state_dict"], strict=True)
            selector = cls(model, grid, kind=data["kind"], feature_names=tuple(data["feature_names"]),
                           hidden_names=tuple(data["hidden_names"]), metadata=data["metadata"])
        except VerispecError as error:
            raise SelectorError(f"the selector {shown} is damaged: {error}") from None
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
            raise SelectorError(f"the selector {shown} is damaged: {reason}") from None
        return selector.to(device)


def _read_state(path: str | Path, shown: str):
    """The content of a selector file (``torch.load`` with ``weights_only``), after refusing a file or an archive
    that declares more than MAX_SELECTOR_FILE_BYTES, before torch reads or decompresses anything."""
    from verispec.files.io import check_zip_sizes

    status = Path(path).stat()  # FileNotFoundError, IsADirectoryError... for the caller to name
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(status.st_mode):  # a FIFO would block the reader in open() for ever, a device never end
        raise SelectorError(f"the selector {shown} is not a regular file (a FIFO, a device or a socket); give a "
                            "selector file")
    size = status.st_size
    if size > MAX_SELECTOR_FILE_BYTES:
        raise SelectorError(f"the selector {shown} holds {size:,} bytes, more than the {MAX_SELECTOR_FILE_BYTES:,} "
                            "verispec reads for a selector (a small network); give a selector file")
    check_zip_sizes(path, limit=MAX_SELECTOR_FILE_BYTES, what=f"the selector {shown}", error=SelectorError)
    return torch.load(path, map_location="cpu", weights_only=True)


def is_selector_file(path: str | Path) -> bool:
    """Whether ``path`` holds a selector file ('verispec selector train' wrote it): its format tag, read back."""
    try:
        data = _read_state(path, repr(str(path)))
    except Exception:  # torch raises many kinds on a file that is not its own
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def selector_file_marked(path: str | Path) -> bool:
    """Whether ``path`` carries the ``written_by`` marker of a selector file verispec wrote
    (``verispec.files.provenance``): what 'verispec selector train' may replace without --overwrite."""
    from verispec.files.provenance import MARKER_KEY, SELECTOR, is_marked

    try:
        data = _read_state(path, repr(str(path)))
    except Exception:  # torch raises many kinds on a file that is not its own
        return False
    return isinstance(data, dict) and is_marked(data.get(MARKER_KEY), SELECTOR)


#: What 'verispec selector train --out' writes (``verispec.files.io.check_output``).
SELECTOR_FILE = OutputKind("verispec selector file", selector_file_marked, is_selector_file, "selector.pt")


class SelectorPolicy:
    """The decoding policy (``verispec.models.decoding``'s BlockPolicy protocol) of a selector: before each
    block's draws, the scalar features of the block's context, then the selector's argmax action.

    ``latency`` gives the features' draft_time and target_time; None takes the latency model the selector was
    trained with."""

    def __init__(self, selector: Selector, latency=None):
        if not isinstance(selector, Selector):
            raise SelectorError(f"a selector policy needs a Selector, got {type(selector).__name__}")
        if selector.feature_names != SCALAR_FEATURES:
            raise SelectorError("a decoding policy computes the scalar features SCALAR_FEATURES; this selector "
                                f"reads {', '.join(selector.feature_names)}")
        if latency is None:
            from verispec.latency import LatencyError, LatencyModel

            if not selector.metadata.get("latency"):
                raise SelectorError("the selector records no latency model; give one to SelectorPolicy")
            try:
                latency = LatencyModel.from_dict(selector.metadata["latency"])
            except LatencyError as error:
                raise SelectorError(f"the selector's latency model is unreadable: {error}") from None
        self.selector = selector
        self.latency = latency
        self.needs_draft = reads_draft(selector.feature_names)
        self.needs_hidden = selector.uses_hidden
        kernel_status()  # the compiled kernels built (or refused) now, not inside a decoding block
        self._actions = tuple((action.tree, action.verifier) for action in selector.grid.actions)

    def actions(self) -> tuple[tuple[str, str], ...]:
        """The (tree spec, verifier name) of every action, in the grid's order."""
        return self._actions

    def features(self, context) -> np.ndarray:
        """The scalar features [F] of a block's context."""
        return context_features(context, latency=self.latency)

    def choose(self, context) -> int:
        """The index into ``actions()`` for the block whose context is ``context``."""
        hidden = context.hidden if self.needs_hidden else None
        return self.selector.choose(self.features(context), hidden)


__all__ = ["FIT_KEYS", "FORMAT", "SELECTOR_FILE", "Selector", "SelectorPolicy", "is_selector_file", "plain_metadata",
           "sampling_dict"]
