"""Planning a compaction with Lance's own planner, and what the commit must keep.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from lance.optimize import Compaction, CompactionOptions, CompactionTask

from memwal.core.document import Document, as_document
from memwal.errors import MemWalError, first_line
from memwal.table import Table
from memwal.table.manifest import TableManifest, maintained_indexes


def lance_options(*, target_rows_per_fragment: int | None = None, max_rows_per_group: int | None = None,
                  materialize_deletions_threshold: float | None = None,
                  max_fragments: int | None = None) -> CompactionOptions:
    """Lance's ``CompactionOptions`` (unset values keep Lance's and the table config's defaults)."""
    out: CompactionOptions = {}
    if target_rows_per_fragment is not None:
        out["target_rows_per_fragment"] = target_rows_per_fragment
    if max_rows_per_group is not None:
        out["max_rows_per_group"] = max_rows_per_group
    if materialize_deletions_threshold is not None:
        out["materialize_deletions_threshold"] = materialize_deletions_threshold
    if max_fragments is not None:
        out["max_source_fragments"] = max_fragments
    return out


@dataclass(frozen=True)
class TaskPlan:
    """One rewrite group: adjacent fragments Lance will rewrite as one or a few fragments."""

    fragment_ids: tuple[int, ...]
    rows: int
    deleted_rows: int


@dataclass(frozen=True)
class CompactPlan(Document):
    """What a compaction would rewrite (``memwal compact --dry-run``).

    Attributes:
        table: The table's URI.
        read_version: The table version the plan read.
        options: Lance's compaction options, as resolved from the job's.
        fragments_before: Fragments at the read version.
        compacted: Each shard's merged generation: the progress the commit keeps.
        index_catchup: Each index's catch-up per shard at the read version.
        indexes: The maintained indexes, whose catch-up the run re-earns.
        tasks: The rewrite tasks: fragments and deleted rows each rewrites.
        lance_tasks: Lance's own task objects, in the order of ``tasks`` (not in the JSON).
        catchup_repair: With nothing to compact, indexes an earlier compaction left without their
            catch-up record (the run re-earns it).
    """

    table: str
    read_version: int
    options: CompactionOptions
    fragments_before: int
    compacted: dict[str, int]
    index_catchup: dict[str, dict[str, int]]
    indexes: tuple[str, ...]
    tasks: tuple[TaskPlan, ...] = ()
    #: Lance's task objects, in the order of ``tasks`` (picklable; not part of the JSON).
    lance_tasks: tuple[CompactionTask, ...] = field(default=(), repr=False)
    #: With nothing to compact: maintained indexes an earlier compaction left without their
    #: catch-up record (it committed, then stopped before re-earning it): re-earned by the run.
    catchup_repair: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return not self.tasks

    def catchup_to_keep(self) -> dict[str, dict[str, int]]:
        """The catch-up recorded at the read version for the maintained indexes: what the
        compaction must leave recorded (or higher) when it is done."""
        return {name: shards for name, shards in self.index_catchup.items() if name in self.indexes}

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "options": self.options,
            "fragments_before": self.fragments_before,
            "fragments_to_rewrite": sum(len(t.fragment_ids) for t in self.tasks),
            "deletions_to_materialize": sum(t.deleted_rows for t in self.tasks),
            "compacted": self.compacted,
            "index_catchup": self.index_catchup,
            "tasks": [as_document(t) for t in self.tasks],
            "catchup_repair": list(self.catchup_repair),
        }


def plan_compaction(table: Table, options: CompactionOptions | None = None,
                    manifest: TableManifest | None = None) -> CompactPlan:
    """Pure: which fragments Lance would rewrite (with Lance's compaction ``options``, see
    :func:`lance_options`), and the progress the commit must keep."""
    manifest = manifest or table.require_mem_wal()
    ds = table.dataset(manifest.version)
    lance_opts: CompactionOptions = {**options} if options else {}
    try:
        lance_plan = Compaction.plan(ds, lance_opts)
    except (ValueError, OSError, RuntimeError) as exc:
        raise MemWalError(f"{table.uri}: cannot plan the compaction: {first_line(exc)}") from exc
    tasks = [(task, list(task.fragments)) for task in lance_plan.tasks]
    plan = CompactPlan(
        table=table.uri,
        read_version=manifest.version,
        options=lance_opts,
        fragments_before=len(ds.get_fragments()),
        compacted=dict(manifest.compacted),
        index_catchup={k: dict(v) for k, v in manifest.index_catchup.items()},
        indexes=tuple(maintained_indexes(manifest)),
        tasks=tuple(TaskPlan(tuple(f.id for f in frags), sum(f.num_rows for f in frags),
                             sum(f.num_deletions for f in frags)) for _, frags in tasks),
        lance_tasks=tuple(task for task, _ in tasks),
    )
    return replace(plan, catchup_repair=tuple(dropped_catchup(table, manifest))) if plan.is_empty() else plan


def dropped_catchup(table: Table, manifest: TableManifest) -> list[str]:
    """Maintained indexes left without a catch-up record by an earlier compaction.

    The signature of a compaction that committed but crashed before re-earning: progress
    exists, the index covers every row (nothing unindexed), yet no record. An index that
    merely lags after a merge has unindexed rows, and is the catch-up job's business.
    """
    if not manifest.compacted:
        return []
    ds = table.dataset(manifest.version)
    out = []
    for name in maintained_indexes(manifest):
        if name in manifest.index_catchup:
            continue
        try:
            unindexed = int(ds.stats.index_stats(name).get("num_unindexed_rows", 0))
        except (ValueError, OSError, RuntimeError):
            continue
        if unindexed == 0:
            out.append(name)
    return out
