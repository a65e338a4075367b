"""An external verification function as a verispec ``Verifier``: its exact law by integration over its uniforms.

``ExternalVerifier(function, layout)`` wraps a function in one of the production layouts
(``verispec.external.layouts``). Its emission law on a batch of draft trees is the law of the function's
outcome over independent Uniform[0, 1) inputs, found by exact integration (``verispec.external.exact``), so
every engine, ``hunt`` and the reports take it like any built-in rule. Its ``procedure`` samples (node,
token) from that law through a chooser. It accepts any draft law (``valid_for``): whether the function
accounts for how its drafts were drawn is exactly what a check finds out.
"""

from __future__ import annotations

import numpy as np

from verispec.errors import UnknownVerifierError, VerispecError
from verispec.external.exact import IntegrationStats, integrate
from verispec.external.layouts import ARRAY_KINDS, Layout, TreeArrays, get_layout
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verifiers import load_attribute


def load_function(spec: str):
    """The function named by ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``; UnknownVerifierError on one
    line when it cannot be loaded or is not callable."""
    function = load_attribute(spec, "function")
    if not callable(function):
        raise UnknownVerifierError(f"{spec!r} is not a function (it is {type(function).__name__})")
    return function


class ExternalVerifier(Verifier):
    """A production-shape verification function (see ``verispec.external.layouts``) as a verifier.

    ``arrays``: 'numpy' or 'torch' (float64 tensors on ``device``, the CPU by default). ``scan``, ``probes``,
    ``max_boxes`` and ``max_breaks`` tune exact integration (``verispec.external.exact.integrate``); ``stats``
    accumulates what it saw (evaluations, cells, how each uniform was used)."""

    valid_for = frozenset(DraftLaw)

    def __init__(self, function, layout: str | Layout, *, name: str | None = None, arrays: str = "numpy",
                 device: str = "cpu", scan: int = 16, probes: int = 4, max_boxes: int = 1024, max_breaks: int = 512):
        if not callable(function):
            raise VerispecError(f"an external verifier needs a function, got {type(function).__name__}")
        if arrays not in ARRAY_KINDS:
            raise VerispecError(f"arrays must be one of {', '.join(ARRAY_KINDS)}, got {arrays!r}")
        self.function = function
        self.layout = get_layout(layout) if isinstance(layout, str) else layout
        self.name = name or getattr(function, "__name__", "external")
        self.arrays = arrays
        self.device = device
        if arrays == "torch":
            try:
                import torch

                torch.empty(0, device=device)
            except ImportError:
                raise VerispecError("arrays 'torch' needs torch: pip install 'torch==2.13.0'") from None
            except (AssertionError, RuntimeError, TypeError, ValueError) as error:
                raise VerispecError(f"device {device!r} cannot be used by torch here ({error}); give cpu, cuda or "
                                    "cuda:N") from None
        self.options = dict(scan=scan, probes=probes, max_boxes=max_boxes, max_breaks=max_breaks)
        self.stats = IntegrationStats()

    def evaluator(self, batch: TreeBatch):
        """``evaluate(rows, uniforms) -> codes`` (node * V + token) for the rows of ``batch``."""
        if batch.exact:
            raise VerispecError(f"external function {self.name} runs in float64; analyse a float problem "
                                "(leave out --exact), its breakpoints are float64 numbers")
        if not isinstance(batch.p, np.ndarray):
            raise VerispecError(f"external function {self.name} is checked on numpy problems of small vocabularies; "
                                "its law is integrated over its uniforms, which real decoding's vocabularies make "
                                "hopeless (run the function itself in your engine instead)")
        self.layout.check_batch(batch)
        trees = TreeArrays(batch)

        def evaluate(rows, uniforms):
            return self.layout.call(self.function, self.name, trees, rows, uniforms, self.arrays, self.device)

        return evaluate

    def emission_laws(self, batch: TreeBatch):
        evaluate = self.evaluator(batch)
        law = integrate(evaluate, batch.num_rows, self.layout.num_uniforms(batch),
                        batch.num_nodes * batch.vocab_size, name=self.name, stats=self.stats, **self.options)
        return law.reshape(batch.num_rows, batch.num_nodes, batch.vocab_size)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """One outcome drawn from the integrated law (the function itself draws nothing from a chooser)."""
        law = np.asarray(self.emission_law(tree), dtype=np.float64).reshape(-1)
        code = chooser.categorical(law / law.sum())
        return divmod(int(code), tree.vocab_size)

    def __repr__(self) -> str:
        return f"<external verifier {self.name} ({self.layout.name})>"
