"""The Spark engines (installed as ``memwal.spark.engine``): the same plans as the local
engines, their heavy work spread over a Spark session's executors, every commit the driver's.

The core finds them through the entry point ``memwal.engines: spark`` (:data:`ENGINES`); it
never names them. ``merge``: reading, deduplicating or folding and staging on executors
(:mod:`.merge`); ``catchup``: index segments per fragment group (:mod:`.catchup`);
``compact``: one task per Lance compaction task (:mod:`.compact`); ``gc``: one task per shard
(:mod:`.gc`); ``snapshot``: shard manifests read in parallel (:mod:`.snapshot`); ``fleet``:
small tables as tasks of one application (:mod:`.fleet`). The
SparkContext is spark-submit's, or a local one started in the background (:mod:`.session`,
with the driver JVM's class archive, :mod:`.jvm_archive`).
"""

from __future__ import annotations

from typing import Any


def _merge() -> Any:
    from memwal.spark.engine.merge import SparkMergeEngine

    return SparkMergeEngine.from_active_or_local()


def _catchup() -> Any:
    from memwal.spark.engine.catchup import SparkCatchupEngine

    return SparkCatchupEngine.from_active_or_local()


def _compact() -> Any:
    from memwal.spark.engine.compact import SparkCompactEngine

    return SparkCompactEngine.from_active_or_local()


def _snapshot() -> Any:
    from memwal.spark.engine.snapshot import SparkManifestReader

    return SparkManifestReader.from_active_or_local()


def _gc() -> Any:
    from memwal.spark.engine.gc import SparkGcEngine

    return SparkGcEngine.from_active_or_local()


def _fleet() -> Any:
    from memwal.spark.engine.fleet import SparkTableRunner

    return SparkTableRunner.from_active_or_local()


class SparkEngines:
    """What the entry point hands the core: the engine of each action, and the session start."""

    name = "spark"
    _factories = {"merge": _merge, "catchup": _catchup, "compact": _compact, "snapshot": _snapshot, "gc": _gc,
                  "fleet": _fleet}

    def engine(self, action: str) -> Any:
        return self._factories[action]()

    def prepare(self) -> None:
        """Boot a local context in the background while the job plans (spark-submit's wins)."""
        from memwal.spark.engine.session import start_local_context

        start_local_context()


ENGINES = SparkEngines()
