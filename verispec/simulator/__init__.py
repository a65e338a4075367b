"""Problems, draft trees, drafters, the generic enumerator and the exact engine.

The names below are loaded on first use (PEP 562): a module that needs only the drafters or the problems (every
verifier, 'verispec list') does not import the engine and what it brings (tqdm, the enumerators, the DP).
"""

from __future__ import annotations

from verispec.lazy_names import lazy_names

_EXPORTS = {
    "Chooser": "chooser", "RandomChooser": "chooser", "enumerate_law": "chooser",
    "BranchingDrafter": "drafters", "ChainDrafter": "drafters", "DelayedDrafter": "drafters", "Drafter": "drafters",
    "DraftLaw": "drafters", "RootIIDDrafter": "drafters",
    "DySpecDrafter": "own_law_drafters", "GreedyDrafter": "own_law_drafters", "HubDrafter": "own_law_drafters",
    "parse_tree": "tree_specs",
    "DEFAULT_TOLERANCE": "engine", "ExactResult": "engine", "analyze": "engine",
    "NodeSolver": "interfaces", "Verifier": "interfaces",
    "OutputLaw": "laws",
    "random_context_free_problem": "generators", "random_markov_problem": "generators", "random_problem": "generators",
    "sun_toy_problem": "generators",
    "load_problem": "problem_files", "problem_from_json": "problem_files", "problem_to_json": "problem_files",
    "ContextFreeProblem": "problems", "MarkovProblem": "problems", "Problem": "problems", "TabularProblem": "problems",
    "target_law": "problems",
    "DraftTree": "trees", "TreeBatch": "trees", "TreeBuilder": "trees", "shape_from_paths": "trees",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(__name__, {name: f"{__name__}.{module}" for name, module in _EXPORTS.items()})
