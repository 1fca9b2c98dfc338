"""This process's connection to Ray: the cluster ``RAY_ADDRESS`` names (Ray's own setting, which
``--ray-address`` sets for the process), else a local Ray with the machine's cores.

The connection starts in the background while the job plans (:func:`start`, from the engine's
``prepare``), as the Spark session does, and a job's first task waits for it (:func:`connected`).
Started off the main thread, ``ray.init`` leaves the process's SIGTERM handler alone (the
follower's graceful stop, Airflow's ``on_kill``). That thread then stays, idle, as long as the
process: a local Ray's processes are started with Linux's parent-death signal, which is sent
when the *thread* that started them ends (observed: the local Ray's GCS killed once the thread
returned, and the driver aborted 60 s later). Ray's own log lines go no further than
errors, and the tasks' output stays on the workers (``log_to_driver=False``): this process's
stdout is the job's result. A local Ray is this process's own and ends with it; a cluster's
address may be any Ray takes (``HOST:PORT`` of a head, ``ray://HOST:10001`` through Ray Client).
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from typing import Any

from memwal.errors import BadInputError, MemWalError, first_line

#: Ray's own environment variable naming the cluster (``--ray-address`` sets it for the process).
ADDRESS_ENV = "RAY_ADDRESS"
#: How long a job waits for the connection (a local Ray starts in 2-5 s here); Ray itself retries
#: an unreachable address for many minutes. The environment variable sets another bound.
CONNECT_SECONDS = 60.0
CONNECT_SECONDS_ENV = "MEMWAL_RAY_CONNECT_SECONDS"
#: How long a job's tasks are waited for while the cluster's GCS does not answer: then the job
#: fails with one line (:func:`memwal.ray.runner.RayRunner.get`). The environment variable sets
#: another bound.
LOST_SECONDS = 30.0
LOST_SECONDS_ENV = "MEMWAL_RAY_LOST_SECONDS"
#: Ray's own bound on a GCS that does not answer, after which its driver ends the process with a
#: native abort (60 s by default): set above :data:`LOST_SECONDS` for this process, unless the
#: environment sets it, so that the job's own one-line failure comes first.
RAY_RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"

_lock = threading.Lock()
_thread: threading.Thread | None = None
_ready = threading.Event()
_failed: BaseException | None = None


class RayUnavailable(MemWalError):
    """Ray could not be started here or the cluster could not be reached."""


def start() -> None:
    """Connect in the background (once per process; a connection already made is kept). A bad
    :data:`CONNECT_SECONDS_ENV` or :data:`LOST_SECONDS_ENV` is bad input here, before the job
    writes anything."""
    global _thread
    _connect_seconds()
    lost_seconds()
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_connect, name="memwal-ray-connect", daemon=True)
            _thread.start()


def connected() -> None:
    """Wait for the connection :func:`start` began (starting it if none did); its failure in one line."""
    start()
    seconds = _connect_seconds()
    if not _ready.wait(seconds):
        raise RayUnavailable(f"{where()}: not reached within {seconds:g} s")
    if _failed is not None:
        raise RayUnavailable(f"{where()}: {first_line(_failed)}")


def _connect_seconds() -> float:
    return _seconds(CONNECT_SECONDS_ENV, CONNECT_SECONDS)


def lost_seconds() -> float:
    """How long a job waits for a cluster whose GCS does not answer (:data:`LOST_SECONDS`)."""
    return _seconds(LOST_SECONDS_ENV, LOST_SECONDS)


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise BadInputError(f"{name}: expected a number of seconds above 0, got {text[:40]!r}")
    return seconds


def where() -> str:
    """The Ray this process uses, for a one-line error."""
    return f"Ray {_where()}"


def answers(timeout: float = 2.0) -> bool:
    """Whether the cluster's GCS answers a read within ``timeout`` seconds. Ray's public API has
    no call with a timeout that asks the GCS (``ray.nodes()`` waits as long as Ray's own bound),
    so this reads a key through the worker's GCS client, as Ray's own tools do."""
    from ray._private.worker import global_worker

    client: Any = getattr(global_worker, "gcs_client", None)  # set when this process connected
    if client is None:
        return False
    try:
        client.internal_kv_get(b"memwal-ping", None, timeout=timeout)
    except Exception:  # noqa: BLE001 - any failure: no answer
        return False
    return True


def _where() -> str:
    address = os.environ.get(ADDRESS_ENV)
    return f"cluster at {address}" if address else "(local)"


def _connect() -> None:
    """Connect, then stay (module docstring) unless the connection failed."""
    global _failed
    try:
        import ray

        if not ray.is_initialized():
            address = os.environ.get(ADDRESS_ENV) or "local"
            local = address == "local"
            # Ray starts its processes by fork and exec: Lance's fork warning does not apply to them
            warnings.filterwarnings("ignore", message="lance is not fork-safe")
            os.environ.setdefault(RAY_RECONNECT_ENV, str(int(lost_seconds() * 4 + 60)))
            ray.init(address=address, num_cpus=os.cpu_count() if local else None,
                     include_dashboard=False if local else None, log_to_driver=False, logging_level=logging.ERROR,
                     namespace="memwal")
    except Exception as exc:  # noqa: BLE001 - said in one line by connected()
        _failed = exc
        return
    finally:
        _ready.set()
    threading.Event().wait()  # never set: this thread lives as long as the process
