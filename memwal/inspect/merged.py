"""`memwal verify`'s proof that merged data is in the base table (check ``merged-data-in-base``).

Merge progress (``compacted_sstables``) only *says* a generation is merged; whoever can commit
to the table can make it say so with no row written (a forged data commit, issue 47). While a
merged generation is still on storage its rows are the evidence, so verify reads them back:

* per shard, the generation folders on storage from the merged generation downward, stopping
  at the first one that is gone, unreadable or holds a link (GC collects the oldest first; below
  a collected generation a key may have a newer version nobody can read any more, so nothing
  there can be proven);
* each key's newest version among them (highest generation) must be in the base table at the
  verified version: with the same value in every column the base still has (a column with a
  merge operator excepted: its value folds the base's), or absent for a deletion;
* a key held by two shards counts as proven when either shard's version matches.

The first key that fails, in key order, is named with its generation and how it fails, and
the count of such keys. A direct write to the base (outside the MemWAL) of a key still held
by a merged generation on storage shows here too, until GC collects that generation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import MemWalError, first_line
from memwal.merge.changes import key_mask
from memwal.merge.columns import BaseFields, dataset_field_ids, renames, to_base_names
from memwal.merge.keys import key_codes
from memwal.merge.ops import table_merge_ops
from memwal.table import Table
from memwal.table.generations import open_generation
from memwal.table.manifest import TableManifest
from memwal.table.naming import shard_dir
from memwal.table.schema import primary_key_of
from memwal.table.shards import ShardState, generation_links, generation_readable, list_generation_dirs

CHECK = "merged-data-in-base"
TOMBSTONE = "_tombstone"
_GEN, _SHARD = "__verify_gen", "__verify_shard"
#: Rows of the base table scanned at once while looking for the merged keys.
_SCAN_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class Unproven:
    """A shard's first key whose merged version the base table does not hold."""

    shard_id: str
    detail: str


def merged_generations(table: Table, shard_id: str, compacted: int, state: ShardState | None) -> list[tuple[int, str]]:
    """``(generation, key)`` of the merged generations on storage that can prove something (see
    the module docstring), highest first."""
    by_number: dict[int, list[str]] = {}
    for name, g in list_generation_dirs(table.store, shard_id).items():
        by_number.setdefault(g, []).append(f"{shard_dir(shard_id)}/{name}")
    out = []
    for g in range(compacted, 0, -1):
        listed = state.generation(g) if state is not None else None
        keys = [state.generation_key(listed)] if state is not None and listed is not None else by_number.get(g, [])
        if len(keys) != 1 or keys[0] not in by_number.get(g, []):
            break
        key = keys[0]
        if not generation_readable(table.store, key) or generation_links(table.store, key):
            break
        out.append((g, key))
    return out


def unproven_merges(table: Table, manifest: TableManifest, states: dict[str, ShardState]) -> list[Unproven]:
    """Per shard, the first merged key the base table does not hold (empty: all proven)."""
    ds = table.dataset(manifest.version)
    pk = primary_key_of(table)
    fields = BaseFields.of(ds)
    folding = set(table_merge_ops(table, manifest.version).folding_columns())
    parts = []
    codes_of = sorted(manifest.compacted)
    for code, sid in enumerate(codes_of):
        for g, key in merged_generations(table, sid, manifest.compacted_generation(sid), states.get(sid)):
            uri = table.store.uri_for(key)
            try:
                gen = open_generation(uri, table.storage_options)
                rows = to_base_names(gen.to_table(), renames(dataset_field_ids(gen), fields, uri))
            except (MemWalError, OSError, ValueError, RuntimeError, pa.ArrowException) as exc:
                return [Unproven(sid, f"merged generation {g} ({uri}) cannot be read: {first_line(exc, uri)}")]
            kept = [c for c in rows.column_names if c in ds.schema.names or c == TOMBSTONE]
            rows = rows.select(kept)
            parts.append(rows.append_column(_GEN, pa.array(np.full(rows.num_rows, g, np.int64)))
                         .append_column(_SHARD, pa.array(np.full(rows.num_rows, code, np.int32))))
    if not parts or not pk:
        return []
    versions = _newest(pa.concat_tables(parts, promote_options="permissive"), pk)
    compared = [c for c in versions.column_names if c in ds.schema.names and c not in pk and c not in folding]
    base = _base_rows(ds, versions.select(pk), [*pk, *compared])
    bad = _mismatches(versions, base, pk, compared)
    if not bad.any():
        return []
    codes = key_codes(versions, pk)
    failing = ~np.isin(codes, codes[~bad]) & bad  # a key another shard's version proves is fine
    if not failing.any():
        return []
    out = []
    shard_codes = versions.column(_SHARD).to_numpy()
    for code in np.unique(shard_codes[failing]):
        mine = failing & (shard_codes == code)
        rows = versions.filter(pa.array(mine)).sort_by([(k, "ascending") for k in pk])
        first = rows.slice(0, 1).to_pylist()[0]
        shown = first[pk[0]] if len(pk) == 1 else {k: first[k] for k in pk}
        how = ("is deleted there but the base table still holds it" if first.get(TOMBSTONE)
               else _how_missing(base, rows.slice(0, 1), pk))
        out.append(Unproven(codes_of[code], f"merged generation {first[_GEN]} holds key {shown!r}, which {how} "
                                            f"({int(mine.sum())} such keys in this shard)"))
    return out


def _newest(t: pa.Table, pk: list[str]) -> pa.Table:
    """Each (shard, key)'s newest version: the highest generation."""
    t = t.take(pc.sort_indices(t, sort_keys=[(_SHARD, "ascending"), (_GEN, "ascending")]))
    frame = pd.DataFrame({"shard": t.column(_SHARD).to_numpy(), "key": key_codes(t, pk)})
    return t.filter(pa.array(~frame.duplicated(keep="last").to_numpy()))


def _base_rows(ds: object, keys: pa.Table, columns: list[str]) -> pa.Table:
    """The base table's rows of ``keys``, scanned batch by batch (only matches are kept)."""
    scanner = ds.scanner(columns=columns, batch_size=_SCAN_BATCH_ROWS)  # type: ignore[attr-defined]
    kept = []
    for batch in scanner.to_batches():
        t = pa.Table.from_batches([batch])
        kept.append(t.filter(pa.array(key_mask(t, keys, list(keys.column_names)))))
    return pa.concat_tables(kept) if kept else scanner.projected_schema.empty_table()


def _mismatches(versions: pa.Table, base: pa.Table, pk: list[str], compared: list[str]) -> np.ndarray:
    """Per version row: True when the base does not hold it (see the module docstring)."""
    deleted = versions.column(TOMBSTONE).fill_null(False).to_numpy(zero_copy_only=False) \
        if TOMBSTONE in versions.column_names else np.zeros(versions.num_rows, bool)
    present = key_mask(versions, base.select(pk), pk)
    bad = np.where(deleted, present, ~present)
    if not compared:
        return bad
    # codes of both tables' keys in one pass: only an integer key is its own code; any other
    # key's code depends on the table it was computed over
    codes = key_codes(pa.concat_tables([versions.select(pk), base.select(pk).cast(versions.select(pk).schema)]), pk)
    version_codes, base_codes = codes[:versions.num_rows], codes[versions.num_rows:]
    at = pd.Series(np.arange(base.num_rows), index=base_codes)
    at = at[~at.index.duplicated(keep="first")]
    rows = np.flatnonzero(~deleted & present)
    if len(rows):
        mine = versions.take(pa.array(rows)).select(compared)
        theirs = base.take(pa.array(at.loc[version_codes[rows]].to_numpy())).select(compared)
        for i, same in zip(rows, _rows_equal(mine, theirs), strict=True):
            bad[i] = bad[i] or not same
    return bad


def _rows_equal(a: pa.Table, b: pa.Table) -> list[bool]:
    """Row by row, whether ``a`` and ``b`` hold equal values (any column type): whole slices
    are compared first, and only a slice that differs is split further."""
    try:
        a = a.cast(b.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return [False] * a.num_rows
    out = [True] * a.num_rows
    pending = [(0, a.num_rows)]
    while pending:
        lo, hi = pending.pop()
        if hi <= lo or a.slice(lo, hi - lo).equals(b.slice(lo, hi - lo)):
            continue
        if hi - lo == 1:
            out[lo] = False
            continue
        mid = (lo + hi) // 2
        pending += [(lo, mid), (mid, hi)]
    return out


def _how_missing(base: pa.Table, row: pa.Table, pk: list[str]) -> str:
    present = key_mask(row, base.select(pk), pk)
    return "the base table holds with other values" if present.any() else "the base table lacks"


__all__ = ["CHECK", "Unproven", "merged_generations", "unproven_merges"]
