"""A latency model for speculative decoding, so that "best" means most tokens per unit of time.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 3) prices one draft-and-verify block of a delayed
tree a = (K, L1, L2) as

    T(a) = sum_(j < L1) t_q + sum_(j < L2) t_q + t_p(tree size),

one draft forward per depth (the K branches of one depth go in one batched forward) and one target forward
scoring the whole tree. For any drafter this is ``T = depth * t_q + t_p(nodes)`` with ``nodes`` the most nodes a
drawn tree has, root included (``Drafter.max_nodes``), and the expected throughput of a verifier is

    tokens per unit time = E[tau + 1] / T.

``LatencyModel`` holds t_q and t_p(n) in one unit: either a cost ratio (synthetic studies: t_q = 1 and
t_p(n) = ratio (1 + per_node (n - 1)), ``from_ratio``) or times measured on a real pair
(``verispec.models.latency.measure_latency``: median forward times by number of new tokens, t_p interpolated
linearly between measured sizes and extrapolated from the last two).
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path

from verispec.errors import VerispecError
from verispec.io import OutputKind, read_user_file

#: Largest latency model file read ('verispec latency --out' writes a few hundred bytes).
MAX_LATENCY_FILE_BYTES = 1 << 20


class LatencyError(VerispecError):
    """A latency model that cannot be built or read."""


def _positive(value, what: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            value < 0 or (value == 0 and not allow_zero):
        raise LatencyError(f"{what} must be a {'non-negative' if allow_zero else 'positive'} finite number, "
                           f"got {value!r}")
    return float(value)


@dataclass(frozen=True)
class LatencyModel:
    """t_q (``draft_step``) and t_p(n) (``target_sizes`` -> ``target_times``, n tree nodes) in one ``unit``."""

    draft_step: float
    target_sizes: tuple[int, ...]
    target_times: tuple[float, ...]
    unit: str = "draft step"
    source: str = ""

    def __post_init__(self):
        _positive(self.draft_step, "the draft step time t_q")
        if not self.target_sizes or len(self.target_sizes) != len(self.target_times):
            raise LatencyError("t_p needs one time per tree size, and at least one size")
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.target_sizes) or \
                list(self.target_sizes) != sorted(set(self.target_sizes)):
            raise LatencyError(f"tree sizes must be increasing positive integers, got {list(self.target_sizes)}")
        for value in self.target_times:
            _positive(value, "a target forward time t_p(n)")

    @classmethod
    def from_ratio(cls, ratio: float, per_node: float = 0.0) -> LatencyModel:
        """t_q = 1, t_p(n) = ratio (1 + per_node (n - 1)): a target forward costs ``ratio`` draft steps, and each
        tree node beyond the first adds the fraction ``per_node`` of it (0: verifying a tree costs what one
        token does, the memory-bound regime of a GPU)."""
        ratio = _positive(ratio, "the cost ratio t_p / t_q")
        per_node = _positive(per_node, "the per-node cost", allow_zero=True)
        return cls(1.0, (1, 2), (ratio, ratio * (1 + per_node)), "draft step",
                   f"cost ratio t_p/t_q = {ratio:g}, per node {per_node:g}")

    def target_time(self, nodes: int) -> float:
        """t_p(n): linear between measured sizes, extrapolated from the two nearest outside them (never
        below the smallest measured time)."""
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise LatencyError(f"a tree has at least one node, got {nodes!r}")
        sizes, times = self.target_sizes, self.target_times
        if len(sizes) == 1:
            return times[0]
        index = min(max(bisect.bisect_left(sizes, nodes), 1), len(sizes) - 1)
        low, high = index - 1, index
        slope = (times[high] - times[low]) / (sizes[high] - sizes[low])
        return max(min(times), times[low] + slope * (nodes - sizes[low]))

    def block_time(self, depth: int, nodes: int) -> float:
        """T = depth t_q + t_p(nodes): one draft-and-verify block."""
        return depth * self.draft_step + self.target_time(nodes)

    def drafter_time(self, drafter) -> float:
        return self.block_time(drafter.depth, drafter.max_nodes)

    def throughput(self, block_efficiency: float, drafter) -> float:
        """Expected tokens per unit time: E[tau + 1] / T."""
        return float(block_efficiency) / self.drafter_time(drafter)

    def plain_throughput(self) -> float:
        """Tokens per unit time of plain decoding: one target forward of one node per token."""
        return 1.0 / self.target_time(1)

    def as_dict(self) -> dict:
        return {"draft_step": self.draft_step, "target_sizes": list(self.target_sizes),
                "target_times": list(self.target_times), "unit": self.unit, "source": self.source}

    @classmethod
    def from_dict(cls, data) -> LatencyModel:
        try:
            return cls(float(data["draft_step"]), tuple(int(n) for n in data["target_sizes"]),
                       tuple(float(t) for t in data["target_times"]), str(data.get("unit", "")),
                       str(data.get("source", "")))
        except (KeyError, TypeError, ValueError) as error:
            raise LatencyError(f"not a latency model (draft_step, target_sizes, target_times): {error}") from None

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        text = read_user_file(path, limit=MAX_LATENCY_FILE_BYTES, what="the latency model", error=LatencyError,
                              why="a measured model is a few hundred bytes")
        try:
            return cls.from_dict(json.loads(text))
        except (json.JSONDecodeError, RecursionError) as error:
            raise LatencyError(f"cannot read the latency model {str(path)!r}: "
                               f"{error if isinstance(error, json.JSONDecodeError) else 'nested too deeply'}") from None


def is_latency_file(path: str | Path) -> bool:
    """Whether ``path`` holds a latency model ``LatencyModel.load`` reads ('verispec latency --out' wrote it)."""
    try:
        LatencyModel.load(path)
    except LatencyError:
        return False
    return True


#: What 'verispec latency --out' writes (``verispec.io.check_output``).
LATENCY_FILE = OutputKind("verispec latency model", is_latency_file, "latency.json")

__all__ = ["LATENCY_FILE", "LatencyError", "LatencyModel", "is_latency_file"]
