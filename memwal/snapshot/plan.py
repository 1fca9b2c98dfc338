"""Planning a refresh: every shard's latest manifest as a snapshot row, and whether to publish at all.

``plan_snapshot`` is pure: it reads the latest table manifest and every shard's latest
manifest (in parallel: a thread pool locally, executors with the Spark engine) and returns
one :class:`ShardRow` per shard.

An idle refresh commits nothing: when the published snapshot already holds exactly the rows
the plan would publish (same shards, same manifest versions and so the same generations),
in the same storage and columns, the plan is marked a no-op (``noop_reason``). Only the
shard manifests feed the rows: merge progress and index catch-up live in the table
manifest, and readers take them from there (they list only generations above the merged
one), so a merge alone needs no new snapshot. A refresh interrupted before checking its
commit (its journal is present) is never a no-op: its repair must run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from memwal.core.document import Document
from memwal.errors import BadInputError, UnsafePathError
from memwal.snapshot.engine import LocalSnapshotEngine, SnapshotEngine
from memwal.snapshot.format import (
    INLINE_THRESHOLD,
    STORAGE_FILE,
    STORAGE_INLINE,
    FieldColumn,
    ShardRow,
    SnapshotUnavailableError,
    field_columns,
    snapshot_schema,
)
from memwal.snapshot.guard import JOURNAL_KEY
from memwal.snapshot.locate import read_snapshot
from memwal.table import Table
from memwal.table.manifest import TableManifest
from memwal.table.paths import generation_key
from memwal.table.shards import list_shard_ids

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnsafeGeneration:
    """A generation a shard manifest lists under a path that is refused (invariant 5)."""

    shard_id: str
    generation: int
    detail: str
    reason: str = "unsafe-path"

    def to_dict(self) -> dict[str, str | int]:
        return {"shard_id": self.shard_id, "generation": self.generation, "reason": self.reason,
                "detail": self.detail}


def unsafe_problems(unsafe: Iterable[UnsafeGeneration]) -> list[str]:
    """A snapshot dry run's verdict: one line per generation listed under a refused path."""
    return [f"shard {u.shard_id} generation {u.generation}: {u.reason}: {u.detail}" for u in unsafe]


@dataclass(frozen=True)
class SnapshotPlan(Document):
    """What a snapshot refresh would publish (``memwal snapshot --dry-run``).

    Attributes:
        table: The table's URI.
        read_version: The table version the plan read.
        planned_at_ms: When the shard manifests were read (milliseconds since the epoch).
        inline_threshold: Up to this many shards the snapshot is stored inline in the index, past
            it as a file.
        columns: The shard field columns of the snapshot's rows.
        rows: One row per shard: its manifest version, current and flushed generations.
        previous_snapshot_ts_millis: The published snapshot's time (0: none yet).
        engine: ``"local"`` or ``"spark"``.
        read_seconds: Time spent reading the shard manifests.
        unsafe_generations: Generations a shard manifest lists under a refused path (a dry run
            with any fails).
        noop_reason: Why nothing needs publishing (None: publish).
    """

    table: str
    read_version: int
    planned_at_ms: int
    inline_threshold: int
    columns: tuple[FieldColumn, ...]
    rows: tuple[ShardRow, ...]
    previous_snapshot_ts_millis: int
    engine: str = "local"
    read_seconds: float = 0.0
    #: Generations a shard manifest lists under a refused path: a dry run with any fails (`problems`).
    unsafe_generations: tuple[UnsafeGeneration, ...] = ()
    #: Why nothing needs publishing (None: publish): see `unchanged_reason`.
    noop_reason: str | None = None

    def problems(self) -> list[str]:
        """What makes this dry run a failure: each generation listed under an unsafe path."""
        return unsafe_problems(self.unsafe_generations)

    @property
    def num_shards(self) -> int:
        return len(self.rows)

    @property
    def storage(self) -> str:
        return STORAGE_INLINE if self.num_shards <= self.inline_threshold else STORAGE_FILE

    @property
    def is_noop(self) -> bool:
        return self.noop_reason is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "num_shards": self.num_shards,
            "storage": self.storage,
            "inline_threshold": self.inline_threshold,
            "previous_snapshot_ts_millis": self.previous_snapshot_ts_millis,
            "noop": self.is_noop,
            "reason": self.noop_reason,
            "engine": self.engine,
            "read_seconds": round(self.read_seconds, 3),
            "field_columns": [c.column for c in self.columns],
            "unsafe_generations": [u.to_dict() for u in self.unsafe_generations],
            "shards": [
                {
                    "shard_id": r.shard_id,
                    "version": r.version,
                    "current_generation": r.current_generation,
                    "flushed_generations": [g for g, _ in r.flushed_generations],
                }
                for r in sorted(self.rows, key=lambda r: r.shard_id)
            ],
        }


def plan_snapshot(
    table: Table,
    *,
    inline_threshold: int = INLINE_THRESHOLD,
    reader: SnapshotEngine | None = None,
    force: bool = False,
) -> SnapshotPlan:
    """Read the latest table manifest and every shard's latest manifest (writes nothing).

    ``force`` publishes even when no shard changed (a new timestamp, same rows): for
    benchmarks and tests that need a committing refresh on an idle table.
    """
    if inline_threshold < 0:
        raise BadInputError(f"inline threshold must not be negative, got {inline_threshold}")
    reader = reader or LocalSnapshotEngine()
    manifest = table.require_mem_wal()
    columns = field_columns(manifest.mem_wal)
    planned_at_ms = int(time.time() * 1000)
    start = time.perf_counter()
    shard_ids = list_shard_ids(table.store)
    rows = reader.read_rows(table, shard_ids, columns)
    elapsed = time.perf_counter() - start
    unsafe: list[UnsafeGeneration] = []
    for r in rows:
        for g, p in r.flushed_generations:
            try:
                generation_key(r.shard_id, p)
            except UnsafePathError as exc:
                unsafe.append(UnsafeGeneration(r.shard_id, g, str(exc)))
    plan = SnapshotPlan(
        table=table.uri,
        read_version=manifest.version,
        planned_at_ms=planned_at_ms,
        inline_threshold=inline_threshold,
        columns=tuple(columns),
        rows=tuple(sorted(rows, key=lambda r: r.shard_id)),
        previous_snapshot_ts_millis=manifest.mem_wal.snapshot_ts_millis if manifest.mem_wal else 0,
        engine=reader.name,
        read_seconds=elapsed,
        unsafe_generations=tuple(unsafe),
    )
    return plan if force else replace(plan, noop_reason=unchanged_reason(table, manifest, plan))


def unchanged_reason(table: Table, manifest: TableManifest, plan: SnapshotPlan) -> str | None:
    """Why the snapshot published at ``manifest`` already says what ``plan`` would (None: it does not).

    Republishes when nothing was published, when the published snapshot cannot be read (a
    file Lance's cleanup removed: publishing again is the repair), when the storage or the
    columns would differ (the threshold or the sharding specs changed), when any shard's
    row differs, and when an interrupted refresh left its journal.
    """
    if plan.previous_snapshot_ts_millis <= 0 or table.store.exists(JOURNAL_KEY):
        return None
    try:
        published = read_snapshot(table, manifest)
    except SnapshotUnavailableError as exc:
        log.info("the published snapshot is not readable (%s): publishing a new one", exc)
        return None
    if published is None or published.storage != plan.storage or published.num_shards != plan.num_shards:
        return None
    if published.schema is None or not published.schema.equals(snapshot_schema(plan.columns)):
        return None
    if tuple(sorted(published.rows, key=lambda r: r.shard_id)) != plan.rows:
        return None
    return f"no shard changed since the snapshot published at snapshot_ts_millis={published.snapshot_ts_millis}"
