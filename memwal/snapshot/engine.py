"""Where a snapshot refresh reads the shard manifests: the :class:`SnapshotEngine` protocol, and
reads in-process (:class:`LocalSnapshotEngine`). The task engine
(``memwal.tasks.snapshot``, on Spark or Ray) reads in tasks and satisfies the same protocol. An
engine only reads; a shard whose latest manifest is unknown fails the refresh (see
:func:`read_rows_from_store`), and the guarded commit is :mod:`memwal.snapshot.execute`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from memwal.core.pool import parallel_map
from memwal.snapshot.format import FieldColumn, ShardRow, shard_row
from memwal.table import Table
from memwal.table.shards import latest_shard_manifest

if TYPE_CHECKING:
    from memwal.store import Store

#: Local manifest reads run in this many threads (object stores are latency bound).
LOCAL_READ_THREADS = 16


class SnapshotEngine(Protocol):
    """Reads the latest manifest of many shards and returns their snapshot rows."""

    name: str

    def read_rows(self, table: Table, shard_ids: list[str], columns: list[FieldColumn]) -> list[ShardRow]: ...


def read_rows_from_store(store: Store, shard_ids: Iterable[str], columns: list[FieldColumn]) -> list[ShardRow]:
    """Sequential reads (the unit of work of a thread or a Spark task).

    A shard whose latest manifest is unknown raises ShardManifestError (exit 1, naming the
    shard) and the refresh publishes nothing: leaving the shard out, or publishing an older
    state of it, would hide its newest generations from readers that trust the snapshot.
    Refusing loses nothing: the previous snapshot stays, and readers already read a shard
    from its manifests when the snapshot is behind it.
    """
    out = []
    for sid in shard_ids:
        state = latest_shard_manifest(store, sid)
        if state is not None:
            out.append(shard_row(state, columns))
    return out


class LocalSnapshotEngine:
    """Reads shard manifests in a thread pool on object stores (latency bound), in one thread on a local disk.

    ``threads=None`` chooses: decoding a manifest holds the GIL, so threads only slow a local
    disk down, while S3 reads wait on the network and gain from every thread
    (docs/decisions/0021-snapshot-manifest-reads-threads.md).
    """

    name = "local"

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads

    def read_rows(self, table: Table, shard_ids: list[str], columns: list[FieldColumn]) -> list[ShardRow]:
        from memwal.store import LocalStore

        threads = self.threads or (1 if isinstance(table.store, LocalStore) else LOCAL_READ_THREADS)
        threads = max(1, threads)
        if len(shard_ids) <= 1 or threads == 1:
            return read_rows_from_store(table.store, shard_ids, columns)
        chunks = [shard_ids[i::threads] for i in range(threads)]
        parts = parallel_map(lambda c: read_rows_from_store(table.store, c, columns), chunks, threads,
                             name="memwal-snapshot")
        return [r for part in parts for r in part]
