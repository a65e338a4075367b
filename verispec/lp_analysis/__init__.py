"""Linear programs and closed forms for optimality analysis (HiGHS through scipy; one checked LP helper)."""

from verispec.lp_analysis.draft_laws import (
    greedy_draft_law,
    hub_draft_law,
    iid_draft_law,
    set_law,
    without_replacement_draft_law,
)
from verispec.lp_analysis.ot import OTCoupling, ot_coupling, repair_marginals
from verispec.lp_analysis.single_position import (
    SinglePositionOptimum,
    iid_ot_optimum,
    set_law_ot_optimum,
    without_replacement_ot_optimum,
)
from verispec.lp_analysis.solve import LPSolution, check_size, solve_lp

__all__ = [
    "LPSolution", "OTCoupling", "SinglePositionOptimum", "check_size", "greedy_draft_law", "hub_draft_law",
    "iid_draft_law", "iid_ot_optimum",
    "ot_coupling", "repair_marginals", "set_law", "set_law_ot_optimum", "solve_lp",
    "without_replacement_draft_law", "without_replacement_ot_optimum",
]
