"""Execute a merge plan: at most two commits, the last one carrying the progress marker.

Pass 1 deletes the keys whose newest version is a tombstone, with no marker. Pass 2
upserts every other key and records ``mark_sstables_as_compacted`` for every shard in the
batch, through ``execute()`` (hazard H2: the uncommitted path drops the marker). When a
batch has only deletes, the delete pass carries the marker. A crash between passes leaves
progress untouched; the rerun recomputes the same net change set, whose deletes are
idempotent and whose upserts are disjoint from them, so it converges to the same table
(invariant 2).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

from lance.mem_wal import CompactedSsTable

from memwal.errors import MemWalError

if TYPE_CHECKING:
    from memwal.lease import Lease
from memwal.merge.changes import NetChanges, local_net_changes
from memwal.merge.plan import MergePlan, plan_merge
from memwal.table import Table, first_line

log = logging.getLogger(__name__)

Step = Callable[[str], None]


class MergeEngine(Protocol):
    """Computes the net change set of a plan (local: pyarrow; spark: executors)."""

    name: str

    def net_changes(self, table: Table, plan: MergePlan, schema) -> NetChanges: ...


class LocalEngine:
    name = "local"

    def __init__(self, partition_rows: int = 2_000_000) -> None:
        self.partition_rows = partition_rows

    def net_changes(self, table: Table, plan: MergePlan, schema) -> NetChanges:
        return local_net_changes(plan, schema, table.storage_options, partition_rows=self.partition_rows)


@dataclass
class ShardMergeResult:
    shard_id: str
    from_generation: int
    to_generation: int
    rows_upserted: int
    rows_deleted: int


@dataclass
class MergeResult:
    table: str
    version: int | None
    shards: list[ShardMergeResult] = field(default_factory=list)
    blocked: list[dict] = field(default_factory=list)
    commits: int = 0
    attempts: int = 1
    engine: str = "local"

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return not self.blocked


class StaleProgressError(MemWalError):
    """Another merger recorded progress for a shard of this batch first."""


_RETRYABLE = (
    "Stale SSTable compaction",
    "commit conflict",
    "Commit conflict",
    "Retryable commit conflict",
    "too many concurrent writers",
    "conflicting transaction",
)


def _is_retryable(exc: BaseException) -> bool:
    text = str(exc)
    return any(s.lower() in text.lower() for s in _RETRYABLE)


def _markers(plan: MergePlan) -> list[CompactedSsTable]:
    return [CompactedSsTable(s.shard_id, s.to_generation) for s in plan.shards]


def commit_net_changes(
    table: Table, plan: MergePlan, net: NetChanges, *, lease: Lease | None, on_step: Step | None = None
) -> tuple[int, int]:
    """The delete pass (no marker) then the marked upsert pass. Returns (version, commits)."""
    step = on_step or (lambda _name: None)
    pk = plan.primary_key
    markers = _markers(plan)
    commits = 0
    ds = table.dataset()
    _guard_progress(table, plan)
    if net.num_deletes:
        if lease:
            lease.check()
        builder = ds.merge_insert(pk).when_matched_delete()
        if net.num_upserts == 0:
            builder = builder.mark_sstables_as_compacted(markers)
        builder.execute(net.delete_keys)
        commits += 1
        step("after-delete-pass")
        if net.num_upserts == 0:
            return table.dataset().version, commits
        ds = table.dataset()
    if lease:
        lease.check()
    (
        ds.merge_insert(pk)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .mark_sstables_as_compacted(markers)
        .execute(net.upsert_reader())
    )
    commits += 1
    step("after-upsert-commit")
    return table.dataset().version, commits


def _guard_progress(table: Table, plan: MergePlan) -> None:
    """Refuse to commit when another merger moved a shard of this batch since planning.

    The delete pass carries no marker, so Lance cannot reject it as stale; re-checking the
    latest progress first keeps a lease-less race from deleting rows a newer merge wrote.
    """
    latest = table.manifest()
    for s in plan.shards:
        now = latest.compacted_generation(s.shard_id)
        if now != s.compacted_generation:
            raise StaleProgressError(
                f"Stale SSTable compaction: shard {s.shard_id} progress moved from "
                f"{s.compacted_generation} to {now} while merging"
            )


def execute_merge(
    table: Table, plan: MergePlan, engine: MergeEngine, *, lease: Lease | None = None, on_step: Step | None = None
) -> MergeResult:
    """Run one planned batch. Raises on conflict; :func:`run_merge` re-plans and retries."""
    step = on_step or (lambda _name: None)
    result = MergeResult(table=table.uri, version=None, engine=engine.name, blocked=[asdict(b) for b in plan.blocked])
    if plan.is_empty():
        return result
    schema = table.dataset(plan.read_version).schema
    if lease:
        lease.check()
    net = engine.net_changes(table, plan, schema)
    try:
        step("after-read")
        version, commits = commit_net_changes(table, plan, net, lease=lease, on_step=step)
    finally:
        net.close()
    result.version = version
    result.commits = commits
    result.shards = [
        ShardMergeResult(
            s.shard_id,
            s.from_generation,
            s.to_generation,
            net.rows_upserted.get(s.shard_id, 0),
            net.rows_deleted.get(s.shard_id, 0),
        )
        for s in plan.shards
    ]
    step("before-report")
    return result


def run_merge(
    table: Table,
    *,
    engine: MergeEngine | None = None,
    lease: Lease | None = None,
    shards: list[str] | None = None,
    max_generations: int | None = None,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    max_attempts: int = 6,
    on_step: Step | None = None,
) -> MergeResult:
    """Plan and execute, re-planning after a conflict (what is merged is skipped)."""
    engine = engine or LocalEngine()
    for attempt in range(1, max_attempts + 1):
        plan = plan_merge(table, shards=shards, max_generations=max_generations, max_rows=max_rows, max_bytes=max_bytes)
        try:
            result = execute_merge(table, plan, engine, lease=lease, on_step=on_step)
            result.attempts = attempt
            return result
        except (OSError, RuntimeError, MemWalError) as exc:
            if not _is_retryable(exc) or attempt == max_attempts:
                raise
            delay = min(5.0, 0.2 * 2 ** (attempt - 1)) * (0.5 + random.random())
            log.warning("merge attempt %d conflicted (%s); re-planning in %.1fs", attempt, first_line(exc), delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
