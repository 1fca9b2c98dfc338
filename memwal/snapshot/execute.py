"""Executing a refresh: encode the plan's rows, store them, and commit them through the H1 guard.

``execute_snapshot`` stores the rows inline in ``inline_snapshots`` (at most
``inline_threshold`` shards, default 100) or as ``_indices/<uuid>/index.lance`` of the entry
it writes, and commits a replacement ``__lance_mem_wal`` entry through
:func:`memwal.snapshot.guard.commit_mem_wal_details`. A no-op plan (no shard changed since
the published snapshot) commits and writes nothing: its result has ``version`` None and a
``reason``, so an idle table scheduled every few minutes does not grow a version per run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lance.dataset import IndexFile

from memwal.core.document import Document, as_document
from memwal.pb import mem_wal_index_pb2
from memwal.snapshot.engine import SnapshotEngine
from memwal.snapshot.format import (
    INLINE_THRESHOLD,
    SNAPSHOT_FILE,
    STORAGE_FILE,
    STORAGE_INLINE,
    TS_METADATA_KEY,
    encode_lance_file,
    rows_to_table,
    snapshot_file_key,
)
from memwal.snapshot.guard import Step, commit_mem_wal_details
from memwal.snapshot.plan import SnapshotPlan, plan_snapshot
from memwal.snapshot.slots import RepairedSlot
from memwal.table import Table

if TYPE_CHECKING:
    from memwal.lease import Lease


@dataclass(frozen=True)
class SnapshotResult(Document):
    """What a snapshot refresh did (``memwal snapshot --json``).

    Attributes:
        table: The table's URI.
        version: The new table version, or None (with a ``reason``) when nothing was published.
        read_version: The table version the refresh read.
        num_shards: Shards in the snapshot.
        storage: ``"inline"`` (in the MemWAL index) or ``"file"`` (past the inline threshold).
        snapshot_ts_millis: The published snapshot's time (milliseconds since the epoch).
        index_uuid: The MemWAL index entry's UUID after the commit.
        path: The snapshot file's path, when stored as a file.
        bytes: The snapshot's size.
        repairs: Repair commits made after its own, restoring progress that a commit between its read
            and its commit would otherwise lose (hazard H1).
        attempts: Commits tried.
        interleaved_commits: Other commits seen between the read and the commit.
        repaired: Each value a refresh restored.
        recovered: Whether the run repaired values an interrupted refresh had left wrong.
        engine: ``"local"`` or ``"spark"``.
        read_seconds: Time spent reading the shard manifests.
        commit_seconds: Time spent committing.
        reason: Why nothing was published (None when it was).
    """

    table: str
    version: int | None
    read_version: int
    num_shards: int
    storage: str
    snapshot_ts_millis: int
    index_uuid: str | None
    path: str | None
    bytes: int
    repairs: int
    attempts: int
    interleaved_commits: int
    repaired: tuple[RepairedSlot, ...]  # each value a refresh restored (hazard H1)
    recovered: bool
    engine: str
    read_seconds: float
    commit_seconds: float
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = as_document(self)
        d["repaired"] = [r.to_dict() for r in self.repaired]
        d["read_seconds"] = round(self.read_seconds, 3)
        d["commit_seconds"] = round(self.commit_seconds, 3)
        return d

    def problems(self) -> list[str]:
        """What makes this run a failure: nothing here (a failed refresh raises, exit 1 or 3)."""
        return []


def unchanged_result(table: Table, plan: SnapshotPlan) -> SnapshotResult:
    """The result of a no-op plan: nothing committed, the published snapshot's timestamp kept."""
    return SnapshotResult(
        table=table.uri,
        version=None,
        read_version=plan.read_version,
        num_shards=plan.num_shards,
        storage=plan.storage,
        snapshot_ts_millis=plan.previous_snapshot_ts_millis,
        index_uuid=None,
        path=None,
        bytes=0,
        repairs=0,
        attempts=0,
        interleaved_commits=0,
        repaired=(),
        recovered=False,
        engine=plan.engine,
        read_seconds=plan.read_seconds,
        commit_seconds=0.0,
        reason=plan.noop_reason,
    )


def execute_snapshot(
    table: Table, plan: SnapshotPlan, *, lease: Lease | None = None, on_step: Step | None = None
) -> SnapshotResult:
    """Encode the plan's rows, store them and commit the guarded replacement (a no-op plan: nothing)."""
    if plan.is_noop:
        return unchanged_result(table, plan)
    start = time.perf_counter()
    tbl = rows_to_table(plan.rows, list(plan.columns))
    storage = plan.storage
    ts_holder: dict[str, int] = {}

    def encode(ts: int) -> bytes:
        return encode_lance_file(tbl, metadata={TS_METADATA_KEY: str(ts)})

    data_cache: dict[int, bytes] = {}
    written: list[str] = []

    def update(details: mem_wal_index_pb2.MemWalIndexDetails, index_uuid: str,
               is_repair: bool) -> list[IndexFile] | None:
        # The timestamp only grows, so readers can find a file snapshot by binary search (H3).
        ts = ts_holder.setdefault("ts", max(plan.planned_at_ms, details.snapshot_ts_millis + 1))
        data = data_cache.setdefault(ts, encode(ts))
        details.snapshot_ts_millis = ts
        details.num_shards = plan.num_shards
        if storage == STORAGE_INLINE:
            details.inline_snapshots = data
            return None
        details.ClearField("inline_snapshots")
        key = snapshot_file_key(index_uuid)
        if lease and not is_repair:
            lease.safe_point()  # nothing written yet: an operator's cancel stops the refresh here
        table.store.put(key, data)  # a fresh UUID per round: the spec's path of the entry we write
        written.append(key)
        return [IndexFile(SNAPSHOT_FILE, len(data))]

    outcome = commit_mem_wal_details(table, update, lease=lease, on_step=on_step)
    ts = ts_holder["ts"]
    return SnapshotResult(
        table=table.uri,
        version=outcome.version,
        read_version=outcome.read_version,
        num_shards=plan.num_shards,
        storage=storage,
        snapshot_ts_millis=ts,
        index_uuid=outcome.index_uuid,
        path=snapshot_file_key(outcome.index_uuid) if storage == STORAGE_FILE else None,
        bytes=len(data_cache[ts]),
        repairs=outcome.repairs,
        attempts=outcome.attempts,
        interleaved_commits=outcome.interleaved_commits,
        repaired=tuple(outcome.repaired),
        recovered=outcome.recovered,
        engine=plan.engine,
        read_seconds=plan.read_seconds,
        commit_seconds=time.perf_counter() - start,
    )


def run_snapshot(
    table: Table,
    *,
    reader: SnapshotEngine | None = None,
    inline_threshold: int = INLINE_THRESHOLD,
    lease: Lease | None = None,
    on_step: Step | None = None,
    force: bool = False,
) -> SnapshotResult:
    """Plan and execute in one call (``force``: publish even when no shard changed)."""
    plan = plan_snapshot(table, inline_threshold=inline_threshold, reader=reader, force=force)
    return execute_snapshot(table, plan, lease=lease, on_step=on_step)
