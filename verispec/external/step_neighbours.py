"""``step-ragged`` with sampled neighbours: every request of the batch samples, and the check is of their joint law.

With greedy fillers (the layout's default) the neighbours of the checked request draw nothing, so damage across
requests cannot show: a request that reads its neighbour's uniforms, or noise shared between requests, leaves every
greedy output as it was. Here (``neighbours="sampled"``, ``--neighbours sampled``) requests 0 and 2 sample too, each
with settings of its own (``NEIGHBOUR_SAMPLING``: request 0 one draft at temperature 0.8 and top-k 2, request 2 no
draft at temperature 1.3) and its own seed, and the check is of the joint law of the three requests' emitted
blocks: in a correct batch the requests are independent, each block continued with its own target after its own
settings follows that request's law, so the joint law is the product of the three (``joint_target``). A request
that reads another's noise, a setting applied to the wrong request, a shared key: each moves a marginal or couples
two requests, and either shows in the joint TV. The exact law is integrated over every draw of the batch (its
neighbours' draws included: more uniforms, so more evaluations than with greedy fillers).

The outcome of a call is one code over the three blocks (``JointCodes``): request r's emitted block, 1 to K_r + 1
tokens, numbered as the single-request code numbers it (blocks of length 1, then 2, ...), the three numbers mixed
in radix (request 0 fastest), and one more code for an outcome no correct batch has (a token outside the
vocabulary). The sequences a report names over- or under-produced are the three blocks' tokens continued and
concatenated, request 0's first (``describe``).
"""

from __future__ import annotations

import numpy as np

from verispec.errors import VerispecError
from verispec.simulator.laws import OutputLaw
from verispec.simulator.problems import target_law

#: The most joint outcomes of the three requests a check tabulates (codes, or sequences once continued): sized
#: before any array of them is made.
MAX_JOINT_CODES = 200_000
#: The choices of ``neighbours`` (``--neighbours``): greedy fillers (the default) or sampling neighbours.
NEIGHBOURS = ("greedy", "sampled")


def neighbour_sampling():
    """{request: Sampling} of the sampled neighbours: other settings than any one request's, so that a setting
    applied to the wrong request changes a law."""
    from verispec.models.sampling import Sampling

    return {0: Sampling(0.8, top_k=2), 2: Sampling(1.3)}


def check_neighbours(value, layout: str) -> str:
    """``value`` as a choice of ``NEIGHBOURS``; VerispecError in one line otherwise, or off ``step-ragged``."""
    if value not in NEIGHBOURS:
        raise VerispecError(f"neighbours must be one of {', '.join(NEIGHBOURS)}, got {value!r}")
    if value != "greedy" and layout != "step-ragged":
        raise VerispecError(f"--neighbours {value} needs the step-ragged layout (a batch of requests); the {layout} "
                            "layout checks one request")
    return value


class JointCodes:
    """The codes of a batch's outcome: each request's block numbered as one request's code (lengths 1..K_r + 1),
    mixed in radix, then one code for an impossible outcome. ``drafts``: K_r of each request."""

    def __init__(self, size: int, drafts: tuple):
        self.size, self.drafts = size, tuple(drafts)
        self.offsets = [np.cumsum([0] + [size ** length for length in range(1, count + 2)]) for count in self.drafts]
        self.radix = tuple(int(offsets[-1]) for offsets in self.offsets)
        self.impossible = int(np.prod(self.radix))
        self.count = self.impossible + 1
        continued = size ** sum(count + 1 for count in self.drafts)  # the joint law continued with the targets
        if max(self.count, continued) > MAX_JOINT_CODES:
            raise VerispecError(f"sampled neighbours tabulate {max(self.count, continued):,} joint outcomes of the "
                                f"three requests at V = {size}, more than {MAX_JOINT_CODES:,}; use a smaller "
                                "vocabulary or fewer drafts")

    def code(self, blocks: list) -> int:
        """The code of the three requests' emitted blocks (tuples of tokens), or the impossible code."""
        parts = []
        for tokens, offsets, drafts in zip(blocks, self.offsets, self.drafts):
            if not 1 <= len(tokens) <= drafts + 1 or any(not 0 <= t < self.size for t in tokens):
                return self.impossible
            parts.append(int(offsets[len(tokens) - 1] + np.ravel_multi_index(tokens, (self.size,) * len(tokens))))
        return int(np.ravel_multi_index(tuple(reversed(parts)), tuple(reversed(self.radix))))

    def joint(self, law: np.ndarray) -> np.ndarray:
        """``law`` [count] as [n_0, n_1, n_2] (the impossible code left out)."""
        return law[:self.impossible].reshape(tuple(reversed(self.radix))).transpose(2, 1, 0)

    def tables(self, law: np.ndarray, request: int) -> list[np.ndarray]:
        """One request's marginal block law as emitted-block tables [(V,)*l for l = 1..K_r + 1]."""
        marginal = self.joint(law).sum(axis=tuple(axis for axis in range(3) if axis != request))
        offsets = self.offsets[request]
        return [marginal[offsets[length - 1]:offsets[length]].reshape((self.size,) * length)
                for length in range(1, self.drafts[request] + 2)]

    def continued(self, law: np.ndarray, wanted: list) -> np.ndarray:
        """The joint law of the three blocks, each continued with its own request's target (``wanted[r]``), as
        one array (V,)*(sum of K_r + 1): request 0's tokens first."""
        joint = self.joint(law)
        for request, (drafts, problem) in enumerate(zip(self.drafts, wanted)):
            # the leading axis (this request's codes) -> its continued sequences, appended last: request order kept
            joint = np.tensordot(joint, self._continuation(request, drafts, problem), axes=([0], [0]))
        return joint.reshape((self.size,) * sum(count + 1 for count in self.drafts))

    def _continuation(self, request: int, drafts: int, problem) -> np.ndarray:
        """[n_r, V^(K_r + 1)]: each code's block continued with the request's target (``OutputLaw``, linear in its
        tables, so one-hot tables give its rows)."""
        rows = []
        offsets = self.offsets[request]
        for code in range(int(offsets[-1])):
            length = int(np.searchsorted(offsets, code, side="right"))
            tables = [np.zeros((self.size,) * (level + 1)) for level in range(drafts + 1)]
            tables[length - 1].reshape(-1)[code - offsets[length - 1]] = 1.0
            rows.append(np.asarray(OutputLaw(self.size, drafts, tuple(tables)).continued_with_target(problem),
                                   dtype=np.float64).reshape(-1))
        return np.stack(rows)


def neighbours_note(neighbours: dict | None) -> str:
    """What a report adds with sampling neighbours (nothing without them)."""
    if not neighbours:
        return ""
    return (f"; every request samples (request 0: 1 draft, {neighbours[0].describe()}; request 2: no draft, "
            f"{neighbours[2].describe()}), checked by the three requests' joint law against the product of their own "
            "targets (a sequence lists request 0's 2 tokens, then request 1's, then request 2's 1)")


def joint_target(wanted: list, drafts: tuple, size: int) -> np.ndarray:
    """The product of the requests' own target laws of K_r + 1 tokens, (V,)*(sum of K_r + 1), request 0 first."""
    joint = np.ones(())
    for problem, count in zip(wanted, drafts):
        joint = np.multiply.outer(joint, np.asarray(target_law(problem, count + 1), dtype=np.float64))
    return joint.reshape((size,) * sum(count + 1 for count in drafts))


__all__ = ["NEIGHBOURS", "JointCodes", "check_neighbours", "joint_target", "neighbour_sampling", "neighbours_note"]
