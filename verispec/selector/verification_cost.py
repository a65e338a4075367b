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

A box's speed moves between days (x1.4-2.2 between the day this CPU's forwards were timed and the day its
verification was: issue 78), so a price is only as good as the pairing of its two halves. ``pricing_run`` says from
the two files' run records whether a regime's forwards (the latency model's ``measured``) and its verification (this
file's rows and ``record``) were timed in one run on one box, and the verdict states it beside every priced result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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

#: The most seconds between the forwards' timing and the verification's for the two to count as one run on one box
#: (experiments/cpu_pricing.sh times them back to back; a box's speed moved x1.4-2.2 between days).
ONE_RUN_GAP_S = 3600


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
    #: when and where the cells were timed (``timed_span``): {"start", "end", "cpu", "cores", "load"}, or None
    measured: dict | None = field(default=None, compare=False)

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
        return cls(regime, device, vocab, times, stopped, unit, source, timed_span(data))

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
                "unit": self.unit, "measured": self.measured}


def _when(text) -> float | None:
    """A run record's UTC date ('2026-11-30T14:37:47Z') as seconds since the epoch, None when it is not one."""
    import datetime

    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except (TypeError, ValueError):
        return None


def _stamp(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_span(record) -> dict | None:
    """A run record (``verispec.files.provenance.run_record`` with its ``seconds``) as the span it timed:
    {"start", "end", "cpu", "cores", "load"}; None where it is not one (no date or machine)."""
    if not isinstance(record, dict) or not isinstance(record.get("machine"), dict):
        return None
    start = _when(record.get("date"))
    if start is None:
        return None
    seconds = record.get("seconds")
    seconds = float(seconds) if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0 else 0.0
    machine = record["machine"]
    return {"start": _stamp(start), "end": _stamp(start + seconds), "cpu": str(machine.get("cpu", "")),
            "cores": machine.get("cores"), "load": machine.get("load")}


def timed_span(data: Mapping) -> dict | None:
    """When a verification-cost file's cells were timed: from its rows' dates where every row carries one (a resumed
    run's rows keep the day each was timed), else its record's start and seconds; on the record's machine."""
    span = run_span(data.get("record"))
    if span is None:
        return None
    rows = data.get("rows")
    dates = [_when(row.get("date")) if isinstance(row, dict) else None for row in rows] \
        if isinstance(rows, list) and rows else [None]
    if None not in dates:
        span.update(start=_stamp(min(dates)), end=_stamp(max(dates)))
    return span


def pricing_run(forwards, verification) -> dict:
    """Whether a priced regime's two halves were timed in one run on one box (issue 78, item 3): ``forwards``, the
    latency model's ``measured`` run record; ``verification``, the verification-cost file's ``measured`` span
    (``timed_span``). One run: both recorded, the same CPU and cores, and at most ``ONE_RUN_GAP_S`` seconds between
    the two spans. Returns {"forwards", "verification" (spans or None), "one_run", "words"}: the words a table
    shows, which name the days when the two were timed apart and say which half has no record."""
    spans = {"forwards": run_span(forwards), "verification": verification if isinstance(verification, dict) and
             _when(verification.get("start")) is not None and _when(verification.get("end")) is not None else None}
    unrecorded = [half for half, span in spans.items() if span is None]
    if unrecorded:
        recorded = [f"{half} timed {span['start'][:10]} on {span['cpu']}" for half, span in spans.items() if span]
        missing = ("the forwards' and the verification's runs" if len(unrecorded) == 2 else
                   {"forwards": "the forwards' run", "verification": "the verification's run"}[unrecorded[0]])
        return {**spans, "one_run": False, "words": "; ".join(recorded + [f"{missing} unrecorded"])}
    timed, checked = spans["forwards"], spans["verification"]
    gap = max(_when(checked["start"]) - _when(timed["end"]), _when(timed["start"]) - _when(checked["end"]), 0.0)
    same_box = (timed["cpu"], timed["cores"]) == (checked["cpu"], checked["cores"])
    if same_box and gap <= ONE_RUN_GAP_S:
        return {**spans, "one_run": True, "gap_s": gap,
                "words": f"forwards and verification timed in one run on {timed['cpu']}, {timed['start'][:10]}"}
    return {**spans, "one_run": False, "gap_s": gap,
            "words": f"two runs: forwards timed {timed['start'][:10]} on {timed['cpu']}, verification "
                     f"{checked['start'][:10]} on {checked['cpu']}"}


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


__all__ = ["FORMAT", "KIND", "MEASURE", "ONE_RUN_GAP_S", "VerificationCost", "VerificationCostError", "pricing_run",
           "regime_costs", "run_span", "timed_span"]
