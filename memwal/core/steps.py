"""Named steps of a job, where a test can hold it to interleave it with another job.

Races are tested as deterministic interleavings (FoundationDB and TiKV call these
failpoints): job A runs until a named step (``merge.before-marked-commit``), the test holds
it there, runs job B, moves the clock, then lets A go on. Every job calls :func:`step` at
the points that matter; with no hook installed it costs one list check.

Two ways to hold a step:

* in this process, :func:`hooked` installs a callback that runs at every step (the test's
  callback blocks the job's thread at the step it wants);
* in other processes (Spark executors, ``spark-submit``, Airflow workers), a *barrier
  directory*: a job reaching step ``name`` while ``<dir>/<name>.hold`` exists writes
  ``<dir>/<name>.reached`` and waits until the hold file is removed. The directory comes from
  the ``MEMWAL_STEP_BARRIER`` environment variable, or travels with a Spark task
  (:func:`barrier_for_tasks` on the driver, ``step(name, barrier=...)`` on the executor).

Nothing here changes what a job does; it only decides *when* a held job goes on.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

#: Environment variable naming a barrier directory (multi-process tests only).
BARRIER_ENV = "MEMWAL_STEP_BARRIER"
#: How often a held process looks whether its hold file is gone.
_POLL_SECONDS = 0.01

_hooks: list[Callable[[str], None]] = []


def step(name: str, *, barrier: str | None = None) -> None:
    """Job code passes step ``name``: run the installed hooks, then any barrier's hold."""
    for hook in list(_hooks):
        hook(name)
    directory = barrier or os.environ.get(BARRIER_ENV)
    if directory:
        _wait_at_barrier(directory, name)


@contextlib.contextmanager
def hooked(hook: Callable[[str], None]) -> Iterator[None]:
    """Run ``hook(name)`` at every step of every job of this process for the block."""
    _hooks.append(hook)
    try:
        yield
    finally:
        _hooks.remove(hook)


def scoped(job: str, on_step: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """The step function of one job: ``step(f"{job}.{name}")``, after the caller's own
    ``on_step(name)`` callback when it gave one."""

    def job_step(name: str) -> None:
        if on_step is not None:
            on_step(name)
        step(f"{job}.{name}")

    return job_step


def barrier_for_tasks() -> str | None:
    """The barrier directory to ship with tasks to other processes (None: none is set)."""
    return os.environ.get(BARRIER_ENV)


def _wait_at_barrier(directory: str, name: str) -> None:
    hold = os.path.join(directory, f"{name}.hold")
    if not os.path.exists(hold):
        return
    with open(os.path.join(directory, f"{name}.reached"), "a") as f:
        f.write(f"{os.getpid()}\n")
    while os.path.exists(hold):
        time.sleep(_POLL_SECONDS)
