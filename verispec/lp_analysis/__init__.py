"""The couplings verifiers are built on: draft laws, single-position optimal transport and its closed forms, the
maximum-flow couplings and importance weights, Global Resolution's Luce programs, and the one checked LP helper
(HiGHS through scipy). What judges verifiers (the multi-step LP, class optima, gaps) is ``verispec.bounds``.

The names below are loaded on first use (PEP 562): importing a submodule that needs no LP (the closed forms of
Global Resolution, say) does not import scipy.optimize, which costs a quarter of a second of start-up.
"""

from __future__ import annotations

from verispec.lazy_names import lazy_names

_EXPORTS = {
    "greedy_draft_law": "draft_laws", "hub_draft_law": "draft_laws", "iid_draft_law": "draft_laws",
    "set_law": "draft_laws", "without_replacement_draft_law": "draft_laws",
    "OTCoupling": "ot", "ot_coupling": "ot", "repair_marginals": "ot",
    "SinglePositionOptimum": "single_position", "iid_ot_optimum": "single_position",
    "set_law_ot_optimum": "single_position", "without_replacement_ot_optimum": "single_position",
    "LPSolution": "solve", "check_size": "solve", "solve_lp": "solve",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()})
