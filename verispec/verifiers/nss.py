"""NSS, naive sampling (Miao et al. 2024, arXiv 2305.09781, Sec. 4): Y ~ p, ignoring the drafts.
The drafts are accepted when Y happens to be one of them; acceptance sum_t p(t) (1 - (1 - q(t))^K)
on K i.i.d. drafts."""

from __future__ import annotations

from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver


class NaiveSamplingSolver(NodeSolver):
    name = "nss"
    summary = "naive sampling: Y ~ p, accepted if it is a draft"
    citation = "Miao et al. 2024, arXiv 2305.09781, Sec. 4"
    # Y ~ p whatever the children are, so any draft law is fine.
    valid_for = frozenset(DraftLaw)

    def output_laws(self, p, q, children):
        return p

    def sequential_tests(self, p, q, draws: int):
        # no draft is ever accepted as such; the final draw from p lands on a drafted token by chance
        return [q * 0] * draws, p

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        return chooser.categorical(p)
