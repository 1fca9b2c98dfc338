"""Proof that the base table holds what a set of merged generations wrote: the one rule for
`memwal verify` (check ``merged-data-in-base``) and for GC before rows leave every reader's view.

Merge progress only *says* a generation is merged. Whoever can write the table's storage can
make it say so (a forged marker or driverless claim, issue 47), make a drain look like another
compactor merged (issue 56), or a second compactor can merge older rows over newer ones (issue
54). The rows are the evidence: each key's newest version among the generations (highest
generation, then row address) must be in the base table with the same value in every column the
base has, a merge operator's column excepted (it folds the base's), or be absent for a
tombstone. A key a *superseding* generation (newer, still read by every reader) also holds is
fine whatever the base says: readers read that one.

The base rows of the keys are found by a filter on a one-column key (Lance uses the key's scalar
index when the table has one) or, for a composite key or many keys, by one scan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import lance
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.merge.changes import key_mask, newest_rows
from memwal.merge.keys import key_codes
from memwal.merge.model import GenerationRef
from memwal.merge.read import GEN, TOMBSTONE, read_generations
from memwal.merge.take import take_rows

#: Rows of the base table scanned at once while looking for the keys.
SCAN_BATCH_ROWS = 65_536

#: Up to this many keys of a one-column key are looked up by a filter; more by one scan.
FILTER_MAX_KEYS = 100_000


@dataclass(frozen=True)
class Unproven:
    """The first key (in key order) whose newest version the base does not hold, and how many;
    ``rows``: every such newest version (the base's columns, ``__gen`` and ``_tombstone``)."""

    shard_id: str
    generation: int
    key: object
    how: str
    count: int
    rows: pa.Table | None = None

    @property
    def detail(self) -> str:
        return (f"generation {self.generation} holds key {self.key!r}, which {self.how} "
                f"({self.count} such keys in this shard)")


def newest_of(refs: Sequence[GenerationRef], schema: pa.Schema, pk: list[str],
              storage_options: dict[str, str] | None) -> pa.Table:
    """Each key's newest version among ``refs`` (one shard): the base's columns, the generation
    it came from (``__gen``) and ``_tombstone``."""
    parts = list(read_generations(refs, schema, storage_options, {r.shard_id: 0 for r in refs}))
    if not parts:
        return pa.table({**{f.name: pa.array([], f.type) for f in schema}, GEN: pa.array([], pa.int64()),
                         TOMBSTONE: pa.array([], pa.bool_())})
    t = pa.concat_tables(parts, promote_options="permissive")
    newest = take_rows(t, newest_rows(t, pk))
    return newest.select([*schema.names, GEN, TOMBSTONE])


def base_rows(ds: lance.LanceDataset, keys: pa.Table, columns: list[str]) -> pa.Table:
    """The base table's rows of ``keys`` (only matches are kept)."""
    pk = list(keys.column_names)
    if len(pk) == 1 and 0 < keys.num_rows <= FILTER_MAX_KEYS and keys.column(0).null_count == 0:
        return ds.to_table(columns=columns, filter=pc.field(pk[0]).isin(keys.column(0).combine_chunks()))
    scanner = ds.scanner(columns=columns, batch_size=SCAN_BATCH_ROWS)
    kept = []
    for batch in scanner.to_batches():
        t = pa.Table.from_batches([batch])
        kept.append(t.filter(pa.array(key_mask(t, keys, pk))))
    return pa.concat_tables(kept) if kept else scanner.projected_schema.empty_table()


def mismatches(versions: pa.Table, base: pa.Table, pk: list[str], compared: list[str]) -> np.ndarray:
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
        for i, same in zip(rows, rows_equal(mine, theirs), strict=True):
            bad[i] = bad[i] or not same
    return bad


def rows_equal(a: pa.Table, b: pa.Table) -> list[bool]:
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


def how_missing(base: pa.Table, row: pa.Table, pk: list[str]) -> str:
    if row.column(TOMBSTONE)[0].as_py():
        return "is deleted there but the base table still holds it"
    present = key_mask(row, base.select(pk), pk)
    return "the base table holds with other values" if present.any() else "the base table lacks"


def prove(ds: lance.LanceDataset, shard_id: str, refs: Sequence[GenerationRef], *, pk: list[str],
          folding: Sequence[str] = (), superseding: Sequence[GenerationRef] = (),
          storage_options: dict[str, str] | None = None) -> Unproven | None:
    """None when ``ds`` holds each key's newest version among ``refs`` (or a ``superseding``
    generation holds the key too), else the first key that fails (see the module docstring)."""
    if not refs or not pk:
        return None
    versions = newest_of(refs, ds.schema, pk, storage_options)
    if not versions.num_rows:
        return None
    compared = [c for c in ds.schema.names if c not in pk and c not in folding]
    base = base_rows(ds, versions.select(pk), [*pk, *compared])
    bad = mismatches(versions, base, pk, compared)
    if bad.any() and superseding:
        later = [t.select(pk) for t in read_generations(superseding, ds.schema, storage_options,
                                                        {r.shard_id: 0 for r in superseding})]
        if later:
            held = key_mask(versions, pa.concat_tables(later, promote_options="permissive"), pk)
            bad &= ~held
    if not bad.any():
        return None
    rows = versions.filter(pa.array(bad)).sort_by([(k, "ascending") for k in pk])
    first = rows.slice(0, 1)
    row = first.to_pylist()[0]
    shown = row[pk[0]] if len(pk) == 1 else {k: row[k] for k in pk}
    return Unproven(shard_id, int(row[GEN]), shown, how_missing(base, first, pk), int(bad.sum()), rows)


__all__ = ["FILTER_MAX_KEYS", "Unproven", "base_rows", "how_missing", "mismatches", "newest_of", "prove",
           "rows_equal"]
