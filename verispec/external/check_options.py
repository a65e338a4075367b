"""The settings of one ``check_external`` run (``verispec.external.check``), as one object."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckOptions:
    """The settings of one ``check_external`` run, travelling as one object (the command's options, checked once):
    the requested ``mode``; black-box ``samples``, ``detect_tv``, ``power``, ``alpha``, ``test`` and ``threshold``;
    the search's ``seed``, ``max_vocab``, ``max_examples``, ``context_free`` and ``suite``; the ``time_budget``."""

    mode: str
    samples: int | None
    detect_tv: float
    power: float
    alpha: float
    seed: int
    test: str
    threshold: float
    max_vocab: int
    max_examples: int
    time_budget: float
    context_free: bool | None
    suite: str | None
