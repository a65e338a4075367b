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
* ``RAISES`` (exit 4): the code under check raised an exception (``SystemExit`` and the exits the supervised
  worker intercepts included) on a problem of the scope (``torch.multinomial`` on an
  all-zero residual, say), and no loss was shown; the report gives that problem, the exception and the line that
  raised it. Its own status rather than LOSSY, because it is not a statement about the law: there is no TV to
  report, and the raising inputs may have probability zero under continuous uniforms (u = 0.0 exactly) while a
  real generator still meets them (torch's float32 uniforms are 0.0 with probability 2^-24). Every command that
  runs code of the user's own ends RAISES too when that code ends, crashes or signals the process, or takes its
  standard output or error (``verispec.guard.supervisor``): then verispec cannot stand behind what it printed.

One rule for raises, on every scope (a given problem, the canonical suite, a search): the property checked is the
law, so the verdict is LOSSY whenever a loss is established, with the first raise listed beside it, and RAISES
only when the code raised and no loss was shown. A loss may be established on a problem the code raises on: the
calls that did not raise overproduce some sequences by an excess that no outputs of the raising inputs could undo
(exactly, or by a one-sided test at the stated false-failure rate; ``verispec.external.raises``). A raise that does
not repeat on the same inputs, and state the code keeps across calls, are said; state that changes on every call
makes a LOSSLESS verdict INCONCLUSIVE, since the verdict is about single calls.

Exit status 2 is bad input (one line on stderr), as for every command: what verispec can refuse without running
the code on a problem (a file that does not exist, a function whose signature cannot take the layout's
arguments, options out of range). Commands that are not checks (``exact``
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
EXIT_RAISES = 4
#: A failure inside verispec itself (a bug: its traceback is printed). Never 1, which says LOSSY.
EXIT_INTERNAL = 70


class Verdict(enum.StrEnum):
    """The verdict of a losslessness check (see the module docstring)."""

    LOSSLESS = "lossless"
    LOSSY = "lossy"
    INCONCLUSIVE = "inconclusive"
    RAISES = "raises"

    @property
    def exit_status(self) -> int:
        return {Verdict.LOSSLESS: EXIT_LOSSLESS, Verdict.LOSSY: EXIT_LOSSY,
                Verdict.INCONCLUSIVE: EXIT_INCONCLUSIVE, Verdict.RAISES: EXIT_RAISES}[self]

    @property
    def word(self) -> str:
        """How reports print it: LOSSLESS, LOSSY, INCONCLUSIVE, RAISES."""
        return self.value.upper()
