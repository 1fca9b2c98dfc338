"""Every operand of a generation, for tables with merge operators, read from its WAL entries.

pylance 14's MemTable keeps one version per key: a flushed generation holds only the newest
row of each key written during that generation (observed: puts of 10, 11 and 12 to one key
flush as 12). Last write wins does not mind; a ``sum`` column does, because the 10 and the
11 are operands too. The shard's WAL keeps every put and delete in write order, each entry
naming its generation in its schema metadata, so a folding merge or read takes the
generation's rows from there: its WAL entries in position order, rows in file order.

That is only right if the WAL entries are all there. Reduced last-write-wins, they must
give exactly the generation's rows (same keys, same tombstones); otherwise the generation
is refused rather than folded from a partial history (:class:`OperandsIncompleteError`).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal.core import steps
from memwal.errors import MemWalError, NotFoundError
from memwal.store import Store, open_store
from memwal.table.shards import list_wal_entries, read_wal_entry_meta

TOMBSTONE = "_tombstone"


class OperandsIncompleteError(MemWalError):
    """A generation's WAL entries are missing or do not reproduce it: folding it would lose operands."""


def wal_keys_by_generation(store: Store, shard_id: str, generations: set[int]) -> dict[int, tuple[str, ...]]:
    """Store keys of the WAL entries of each wanted generation, in position order.

    An entry listed and gone before it was read was collected by a concurrent GC, which
    only collects entries of merged generations: it is not one of ours, or our plan is
    stale (a missing operand then stops the shard, and the merge re-reads the progress).
    """
    out: dict[int, list[str]] = {g: [] for g in generations}
    entries = list_wal_entries(store, shard_id)
    steps.step("operands.after-wal-listing")
    for entry in entries:
        try:
            meta = read_wal_entry_meta(store, shard_id, entry.position)
        except NotFoundError:
            continue
        if meta.generation in out:
            out[meta.generation].append(entry.key)
    return {g: tuple(keys) for g, keys in out.items()}


def read_operands(table_uri: str, storage_options: dict | None, wal_keys: tuple[str, ...],
                  rename: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table:
    """The rows of WAL entries in order, with a ``_rowaddr`` giving that order; ``rename``
    names each entry's columns before they are put together (entries written before a
    rename carry the old names)."""
    store = open_store(table_uri, storage_options)
    try:
        tables = [pa.ipc.open_stream(io.BytesIO(store.get(key))).read_all() for key in wal_keys]
    except NotFoundError as exc:  # collected since the plan listed it: the generation was merged meanwhile
        raise OperandsIncompleteError(f"a WAL entry of the generation vanished: {exc}") from exc
    if rename is not None:
        tables = [rename(t) for t in tables]
    rows = pa.concat_tables([t.replace_schema_metadata(None) for t in tables], promote_options="permissive")
    return rows.append_column("_rowaddr", pa.array(np.arange(rows.num_rows, dtype=np.uint64)))


def check_complete(operands: pa.Table, flushed: pa.Table, primary_key: list[str], where: str) -> None:
    """Refuse operands that do not reduce (last write wins) to the flushed generation."""

    def same(a: pa.Table, b: pa.Table) -> bool:
        try:
            return a.num_rows == b.num_rows and a.equals(b.cast(a.schema))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # types that cannot agree
            return False

    if operands.num_rows < flushed.num_rows or not same(newest(operands, primary_key),
                                                        newest(flushed, primary_key)):
        raise OperandsIncompleteError(
            f"{where}: its WAL entries do not reproduce it, so the operands of its merge operators are incomplete; "
            "it cannot be folded (merge with no operators, or restore the WAL entries)"
        )


def newest(t: pa.Table, primary_key: list[str]) -> pa.Table:
    """Each key's last row (key and tombstone only), sorted by key.

    A stable sort by key keeps each key's rows in write order, so a key's last row is the one
    whose next neighbour has another key: one sort and one comparison of neighbours, as
    tables, never Python objects. This runs for every generation of a folding merge; Arrow's
    hash aggregation cost several milliseconds per generation of a few thousand rows in
    setting up its plan (issue 23: merge operators within 1.5x of a merge without).
    """
    t = t.select([*primary_key, TOMBSTONE])
    n = t.num_rows
    if n < 2:
        return t
    t = t.take(pc.sort_indices(t, sort_keys=[(k, "ascending") for k in primary_key]))
    ends = None
    for k in primary_key:
        ahead, behind = t.column(k).slice(0, n - 1), t.column(k).slice(1)
        differs = pc.not_equal(ahead, behind)
        if ahead.null_count or behind.null_count:  # a null key equals a null key, nothing else
            differs = pc.if_else(pc.or_(pc.is_null(ahead), pc.is_null(behind)),
                                 pc.not_equal(pc.is_null(ahead), pc.is_null(behind)), differs)
        ends = differs if ends is None else pc.or_(ends, differs)
    return t.filter(pa.chunked_array([*ends.chunks, pa.array([True])]))
