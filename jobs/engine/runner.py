"""The Spark session as a :class:`memwal.tasks.TaskRunner`: the task engines of
:mod:`memwal.tasks` (compaction, GC, the snapshot refresh, catch-up, the fleet) on Spark.

A job of tasks is one DataFrame job (:func:`memwal.spark.engine.frames.run_tasks`), run under a
tag an operator's cancel interrupts (:func:`memwal.spark.engine.tags.stoppable_job`); the
session is waited for when a job first needs it, so a run with nothing to do never waits for
one (it starts in the background while the job plans: :func:`memwal.spark.engine.session.start_session`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

from memwal.spark.engine.frames import run_tasks
from memwal.spark.engine.session import active_or_local, default_parallelism
from memwal.spark.engine.tags import stoppable_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

P = TypeVar("P")
R = TypeVar("R")


class SparkRunner:
    """Tasks on a Spark session (classic or Connect): the given one, else the active or a local one."""

    name = "spark"

    def __init__(self, spark: SparkSession | None = None, app: str = "memwal-jobs") -> None:
        self._spark = spark
        self._app = app

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = active_or_local(self._app)
        return self._spark

    def parallelism(self) -> int:
        return default_parallelism(self.spark)

    def run_tasks(self, payloads: Sequence[P], fn: Callable[[P], Iterable[R]]) -> list[R]:
        return run_tasks(self.spark, payloads, fn)

    def stoppable(self, name: str) -> AbstractContextManager[str]:
        return stoppable_job(self.spark, name)
