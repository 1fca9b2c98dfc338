"""The Ray engines (installed as ``memwal.ray``, with Ray from the ``memwal-jobs[ray]`` extra):
the same plans as the local and Spark engines, their heavy work in Ray tasks, every commit the
driver's.

The core finds them through the entry point ``memwal.engines: ray`` (:data:`ENGINES`); it never
names them. ``merge``: reading, deduplicating or folding and writing in tasks, rows between
stages through Ray's object store (:mod:`.merge`); ``catchup``, ``compact``, ``gc``,
``snapshot`` and ``fleet``: the task engines of :mod:`memwal.tasks` on Ray (:mod:`.runner`).
The cluster is ``RAY_ADDRESS``'s, else a local Ray with the machine's cores (:mod:`.cluster`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from memwal.ray.merge import RayMergeEngine

    from memwal.tasks import TaskEngine

    #: One action's Ray engine (each satisfies that action's engine protocol in the core).
    RayEngine: TypeAlias = RayMergeEngine | TaskEngine


class RayEngines:
    """What the entry point hands the core: the engine of each action, and the connection's start."""

    name = "ray"

    def engine(self, action: str) -> RayEngine:
        from memwal.ray.merge import RayMergeEngine
        from memwal.ray.runner import RayRunner

        from memwal.tasks import task_engine

        return RayMergeEngine(RayRunner()) if action == "merge" else task_engine(action, RayRunner())

    def prepare(self) -> None:
        """Connect to Ray in the background while the job plans (:func:`memwal.ray.cluster.start`)."""
        from memwal.ray.cluster import start

        from memwal.actions.engines import require_module

        require_module("ray")  # here, not in the connecting thread: a missing extra is bad input now
        start()


ENGINES = RayEngines()
