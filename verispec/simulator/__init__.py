"""Problems, draft trees, drafters, the generic enumerator and the exact engine.

The names below are loaded on first use (PEP 562): a module that needs only the drafters or the problems (every
verifier, 'verispec list') does not import the engine and what it brings (tqdm, the enumerators, the DP).
"""

from __future__ import annotations

from verispec.lazy_names import lazy_names

_EXPORTS = {
    "Chooser": "chooser", "RandomChooser": "chooser", "enumerate_law": "chooser",
    "BranchingDrafter": "drafters", "ChainDrafter": "drafters", "DelayedDrafter": "drafters", "Drafter": "drafters",
    "DraftLaw": "drafters", "DySpecDrafter": "drafters", "GreedyDrafter": "drafters", "HubDrafter": "drafters",
    "RootIIDDrafter": "drafters", "parse_tree": "drafters",
    "DEFAULT_TOLERANCE": "engine", "ExactResult": "engine", "analyze": "engine",
    "NodeSolver": "interfaces", "Verifier": "interfaces",
    "OutputLaw": "laws",
    "ContextFreeProblem": "problems", "MarkovProblem": "problems", "Problem": "problems", "TabularProblem": "problems",
    "load_problem": "problems", "problem_from_json": "problems", "problem_to_json": "problems",
    "random_context_free_problem": "problems", "random_markov_problem": "problems", "random_problem": "problems",
    "sun_toy_problem": "problems", "target_law": "problems",
    "DraftTree": "trees", "TreeBatch": "trees", "TreeBuilder": "trees", "shape_from_paths": "trees",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()})
