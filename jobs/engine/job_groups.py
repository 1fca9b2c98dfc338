"""A Spark job's job group: stopping it on an operator's cancel, and waiting for its tasks to end after it failed.

A job group is how a job's tasks are found again: :func:`stoppable_group` runs the engine's
Spark jobs in one and cancels the group when an operator's cancel reaches the running job
(:func:`memwal.lease.cancel.stoppable`: the job's lease is watched while the Spark jobs run).

A failed job's other tasks are killed asynchronously: PySpark lets a task's Python worker run
for a few seconds more (its monitor's poll and ``spark.python.task.killTimeout``). A task that
finished its write meanwhile writes its files and receipt after the driver's cleanup (seen under
load: a fragment left in ``data/`` by the merge). So the cleanup first waits for them
(:func:`settle`), finding them through the job group the job ran in (:func:`job_group`). A task
killed in the middle of a write leaves no receipt: what it wrote is an orphan for ``gc --orphans``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import SparkContext

from memwal.lease import cancel

log = logging.getLogger(__name__)

#: Spark's local property naming the job group of the jobs a thread starts.
JOB_GROUP = "spark.jobGroup.id"
#: How long a failed job's cleanup waits for its other tasks to end.
SETTLE_SECONDS = 60.0


@contextmanager
def job_group(sc: SparkContext, name: str) -> Iterator[str]:
    """The jobs this thread starts inside run in a job group, whose name is yielded: the caller's
    own group when it set one (a notebook's, a scheduler's), else ``name``, unset on the way out."""
    previous = sc.getLocalProperty(JOB_GROUP)
    group = previous or name
    sc.setLocalProperty(JOB_GROUP, group)
    try:
        yield group
    finally:
        sc.setLocalProperty(JOB_GROUP, previous)  # type: ignore[arg-type]  # None (Java's null) unsets it


@contextmanager
def stoppable_group(sc: SparkContext, name: str) -> Iterator[str]:
    """:func:`job_group`, cancelled when an operator's cancel reaches the job that runs it; after
    a failure (a cancel included) the block's error propagates once the group's tasks ended."""
    with job_group(sc, name) as group, cancel.stoppable(lambda: sc.cancelJobGroup(group)):
        try:
            yield group
        except Exception:
            settle(sc, group)
            raise


def settle(sc: SparkContext, group: str) -> None:
    """Wait, at most :data:`SETTLE_SECONDS`, until no task of ``group``'s jobs still runs."""
    tracker = sc.statusTracker()
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        stages = [s for j in tracker.getJobIdsForGroup(group) if (info := tracker.getJobInfo(j)) is not None
                  for s in info.stageIds]
        if not any((stage := tracker.getStageInfo(s)) is not None and stage.numActiveTasks > 0 for s in stages):
            return
        time.sleep(0.1)
    log.warning("spark job group %s: tasks still running after %.0f s; what they write is left to gc --orphans",
                group, SETTLE_SECONDS)
