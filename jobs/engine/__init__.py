"""The Spark engines (installed as ``memwal.spark.engine``): the same plans as the local
engines, their heavy work spread over a Spark session's executors, every commit the driver's.

The core finds them through the entry point ``memwal.engines: spark`` (:data:`ENGINES`); it
never names them. ``merge``: reading, deduplicating or folding and staging on executors
(:mod:`.merge`); ``catchup``: index segments per fragment group (:mod:`.catchup`);
``compact``: one task per Lance compaction task (:mod:`.compact`); ``gc``: one task per shard
(:mod:`.gc`); ``snapshot``: shard manifests read in parallel (:mod:`.snapshot`); ``fleet``:
small tables as tasks of one application (:mod:`.fleet`). Every stage is a DataFrame
(:mod:`.frames`), so the same engines run on a classic session (spark-submit's, an
application's, or a local one started in the background, with the driver JVM's class archive,
:mod:`.jvm_archive`) and over Spark Connect (``SPARK_REMOTE``: :mod:`.session`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from memwal.spark.engine.catchup import SparkCatchupEngine
    from memwal.spark.engine.compact import SparkCompactEngine
    from memwal.spark.engine.fleet import SparkTableRunner
    from memwal.spark.engine.gc import SparkGcEngine
    from memwal.spark.engine.merge import SparkMergeEngine
    from memwal.spark.engine.snapshot import SparkManifestReader

    #: One action's Spark engine (each satisfies that action's engine protocol in the core).
    SparkEngine: TypeAlias = (SparkMergeEngine | SparkCatchupEngine | SparkCompactEngine | SparkManifestReader
                              | SparkGcEngine | SparkTableRunner)


def _merge() -> SparkMergeEngine:
    from memwal.spark.engine.merge import SparkMergeEngine

    return SparkMergeEngine.from_active_or_local()


def _catchup() -> SparkCatchupEngine:
    from memwal.spark.engine.catchup import SparkCatchupEngine

    return SparkCatchupEngine.from_active_or_local()


def _compact() -> SparkCompactEngine:
    from memwal.spark.engine.compact import SparkCompactEngine

    return SparkCompactEngine.from_active_or_local()


def _snapshot() -> SparkManifestReader:
    from memwal.spark.engine.snapshot import SparkManifestReader

    return SparkManifestReader.from_active_or_local()


def _gc() -> SparkGcEngine:
    from memwal.spark.engine.gc import SparkGcEngine

    return SparkGcEngine.from_active_or_local()


def _fleet() -> SparkTableRunner:
    from memwal.spark.engine.fleet import SparkTableRunner

    return SparkTableRunner.from_active_or_local()


class SparkEngines:
    """What the entry point hands the core: the engine of each action, and the session start."""

    name = "spark"
    _factories: dict[str, Callable[[], SparkEngine]] = {
        "merge": _merge, "catchup": _catchup, "compact": _compact, "snapshot": _snapshot, "gc": _gc,
        "fleet": _fleet}

    def engine(self, action: str) -> SparkEngine:
        return self._factories[action]()

    def prepare(self) -> None:
        """Start the session in the background while the job plans (spark-submit's wins; over
        Spark Connect no JVM starts here)."""
        from memwal.spark.engine.session import start_session

        _require("pyspark")  # here, not in the session's thread: a missing extra is bad input now
        start_session()


def _require(module: str) -> None:
    """ModuleNotFoundError when ``module`` is not installed (found without importing it)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ValueError, ImportError):  # a module set to None in sys.modules: not importable
        found = False
    if not found:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)


ENGINES = SparkEngines()
