"""What each rule's own verification costs per block, measured on a device: the price the verdict adds to a latency
regime's block time (issue 66, item 4).

A latency model prices a block's forwards: T(a) = sum_j t_q(w_j) + t_p(nodes) (``verispec.selector.actions.
action_times``, the DDTE paper's Eq. 11; Thomas et al. 2026, arXiv 2602.16994). Real decoding also runs the rule
between the target's forward and the cache update (``verispec.models.decoding``: ``_verify``, timed as ``verify_s``):
the rule's law over the drawn tree and the draws from it. Per node that is a few milliseconds for SpecInfer at
V = 151,936 on a CPU, and tens for Global Resolution and psbv, which solve a node's split; a verdict that leaves it
out may name a winner that loses on the machine. A verification-cost file holds, for every action of a grid and
every sampling setting, the median milliseconds of that step per block as measured on one device
(``experiments/verification_cost.py``); the priced block time is T(a) + v(a).

The file (JSON, ``FORMAT``, the ``written_by`` marker of ``KIND``) names the latency ``regime`` it prices (``cpu``:
this machine), the ``device`` in words, the pair's ``vocab_size``, the ``unit`` (ms, the regime's unit) and per
setting (``verispec.selector.roots.sampling_text``: 'T=0.7 top-k=20 top-p=0.8') ``actions``: {action name
('globalres K=2 L1=1 L2=3', ``Action.name``): ms}, and ``stopped``: {action name: {"lower_bound_ms", "why"}} for a
cell its budget stopped. A rule with a stopped action cannot be priced at that setting (``unpriceable``): the verdict
names no priced result for it. A file that misses an action of a dataset's grid is refused on one line
(``check_covers``), naming the action and how to measure it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verispec.errors import VerispecError, describe
from verispec.files.io import read_user_file

#: The file's format, and the kind of its ``written_by`` marker (``verispec.files.provenance``).
FORMAT = "verispec verification cost"
KIND = "verification cost"

#: Largest file read: 9 rules x 80 actions x 2 settings with their per-block rows is some 300 KB.
MAX_FILE_BYTES = 16 << 20

#: How a missing action is measured (the refusal's fix).
MEASURE = "python experiments/verification_cost.py --dataset FILE ... --out FILE"


class VerificationCostError(VerispecError):
    """A verification-cost file that cannot be read or does not cover what the verdict prices."""


def _milliseconds(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise VerificationCostError(f"{what} must be a non-negative number of ms, got {describe(value)}")
    return float(value)


@dataclass(frozen=True)
class VerificationCost:
    """Per setting name, per action name, the rule's verification ms per block (``times``), and the cells a budget
    stopped (``stopped``: setting -> action name -> (lower bound ms, why)), measured on ``device`` for ``regime``."""

    regime: str
    device: str
    vocab_size: int
    times: Mapping[str, Mapping[str, float]]
    stopped: Mapping[str, Mapping[str, tuple[float, str]]]
    unit: str = "ms"
    source: str = ""

    @classmethod
    def from_dict(cls, data, source: str = "") -> VerificationCost:
        """The costs of a file's JSON ``data``; one-line refusal of anything else, naming ``source``."""
        where = f"the verification-cost file {source!r}" if source else "the verification costs"
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise VerificationCostError(f"{where} is not a verification-cost file (its format is not {FORMAT!r}); "
                                        f"make one with {MEASURE}")
        regime, device, vocab, unit = (data.get(key) for key in ("regime", "device", "vocab_size", "unit"))
        if not isinstance(regime, str) or not regime or not isinstance(device, str):
            raise VerificationCostError(f"{where} names no regime and device (strings); make it with {MEASURE}")
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
            raise VerificationCostError(f"{where} has no vocabulary size (a positive integer), got {describe(vocab)}")
        if unit != "ms":
            raise VerificationCostError(f"{where} is in {describe(unit)}, not 'ms'; make it with {MEASURE}")
        settings = data.get("settings")
        if not isinstance(settings, dict) or not settings:
            raise VerificationCostError(f"{where} holds no settings ({{setting: {{'actions': ...}}}})")
        times, stopped = {}, {}
        for name, entry in settings.items():
            actions = entry.get("actions") if isinstance(entry, dict) else None
            held = entry.get("stopped", {}) if isinstance(entry, dict) else None
            if not isinstance(actions, dict) or not isinstance(held, dict):
                raise VerificationCostError(f"{where}: the setting {name!r} has no 'actions' {{name: ms}}")
            times[name] = {action: _milliseconds(ms, f"{where}: {action!r} at {name}")
                           for action, ms in actions.items()}
            stopped[name] = {}
            for action, cell in held.items():
                if not isinstance(cell, dict) or not isinstance(cell.get("why"), str):
                    raise VerificationCostError(f"{where}: the stopped cell {action!r} at {name} needs "
                                                "'lower_bound_ms' and 'why'")
                stopped[name][action] = (_milliseconds(cell.get("lower_bound_ms"), f"{where}: {action!r}'s lower "
                                                                                   "bound"), cell["why"])
        return cls(regime, device, vocab, times, stopped, unit, source)

    @classmethod
    def load(cls, path: str | Path) -> VerificationCost:
        text = read_user_file(path, limit=MAX_FILE_BYTES, what="the verification-cost file",
                              error=VerificationCostError, why="a file of every action's cost is far smaller",
                              regular_only=True)
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise VerificationCostError(f"cannot read the verification-cost file {str(path)!r}: "
                                        f"{error if isinstance(error, json.JSONDecodeError) else 'nested too deeply'}"
                                        ) from None
        return cls.from_dict(data, str(path))

    def check_covers(self, settings: Sequence, regimes: Mapping) -> None:
        """Refuse on one line costs that do not price the verdict: a regime the verdict lacks, another unit or
        vocabulary than the regime's and the datasets', a setting or an action of a setting's grid missing
        (``settings``: ``verispec.selector.study.Setting``, ``regimes``: name -> ``LatencyModel``)."""
        where = f"the verification-cost file {self.source!r}"
        if self.regime not in regimes:
            raise VerificationCostError(f"{where} prices the regime {self.regime!r}, which this verdict does not have "
                                        f"({', '.join(regimes)}); give its latency model (--latency FILE for 'cpu')")
        if regimes[self.regime].unit != self.unit:
            raise VerificationCostError(f"{where} is in {self.unit}, the regime {self.regime!r} in "
                                        f"{regimes[self.regime].unit}; measure both in one unit")
        for setting in settings:
            vocab = setting.data.metadata.get("vocab_size")
            if vocab is not None and int(vocab) != self.vocab_size:
                raise VerificationCostError(f"{where} was measured at V = {self.vocab_size:,}, the datasets' pair has "
                                            f"V = {int(vocab):,}; measure at the pair's vocabulary ({MEASURE})")
            if setting.name not in self.times:
                raise VerificationCostError(f"{where} has no setting {setting.name!r} (it holds "
                                            f"{', '.join(map(repr, self.times))}); measure it ({MEASURE})")
            held = self.times[setting.name].keys() | self.stopped[setting.name].keys()
            for action in setting.data.grid.actions:
                if action.name not in held:
                    raise VerificationCostError(f"{where} misses the action {action.name!r} of the grid at "
                                                f"{setting.name} ({setting.source}); measure every action of the "
                                                f"datasets' grid ({MEASURE})")

    def per_action(self, grid, setting: str) -> np.ndarray:
        """v(a) [A] in ms for ``grid``'s actions at ``setting`` (NaN where a budget stopped the cell)."""
        times, stopped = self.times[setting], self.stopped[setting]
        return np.array([times[action.name] if action.name in times else (math.nan if action.name in stopped else
                                                                          _missing(action.name, setting))
                         for action in grid.actions], dtype=np.float64)  # [A]

    def unpriceable(self, grid, setting: str) -> list[str]:
        """The rules of ``grid`` with an action a budget stopped at ``setting``: no priced figure for them."""
        stopped = self.stopped.get(setting, {})
        return [name for name in grid.verifiers
                if any(action.verifier == name and action.name in stopped for action in grid.actions)]

    def describe(self) -> dict:
        """What the verdict records of the file: its path, regime, device and vocabulary."""
        return {"file": self.source, "regime": self.regime, "device": self.device, "vocab_size": self.vocab_size,
                "unit": self.unit}


def _missing(name: str, setting: str):
    raise VerificationCostError(f"no verification cost of {name!r} at {setting}; check the file first "
                                "(VerificationCost.check_covers)")


def regime_costs(paths: Sequence[str | Path], settings: Sequence, regimes: Mapping) -> dict[str, VerificationCost]:
    """{regime: its costs} from the files ``paths``, each checked against the verdict (``check_covers``); two files
    of one regime are refused on one line."""
    costs: dict[str, VerificationCost] = {}
    for path in paths:
        cost = VerificationCost.load(path)
        cost.check_covers(settings, regimes)
        if cost.regime in costs:
            raise VerificationCostError(f"the verification-cost files {costs[cost.regime].source!r} and {str(path)!r} "
                                        f"both price the regime {cost.regime!r}; give one file a regime")
        costs[cost.regime] = cost
    return costs


__all__ = ["FORMAT", "KIND", "MEASURE", "VerificationCost", "VerificationCostError", "regime_costs"]
