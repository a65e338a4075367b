"""Bounds that judge verifiers: the best block efficiency of any valid verifier (the multi-step LP, its single-path
form and its rational certificate), of a class of verifiers (cvxpy programs, select-then-verify) and every rule's
gap to them. The couplings verifiers are built on live in ``verispec.lp_analysis``.

The names below are loaded on first use (PEP 562): importing this package does not import scipy or cvxpy.
"""

from __future__ import annotations

from verispec.lazy_names import lazy_names

_EXPORTS = {
    "DEFAULT_MAX_NONZEROS": "multistep", "RESTRICTIONS": "multistep", "MultiStepLP": "multistep",
    "MultiStepOptimum": "multistep", "TabulatedVerifier": "multistep", "build_multistep_lp": "multistep",
    "coupling_bound": "multistep", "optimal_block_efficiency": "multistep",
    "CertificateError": "certificate", "RationalCertificate": "certificate", "certify_optimum": "certificate",
    "GapReport": "gaps", "GapRow": "gaps", "gap_report": "gaps", "verifier_gaps": "gaps",
    "CLASSES": "classes", "ClassOptimum": "classes", "LPVariables": "classes", "optimize_class": "classes",
    "DraftedNodeBound": "path_selection", "SelectionOptimum": "path_selection", "depth_bounds": "path_selection",
    "drafted_node_program": "path_selection", "selection_optimum": "path_selection",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()})
