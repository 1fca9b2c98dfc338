"""Running a catch-up plan, and insisting that Lance recorded the catch-up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwal.catchup.engine import CatchupEngine, LocalCatchupEngine
from memwal.catchup.plan import NONE, WAIT, CatchupPlan, CatchupThresholds, plan_catchup
from memwal.core import steps
from memwal.core.document import Document, as_document
from memwal.core.retry import after_conflict, vanished
from memwal.errors import MemWalError, StateMovedError
from memwal.history import run as history
from memwal.table import Table

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexResult:
    index_name: str
    action: str
    caught_up: dict[str, int]
    recorded: bool


@dataclass(frozen=True)
class CatchupResult(Document):
    """What an index catch-up did (``memwal catchup --json``).

    Attributes:
        table: The table's URI.
        version: The new table version, or None when nothing was committed.
        indexes: Per index: what was done and whether its catch-up is recorded.
        engine: ``"local"`` or ``"spark"``.
    """

    table: str
    version: int | None
    indexes: tuple[IndexResult, ...] = ()
    engine: str = "local"

    @property
    def all_recorded(self) -> bool:
        """Every index's catch-up recorded, but for those that wait for rows to train on (a
        planned no-op: there was nothing Lance could record)."""
        return all(i.recorded for i in self.indexes if i.action != WAIT)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "engine": self.engine,
                "all_recorded": self.all_recorded, "indexes": [as_document(i) for i in self.indexes]}

    def problems(self) -> list[str]:
        """What makes this run a failure: nothing here (a failed catch-up raises, exit 1 or 3)."""
        return []


def execute_catchup(table: Table, plan: CatchupPlan, engine: CatchupEngine | None = None, *,
                    lease: Lease | None = None) -> CatchupResult:
    """Run the plan's work; the result names only the versions this run committed (never one
    another holder committed meanwhile), and whether Lance recorded each index's catch-up.

    The lease is checked right before each commit, after the named step (a job frozen at the
    step and taken over meanwhile stops there, exit 3, with nothing committed); each of those
    checks is a safe point where an operator's cancel stops the job."""
    engine = engine or LocalCatchupEngine()
    work = plan.work()
    version: int | None = None
    if work:
        if lease:
            lease.check(safe_to_stop=True)  # nothing built yet: a cancel stops here
        steps.step("catchup.before-build")
        # each commit is whole (an index's segments, or Lance's optimize_indices): before each, a cancel stops it
        fence = lease.safe_point if lease else None
        committed = engine.run(table, plan, work, fence)
        for v in committed:
            history.committed(table, v)
        version = max(committed, default=None)
    after = table.manifest()
    results: list[IndexResult] = []
    for ip in plan.indexes:
        caught = {s: after.index_catchup.get(ip.index_name, {}).get(s, 0) for s in after.compacted}
        # Read back what Lance recorded: every shard at least at the progress we planned against.
        recorded = all(caught.get(s, 0) >= g for s, g in plan.compacted.items())
        results.append(IndexResult(ip.index_name, ip.action, caught, recorded))
        if ip.action not in (NONE, WAIT) and not recorded:
            log.warning("index %s: Lance did not record catch-up to %s (recorded %s)", ip.index_name,
                        plan.compacted, caught)
    return CatchupResult(table=table.uri, version=version, indexes=tuple(results), engine=engine.name)


def _others_committed(table: Table, since: int) -> bool:
    """Whether a commit other than an index commit (ours) landed after version ``since``.

    (pylance 14.0.2 cannot read back a compaction's transaction, a ``Rewrite`` whose
    ``RewrittenIndex`` it fails to build: an unreadable transaction counts as another's.)
    """
    ds = table.dataset()
    for v in range(since + 1, ds.version + 1):
        try:
            txn = ds.read_transaction(v)
        except Exception:  # noqa: BLE001 - see above
            return True
        if txn is None or type(txn.operation).__name__ != "CreateIndex":
            return True
    return False


def run_catchup(table: Table, *, plan: CatchupPlan | None = None, engine: CatchupEngine | None = None,
                lease: Lease | None = None,
                indexes: list[str] | None = None, thresholds: CatchupThresholds | None = None,
                max_attempts: int = 6) -> CatchupResult:
    """Execute ``plan`` (or a fresh one) and insist that Lance recorded the catch-up.

    A lost race is redone on a fresh plan (memwal.core.retry): an index commit that a concurrent
    compaction preempted ("Retryable commit conflict ... Rewrite"), or a catch-up record a
    commit right after ours dropped (Lance's compaction does: hazard H4).
    """
    if plan is not None:
        indexes = (None if plan.requested is None else list(plan.requested)) if indexes is None else indexes
        thresholds = plan.thresholds or thresholds

    def attempt(n: int) -> CatchupResult:
        if n > 1 and lease:
            lease.check(safe_to_stop=True)
        p = plan if n == 1 and plan is not None else plan_catchup(table, indexes=indexes, thresholds=thresholds)
        try:
            result = execute_catchup(table, p, engine, lease=lease)
        except (OSError, ValueError, RuntimeError) as exc:
            # A file a concurrent version cleanup removed while the index was built.
            if vanished(exc) and table.manifest().version > p.read_version:
                raise StateMovedError(f"{table.uri}: version {p.read_version} moved while indexing") from exc
            raise
        if not result.all_recorded:
            missing = [i.index_name for i in result.indexes if not i.recorded]
            if _others_committed(table, p.read_version):
                raise StateMovedError(f"{table.uri}: a concurrent commit dropped or preceded the catch-up record of "
                                      f"{', '.join(missing)}")
            raise MemWalError(f"{table.uri}: indexes {', '.join(missing)} ran but Lance did not record their catch-up")
        return result

    return after_conflict(attempt, what=f"{table.uri}: catch-up", attempts=max_attempts)
