"""The verifier contract: what the exact engine (and real decoding) asks of a verification rule.

A *verifier* maps draft trees to their *emission laws*: for a batch of N trees of one topology
(``TreeBatch``), ``emission_laws(batch)`` returns law[row, node, token] (shape [N, num_nodes, V]) = P(accept
the root-to-node path and emit ``token`` after it); each row sums to one. The law of ONE tree is the
one-row case (``emission_law``), never a second copy. Real decoding samples (node, token) from it; the
exact engine sums it over draft outcomes.

Every verifier also writes its rule as the paper's sampling algorithm against a ``Chooser``
(``procedure``): the independent parity twin of the law. The generic
enumerator runs it over every choice trace (``enumerated_emission_law``), and the tests hold the two equal.

A *node solver* is the node-local kind of rule (an "OTLP solver", DDTE arXiv 2602.16994, Sec. 2): given
the target law p, the draft law q and the ordered child list drafted at one node it outputs one token, with
``output_laws(p [N, V], q [N, V], children [N, m]) -> [N, V]`` batched over nodes. The top-down walk
(verispec.verifiers.tree_walk) turns any solver into a verifier.

Capabilities the engines rely on are declared here, on the base classes:

* ``Verifier.node_solver``: the solver whose top-down walk the verifier's law is, or None. The walk
  dynamic program (verispec.simulator.dp) applies exactly when it is set.
* ``Verifier.order_free``: the law, keyed by token paths, is the same for every order of the K i.i.d.
  root paths, so fast enumeration may enumerate the paths as multisets.
* ``Verifier.rule_dp``: the rule's own exact method over draft outcomes (a ``RuleDP``), or None: a whole-tree
  rule whose structure lets its output law be summed without enumerating trees (GBV: one term per selected
  path; Traversal: a dynamic program over the post-order's states, docs/guides/whole_tree_rules.md).

A subclass that redefines ``emission_laws`` no longer inherits ``node_solver``, ``order_free`` or
``rule_dp`` (an engine would otherwise analyse the parent's rule through them); it may restate them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from verispec import backend
from verispec.errors import VerifierError, VerispecError
from verispec.simulator.chooser import Chooser, NegligibleBranch, enumerate_law
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree, TreeBatch


class NodeSolver(ABC):
    """The law of the output token at a node, given (p, q, ordered child list); batched over nodes."""

    #: Registry name of the tree verifier built from this solver.
    name: str
    #: Draft laws of a node's child list under which the output has law p.
    valid_for: frozenset[DraftLaw] = frozenset({DraftLaw.IID_CHILDREN})
    #: How many of the lowest-numbered tokens outside the node's support (p = q = 0) the rule reads, beside the
    #: support itself (khisti's truncated ranking: zero-mass tokens hold its top-s slots). 0: the rule's output at
    #: the support does not depend on which zero-mass tokens the vocabulary holds, so a caller may cut the
    #: vocabulary to any superset of the support; otherwise it must hand exactly the support and those tokens,
    #: in vocabulary order (``verispec.selector.comb_trees`` does).
    outside_tokens_read: int = 0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "output_law" in cls.__dict__:
            raise TypeError(f"{cls.__name__} defines output_law; write the batched output_laws(p, q, children) "
                            "instead (output_law is its one-row case)")

    @abstractmethod
    def output_laws(self, p, q, children):
        """P(Y = y | children) for every row: p, q [N, V], children [N, m] int -> [N, V]; rows sum to one."""

    @abstractmethod
    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        """The rule as a sampling procedure at one node (p, q [V]): draw Y through ``chooser``."""

    def sequential_tests(self, p, q, draws: int):
        """Optional closed form of the rule on ``draws`` i.i.d. drafts, for rules that test the drafts one by one:
        ``(accept, final)`` with ``accept[j]`` [N, V] = P(draft j + 1 is t and is accepted | drafts 1..j all
        rejected) and ``final`` [N, V] = the output law when every draft is rejected, where neither may depend
        on WHICH tokens were rejected before (SpecInfer's residual chain, SpecTr's fixed ratio test, NSS's
        zero tests). The walk DP and the certified walk then get a node's kernel (its output law summed over
        all V^n draw lists) in O(n^2 V) instead of V^n solver rows (``verispec.simulator.dp.node_kernels``).
        Tokens where p = q = 0 may be left out of p and q (the certified walk passes the union of the supports
        only), so the tests must treat such tokens as absent: sums and elementwise rules do.
        None (the default) when the rule is not of this form; it must agree with ``output_laws``, and is used
        only while the class that defines it also defines, or inherits from the definer of, ``output_laws``
        (``has_sequential_tests``), so a variant that redefines ``output_laws`` is analysed by its own law."""
        return None

    @property
    def has_sequential_tests(self) -> bool:
        """Whether ``sequential_tests`` states the same rule as ``output_laws`` (see there)."""
        owners = type(self).__mro__
        tests = next(cls for cls in owners if "sequential_tests" in cls.__dict__)
        laws = next(cls for cls in owners if "output_laws" in cls.__dict__)
        return tests is not NodeSolver and issubclass(tests, laws)

    def output_law(self, p, q, children: tuple[int, ...]):
        """``output_laws`` for one node: p, q [V] and a child list -> [V]."""
        tokens = backend.index_array([list(children)], p)
        return self.output_laws(p[None], q[None], tokens)[0]

    def enumerated_output_law(self, p, q, children: tuple[int, ...]) -> np.ndarray:
        """The output law derived from ``sample`` by the generic enumerator (for parity tests)."""
        def checked(chooser):
            try:
                token = self.sample(p, q, children, chooser)
            except (VerispecError, NegligibleBranch):
                raise
            except Exception as error:  # a user's rule may fail in any way; report it on one line
                raise VerifierError(f"node solver '{self.name}' raised {type(error).__name__}: {error}") from None
            if not (isinstance(token, (int, np.integer)) and not isinstance(token, bool) and 0 <= token < len(p)):
                shown = repr(token.item() if isinstance(token, np.generic) else token)[:80]
                raise VerifierError(f"node solver '{self.name}' returned {shown}; it must return a token, an "
                                    f"integer in 0..{len(p) - 1}")
            return int(token)

        law = backend.zeros(p.shape, p)
        for token, probability in enumerate_law(checked, exact=backend.is_exact(p), name=self.name).items():
            law[token] += probability
        return law

    def __repr__(self) -> str:
        return f"<node solver {self.name}>"


@dataclass(frozen=True, eq=False)
class RuleLaw:
    """What a ``RuleDP`` returns: ``emitted[l - 1]`` [V]*l = P(emitted block = s) for blocks of length
    l = 1..L+1 (the ``OutputLaw`` arrays), and ``details`` (counts for the result's extras)."""

    emitted: tuple
    details: dict


class RuleDP(ABC):
    """A verifier's own exact method: its output law summed over every draft outcome of an i.i.d.-structured
    drafter by a dynamic program that uses the rule's structure, never enumerating trees. It must compute the
    law of the rule as written (``emission_laws``), assuming only how the drafter draws, so that the engine's
    losslessness check stays a check; tests hold it to whole-tree enumeration at 1e-12."""

    #: Shown in the engine's note, e.g. 'selected-path sum'.
    name: str

    @abstractmethod
    def applies(self, drafter) -> bool:
        """Whether this method covers the drafter's trees."""

    @abstractmethod
    def check_size(self, problem, drafter) -> None:
        """ProblemTooLargeError, before any work, when the method cannot finish."""

    @abstractmethod
    def output_law(self, problem, drafter, *, progress: bool = False) -> RuleLaw:
        """The law of the emitted block over every draft outcome."""

    def __repr__(self) -> str:
        return f"<rule DP {self.name}>"


class Verifier(ABC):
    """Base class: subclasses set ``name`` and ``valid_for`` and write ``emission_laws`` and ``procedure``."""

    #: Registry name used by the CLI.
    name: str
    #: Draft laws the rule is lossless for (verispec.simulator.drafters.DraftLaw).
    valid_for: frozenset[DraftLaw]
    #: The node solver whose top-down walk this verifier's law is (the walk DP applies), else None.
    node_solver: NodeSolver | None = None
    #: True when the law, keyed by token paths, does not depend on the order of the K i.i.d. root paths.
    order_free: bool = False
    #: The rule's own exact method over draft outcomes (a ``RuleDP``), else None; subclasses may make it a
    #: property built from ``self``, so that a variant overriding the rule's parts is analysed as written.
    rule_dp: RuleDP | None = None
    #: True when ``forest_stopping_masses(forest)`` (a ``LawForest``: many trees of many topologies at once) is this
    #: rule's law, so that the selector's labels walk every tree of a root in one pass; a subclass may make it a
    #: property that checks a variant left the recursion alone (Traversal, GBV).
    reads_forest: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "emission_law" in cls.__dict__:
            raise TypeError(f"{cls.__name__} defines emission_law; write the batched emission_laws(batch) "
                            "instead (emission_law is its one-row case, and fast enumeration uses it)")
        if "emission_laws" in cls.__dict__:
            # A redefined law is not the parent's walk, nor known to be order free, unless restated.
            if "node_solver" not in cls.__dict__:
                cls.node_solver = None
            if "order_free" not in cls.__dict__:
                cls.order_free = False
            if "rule_dp" not in cls.__dict__:
                cls.rule_dp = None
            if "reads_forest" not in cls.__dict__:
                cls.reads_forest = False

    @abstractmethod
    def emission_laws(self, batch: TreeBatch):
        """law[row, node, token] = P(stop at node and emit token), shape [N, num_nodes, V]."""

    @abstractmethod
    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """Verify ``tree`` making random decisions through ``chooser``; return (node, emitted token)."""

    def emission_law(self, tree: DraftTree):
        """law[node, token] for one tree: the one-row case of ``emission_laws``, shape [num_nodes, V]."""
        return self.emission_laws(tree.as_batch())[0]

    def enumerated_emission_law(self, tree: DraftTree) -> np.ndarray:
        """The emission law obtained by running ``procedure`` over every choice trace."""
        return emission_law_of_procedure(self.procedure, tree, name=self.name)

    def sample(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """One verification outcome (node, token); uses the procedure."""
        return self.procedure(tree, chooser)

    def __repr__(self) -> str:
        return f"<verifier {self.name}>"


def emission_law_of_procedure(procedure, tree: DraftTree, *, name: str = "procedure") -> np.ndarray:
    """Exact emission law of a (node, token) sampling procedure, by the generic enumerator.

    A procedure that returns anything but a (node, token) pair inside the tree and vocabulary, raises, or
    makes more than ``MAX_CHOICES_PER_TRACE`` random decisions in one run is reported as a
    ``VerifierError`` naming the rule and what it did."""

    def checked(chooser):
        try:
            outcome = procedure(tree, chooser)
        except VerispecError:
            raise
        except Exception as error:  # a user's rule may fail in any way; report it on one line
            if isinstance(error, NegligibleBranch):
                raise
            raise VerifierError(f"verifier '{name}' raised {type(error).__name__}: {error}") from None
        return checked_outcome(outcome, tree, name)

    law = backend.zeros((tree.num_nodes, tree.vocab_size), tree.p)
    for (node, token), probability in enumerate_law(checked, exact=tree.exact, name=name).items():
        law[node, token] += probability
    return law


def checked_outcome(outcome, tree: DraftTree, name: str) -> tuple[int, int]:
    """A procedure's (node, token) as two ints, or a VerifierError naming the rule and what it returned."""
    if not (isinstance(outcome, tuple) and len(outcome) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in outcome)):
        shown = repr(outcome.item() if isinstance(outcome, np.generic) else outcome)
        raise VerifierError(f"verifier '{name}' returned {shown[:80]}; a procedure must return (node, token), "
                            "two integers")
    node, token = int(outcome[0]), int(outcome[1])
    if not 0 <= node < tree.num_nodes:
        raise VerifierError(f"verifier '{name}' returned node {node}, but the tree has nodes 0..{tree.num_nodes - 1}")
    if not 0 <= token < tree.vocab_size:
        raise VerifierError(f"verifier '{name}' returned token {token}, outside the vocabulary "
                            f"0..{tree.vocab_size - 1}")
    return node, token
