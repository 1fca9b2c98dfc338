"""Where a compaction's rewrite tasks run: the :class:`CompactEngine` protocol, and Lance's tasks
in-process (:class:`LocalCompactEngine`). The task engine (``memwal.tasks.compact``) runs
one Spark or Ray task per Lance task and satisfies the same protocol. An engine only rewrites: the
one commit, with progress kept, is the driver's (:mod:`memwal.compact.execute`).
"""

from __future__ import annotations

from typing import Protocol

from lance.optimize import RewriteResult

from memwal.compact.plan import CompactPlan
from memwal.table import Table


class CompactEngine(Protocol):
    """Runs a plan's Lance tasks (local: in-process; spark: one Spark task per Lance task)."""

    name: str

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]: ...


class LocalCompactEngine:
    name = "local"

    @classmethod
    def from_active_or_local(cls) -> LocalCompactEngine:
        return cls()

    def run_tasks(self, table: Table, plan: CompactPlan) -> list[RewriteResult]:
        ds = table.dataset(plan.read_version)
        return [task.execute(ds) for task in plan.lance_tasks]
