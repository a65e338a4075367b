"""Clusters a build runs on: a Dask scheduler (at an address, or 'local:N' started here) and Ray.

An address that answers nothing, or answers as something else, is refused on one line within
``CONNECT_TIMEOUT`` (a TCP probe first, then the scheduler's or Ray's own handshake), not after distributed's
30 s of retries or Ray's endless ones; a Ray started here ends with the build's process even when that is
killed outright (a reaper process). ``cluster_session`` keeps one connection for several builds (the report's
studies).
"""

from __future__ import annotations

import contextlib
import os
import time

from verispec.errors import describe
from verispec.study.grid import SweepError
from verispec.study.workers import available_cores, is_local_cluster, local_cluster_workers

#: Seconds a cluster named by --address has to answer, first a TCP connection to its port, then the Dask
#: scheduler's or Ray's own handshake, before the build is refused on one line: a closed port, a host that does
#: not answer or a port that is no scheduler's is named within this time, not after distributed's 30 s of retries
#: or Ray's endless ones.
CONNECT_TIMEOUT = 10.0

#: Address schemes of a Dask scheduler (``distributed``'s comms; ``tcp`` when none is written); those over TCP
#: (all but inproc and ucx) are probed before connecting.
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "inproc", "ucx")


def _split_address(address: str, what: str, schemes: tuple[str, ...], example: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a cluster address 'SCHEME://HOST:PORT' or 'HOST:PORT' ('[::1]:8786' for IPv6);
    one line naming the address where it is not one (no port, a port outside 1..65535, another scheme)."""
    scheme, separator, rest = address.partition("://")
    if not separator:
        scheme, rest = "", address
    if scheme and scheme not in schemes:
        raise SweepError(f"--address {address[:80]!r}: {scheme}:// is not an address of {what}; write "
                         f"{example}")
    if scheme in ("inproc", "ucx"):
        return scheme, rest, None
    host, colon, port_text = rest.rpartition(":")
    port = int(port_text) if port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 else 0
    if not colon or not host.strip("[]") or not 1 <= port <= 65535:
        raise SweepError(f"--address {address[:80]!r} is not HOST:PORT with a port in 1..65535; write {example}")
    return scheme, host.strip("[]"), port


def _probe(host: str, port: int, address: str, what: str, hint: str, *, speaks_first: bool = False) -> None:
    """One TCP connection to (host, port) within CONNECT_TIMEOUT, or a one-line SweepError naming ``address`` (as
    given, with where it came from), why none came (a name that does not resolve, nothing listening, no answer)
    and ``hint``, how to start one. ``speaks_first``: the server sends the first bytes (a Dask scheduler's
    handshake does, at once), so a port that accepts and stays silent is no such server; distributed's own
    client waits on it for ever, whatever its timeout."""
    import socket

    began = time.monotonic()
    try:
        connection = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except socket.gaierror:
        why = f"the host {host!r} cannot be resolved"
    except ConnectionRefusedError:
        why = f"connection refused: nothing listens on port {port} there"
    except TimeoutError:
        why = f"no answer within {CONNECT_TIMEOUT:g} s"
    except OSError as error:
        why = error.strerror or str(error)
    else:
        with connection:
            if not speaks_first:
                return
            connection.settimeout(max(0.1, CONNECT_TIMEOUT - (time.monotonic() - began)))
            try:
                if connection.recv(1):
                    return
                why = "the port accepted and closed the connection without a word"
            except TimeoutError:
                why = f"the port accepts connections but sent no {what}'s handshake within {CONNECT_TIMEOUT:g} s"
            except OSError as error:
                why = error.strerror or str(error)
    raise SweepError(f"no {what} answers at {address[:120]} ({why}); {hint}")


def _dask_hint(port: int | None) -> str:
    return (f"start one with 'dask scheduler --port {port or 8786}' and workers with 'dask worker HOST:"
            f"{port or 8786}', or give --address local:N for N worker processes here")


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(error).__name__


@contextlib.contextmanager
def dask_client(address):
    """A ``distributed.Client``: ``address`` itself when it is one, a new client of the scheduler at ``address``
    (tcp://host:8786; refused on one line within ``CONNECT_TIMEOUT`` where no scheduler answers), or, for
    'local:N', a cluster of N single-threaded worker processes started here."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError("--backend dask needs dask's scheduler: pip install 'dask[distributed]'") from None
    if not isinstance(address, str):
        yield address
        return
    if is_local_cluster(address):
        workers, _ = local_cluster_workers(address)
        import logging

        # warnings only past ERROR: an interrupted build's cancelled tasks and killed workers are expected
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            yield client
        return
    scheme, host, port = _split_address(address, "a Dask scheduler", DASK_SCHEMES,
                                        "tcp://HOST:PORT (a scheduler) or local:N (N worker processes here)")
    if scheme not in ("inproc", "ucx"):
        _probe(host, port, address, "Dask scheduler", _dask_hint(port), speaks_first=scheme in ("", "tcp"))
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except Exception as error:  # a port that answers but is no scheduler's fails in many ways
        # (OSError, TimeoutError; a web server's reply read as a frame length asked numpy for 3 EiB)
        raise SweepError(f"cannot connect to a Dask scheduler at {address!r} within {CONNECT_TIMEOUT:g} s "
                         f"({_first_line(error)}); is it a scheduler's address? {_dask_hint(port)}") from None
    with client:
        yield client


def _ray_address(address) -> tuple[str | None, str]:
    """(the address ray.init will use, where it comes from): --address, else the RAY_ADDRESS variable (which
    ray.init reads itself when given none), else None: a Ray started here."""
    if address is None and os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    return address, "--address"


@contextlib.contextmanager
def ray_session(address):
    """Ray, initialised for the block: kept as it is where this process already initialised it (a caller's
    session, or the report's for all its studies), else ``ray.init(address)`` (None: a Ray started here, as many
    CPUs as cores, no dashboard) and ``ray.shutdown()`` after the block, which stops a Ray started here with
    every process of it. An address that answers nothing is refused on one line within ``CONNECT_TIMEOUT``."""
    try:
        import ray
    except ImportError:
        raise SweepError("--backend ray needs Ray: pip install ray (or pip install -e '.[sweep]')") from None
    target, origin = _ray_address(address)
    where = None  # (host, port) of a cluster elsewhere
    if target not in (None, "local", "auto"):
        if not isinstance(target, str):
            raise SweepError(f"--backend ray takes an address HOST:PORT (or ray://HOST:PORT), got {describe(target)}")
        _, host, port = _split_address(target, "a Ray cluster", ("ray",), "HOST:PORT of a Ray head node (ray start "
                                       "--head --port PORT), ray://HOST:PORT, or no --address")
        where = (host, port)
    if ray.is_initialized():
        yield
        return
    if where is not None:
        _probe(*where, target + (" (RAY_ADDRESS)" if origin == "RAY_ADDRESS" else ""), "Ray cluster",
               f"start one with 'ray start --head --port {where[1]}' on that host, or "
               + ("unset RAY_ADDRESS" if origin == "RAY_ADDRESS" else "leave --address out") + " to start Ray here")
    options = {"num_cpus": available_cores(), "include_dashboard": False} if target in (None, "local") else {}
    started = _descendants() if options else []
    _ray_init(ray, address, options, target, origin)
    # a Ray started here: its processes end with this one even when it is killed outright (SIGKILL), when Ray's own
    # fate sharing leaves its agents running for minutes
    reaper = _start_reaper(sorted(set(_descendants()) - set(started))) if options else None
    try:
        yield
    finally:
        ray.shutdown()
        if reaper is not None:
            reaper.terminate()
            reaper.wait()


def _descendants() -> list[tuple[int, float]]:
    """(pid, start time) of every process below this one (psutil: Ray depends on it), or [] where it cannot tell."""
    try:
        import psutil

        return [(child.pid, child.create_time()) for child in psutil.Process().children(recursive=True)]
    except Exception:  # no psutil, or a process that ended while listed: nothing to watch
        return []


#: The reaper of a Ray started here (``_start_reaper``): it reads its standard input, a pipe from the build's
#: process, until the end of file that the build's end (however it ends) gives, then kills the processes named on
#: its command line (pid:start time, so that a reused pid is left alone) and exits. SIGINT is ignored: Ctrl-C
#: reaches the whole process group, and the build's process shuts Ray down itself.
_REAPER = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
while sys.stdin.buffer.read(1 << 16):
    pass
import psutil
for item in sys.argv[1:]:
    pid, started = item.split(":")
    try:
        process = psutil.Process(int(pid))
        if abs(process.create_time() - float(started)) < 0.01:
            process.kill()
    except psutil.Error:
        pass
"""


def _start_reaper(processes: list[tuple[int, float]]):
    """A small process that kills ``processes`` (pid, start time) once this process has ended, unless it is
    terminated first (``ray_session`` does, after ``ray.shutdown``): Ray's processes started here must not outlive
    a build killed outright. None where there is nothing to watch."""
    import subprocess
    import sys

    if not processes:
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, *(f"{pid}:{started!r}" for pid, started in processes)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ray_init(ray, address, options: dict, target, origin: str) -> None:
    """``ray.init``: in this thread for a Ray started here (its SIGTERM handler, which exits the process, is taken
    back off so that the build's own handler stops it cleanly), in a helper thread for a cluster elsewhere, given
    ``CONNECT_TIMEOUT`` to connect: Ray retries a port that answers but is no Ray's for minutes, then ends the
    process."""
    import logging
    import signal
    import threading

    if not options:
        outcome: dict = {}

        def connect():
            try:
                ray.init(address=address, logging_level=logging.ERROR)
                outcome["done"] = True
            except Exception as error:  # every failure of Ray's is named on one line below
                outcome["error"] = error

        logging.getLogger("ray").setLevel(logging.ERROR)  # "SIGTERM handler is not set ... not the main thread"
        thread = threading.Thread(target=connect, name="ray.init", daemon=True)
        thread.start()
        thread.join(CONNECT_TIMEOUT)
        if "done" not in outcome:
            why = (_first_line(outcome["error"]) if "error" in outcome else
                   f"no Ray handshake within {CONNECT_TIMEOUT:g} s: is it a Ray head node's GCS port?")
            raise SweepError(f"cannot connect to a Ray cluster at {target!r}"
                             + (" (RAY_ADDRESS)" if origin == "RAY_ADDRESS" else "") + f" ({why}); start one with "
                             "'ray start --head --port PORT' and give HOST:PORT, or leave --address out to start "
                             "Ray here")
        return
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=address, logging_level=logging.ERROR, **options)
    except Exception as error:  # Ray raises RuntimeError, ValueError, ConnectionError ...
        raise SweepError(f"cannot start Ray here ({_first_line(error)})") from None
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def cluster_session(backend: str, address):
    """One connection for several builds (the report's studies): for Dask at an address or 'local:N', a client
    (and the local cluster) whose ``distributed.Client`` is yielded to pass on as their address; for Ray, Ray
    initialised once (``ray_session``); otherwise ``address`` unchanged."""
    if backend == "dask" and isinstance(address, str):
        with dask_client(address) as client:
            yield client
    elif backend == "ray":
        with ray_session(address):
            yield address
    else:
        yield address


__all__ = ["CONNECT_TIMEOUT", "cluster_session", "dask_client", "ray_session"]
