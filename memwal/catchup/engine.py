"""Where a catch-up's index work runs: the :class:`CatchupEngine` protocol, and Lance's own
``optimize_indices`` in-process (:class:`LocalCatchupEngine`). The task engine
(``memwal.tasks.catchup``) builds segments in Spark or Ray tasks and satisfies the same protocol.

An engine calls ``fence`` (the lease check) right before each commit, so a job that lost its
lease commits nothing more (a lease check is not a fence on its own: hazard H5), and records
each commit as the running job's the moment it lands (:func:`memwal.history.run.committed`):
a fence that stops the job before its second commit must not leave the first to the history as
an ``external`` commit (issue 64: a cancelled catch-up's retrain then showed as another's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from memwal.catchup.plan import OPTIMIZE, RETRAIN, CatchupPlan, IndexPlan
from memwal.core import steps
from memwal.history import run as history
from memwal.table import Table

#: Called right before each commit of an engine (the lease check); None: no check.
Fence = Callable[[], None] | None

ALL_DELTAS = 1 << 30


class CatchupEngine(Protocol):
    """Builds what a plan's indexes lack (local: Lance's ``optimize_indices``; spark: segments on
    executors); returns the versions it committed, calling ``fence`` right before each commit."""

    @property
    def name(self) -> str: ...

    def run(self, table: Table, plan: CatchupPlan, work: list[IndexPlan], fence: Fence = None) -> list[int]: ...


class LocalCatchupEngine:
    """Lance's own optimize_indices, in-process: one commit per kind of work.

    Incremental: the unindexed fragments become part of the newest delta. Rebuild: a
    vector index is retrained (new centroids for drifted data); a scalar index has no
    training, so its rebuild is merging every delta into one.
    """

    name = "local"

    def run(self, table: Table, plan: CatchupPlan, work: list[IndexPlan], fence: Fence = None) -> list[int]:
        """Run the work; the versions it committed (``fence`` is called right before each
        commit: a lease check, so a job that lost its lease commits nothing more)."""
        groups: list[tuple[list[str], dict[str, int | bool]]] = [
            ([i.index_name for i in work if i.action == OPTIMIZE], {"num_indices_to_merge": 1}),
            ([i.index_name for i in work if i.action == RETRAIN and i.is_vector], {"retrain": True}),
            ([i.index_name for i in work if i.action == RETRAIN and not i.is_vector],
             {"num_indices_to_merge": ALL_DELTAS}),
        ]
        committed: list[int] = []
        for names, options in groups:
            if names:
                ds = table.dataset()
                before = ds.version
                if fence is not None:
                    fence()
                steps.step("catchup.fenced")  # past its last check, before Lance builds and commits
                ds.optimize.optimize_indices(index_names=names, **options)
                if ds.version != before:  # the handle moved to its own commit (a no-op commits nothing)
                    history.committed(table, ds.version)
                    committed.append(ds.version)
        return committed


