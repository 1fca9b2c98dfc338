"""Reader helper: shard snapshots for pylance's LSM readers, listing only unmerged generations.

Listing only generations above the merge progress means a pylance reader never opens a
generation that GC may collect (``LsmScanner`` fails, it does not skip, when a listed
generation is missing: DESIGN.md section 4).
"""

from __future__ import annotations

import pyarrow as pa
from lance.mem_wal import LsmScanner, ShardSnapshot

from memwal.shard_manifests import all_shard_manifests
from memwal.table import Table
from memwal.table_manifest import TableManifest


def shard_snapshots(
    table: Table, *, manifest: TableManifest | None = None, include_merged: bool = False
) -> list[ShardSnapshot]:
    """One snapshot per shard from the shard manifests (authoritative for shard state)."""
    manifest = manifest or table.require_mem_wal()
    out = []
    for shard_id, state in all_shard_manifests(table.store).items():
        compacted = manifest.compacted_generation(shard_id)
        snap = ShardSnapshot(shard_id).with_current_generation(state.current_generation)
        if state.manifest.shard_spec_id:
            snap = snap.with_spec_id(state.manifest.shard_spec_id)
        for g in state.flushed:
            if include_merged or g.generation > compacted:
                state.generation_key(g)  # refuse unsafe paths before a reader opens them
                snap = snap.with_sstable(g.generation, g.path)
        out.append(snap)
    return out


def lsm_scan(
    table: Table,
    *,
    columns: list[str] | None = None,
    filter: str | None = None,
    limit: int | None = None,
    snapshots: list[ShardSnapshot] | None = None,
) -> pa.Table:
    """The rows a reader sees: base table merged with unmerged generations by primary key."""
    manifest = table.require_mem_wal()
    ds = table.dataset(manifest.version)
    scanner = LsmScanner.from_snapshots(
        ds, snapshots if snapshots is not None else shard_snapshots(table, manifest=manifest)
    )
    if columns:
        scanner = scanner.project(columns)
    if filter:
        scanner = scanner.filter(filter)
    if limit is not None:
        scanner = scanner.limit(limit)
    return scanner.to_table()
