"""Verdicts of a losslessness check, and the exit statuses every ``verispec`` command shares.

A check can end three ways, and only one of them passes a script that reads the exit status:

* ``LOSSLESS`` (exit 0): *proven* (the exact output law of the rule on the problems checked, equal to the
  target's within the stated tolerance) or *powered* (a black-box test that did not reject, together with
  the smallest total-variation distance it would have detected, and with what probability).
* ``LOSSY`` (exit 1): a witness problem on which the rule's law differs from the target's, found exactly or
  confirmed by a fresh test at the stated false-failure rate.
* ``INCONCLUSIVE`` (exit 3): anything else - a search that found no witness, a time budget spent before the
  planned problems were checked, a black-box test without the power to detect the TV asked for. The report
  says what was tried and what to run next.

Exit status 2 is bad input (one line on stderr), as for every command. Commands that are not checks (``exact``
without ``--fail-if-lossy``, ``bound``, ``predict``) exit 3 when their ``--time-budget`` ends before an answer
with the precision asked for.
"""

from __future__ import annotations

import enum

#: Exit statuses of the command line.
EXIT_LOSSLESS = 0
EXIT_LOSSY = 1
EXIT_BAD_INPUT = 2
EXIT_INCONCLUSIVE = 3


class Verdict(enum.StrEnum):
    """The verdict of a losslessness check (see the module docstring)."""

    LOSSLESS = "lossless"
    LOSSY = "lossy"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_status(self) -> int:
        return {Verdict.LOSSLESS: EXIT_LOSSLESS, Verdict.LOSSY: EXIT_LOSSY,
                Verdict.INCONCLUSIVE: EXIT_INCONCLUSIVE}[self]

    @property
    def word(self) -> str:
        """How reports print it: LOSSLESS, LOSSY, INCONCLUSIVE."""
        return self.value.upper()
