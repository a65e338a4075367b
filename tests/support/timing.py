"""Wall-clock bounds that a loaded box does not break (issue 77, item 5).

A budget is a wall-clock deadline, so the time a command takes to keep it is the budget itself plus the work it does
once the deadline passes (a C call in flight, a worker to stop and reap, a report to write). That work is CPU time,
and on a shared box it takes longer in wall time by the box's load: with eight busy processes on two cores, each gets
about a quarter of a core. ``Stopwatch`` measures that stretch in the same test, before and after the timed block
(wall time over this process's CPU time for a short busy loop, or the load average per core where that is larger),
and a bound is ``fixed + cpu x stretch``: the fixed part (the budget, a sleep) does not stretch, the CPU part does.
On an idle core the stretch is 1 and the bound is the one the test states. A budget not kept still fails: the work
it would have run to the end is CPU time too, stretched by the same factor, and a test states a CPU part well below
that work's.
"""

from __future__ import annotations

import time

#: CPU seconds of the busy loop that measures the stretch (long enough to span a few scheduler slices).
SAMPLE_CPU_SECONDS = 0.05
#: The largest stretch believed (a box so loaded that a test's CPU part would be meaningless beyond it).
MAX_STRETCH = 50.0


def stretch(sample: float = SAMPLE_CPU_SECONDS) -> float:
    """Wall seconds per CPU second of this process now (at least 1): how much slower than an idle core it runs."""
    wall, cpu = time.monotonic(), time.process_time()
    while time.process_time() - cpu < sample:
        pass
    return min(MAX_STRETCH, max(1.0, (time.monotonic() - wall) / (time.process_time() - cpu)))


def load_stretch() -> float:
    """The one-minute load average per core (at least 1, at most ``MAX_STRETCH``): the runnable processes a core is
    shared by, on average, which a process's wall time per CPU second approaches under steady load."""
    import os

    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this system: the sampled stretch alone
        return 1.0
    return min(MAX_STRETCH, max(1.0, load))


def box_stretch() -> float:
    """The box's stretch now: the larger of a sampled ``stretch`` and ``load_stretch`` (a budget a test gives in
    seconds of an idle core is this many times longer in wall time)."""
    return max(stretch(), load_stretch())


class Stopwatch:
    """``with Stopwatch() as watch: ...``, then ``watch.seconds`` (wall) and ``watch.bound(fixed, cpu)``."""

    def __enter__(self) -> Stopwatch:
        self.before = stretch()
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.monotonic() - self.start
        self.after = stretch()
        self.load = load_stretch()

    @property
    def factor(self) -> float:
        """The box's stretch around the block: the largest of before, after, and the one-minute load per core (a
        50 ms sample can fall in a moment when this process had a core to itself while the block did not: four
        test workers on two cores measured 1.05 and ran a 1.18 s bound's block in 1.26 s)."""
        return max(self.before, self.after, self.load)

    def bound(self, fixed: float, cpu: float) -> float:
        """``fixed`` wall seconds (a budget, a sleep) plus ``cpu`` seconds of an idle core, stretched by the load."""
        return fixed + cpu * self.factor

    def within(self, fixed: float, cpu: float) -> bool:
        return self.seconds < self.bound(fixed, cpu)

    def __repr__(self) -> str:
        return f"Stopwatch({self.seconds:.2f} s, stretch {self.before:.2f}/{self.after:.2f})"


def timed(function, *args, **kwargs):
    """(function(*args, **kwargs), its Stopwatch)."""
    with Stopwatch() as watch:
        result = function(*args, **kwargs)
    return result, watch
