"""The processes of a build: how many it starts here, and how they end with it.

A build of many cells (a sweep, a selector dataset, the report's studies) never starts more processes here than
there are cores (``worker_processes``); its local workers end when its process ends, however it ends
(``watch_parent``), and SIGTERM or Ctrl-C stop it whole, workers and all, its rows saved
(``interrupt_on_signals``, ``BuildInterrupted``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from verispec.study.grid import SweepError


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the system reports one, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_workers(jobs: int | None) -> tuple[int, str | None]:
    """(local worker processes for ``jobs``, a one-line note when ``jobs`` was capped, else None). Never more
    processes than cores: cells are CPU-bound, so extra processes only queue behind each other, and each costs
    a process start and a copy of the interpreter (``--jobs 10000`` once started 1,117)."""
    cores = available_cores()
    if jobs is None:
        return cores, None
    if jobs > cores:
        return cores, f"--jobs {jobs} is more than the {cores} cores here; running {cores} local processes"
    return jobs, None


def is_local_cluster(address) -> bool:
    """Whether a Dask ``address`` asks for a cluster started here: 'local' or 'local:N' ('localhost:8786' is a
    scheduler's address)."""
    return isinstance(address, str) and (address == "local" or address.startswith("local:"))


def local_cluster_workers(address: str) -> tuple[int, str | None]:
    """(worker processes of the Dask cluster 'local:N' started here, a one-line note when N was capped, else
    None): N, by default and at most the cores here, as for local processes (``local_workers``)."""
    _, _, count = address.partition(":")
    try:
        workers = int(count) if count else None
        if workers is not None and workers < 1:
            raise ValueError
    except ValueError:
        raise SweepError(f"a local Dask cluster is 'local:N' with N >= 1 workers, got {address!r}") from None
    cores = available_cores()
    if workers is None:
        return cores, None
    if workers > cores:
        return cores, (f"--address {address} asks for {workers} worker processes, more than the {cores} cores "
                       f"here; starting {cores}")
    return workers, None


def worker_processes(backend: str, jobs: int | None, address) -> tuple[int | None, str | None]:
    """(the worker processes ``run_sweep`` starts here, a one-line note when the request was capped at the
    cores): ``jobs`` local processes, or the N workers of a Dask cluster 'local:N', at most the cores either
    way. None where it starts none: serial runs in this process, and a cluster at an address (or Ray) keeps the
    workers it has."""
    if backend in ("serial", "local") and address is not None:
        raise SweepError(f"--address {str(address)[:80]!r} names a cluster, which --backend dask or ray uses; "
                         f"--backend {backend} runs here (leave --address out)")
    if backend == "local":
        return local_workers(jobs)
    if backend == "dask" and is_local_cluster(address):
        return local_cluster_workers(address)
    return None, None


#: Seconds between a local worker's checks that the build's process is still alive (the fallback where the
#: kernel's parent-death signal is not available).
PARENT_POLL_SECONDS = 0.5



def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's (the pid was reused): the build's process is gone
        return False
    return True


def watch_parent(parent: int) -> None:
    """Initializer of a local worker process: it ends when the build's process ``parent`` ends, however that ends
    (SIGKILL included), rather than computing on as an orphan. On Linux the kernel sends it SIGKILL when its parent
    dies (prctl PR_SET_PDEATHSIG); everywhere a daemon thread checks every ``PARENT_POLL_SECONDS`` that its parent
    is the same and ``parent`` alive, and exits otherwise. SIGINT is ignored (Ctrl-C reaches the whole process
    group, and the build's process stops its workers itself), as is SIGHUP, and SIGTERM restored to its default (a
    forked worker inherits the build's handler, which would make it raise in its task instead of ending)."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):  # a hang-up reaches the group too, as Ctrl-C does
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from verispec.guard.processes import kill_me_with_my_parent

    kill_me_with_my_parent()
    started_under = os.getppid()
    if not _process_alive(parent):  # it ended before the signal was asked for
        os._exit(1)

    def watch():
        while os.getppid() == started_under and _process_alive(parent):
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="verispec parent watch", daemon=True).start()


def stop_pool(pool) -> None:
    """End a pool of local processes now, its running tasks included (an interrupted build): queued tasks are
    cancelled and every worker is sent SIGTERM, then SIGKILL if it has not ended within 5 s."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(1)


class BuildInterrupted(KeyboardInterrupt):
    """A build stopped by SIGTERM, SIGHUP or Ctrl-C (SIGINT), raised in its main thread (``interrupt_on_signals``):
    the executor stops its workers, the rows finished so far are saved, and the CLI exits with 128 + the signal's
    number after one line saying that a rerun resumes."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.exit_status = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}: the finished cells are kept in the row "
                         "store; run the same command again to resume")


#: The signals that stop a build as the user's stop: a hang-up (the terminal closed, an ssh session lost) is one
#: as SIGTERM and Ctrl-C are, so without its handler a build died by SIGHUP's default, its unsaved rows lost.
INTERRUPTING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP")
                             if hasattr(signal, name))


@contextlib.contextmanager
def interrupt_on_signals():
    """For the block, SIGTERM, SIGINT and SIGHUP (``INTERRUPTING_SIGNALS``) raise ``BuildInterrupted`` in the main
    thread (elsewhere the block runs as it is), so that a build ends whole, workers and all, with its store saved,
    rather than dying with its workers orphaned (SIGTERM's and SIGHUP's default) or waiting for every running task
    (a pool's exit on Ctrl-C)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def interrupt(signum, frame):
        received.append(signum)
        raise BuildInterrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in INTERRUPTING_SIGNALS}
    try:
        yield
    except KeyboardInterrupt as error:
        if received and not isinstance(error, BuildInterrupted):  # Ray's wait turns it into a KeyboardInterrupt
            raise BuildInterrupted(received[0]) from None
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


__all__ = ["BuildInterrupted", "available_cores", "interrupt_on_signals", "is_local_cluster", "local_cluster_workers",
           "local_workers", "stop_pool", "watch_parent", "worker_processes"]
