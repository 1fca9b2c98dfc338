"""Ray as a :class:`memwal.tasks.TaskRunner`: the task engines of :mod:`memwal.tasks`
(compaction, GC, the snapshot refresh, catch-up, the fleet) and the merge's stages on Ray.

A job of tasks is one remote call per payload; the function they share is put in the object
store once. What the tasks return is waited for in rounds (:data:`WAIT_SECONDS`), so that an
operator's cancel, reaching the run through the lease it watches (:meth:`RayRunner.stoppable`),
cancels every task still running (``ray.cancel(force=True)``: the worker process is killed) and
the run stops with one line. Each round also asks the cluster's GCS for an answer: a cluster
that gives none for :data:`memwal.ray.cluster.LOST_SECONDS` fails the job with one line, exit 1,
before anything is committed (the tasks' results are needed first). A task's failure comes back
as one line too: our own error with its class (so the exit code holds), else the task's error
class and message, never Ray's traceback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from memwal.ray.cluster import RayUnavailable, answers, connected, lost_seconds, where

from memwal.errors import MemWalError, first_line
from memwal.lease import cancel

P = TypeVar("P")
R = TypeVar("R")

#: How long one wait for a job's tasks lasts before the driver looks again (a cancel is noticed
#: by the lease watch meanwhile: this only bounds how late a stop is seen by the waiting thread).
WAIT_SECONDS = 1.0


class RayJobStopped(MemWalError):
    """The Ray tasks were cancelled because an operator cancelled the run."""


def _call(fn: Callable[[Any], Iterable[Any]], payload: Any) -> list[Any]:
    return list(fn(payload))


class RayRunner:
    """Tasks on this process's Ray (:mod:`memwal.ray.cluster`)."""

    name = "ray"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[Any] = []
        self._stopped = threading.Event()

    def parallelism(self) -> int:
        import ray

        connected()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def run_tasks(self, payloads: Sequence[P], fn: Callable[[P], Iterable[R]]) -> list[R]:
        if not payloads:
            return []
        import ray

        connected()
        call = ray.remote(_call)
        shared = ray.put(fn)
        out: list[R] = []
        for results in self.get([call.remote(shared, p) for p in payloads]):
            out += results
        return out

    def get(self, refs: list[Any]) -> list[Any]:
        """The values of ``refs`` (tasks this runner started), in order; while they run, a stop
        cancels them. A failure in one line (module docstring)."""
        import ray

        with self._lock:
            self._running += refs
        try:
            pending, bound = list(refs), lost_seconds()
            heard = time.monotonic()
            while pending:
                if self._stopped.is_set():
                    raise RayJobStopped("the Ray tasks were cancelled")
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_SECONDS)
                if pending and answers():
                    heard = time.monotonic()
                elif pending and time.monotonic() - heard > bound:
                    raise RayUnavailable(f"{where()}: lost: no answer for {bound:g} s while tasks ran")
            return list(ray.get(refs))
        except ray.exceptions.TaskCancelledError:
            raise RayJobStopped("the Ray tasks were cancelled") from None
        except ray.exceptions.RayTaskError as exc:
            raise task_error(exc) from None
        except ray.exceptions.RayError as exc:
            raise MemWalError(f"the Ray job failed: {type(exc).__name__}: {first_line(exc)[:500]}") from None
        finally:
            ended = {id(r) for r in refs}
            with self._lock:
                self._running = [r for r in self._running if id(r) not in ended]

    def stop(self) -> None:
        """Cancel every task this runner is waiting for (the workers running them are killed)."""
        import ray

        self._stopped.set()
        with self._lock:
            running = list(self._running)
        for ref in running:
            ray.cancel(ref, force=True)

    @contextmanager
    def stoppable(self, name: str) -> Iterator[str]:
        """The tasks started inside are cancelled when an operator's cancel reaches the run."""
        self._stopped.clear()
        with cancel.stoppable(self.stop):
            try:
                yield name
            except KeyboardInterrupt:  # the process is asked to stop (Airflow's on_kill): so are its tasks
                self.stop()
                raise
            except RayJobStopped:
                raise RayJobStopped(f"the Ray job {name} was cancelled") from None


def task_error(exc: Any) -> MemWalError:
    """A task's failure on the driver: our own error as it was raised (its class keeps the exit
    code), else one line with the task's error class and message."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, MemWalError):
        return cause
    if cause is not None:
        return MemWalError(f"a Ray task failed: {type(cause).__name__}: {first_line(cause)[:500]}")
    return MemWalError(f"a Ray task failed: {first_line(exc)[:500]}")
