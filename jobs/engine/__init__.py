"""The Spark engines (installed as ``memwal.spark.engine``): the same plans as the local
engines, their heavy work spread over a Spark session's executors, every commit the driver's.

The core finds them through the entry point ``memwal.engines: spark`` (:data:`ENGINES`); it
never names them. ``merge``: reading, deduplicating or folding and staging on executors
(:mod:`.merge`); ``catchup``, ``compact``, ``gc``, ``snapshot`` and ``fleet``: the task engines
of :mod:`memwal.tasks` on the session (:mod:`.runner`). Every stage is a DataFrame
(:mod:`.frames`), so the same engines run on a classic session (spark-submit's, an
application's, or a local one started in the background, with the driver JVM's class archive,
:mod:`.jvm_archive`) and over Spark Connect (``SPARK_REMOTE``: :mod:`.session`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from memwal.spark.engine.merge import SparkMergeEngine

    from memwal.tasks import TaskEngine

    #: One action's Spark engine (each satisfies that action's engine protocol in the core).
    SparkEngine: TypeAlias = SparkMergeEngine | TaskEngine


def _merge() -> SparkMergeEngine:
    from memwal.spark.engine.merge import SparkMergeEngine

    return SparkMergeEngine.from_active_or_local()


def _tasks(action: str) -> SparkEngine:
    """The task engine of ``action`` (:mod:`memwal.tasks`) on this process's Spark session."""
    from memwal.spark.engine.runner import SparkRunner

    from memwal.tasks import task_engine

    return task_engine(action, SparkRunner(app="memwal-fleet") if action == "fleet" else SparkRunner())


class SparkEngines:
    """What the entry point hands the core: the engine of each action, and the session start."""

    name = "spark"

    def engine(self, action: str) -> SparkEngine:
        return _merge() if action == "merge" else _tasks(action)

    def prepare(self) -> None:
        """Start the session in the background while the job plans (spark-submit's wins; over
        Spark Connect no JVM starts here)."""
        from memwal.spark.engine.session import start_session

        from memwal.actions.engines import require_module

        require_module("pyspark")  # here, not in the session's thread: a missing extra is bad input now
        start_session()


ENGINES = SparkEngines()
