"""Where a batch's keys live in the base table, and the deletion files that retire those rows.

Run where the batch's rows are (Spark executors), for the driverless commit
(:mod:`memwal.merge.driverless`); nothing here commits.

* :func:`base_key_rows`: the key columns and row addresses of the live base rows of some keys
  at one table version (:func:`base_addresses`: the addresses alone). The join is chosen like
  ``merge_insert``'s (:func:`memwal.merge.join.use_key_index`), so that finding a batch's rows
  costs what the merge's own join does, never more: few keys for the base's size are looked up
  through Lance's filter (its scalar index when the key has one), in chunks; any other batch is
  matched against one scan of the key columns (in batches of :data:`SCAN_BATCH_ROWS` rows for a
  fixed-width key, of decoded bytes for a key of strings: Lance's own 8,192-row batches made the
  per-batch work half the check at 16M rows), the batch's keys indexed once for the whole scan
  (:class:`memwal.merge.keys.IntKeySet`; indexing them again for each of the base's batches made
  the merge's key check 30 times its floor at 16M rows, issue 82). Text filters are built from
  integers only, never from key text read from storage; other keys go to Lance as an Arrow
  expression.
* :func:`retire`: one new deletion file per base fragment (``LanceFragment.delete_rows``,
  merged with the fragment's deletions at that version), or none left: the fragment's id.
  Two calls for one fragment would write two files each missing the other's rows, so a
  caller hands each fragment's addresses to exactly one call (the engine groups them by
  fragment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata, LanceFragment

from memwal.core.pool import parallel_map
from memwal.merge.batches import fixed_width_bytes
from memwal.merge.changes import SCAN_BATCH_ROWS, key_mask
from memwal.merge.join import use_key_index
from memwal.merge.keys import IntKeySet, int_key
from memwal.merge.newest import bounded_scanner

#: Keys per filtered lookup through the key index.
INDEX_CHUNK_KEYS = 1_000
#: Fragments whose deletion files one call writes side by side.
RETIRE_THREADS = 4
#: A column name a filter may name unquoted.
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ROWADDR = "_rowaddr"


def base_key_rows(ds: lance.LanceDataset, keys: pa.Table, primary_key: list[str]) -> pa.Table:
    """The key columns and row address (``_rowaddr``, uint64: fragment id << 32 | offset) of
    ``ds``'s live rows whose key is among ``keys``' (see the module docstring). Memory follows the
    rows found: the scan's batches are bounded by decoded bytes and only matching rows are kept."""
    schema = pa.schema([*(ds.schema.field(k) for k in primary_key), pa.field(ROWADDR, pa.uint64())])
    if keys.num_rows == 0:
        return schema.empty_table()
    wanted = int_key(keys, primary_key)
    base_rows = ds.count_rows()
    column = keys.column(primary_key[0])
    if len(primary_key) == 1 and column.null_count == 0 and use_key_index(keys.num_rows, base_rows):
        if wanted is not None and pa.types.is_signed_integer(column.type) and _PLAIN_NAME.match(primary_key[0]):
            distinct = sorted_unique(wanted)
            filters: list[object] = [
                f"{primary_key[0]} IN ({','.join(str(int(v)) for v in distinct[start:start + INDEX_CHUNK_KEYS])})"
                for start in range(0, len(distinct), INDEX_CHUNK_KEYS)]
        elif column.type.equals(schema.field(0).type):
            values = column.combine_chunks()
            filters = [pc.field(primary_key[0]).isin(values.slice(start, INDEX_CHUNK_KEYS))
                       for start in range(0, len(values), INDEX_CHUNK_KEYS)]
        else:  # a key typed unlike the base's: matched by the scan's join below
            filters = []
        if filters:
            found = [ds.scanner(columns=primary_key, filter=f, with_row_address=True).to_table() for f in filters]
            return pa.concat_tables([t.select([*primary_key, ROWADDR]) for t in found]).cast(schema)
    among = IntKeySet(wanted, base_rows) if wanted is not None else None
    kept = []
    if all(fixed_width_bytes(f.type) is not None for f in schema):  # a row's width is known: batches by rows
        scanner = ds.scanner(columns=primary_key, with_row_address=True, batch_size=SCAN_BATCH_ROWS)
    else:  # a key of strings may be any width: batches by decoded bytes
        scanner = bounded_scanner(ds, primary_key, with_row_address=True)
    for batch in scanner.to_batches():
        values = int_key(batch, primary_key) if among is not None else None
        if among is not None and values is not None:
            mask = among.contains(values)
        else:  # other keys, or a null in the base's key (no key of the batch): the join
            mask = key_mask(pa.Table.from_batches([batch]).select(primary_key), keys.select(primary_key), primary_key)
        if mask.any():
            kept.append(pa.Table.from_batches([batch]).select([*primary_key, ROWADDR]).filter(pa.array(mask)))
    return pa.concat_tables(kept).cast(schema) if kept else schema.empty_table()


def base_addresses(ds: lance.LanceDataset, keys: pa.Table, primary_key: list[str]) -> np.ndarray:
    """Row addresses (uint64: fragment id << 32 | offset) of ``ds``'s live rows whose key is
    among ``keys``' (:func:`base_key_rows`)."""
    found = base_key_rows(ds, keys, primary_key).column(ROWADDR)
    return found.to_numpy() if found.num_chunks else np.zeros(0, dtype=np.uint64)


def by_fragment(addresses: np.ndarray) -> dict[int, np.ndarray]:
    """Row addresses grouped by fragment id: each fragment's offsets (uint32, sorted, unique).
    One sort of the addresses, then one split at the fragment boundaries."""
    ordered = sorted_unique(addresses.astype(np.uint64, copy=False))
    if not len(ordered):
        return {}
    fragment = ordered >> np.uint64(32)
    edges = np.flatnonzero(fragment[1:] != fragment[:-1]) + 1
    return {int(chunk[0] >> np.uint64(32)): (chunk & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            for chunk in np.split(ordered, edges)}


def retire(ds: lance.LanceDataset, offsets: dict[int, np.ndarray],
           threads: int = RETIRE_THREADS) -> list[tuple[int, FragmentMetadata | None]]:
    """Per fragment, its metadata with a new deletion file for ``offsets`` (None: no row
    left). One call per fragment and batch (module docstring)."""

    def one(item: tuple[int, np.ndarray]) -> tuple[int, FragmentMetadata | None]:
        fid, offs = item
        return fid, LanceFragment(ds, fid).delete_rows(offs.tolist())

    return parallel_map(one, sorted(offsets.items()), threads, name="memwal-retire")


def merge_offsets(parts: Iterable[tuple[int, bytes]]) -> dict[int, np.ndarray]:
    """Offsets of one fragment sent by several tasks (uint32 bytes), joined per fragment."""
    out: dict[int, list[np.ndarray]] = {}
    for fid, raw in parts:
        out.setdefault(fid, []).append(np.frombuffer(raw, dtype=np.uint32))
    return {fid: sorted_unique(np.concatenate(arrays)) for fid, arrays in out.items()}


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``a`` sorted without repeats: one sort and one neighbour compare (NumPy's own ``unique``
    hashes integers, far slower on millions of keys: docs/decisions/0005-spark-merge-shapes.md)."""
    ordered = np.sort(a)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered
