"""Time budgets: an analysis started with a deadline stops at it, wherever its work happens to be.

``analyze(..., deadline=...)`` (and ``hunt``'s time budget) set the deadline for the duration of the call;
every loop that can run long (choice traces, draft trees, tree groups, DP depths and kernel chunks) calls
``check`` and raises ``AnalysisTimeoutError`` once it has passed. The deadline is a ``time.monotonic()``
value held in a context variable, so nested calls and threads each see their own.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

from verispec.errors import AnalysisTimeoutError

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("verispec_deadline", default=None)


@contextmanager
def time_budget(deadline: float | None) -> Iterator[None]:
    """Run the block under ``deadline`` (a ``time.monotonic()`` value; None keeps any outer deadline)."""
    if deadline is None:
        yield
        return
    outer = _deadline.get()
    token = _deadline.set(deadline if outer is None else min(deadline, outer))
    try:
        yield
    finally:
        _deadline.reset(token)


def check(what: str) -> None:
    """Raise ``AnalysisTimeoutError`` naming ``what`` if the current deadline has passed."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise AnalysisTimeoutError(f"{what} ran past its time budget")
