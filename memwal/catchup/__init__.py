"""Index catch-up: bring base-table indexes up to the merged generations.

Lance records catch-up itself: when an index commit covers every fragment live at its
read version, Lance writes ``index_catchup[index] = compacted_sstables`` of that version
(DESIGN.md section 4). So the job's work is to decide, per maintained index, whether to
optimise incrementally (add the unindexed fragments as a delta) or to retrain (too many
deltas, or too large an unindexed fraction, like Zeppelin's retrain threshold), run it,
and read back that Lance recorded the catch-up. GC waits for that record (gate b).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from memwal.core import steps
from memwal.core.retry import after_conflict, vanished
from memwal.errors import BadInputError, MemWalError, StateMovedError
from memwal.history import run as history
from memwal.inspect.status import maintained_indexes
from memwal.table import Table
from memwal.table.manifest import TableManifest

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

NONE, OPTIMIZE, RETRAIN = "none", "optimize", "retrain"


@dataclass
class CatchupThresholds:
    """When an incremental optimisation is no longer good enough and a rebuild is due."""

    max_deltas: int = 8
    max_unindexed_fraction: float = 0.5


@dataclass
class IndexPlan:
    index_name: str
    action: str
    reason: str
    lag: dict[str, int]  # shard -> compacted - caught up (0 when caught up)
    caught_up: dict[str, int]
    num_deltas: int
    indexed_rows: int
    unindexed_rows: int
    unindexed_fragments: int
    index_type: str = ""

    @property
    def is_vector(self) -> bool:
        return self.index_type.upper().startswith(("IVF", "HNSW", "FLAT"))


@dataclass
class CatchupPlan:
    table: str
    read_version: int
    compacted: dict[str, int]
    indexes: list[IndexPlan] = field(default_factory=list)
    #: What the plan was asked for, so that a run that lost a race plans again the same way.
    requested: list[str] | None = field(default=None, repr=False)
    thresholds: CatchupThresholds | None = field(default=None, repr=False)

    def work(self) -> list[IndexPlan]:
        return [i for i in self.indexes if i.action != NONE]

    def to_json(self) -> dict:
        return {"table": self.table, "read_version": self.read_version, "compacted": self.compacted,
                "indexes": [asdict(i) for i in self.indexes]}


@dataclass
class IndexResult:
    index_name: str
    action: str
    caught_up: dict[str, int]
    recorded: bool


@dataclass
class CatchupResult:
    table: str
    version: int | None
    indexes: list[IndexResult] = field(default_factory=list)
    engine: str = "local"

    @property
    def all_recorded(self) -> bool:
        return all(i.recorded for i in self.indexes)

    def to_json(self) -> dict:
        return {"table": self.table, "version": self.version, "engine": self.engine,
                "all_recorded": self.all_recorded, "indexes": [asdict(i) for i in self.indexes]}


def _index_stats(ds, name: str) -> dict:
    try:
        return ds.stats.index_stats(name)
    except (ValueError, OSError, RuntimeError) as exc:
        raise BadInputError(f"index {name!r}: cannot read its statistics: {exc}") from exc


def plan_catchup(table: Table, *, indexes: list[str] | None = None,
                 thresholds: CatchupThresholds | None = None, manifest: TableManifest | None = None) -> CatchupPlan:
    """Pure: which maintained indexes lag, by how much, and what would bring them up."""
    thresholds = thresholds or CatchupThresholds()
    manifest = manifest or table.require_mem_wal()
    maintained = maintained_indexes(manifest)
    existing = {i.name for i in manifest.user_indices()}
    names = maintained if not indexes else indexes
    unknown = sorted(set(names) - existing)
    if unknown:
        raise BadInputError(f"{table.uri}: no such index on the base table: {', '.join(unknown)}")
    ds = table.dataset(manifest.version)
    plan = CatchupPlan(table=table.uri, read_version=manifest.version, compacted=dict(manifest.compacted),
                       requested=indexes, thresholds=thresholds)
    for name in names:
        stats = _index_stats(ds, name)
        recorded = manifest.index_catchup.get(name, {})
        caught = {s: recorded.get(s, 0) for s in manifest.compacted}
        lag = {s: max(0, g - caught[s]) for s, g in manifest.compacted.items()}
        indexed = int(stats.get("num_indexed_rows", 0))
        unindexed = int(stats.get("num_unindexed_rows", 0))
        deltas = len(stats.get("num_indexed_rows_per_delta", []) or []) or int(stats.get("num_indices", 1))
        total = indexed + unindexed
        fraction = unindexed / total if total else 0.0
        if not any(lag.values()) and unindexed == 0:
            action, reason = NONE, "caught up"
        elif deltas >= thresholds.max_deltas:
            action, reason = RETRAIN, f"{deltas} deltas >= {thresholds.max_deltas}"
        elif fraction > thresholds.max_unindexed_fraction:
            action, reason = RETRAIN, f"{fraction:.0%} of rows unindexed > {thresholds.max_unindexed_fraction:.0%}"
        else:
            action = OPTIMIZE
            reason = f"{unindexed} unindexed rows, lag {max(lag.values(), default=0)} generations"
        plan.indexes.append(IndexPlan(name, action, reason, lag, caught, deltas, indexed, unindexed,
                                      int(stats.get("num_unindexed_fragments", 0)), str(stats.get("index_type", ""))))
    return plan


ALL_DELTAS = 1 << 30


class LocalCatchupEngine:
    """Lance's own optimize_indices, in-process: one commit per kind of work.

    Incremental: the unindexed fragments become part of the newest delta. Rebuild: a
    vector index is retrained (new centroids for drifted data); a scalar index has no
    training, so its rebuild is merging every delta into one.
    """

    name = "local"

    def run(self, table: Table, plan: CatchupPlan, work: list[IndexPlan]) -> None:
        groups = [
            ([i.index_name for i in work if i.action == OPTIMIZE], {"num_indices_to_merge": 1}),
            ([i.index_name for i in work if i.action == RETRAIN and i.is_vector], {"retrain": True}),
            ([i.index_name for i in work if i.action == RETRAIN and not i.is_vector],
             {"num_indices_to_merge": ALL_DELTAS}),
        ]
        for names, options in groups:
            if names:
                table.dataset().optimize.optimize_indices(index_names=names, **options)


def execute_catchup(table: Table, plan: CatchupPlan, engine=None, *, lease: Lease | None = None) -> CatchupResult:
    engine = engine or LocalCatchupEngine()
    work = plan.work()
    result = CatchupResult(table=table.uri, version=None, engine=engine.name)
    before = table.dataset().version
    if work:
        if lease:
            lease.check()
        steps.step("catchup.before-build")
        engine.run(table, plan, work)
    after = table.manifest()
    if work:
        result.version = after.version
        _record_index_commits(table, before, after.version)
    for ip in plan.indexes:
        caught = {s: after.index_catchup.get(ip.index_name, {}).get(s, 0) for s in after.compacted}
        # Read back what Lance recorded: every shard at least at the progress we planned against.
        recorded = all(caught.get(s, 0) >= g for s, g in plan.compacted.items())
        result.indexes.append(IndexResult(ip.index_name, ip.action, caught, recorded))
        if ip.action != NONE and not recorded:
            log.warning("index %s: Lance did not record catch-up to %s (recorded %s)", ip.index_name,
                        plan.compacted, caught)
    return result


def _record_index_commits(table: Table, before: int, after: int) -> None:
    """Name the index commits of this catch-up in the run's history: an engine commits one
    version per group of indexes, and a merge may commit in between (it is not ours)."""
    ds = table.dataset()
    for v in range(before + 1, after + 1):
        try:
            txn = ds.read_transaction(v)
        except (OSError, ValueError, RuntimeError, TypeError):  # pylance 14 cannot read a Rewrite's
            continue
        if txn is not None and type(txn.operation).__name__ == "CreateIndex":
            history.committed(v)


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


def run_catchup(table: Table, *, plan: CatchupPlan | None = None, engine=None, lease: Lease | None = None,
                indexes: list[str] | None = None, thresholds: CatchupThresholds | None = None,
                max_attempts: int = 6) -> CatchupResult:
    """Execute ``plan`` (or a fresh one) and insist that Lance recorded the catch-up.

    A lost race is redone on a fresh plan (memwal.core.retry): an index commit that a concurrent
    compaction preempted ("Retryable commit conflict ... Rewrite"), or a catch-up record a
    commit right after ours dropped (Lance's compaction does: hazard H4).
    """
    if plan is not None:
        indexes = plan.requested if indexes is None else indexes
        thresholds = plan.thresholds or thresholds

    def attempt(n: int) -> CatchupResult:
        if n > 1 and lease:
            lease.check()
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
