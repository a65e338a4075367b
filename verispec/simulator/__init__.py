"""Problems, draft trees, drafters, the generic enumerator and the exact engine."""

from verispec.simulator.chooser import Chooser, RandomChooser, enumerate_law
from verispec.simulator.drafters import (
    BranchingDrafter,
    ChainDrafter,
    DelayedDrafter,
    Drafter,
    DraftLaw,
    DySpecDrafter,
    GreedyDrafter,
    HubDrafter,
    RootIIDDrafter,
    parse_tree,
)
from verispec.simulator.engine import DEFAULT_TOLERANCE, ExactResult, analyze
from verispec.simulator.interfaces import NodeSolver, Verifier
from verispec.simulator.laws import OutputLaw
from verispec.simulator.problems import (
    ContextFreeProblem,
    MarkovProblem,
    Problem,
    TabularProblem,
    load_problem,
    problem_from_json,
    problem_to_json,
    random_context_free_problem,
    random_markov_problem,
    random_problem,
    sun_toy_problem,
    target_law,
)
from verispec.simulator.trees import DraftTree, TreeBatch, TreeBuilder, shape_from_paths

__all__ = [
    "BranchingDrafter", "ChainDrafter", "Chooser", "ContextFreeProblem", "DEFAULT_TOLERANCE", "DelayedDrafter",
    "DraftLaw", "DraftTree", "Drafter", "DySpecDrafter", "ExactResult", "GreedyDrafter", "HubDrafter",
    "MarkovProblem", "NodeSolver", "OutputLaw", "Problem", "RandomChooser", "RootIIDDrafter", "TabularProblem",
    "TreeBatch", "TreeBuilder", "Verifier",
    "analyze", "enumerate_law", "load_problem", "parse_tree", "problem_from_json", "problem_to_json",
    "random_context_free_problem", "random_markov_problem", "random_problem", "shape_from_paths",
    "sun_toy_problem", "target_law",
]
