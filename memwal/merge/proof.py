"""Proof that the base table, at one version, holds what a group of merged generations wrote.

The one row-level rule for GC (before a generation leaves the listing or storage) and for
`memwal verify` (``merged-data-in-base``), read at the version the rule names
(:mod:`memwal.merge.cover`): each key's newest version among the generations (highest
generation, then row position) must be in the base with the same value in every column the base
has, a merge operator's column excepted (it folds the base's value), or be absent for a
tombstone. A key that a *superseding* generation (newer, still read by every reader) also holds
is fine whatever the base says. Values compare bit for bit, so a NaN equals the same NaN
(issue 61: a merged NaN failed a healthy table for good).

Memory is bounded by decoded bytes, never by bytes on disk (Lance compresses repetitive rows some
600x, issue 61): the generations' key columns are read first (each key's newest version found
from keys alone), then the base is scanned once in batches sized from a sample of the rows'
decoded width, and for each batch only the matching generation rows are fetched by position
(``take``) and compared. A one-column key of at most :data:`FILTER_MAX_KEYS` keys is pushed down
to the scan as a filter (Lance uses the key's scalar index when the table has one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal.merge.model import GenerationRef
from memwal.merge.newest import GEN, OFF, SLOT, OpenGenerations, bounded_scanner, newest_versions
from memwal.merge.read import TOMBSTONE
from memwal.merge.rowhash import row_digests

#: Up to this many keys of a one-column key are pushed down to the base scan as a filter.
FILTER_MAX_KEYS = 100_000

_ROW = "__row"
#: In :attr:`Unproven.failing`: how the base fails each key (see :data:`_HOW`).
HOW = "__how"


@dataclass(frozen=True)
class Unproven:
    """The first key (in key order) whose newest version the base, at ``version``, does not hold.

    ``failing``: every such key (key columns, ``__gen``, ``_tombstone``, ``__how``): small, for a
    repair to look the rows up again."""

    shard_id: str
    generation: int
    key: object
    how: str
    count: int
    version: int
    failing: pa.Table

    @property
    def detail(self) -> str:
        return (f"generation {self.generation} holds key {self.key!r}, which {self.how} at table version "
                f"{self.version} ({self.count} such keys in this shard)")

    def detail_for(self, low: int, high: int) -> str:
        """The detail naming the first failing key whose newest version is in ``low``..``high``."""
        gens = self.failing.column(GEN).to_numpy()
        mine = self.failing.filter(pa.array((gens >= low) & (gens <= high)))
        if not mine.num_rows:
            return self.detail
        pk = [c for c in mine.column_names if c not in (GEN, TOMBSTONE, HOW)]
        row = mine.sort_by([(k, "ascending") for k in pk]).slice(0, 1).to_pylist()[0]
        shown = row[pk[0]] if len(pk) == 1 else {k: row[k] for k in pk}
        return (f"generation {row[GEN]} holds key {shown!r}, which {_HOW[row[HOW]]} at table version "
                f"{self.version} ({mine.num_rows} such keys)")

    @property
    def generations(self) -> set[int]:
        """The generations whose newest versions the base lacks."""
        return {int(g) for g in self.failing.column(GEN).to_pylist()}


def _canonical(a: pa.Array) -> pa.Array:
    """``a`` with every floating-point value as its bits (NaNs as one NaN): equal values compare
    equal, NaN included, where Arrow's own equality says NaN differs from itself."""
    t = a.type
    if pa.types.is_floating(t):
        np_type = {16: np.float16, 32: np.float32, 64: np.float64}[t.bit_width]
        as_int = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[t.bit_width]
        values = a.fill_null(0).to_numpy(zero_copy_only=False).astype(np_type)
        values[np.isnan(values)] = np.nan  # one NaN: its sign and payload bits are not a value
        bits = values.view({16: np.int16, 32: np.int32, 64: np.int64}[t.bit_width])
        return pa.array(bits, as_int, mask=a.is_null().to_numpy(zero_copy_only=False))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        flat = a.flatten() if not pa.types.is_fixed_size_list(t) else a.values.slice(
            a.offset * t.list_size, len(a) * t.list_size)
        inner = _canonical(flat)
        if pa.types.is_fixed_size_list(t):
            return pa.FixedSizeListArray.from_arrays(inner, t.list_size, mask=a.is_null())
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        offsets = pc.subtract(a.offsets, a.offsets[0])
        return cls.from_arrays(offsets, inner, mask=a.is_null())
    if pa.types.is_struct(t):
        fields = [a.field(i) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays([_canonical(f) for f in fields], names=[f.name for f in t],
                                          mask=a.is_null())
    return a


def rows_equal(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Row by row, whether ``a`` and ``b`` hold equal values (any column type; NaN equals NaN):
    whole slices are compared first, and only a slice that differs is split further."""
    try:
        a = a.cast(b.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return np.zeros(a.num_rows, bool)
    a = pa.table({n: _canonical(a.column(n).combine_chunks()) for n in a.column_names})
    b = pa.table({n: _canonical(b.column(n).combine_chunks()) for n in b.column_names})
    out = np.ones(a.num_rows, bool)
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


def _matches(batch: pa.Table, newest: pa.Table, pk: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (row of ``batch``, row of ``newest``) with equal keys."""
    left = batch.select(pk).append_column(_ROW, pa.array(np.arange(batch.num_rows, dtype=np.int64)))
    right = newest.select(pk).append_column("__n", pa.array(np.arange(newest.num_rows, dtype=np.int64)))
    joined = left.join(right, pk, join_type="inner")
    return joined.column(_ROW).to_numpy(), joined.column("__n").to_numpy()


def digests_of(gens: OpenGenerations, newest: pa.Table, schema: pa.Schema) -> np.ndarray:
    """Each newest row's digest over ``schema`` (:mod:`memwal.merge.rowhash`), each generation
    read once, in order, in bounded batches (no random access: a take decodes whole pages)."""
    out = np.zeros((newest.num_rows, 2), np.uint64)
    slots = newest.column(SLOT).to_numpy()
    offs = newest.column(OFF).to_numpy()
    for slot in np.unique(slots):
        where = np.flatnonzero(slots == slot)  # newest is sorted by slot, then row position
        wanted = offs[where]
        for start, rows in gens.scan(int(slot), schema):
            lo, hi = np.searchsorted(wanted, [start, start + rows.num_rows])
            if hi > lo:
                out[where[lo:hi]] = row_digests(rows.take(pa.array(wanted[lo:hi] - start)))
    return out


def check_base(ds: lance.LanceDataset, gens: OpenGenerations, newest: pa.Table, compared: list[str]) -> np.ndarray:
    """Per row of ``newest``: 0 the base holds it, 1 the base lacks it, 2 the base holds other
    values, 3 the base still holds a deleted key. The generations' rows are digested first (16
    bytes a row), then the base is scanned once, batch by batch, its matching rows digested."""
    pk = gens.pk
    state = np.full(newest.num_rows, -1, np.int8)  # -1: not seen in the base
    tomb = newest.column(TOMBSTONE).to_numpy(zero_copy_only=False)
    mine = digests_of(gens, newest, pa.schema([ds.schema.field(c) for c in compared])) if compared else None
    flt = None
    if len(pk) == 1 and newest.num_rows <= FILTER_MAX_KEYS and newest.column(0).null_count == 0:
        flt = pc.field(pk[0]).isin(newest.column(pk[0]).combine_chunks())
    for batch in bounded_scanner(ds, [*pk, *compared], filter=flt).to_batches():
        base = pa.Table.from_batches([batch])
        rows, idx = _matches(base, newest, pk)
        if not len(rows):
            continue
        deleted = tomb[idx]
        state[idx[deleted]] = 3
        live_rows, live_idx = rows[~deleted], idx[~deleted]
        if not len(live_idx):
            continue
        same = np.ones(len(live_idx), bool)
        if mine is not None:
            theirs = row_digests(batch.select(compared))[live_rows]  # the batch as scanned: no copy of it
            same = (theirs == mine[live_idx]).all(axis=1)
        # a key the base holds twice (a key that is not unique) fails if either copy differs
        state[live_idx[~same]] = 2
        ok = live_idx[same]
        state[ok[state[ok] == -1]] = 0
    state[(state == -1) & tomb] = 0
    state[state == -1] = 1
    return state


_HOW = {1: "the base table lacks", 2: "the base table holds with other values",
        3: "is deleted there but the base table still holds it"}


def prove(ds: lance.LanceDataset, shard_id: str, refs: Sequence[GenerationRef], *, pk: list[str],
          folding: Sequence[str] = (), superseding: Sequence[GenerationRef] = (),
          storage_options: dict[str, str] | None = None,
          known: Mapping[str, pa.Table] | None = None) -> Unproven | None:
    """None when ``ds`` holds each key's newest version among ``refs`` (or a ``superseding``
    generation holds the key too), else the first key that fails (see the module docstring).
    ``known``: key columns already read (:class:`OpenGenerations`)."""
    if not refs or not pk:
        return None
    gens = OpenGenerations([*refs, *superseding], pk, storage_options, known)
    newest = newest_versions(gens, range(len(refs)), range(len(refs), len(refs) + len(superseding)))
    if not newest.num_rows:
        return None
    compared = [c for c in ds.schema.names if c not in pk and c not in folding]
    state = check_base(ds, gens, newest, compared)
    bad = state > 0
    if not bad.any():
        return None
    failing = newest.filter(pa.array(bad))
    first_at = pc.sort_indices(failing, sort_keys=[(k, "ascending") for k in pk])[0].as_py()
    row = failing.slice(first_at, 1).to_pylist()[0]
    shown = row[pk[0]] if len(pk) == 1 else {k: row[k] for k in pk}
    how = _HOW[int(state[np.flatnonzero(bad)[first_at]])]
    failing = failing.select([*pk, GEN, TOMBSTONE]).append_column(HOW, pa.array(state[bad], pa.int8()))
    return Unproven(shard_id, int(row[GEN]), shown, how, int(bad.sum()), int(ds.version), failing)


__all__ = ["FILTER_MAX_KEYS", "Unproven", "check_base", "prove", "rows_equal"]
