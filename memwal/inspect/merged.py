"""`memwal verify`'s proof that merged data is in the base table (check ``merged-data-in-base``).

Merge progress (``compacted_sstables``) only *says* a generation is merged; whoever can commit
to the table can make it say so with no row written (a forged data commit, issue 47). While a
merged generation is still on storage its rows are the evidence, so verify reads them back:

* per shard, the generation folders on storage from the merged generation (the recorded one, or
  what another compactor's drain shows when higher: a drain is a claim too, issue 56) downward, stopping
  at the first one that is gone, unreadable or holds a link (GC collects the oldest first; below
  a collected generation a key may have a newer version nobody can read any more, so nothing
  there can be proven);
* each key's newest version among them (highest generation) must be in the base table at the
  verified version: with the same value in every column the base still has (a column with a
  merge operator excepted: its value folds the base's), or absent for a deletion;
* a key held by two shards counts as proven when either shard's version matches.

The first key that fails, in key order, is named with its generation and how it fails, and
the count of such keys. A stale base shows so: a second compactor that merged older rows over
newer ones (issue 54). A direct write to the base (outside the MemWAL) of a key still held
by a merged generation on storage shows here too, until GC collects that generation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import MemWalError, first_line
from memwal.merge.columns import BaseFields, dataset_field_ids, renames, to_base_names
from memwal.merge.keys import key_codes
from memwal.merge.ops import table_merge_ops
from memwal.merge.proof import base_rows, how_missing, mismatches
from memwal.table import Table
from memwal.table.drain import merged_through
from memwal.table.generations import open_generation
from memwal.table.manifest import TableManifest
from memwal.table.naming import shard_dir
from memwal.table.schema import primary_key_of
from memwal.table.shards import ShardState, generation_links, generation_readable, list_generation_dirs

CHECK = "merged-data-in-base"
TOMBSTONE = "_tombstone"
_GEN, _SHARD = "__verify_gen", "__verify_shard"


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
    pk = primary_key_of(table, ds)
    fields = BaseFields.of(ds)
    folding = set(table_merge_ops(table, manifest.version).folding_columns())
    parts = []
    codes_of = sorted(set(manifest.compacted) | set(states))
    for code, sid in enumerate(codes_of):
        merged = merged_through(manifest.compacted_generation(sid), states.get(sid))
        for g, key in merged_generations(table, sid, merged, states.get(sid)):
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
    base = base_rows(ds, versions.select(pk), [*pk, *compared])
    bad = mismatches(versions, base, pk, compared)
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
        how = how_missing(base, rows.slice(0, 1), pk)
        out.append(Unproven(codes_of[code], f"merged generation {first[_GEN]} holds key {shown!r}, which {how} "
                                            f"({int(mine.sum())} such keys in this shard)"))
    return out


def _newest(t: pa.Table, pk: list[str]) -> pa.Table:
    """Each (shard, key)'s newest version: the highest generation."""
    t = t.take(pc.sort_indices(t, sort_keys=[(_SHARD, "ascending"), (_GEN, "ascending")]))
    frame = pd.DataFrame({"shard": t.column(_SHARD).to_numpy(), "key": key_codes(t, pk)})
    return t.filter(pa.array(~frame.duplicated(keep="last").to_numpy()))


__all__ = ["CHECK", "Unproven", "merged_generations", "unproven_merges"]
