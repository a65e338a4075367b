"""The grid of a sweep: its axes (``SweepGrid``), the cells they give and each cell's key.

A grid is the product of

* problem families: ``context-free`` (one Dirichlet pair (p, q) at every prefix), ``random`` (an independent
  pair per prefix, to the tree's depth), ``markov`` (order-1 Markov rows), each drawn with the knobs of
  ``verispec.simulator.problems`` (vocabulary size V, ``divergence`` of the draft from the target,
  ``temperature`` applied to both laws, Dirichlet ``concentration``) and a seed; or ``file:PATH``, a problem
  file (a derived problem from ``verispec derive``, say), for which the knobs do not apply and whose cells are
  keyed on the SHA-256 of its content (``file_sha256``), so that an edited file is a new problem;
* tree specifications, verifiers (a verifier is paired only with the trees it is valid for) and methods.

A cell is a dict of every parameter (``cell_key`` is its canonical JSON, the key of its row in a store); what a
cell computes is ``verispec.study.cells.run_cell``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from verispec.errors import VerispecError
from verispec.guard.limits import DEFAULT_COST_RATIO, METHODS
from verispec.latency import LatencyModel

#: The sweep's default price of a block: t_q = 1, t_p(n) = 4 whatever the tree size.
DEFAULT_LATENCY = LatencyModel.from_ratio(DEFAULT_COST_RATIO)

#: Problem families drawn from seeds (``file:PATH`` names a problem file instead).
FAMILIES = ("context-free", "random", "markov")

#: Most cells one sweep accepts (each is at least one exact analysis).
MAX_CELLS = 1_000_000

#: Most prefixes a random per-prefix problem may tabulate (1 + V + .. + V^L; 2 [V] laws each).
MAX_RANDOM_PREFIXES = 100_000


class SweepError(VerispecError):
    """A sweep specification or output that cannot be used."""


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a sweep; ``cells()`` is their product (knobs only for seeded families)."""

    families: tuple[str, ...] = ("context-free",)
    vocab_sizes: tuple[int, ...] = (3,)
    divergences: tuple[float, ...] = (0.5,)
    temperatures: tuple[float, ...] = (1.0,)
    concentrations: tuple[float, ...] = (1.0,)
    seeds: tuple[int, ...] = (0,)
    trees: tuple[str, ...] = ("chain:2",)
    verifiers: tuple[str, ...] = ("all",)
    methods: tuple[str, ...] = ("auto",)
    gap: bool = False
    cell_timeout: float | None = None
    #: prices each block for the throughput columns (default: a target forward costs 4 draft steps)
    latency: LatencyModel = DEFAULT_LATENCY

    def __post_init__(self):
        from verispec.simulator import parse_tree
        from verispec.simulator.generators import check_knobs
        from verispec.sizes import check_vocab_size
        from verispec.verifiers import get_verifier, lossless_rules

        for name, values in self._axes().items():
            if not values:
                raise SweepError(f"the sweep axis {name} is empty; give at least one value")
        for family in self.families:
            if family not in FAMILIES and not (family.startswith("file:") and len(family) > 5):
                raise SweepError(f"unknown problem family {family!r}; use one of {', '.join(FAMILIES)} or file:PATH")
            if family.startswith("file:") and not Path(family[5:]).is_file():
                raise SweepError(f"problem file {family[5:]!r} of family {family!r} does not exist")
        for vocab in self.vocab_sizes:
            if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
                raise SweepError(f"vocabulary size {vocab!r} must be an integer >= 2")
            # the seeded families' tables, before any is built: one vector of V per law, V + 1 for a Markov problem
            if any(not family.startswith("file:") for family in self.families):
                check_vocab_size(vocab, f"--vocab {vocab}", markov="markov" in self.families)
        for seed in self.seeds:
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise SweepError(f"seed {seed!r} must be a non-negative integer")
        # the generators' own rule for their knobs, one axis at a time (the others at valid values)
        for divergence in self.divergences:
            check_knobs(2, 1.0, divergence, 1.0, 0.0)
        for temperature in self.temperatures:
            check_knobs(2, 1.0, 0.5, temperature, 0.0)
        for concentration in self.concentrations:
            check_knobs(2, concentration, 0.5, 1.0, 0.0)
        for spec in self.trees:
            parse_tree(spec)
        for name in self.verifiers:
            if name != "all":
                get_verifier(name)
            else:
                lossless_rules()
        for method in self.methods:
            if method not in METHODS:
                raise SweepError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        if self.cell_timeout is not None and not (self.cell_timeout > 0 and math.isfinite(self.cell_timeout)):
            raise SweepError(f"cell_timeout must be a positive number of seconds, got {self.cell_timeout!r}")

    def _axes(self) -> dict:
        return {"families": self.families, "vocab_sizes": self.vocab_sizes, "divergences": self.divergences,
                "temperatures": self.temperatures, "concentrations": self.concentrations, "seeds": self.seeds,
                "trees": self.trees, "verifiers": self.verifiers, "methods": self.methods}

    def verifier_names(self) -> list[str]:
        from verispec.verifiers import lossless_rules

        names = lossless_rules() if "all" in self.verifiers else []
        return list(dict.fromkeys(names + [name for name in self.verifiers if name != "all"]))

    def problem_settings(self) -> list[dict]:
        """The distinct problems: a seeded family for every knob combination, a file once with the SHA-256 of its
        content (``file_sha256``), so that a row of the file as it was is never taken for one of the file as it
        is now."""
        settings = []
        for family in dict.fromkeys(self.families):
            if family.startswith("file:"):
                settings.append({"family": family, "vocab": None, "divergence": None, "temperature": None,
                                 "concentration": None, "seed": None, "file_sha256": file_sha256(family[5:])})
                continue
            for vocab, divergence, temperature, concentration, seed in itertools.product(
                    dict.fromkeys(self.vocab_sizes), dict.fromkeys(self.divergences),
                    dict.fromkeys(self.temperatures), dict.fromkeys(self.concentrations), dict.fromkeys(self.seeds)):
                settings.append({"family": family, "vocab": vocab, "divergence": float(divergence),
                                 "temperature": float(temperature), "concentration": float(concentration),
                                 "seed": seed})
        return settings

    def size_estimate(self) -> int:
        """Cells before dropping invalid (verifier, tree) pairs: checked before anything is built."""
        problems = sum(1 if family.startswith("file:") else
                       len(set(self.vocab_sizes)) * len(set(self.divergences)) * len(set(self.temperatures))
                       * len(set(self.concentrations)) * len(set(self.seeds))
                       for family in set(self.families))
        return problems * len(set(self.trees)) * len(self.verifier_names()) * len(set(self.methods))

    def cells(self) -> tuple[list[dict], int]:
        """(the cells, how many (verifier, tree) pairs were left out as invalid for the verifier's draft law)."""
        from verispec.errors import IncompatibleDraftError
        from verispec.simulator import parse_tree
        from verispec.simulator.engine import check_compatible
        from verispec.verifiers import get_verifier

        estimate = self.size_estimate()
        if estimate > MAX_CELLS:
            raise SweepError(f"the grid has up to {estimate:,} cells, above {MAX_CELLS:,}; sweep fewer values")
        pairs, skipped = [], 0
        for spec in dict.fromkeys(self.trees):
            drafter = parse_tree(spec)
            for name in self.verifier_names():
                try:
                    check_compatible(get_verifier(name), drafter)
                    pairs.append((spec, name))
                except IncompatibleDraftError:
                    skipped += 1
        latency = self.latency.as_dict()
        problems = self.problem_settings()
        cells = [{**problem, "tree": spec, "verifier": name, "method": method, "lp_optimum": self.gap,
                  "cell_timeout": self.cell_timeout, "latency": latency}
                 for problem in problems for spec, name in pairs for method in dict.fromkeys(self.methods)]
        return cells, skipped * len(problems) * len(set(self.methods))


def cell_key(cell: dict) -> str:
    """Every parameter of the cell, canonically: the key under which its row is kept."""
    return json.dumps(cell, sort_keys=True, separators=(",", ":"))


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of a problem file's content, read with ``load_problem``'s bound: a longer file is refused
    when it is loaded, so its first bytes are enough to key it."""
    from verispec.simulator.problem_files import MAX_PROBLEM_FILE_BYTES

    digest, remaining = hashlib.sha256(), MAX_PROBLEM_FILE_BYTES + 1
    try:
        with open(path, "rb") as stream:
            while remaining > 0 and (chunk := stream.read(min(1 << 20, remaining))):
                digest.update(chunk)
                remaining -= len(chunk)
    except OSError as error:
        raise SweepError(f"cannot read problem file {str(path)!r}: {error.strerror or error}") from None
    return digest.hexdigest()


#: Most seeds one --seeds names (ranges counted before they are expanded): every seed is at least one cell of a
#: sweep (MAX_CELLS) and one root of a selector dataset.
MAX_SEEDS = MAX_CELLS


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0-4' or '1,3,5' (or both: '0-2,7') -> seeds; more than MAX_SEEDS of them is refused by counting the ranges,
    before any is expanded."""
    spans = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            span = (int(low), int(high)) if dash else (int(part), int(part))
            if span[1] < span[0]:
                raise ValueError
        except ValueError:
            raise SweepError(f"cannot read seeds {_shortened(text)!r}: write a list such as 0,1,2 or a range such "
                             "as 0-9") from None
        spans.append(span)
    count = sum(high - low + 1 for low, high in spans)
    if count > MAX_SEEDS:
        raise SweepError(f"--seeds {_shortened(text)!r} names {count:,} seeds, above the limit of {MAX_SEEDS:,}; give "
                         "fewer seeds")
    return tuple(dict.fromkeys(seed for low, high in spans for seed in range(low, high + 1)))


def _shortened(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:40]}..."


__all__ = ["DEFAULT_LATENCY", "FAMILIES", "MAX_CELLS", "MAX_SEEDS", "SweepError", "SweepGrid", "cell_key",
           "file_sha256", "parse_seeds"]
