"""Writing one rollup: the run's newest rows, flushed by Lance's own writer, moved into the shard.

The rows: each key's newest version across the run (highest generation, then row position), a
tombstone kept as a delete. A run whose rows decode to at most a batch (:data:`BATCH_BYTES`, as
read) is read once, whole; a larger one's newest versions are found from the key columns alone
and fetched by position in batches of bounded decoded size (:mod:`memwal.merge.newest`): the
writer's MemTable holds them all, so
a run that would decode past :data:`memwal.rollup.plan.MAX_DECODED_BYTES` is refused before a
row is written, never read whole (issue 61). Clients read a run so, whatever merge operators the
table declares (they fold only into the base), so a rollup never folds.

The folder: no client reads a generation by its rows alone. pylance 14 and lance-context (Lance
9) open its Lance manifest, its primary-key index (``_pk_index/``), its bloom filter and the
maintained indexes under ``_indices/``, in the format and data storage version the table's
writers use. Rather than re-implement those files, the rollup is flushed by a real
``ShardWriter`` on a shallow clone of the base table (same schema, storage version, MemWAL
configuration and index definitions; only metadata is copied) under our own
``_mem_wal/_staging/rollup-<id>/``, which no client lists. The rollup marker is written into its
one generation, which then becomes a fresh ``<8 hex>_gen_<g>`` folder of the shard: on a disk by
one rename (its files fsynced first), elsewhere copied file by file, its Lance manifests last, each
created only if absent; then the staging is removed. The copy read and wrote each of some twenty
files again, a tenth of a rollup's CPU on a disk (issue 82). Nothing lists the new folder until the
shard manifest does (:func:`memwal.gc.drain.write_compaction`); a crash before that leaves an
unlisted folder the orphans collector takes.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa

from memwal.core import steps
from memwal.errors import MemWalError, first_line
from memwal.merge.newest import BATCH_BYTES, OpenGenerations, batch_rows, fetch, newest_versions, row_width
from memwal.merge.read import TOMBSTONE
from memwal.merge.refs import generation_refs
from memwal.rollup.marker import marker_bytes, stands_from
from memwal.rollup.plan import MAX_DECODED_BYTES, RollupPlan
from memwal.store import Store
from memwal.table import Table
from memwal.table.naming import MEM_WAL_DIR, ROLLUP_MARKER, STAGING_DIR, parse_generation_dir, shard_dir
from memwal.table.schema import primary_key_of

log = logging.getLogger(__name__)

#: The writer's MemTable must hold the whole rollup (one flush, one generation): its byte budget
#: is the rows' Arrow bytes times this, plus :data:`_MEMTABLE_SLACK`.
_MEMTABLE_FACTOR = 3
_MEMTABLE_SLACK = 64 << 20
#: The writer's ceiling on unflushed bytes (backpressure, not an allocation) must hold the MemTable
#: and what its in-memory indexes reserve (a fixed part and some bytes a row); the writer refuses
#: a ceiling below that, so it is set generously.
_INDEX_RESERVE = 256 << 20
_INDEX_BYTES_PER_ROW = 1024
#: Rows per ``put``: the writer counts batches against ``max_memtable_batches`` (8,000).
_PUT_ROWS = 65_536


class RollupError(MemWalError):
    """A rollup could not be written (its shard keeps its run listed; nothing else changes)."""


@dataclass(frozen=True)
class WrittenRollup:
    """A rollup folder on storage, not listed yet."""

    shard_id: str
    generation: int
    path: str
    rows: int
    bytes: int
    replaces: tuple[tuple[int, str], ...]
    #: Its rows' decoded size (what a later rollup of it will hold in memory).
    decoded: int | None = None
    #: A generation rewritten with its key index (memwal.rollup.plan.plan_heals).
    heal: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"shard_id": self.shard_id, "generation": self.generation, "path": self.path, "rows": self.rows,
                "bytes": self.bytes, "replaces": [{"generation": g, "path": p} for g, p in self.replaces],
                "heal": self.heal}


@dataclass(frozen=True)
class RollupRows:
    """A run's newest rows, ready to stream: upserts fetched in batches, deleted keys."""

    upserts: Callable[[], Iterator[pa.Table]]
    upsert_count: int
    deletes: pa.Table
    #: The upserts' decoded size, estimated from a sample of them.
    decoded: int


def rollup_rows(table: Table, ds: lance.LanceDataset, plan: RollupPlan, *,
                max_decoded: int = MAX_DECODED_BYTES, held_bytes: int = BATCH_BYTES) -> RollupRows:
    """The run's newest rows in the schema of the base table ``ds`` (see the module docstring):
    read whole when they decode to at most ``held_bytes``, else keys first, rows fetched by
    position in bounded batches. RollupError when they would decode to more than ``max_decoded``
    bytes (the writer holds them all in its MemTable)."""
    schema = ds.schema
    pk = primary_key_of(table, ds)
    refs = generation_refs(table, ds, plan.shard_id, [(e.generation, e.path) for e in plan.entries])
    gens = OpenGenerations(refs, pk, table.storage_options)
    gens.hold(schema, held_bytes)  # a few small flushes: read once, whole (else keys first, rows by position)
    newest = newest_versions(gens, range(len(refs)), ())
    tomb = newest.column(TOMBSTONE).to_numpy(zero_copy_only=False) if newest.num_rows else np.zeros(0, bool)
    deletes = newest.filter(pa.array(tomb)).select(pk).cast(pa.schema([schema.field(k) for k in pk]))
    ups = newest.filter(pa.array(~tomb))
    width = row_width(gens, ups, schema)  # a sample of rows read once: the bound and the batches
    decoded = width * ups.num_rows
    if decoded > max_decoded:
        raise RollupError(f"shard {plan.shard_id}: the run {plan.entries[0].generation}-{plan.generation} decodes to "
                          f"about {decoded:,} bytes, more than a rollup holds ({max_decoded:,}): left listed as it is")
    step = batch_rows(width)

    def batches() -> Iterator[pa.Table]:
        for start in range(0, ups.num_rows, step):
            idx = np.arange(start, min(start + step, ups.num_rows))
            yield fetch(gens, ups, idx, schema).cast(schema)

    return RollupRows(batches, ups.num_rows, deletes, decoded)


def write_rollup(table: Table, plan: RollupPlan, *, remove_staging: Callable[[str], None]) -> WrittenRollup:
    """Write ``plan``'s rollup folder into its shard (see the module docstring); not listed yet.

    ``remove_staging`` deletes a staging prefix (GC's own deletion, link-safe). RollupError when
    a generation of the run cannot be read (another compactor may have removed it meanwhile)."""
    ds = table.dataset()  # one open for the rows' schema and the clone the rollup is flushed in
    try:
        rows = rollup_rows(table, ds, plan)
    except RollupError:
        raise
    except (MemWalError, OSError, ValueError, RuntimeError, pa.ArrowException) as exc:
        raise RollupError(f"shard {plan.shard_id}: the run {plan.entries[0].generation}-{plan.generation} cannot "
                          f"be read: {first_line(exc, table.uri)}") from exc
    staging = f"{STAGING_DIR}/rollup-{uuid.uuid4().hex[:16]}"
    try:
        flushed = _flush_in_clone(table, ds, plan.shard_id, staging, rows)
        steps.step("rollup.staged")  # flushed in the staging clone; nothing in the shard yet
        path = _fresh_name(table.store, plan.shard_id, plan.generation)
        low = min(stands_from(table.store, plan.shard_id, e.path, e.generation) for e in plan.entries)
        target = f"{shard_dir(plan.shard_id)}/{path}"
        try:
            size = _place_folder(table.store, flushed, target,
                                 marker=marker_bytes([(e.generation, e.path) for e in plan.entries], low))
        except (MemWalError, OSError) as exc:
            raise RollupError(f"shard {plan.shard_id}: the rollup cannot be placed at "
                              f"{table.store.uri_for(target)}: {first_line(exc, table.uri)}") from exc
        steps.step("rollup.written")  # the folder whole in the shard, unlisted; the staging still there
    finally:
        remove_staging(staging)
    log.info("rollup of shard %s: generations %s as %s (%d rows, %d deletes)", plan.shard_id,
             ",".join(str(e.generation) for e in plan.entries), path, rows.upsert_count, rows.deletes.num_rows)
    return WrittenRollup(plan.shard_id, plan.generation, path, rows.upsert_count + rows.deletes.num_rows, size,
                         tuple((e.generation, e.path) for e in plan.entries), rows.decoded, plan.heal)


def _flush_in_clone(table: Table, ds: lance.LanceDataset, shard_id: str, staging: str, rows: RollupRows) -> str:
    """Flush the rows as one generation of ``shard_id`` in a shallow clone of the base ``ds`` at
    ``staging``; the store key of that generation's folder."""
    try:
        clone = ds.shallow_clone(table.store.uri_for(staging), ds.version,
                                 storage_options=table.storage_options or None)
    except (OSError, ValueError, RuntimeError) as exc:
        raise RollupError(f"shard {shard_id}: cannot stage a rollup at {table.store.uri_for(staging)}: {exc}") from exc
    count = rows.upsert_count + rows.deletes.num_rows
    memtable = _MEMTABLE_FACTOR * (rows.decoded + rows.deletes.nbytes) + _MEMTABLE_SLACK
    ceiling = memtable + _INDEX_RESERVE + _INDEX_BYTES_PER_ROW * (count + 1)
    writer = clone.mem_wal_writer(shard_id, durable_write=False, max_memtable_rows=count + 1,
                                  max_memtable_size=memtable, max_memtable_batches=1 << 20,
                                  max_unflushed_memtable_bytes=ceiling, stats_log_interval_ms=0)
    try:
        for t in rows.upserts():
            for batch in t.to_batches(max_chunksize=_PUT_ROWS):
                writer.put(pa.Table.from_batches([batch], schema=t.schema))
        if rows.deletes.num_rows:
            writer.delete(rows.deletes)
    finally:
        writer.close()
    prefix = f"{staging}/{MEM_WAL_DIR}/{shard_id}/"
    gens = [d for d in table.store.list_dirs(prefix) if parse_generation_dir(d) is not None]
    if len(gens) != 1:
        raise RollupError(f"shard {shard_id}: the rollup writer flushed {len(gens)} generations, expected one")
    return prefix + gens[0]


def _fresh_name(store: Store, shard_id: str, generation: int) -> str:
    """A ``<8 hex>_gen_<g>`` name no folder of the shard has: each name drawn is looked up alone
    (a shard keeps a week of folders: listing them all at every rollup grew with the table's age,
    issue 82), and the copy's put-if-absent of every object refuses a name taken meanwhile."""
    while True:
        name = f"{secrets.token_hex(4)}_gen_{generation}"
        prefix = f"{shard_dir(shard_id)}/{name}/"
        keys, folders = store.list_level(prefix)
        if not keys and not folders and not store.list_links(prefix, recursive=False):
            return name


def _place_folder(store: Store, source: str, target: str, *, marker: bytes) -> int:
    """Make the staged folder ``source`` the rollup's ``target`` (created only if absent), with
    the rollup marker (:data:`ROLLUP_MARKER`: what the rollup replaces) in it. On a disk the marker
    is written into ``source``, which is then moved by one rename (:meth:`Store.move_folder`);
    elsewhere (or when the move cannot be made) it is copied object by object, the marker put
    into ``target`` directly, the Lance manifests last: a folder cut short by a crash has none,
    and no reader can open it. Bytes placed."""
    marked = store.has_directories  # the marker goes in with the folder's one rename
    if marked:
        store.put_if_absent(f"{source}/{ROLLUP_MARKER}", marker)
        moved = store.move_folder(source, target)
        if moved is not None:
            return moved
    objects = list(store.list(source + "/"))

    def copy(keys: list[str]) -> int:
        size = 0
        for key in keys:
            data = store.get(key)
            store.put_if_absent(target + key[len(source):], data)
            size += len(data)
        return size

    size = copy([o.key for o in objects if "/_versions/" not in o.key])  # the marker among them when marked
    if not marked:  # an object store: no PUT and GET of the marker through the staging
        store.put_if_absent(f"{target}/{ROLLUP_MARKER}", marker)
        size += len(marker)
    steps.step("rollup.copied")  # rows, key index, bloom filter and marker in the shard, no Lance manifest: unopenable
    return size + copy([o.key for o in objects if "/_versions/" in o.key])


__all__ = ["RollupError", "WrittenRollup", "rollup_rows", "write_rollup"]
