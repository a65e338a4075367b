"""A hang-up (SIGHUP: the terminal closed, an ssh session lost) stops a build as SIGTERM and Ctrl-C do (issue 64):
``interrupt_on_signals`` raises ``BuildInterrupted`` with status 128 + 1, so the executor saves the rows that
arrived and the command says on one line how to resume. Before, SIGHUP was not among its signals and a
`selector dataset` or `sweep` died by its default (status -1, no line, the unsaved rows lost)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from verispec.study import workers

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this system")


def _hang_up_inside(monkeypatch, signals) -> tuple[list[int], BaseException | None]:
    """Send SIGHUP to this process inside ``interrupt_on_signals`` handling ``signals``; what reached a recording
    handler installed outside it, and what the block raised. The outer handler keeps a missed SIGHUP from ending
    the test run (its default)."""
    monkeypatch.setattr(workers, "INTERRUPTING_SIGNALS", signals)
    reached: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: reached.append(signum))
    raised = None
    try:
        with workers.interrupt_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(100):  # the handler runs between bytecodes of the main thread
                time.sleep(0.001)
    except BaseException as error:  # what the block raised is what the test reads
        raised = error
    finally:
        signal.signal(signal.SIGHUP, previous)
    return reached, raised


@pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")), reason="signals to this process")
def test_a_hang_up_interrupts_a_build_with_its_own_status(monkeypatch):
    reached, raised = _hang_up_inside(monkeypatch, workers.INTERRUPTING_SIGNALS)
    assert reached == []
    assert isinstance(raised, workers.BuildInterrupted) and isinstance(raised, KeyboardInterrupt)
    assert raised.exit_status == 128 + 1 == 129
    assert str(raised).startswith("interrupted by SIGHUP: the finished cells are kept in the row store")
    assert signal.getsignal(signal.SIGHUP) is not None  # restored after the block


@pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")), reason="signals to this process")
def test_negative_control_the_old_signals_let_a_hang_up_through(monkeypatch):
    """The old pair (SIGTERM, SIGINT): the block goes on, and the hang-up reaches the handler outside (in a build,
    SIGHUP's default: the process dies without a line)."""
    reached, raised = _hang_up_inside(monkeypatch, (signal.SIGTERM, signal.SIGINT))
    assert reached == [signal.SIGHUP] and raised is None


def test_a_build_worker_ignores_a_hang_up_as_it_ignores_ctrl_c(monkeypatch):
    """A hang-up reaches the build's whole process group; its workers leave the stop to the build's process (which
    stops them itself), as they do for Ctrl-C, instead of dying mid-task under the pool."""
    import verispec.guard.processes

    set_to: dict[int, object] = {}
    monkeypatch.setattr(signal, "signal", lambda signum, handler: set_to.__setitem__(signum, handler))
    monkeypatch.setattr(verispec.guard.processes, "kill_me_with_my_parent", lambda: None)
    monkeypatch.setattr("threading.Thread", lambda **kwargs: type("NotStarted", (), {"start": lambda self: None})())
    workers.watch_parent(os.getpid())
    assert set_to[signal.SIGHUP] is signal.SIG_IGN and set_to[signal.SIGINT] is signal.SIG_IGN
    assert set_to[signal.SIGTERM] is signal.SIG_DFL
