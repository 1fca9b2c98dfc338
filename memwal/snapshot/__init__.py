"""Shard snapshot refresh: publish every shard's state in the MemWAL index (spec: "Shard Snapshot Storage").

One module per job:

* :mod:`memwal.snapshot.format`: the rows, the spec's Arrow schema and the Lance-file codec;
* :mod:`memwal.snapshot.locate`: reading a published snapshot, inline or in a file (hazard H3);
* :mod:`memwal.snapshot.plan`: every shard's latest manifest as a row, and whether anything
  changed since the published snapshot (an idle refresh commits nothing);
* :mod:`memwal.snapshot.guard`: the replacement of the ``__lance_mem_wal`` details that
  never loses progress committed concurrently (hazard H1), and its crash journal;
* :mod:`memwal.snapshot.execute`: encode, store, commit through the guard;
* :mod:`memwal.snapshot.versions`: table manifests by version, shared by the locator and the guard.

This package re-exports what callers use, so ``from memwal.snapshot import ...`` keeps working;
each module loads when one of its names is first asked for (a read needs the format and the
locator, not the refresh job: a new process's first read pays only for what it uses).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports a module on first use
    from memwal.snapshot.engine import LOCAL_READ_THREADS, LocalSnapshotEngine, SnapshotEngine, read_rows_from_store
    from memwal.snapshot.execute import SnapshotResult, execute_snapshot, run_snapshot, unchanged_result
    from memwal.snapshot.format import (
        FIELD_COLUMN_PREFIX,
        FLUSHED_TYPE,
        INLINE_THRESHOLD,
        SNAPSHOT_FILE,
        STORAGE_FILE,
        STORAGE_INLINE,
        TS_METADATA_KEY,
        FieldColumn,
        ShardRow,
        SnapshotUnavailableError,
        arrow_type_of,
        decode_lance_file,
        decode_snapshot_bytes,
        encode_lance_file,
        field_columns,
        rows_to_table,
        shard_row,
        snapshot_file_key,
        snapshot_schema,
        table_to_rows,
    )
    from memwal.snapshot.guard import JOURNAL_KEY, GuardedCommit, Step, commit_mem_wal_details
    from memwal.snapshot.locate import LoadedSnapshot, read_snapshot
    from memwal.snapshot.plan import SnapshotPlan, plan_snapshot, unchanged_reason
    from memwal.snapshot.slots import (
        CONFIG_FIELDS,
        Slot,
        analyse_round,
        apply_slots,
        describe_slot,
        desired_after,
        slots_of,
    )

#: Each module's names: a module is imported when one of its names is first asked for.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "memwal.snapshot.engine": ("LOCAL_READ_THREADS", "LocalSnapshotEngine", "SnapshotEngine", "read_rows_from_store"),
    "memwal.snapshot.execute": ("SnapshotResult", "execute_snapshot", "run_snapshot", "unchanged_result"),
    "memwal.snapshot.format": (
        "FIELD_COLUMN_PREFIX", "FLUSHED_TYPE", "FieldColumn", "INLINE_THRESHOLD", "SNAPSHOT_FILE",
        "STORAGE_FILE", "STORAGE_INLINE", "ShardRow", "SnapshotUnavailableError", "TS_METADATA_KEY",
        "arrow_type_of", "decode_lance_file", "decode_snapshot_bytes", "encode_lance_file", "field_columns",
        "rows_to_table", "shard_row", "snapshot_file_key", "snapshot_schema", "table_to_rows",
    ),
    "memwal.snapshot.guard": ("GuardedCommit", "JOURNAL_KEY", "Step", "commit_mem_wal_details"),
    "memwal.snapshot.locate": ("LoadedSnapshot", "read_snapshot"),
    "memwal.snapshot.plan": ("SnapshotPlan", "plan_snapshot", "unchanged_reason"),
    "memwal.snapshot.slots": (
        "CONFIG_FIELDS", "Slot", "analyse_round", "apply_slots", "describe_slot", "desired_after", "slots_of",
    ),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "CONFIG_FIELDS",
    "FIELD_COLUMN_PREFIX",
    "FLUSHED_TYPE",
    "INLINE_THRESHOLD",
    "JOURNAL_KEY",
    "LOCAL_READ_THREADS",
    "SNAPSHOT_FILE",
    "STORAGE_FILE",
    "STORAGE_INLINE",
    "TS_METADATA_KEY",
    "FieldColumn",
    "GuardedCommit",
    "LoadedSnapshot",
    "LocalSnapshotEngine",
    "ShardRow",
    "Slot",
    "SnapshotEngine",
    "SnapshotPlan",
    "SnapshotResult",
    "SnapshotUnavailableError",
    "Step",
    "analyse_round",
    "apply_slots",
    "arrow_type_of",
    "commit_mem_wal_details",
    "decode_lance_file",
    "decode_snapshot_bytes",
    "describe_slot",
    "desired_after",
    "encode_lance_file",
    "execute_snapshot",
    "field_columns",
    "plan_snapshot",
    "read_rows_from_store",
    "read_snapshot",
    "rows_to_table",
    "run_snapshot",
    "shard_row",
    "slots_of",
    "snapshot_file_key",
    "snapshot_schema",
    "table_to_rows",
    "unchanged_reason",
    "unchanged_result",
]


def __getattr__(name: str) -> object:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'memwal.snapshot' has no attribute {name!r}")
