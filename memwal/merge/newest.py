"""Each key's newest version among a set of generations, in memory bounded by decoded bytes.

A merged generation's rows may decode to hundreds of times their bytes on disk (Lance compresses
repetitive rows some 600x, issue 61), so what reads many of them at once (GC's proof, `memwal
verify`, a rollup) never holds them whole: the key columns are read first (each key's newest
version is found from keys, generation and row position alone), and the rows themselves are
fetched by position (``take``) in batches sized from a sample of their decoded width.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal.merge.keys import key_codes
from memwal.merge.model import GenerationRef
from memwal.merge.read import TOMBSTONE, conform
from memwal.table.generations import open_generation

#: Decoded bytes of one batch of rows (base or generation) held at once.
BATCH_BYTES = 32 << 20
MIN_BATCH_ROWS, MAX_BATCH_ROWS = 16, 65_536
#: Rows sampled to measure a row's decoded width.
_SAMPLE_ROWS = 256

GEN, SLOT, OFF = "__gen", "__slot", "__off"

#: What a bounded scan buffers from storage before it waits (Lance's backpressure).
IO_BUFFER_BYTES = 64 << 20


def bounded_scanner(ds: lance.LanceDataset, columns: list[str], *, filter: object = None,
                    with_row_address: bool = False, fragments: list[lance.LanceFragment] | None = None
                    ) -> lance.LanceScanner:
    """A scan whose memory is bounded by decoded bytes: batches of about :data:`BATCH_BYTES`
    (Lance's own byte limit, alone: with a row limit beside it, Lance 14 decodes the rows first,
    and a scan of 10 KB rows in batches of 65,536 peaked at 800 MB where 360 MB by bytes), one
    fragment's reads at a time, two batches decoded ahead, at most :data:`IO_BUFFER_BYTES`
    buffered; ``fragments``: only those."""
    return ds.scanner(columns=columns, filter=filter, batch_size_bytes=BATCH_BYTES, batch_readahead=2,
                      fragment_readahead=1, io_buffer_size=IO_BUFFER_BYTES, with_row_address=with_row_address,
                      fragments=fragments)


def _gen_names(ref: GenerationRef, wanted: Sequence[str], present: Sequence[str]) -> dict[str, str]:
    """Base name -> the generation's column name, for the ``wanted`` base columns it has."""
    back = {base: gen for gen, base in ref.renamed if base is not None}
    renamed = {gen for gen, _ in ref.renamed}
    out = {}
    for name in wanted:
        gen = back.get(name, name if name not in renamed else None)
        if gen is not None and gen in present:
            out[name] = gen
    return out


class OpenGenerations:
    """The generations of a proof, open, with their key columns read.

    ``known``: the key columns (and tombstone) of some of them, by folder URI, as :meth:`split`
    gave them from an earlier read: not read again, and their folders opened only for their rows."""

    def __init__(self, refs: Sequence[GenerationRef], pk: list[str], storage_options: dict[str, str] | None,
                 known: Mapping[str, pa.Table] | None = None) -> None:
        self.refs, self.pk, self._options = list(refs), pk, storage_options
        self._known = known or {}
        self._ds = {slot: open_generation(r.uri, storage_options) for slot, r in enumerate(self.refs)
                    if r.uri not in self._known}
        #: Every slot's rows, read whole by :meth:`hold` (base names and types, tombstone last).
        self._held: dict[int, pa.Table] = {}

    def dataset(self, slot: int) -> lance.LanceDataset:
        if slot not in self._ds:
            self._ds[slot] = open_generation(self.refs[slot].uri, self._options)
        return self._ds[slot]

    def keys(self, slots: Sequence[int]) -> pa.Table:
        """Key columns, generation, slot, row position and tombstone of every row of ``slots``."""
        parts = []
        for slot in slots:
            ref = self.refs[slot]
            t = self._known.get(ref.uri)
            if t is None and slot in self._held:
                t = self._held[slot]
                t = t.select([*self.pk, *([TOMBSTONE] if TOMBSTONE in t.column_names else [])])
            if t is None:
                ds = self.dataset(slot)
                names = _gen_names(ref, self.pk, ds.schema.names)
                cols = [*names.values(), TOMBSTONE] if TOMBSTONE in ds.schema.names else list(names.values())
                t = bounded_scanner(ds, cols).to_table()
                t = t.rename_columns([{g: b for b, g in names.items()}.get(c, c) for c in t.column_names])
            n = t.num_rows
            tomb = t.column(TOMBSTONE).fill_null(False) if TOMBSTONE in t.column_names else pa.array(np.zeros(n, bool))
            parts.append(pa.table({**{k: t.column(k) for k in self.pk},
                                   GEN: pa.array(np.full(n, ref.generation, np.int64)),
                                   SLOT: pa.array(np.full(n, slot, np.int32)),
                                   OFF: pa.array(np.arange(n, dtype=np.int64)), TOMBSTONE: tomb}))
        return pa.concat_tables(parts, promote_options="permissive")

    def hold(self, schema: pa.Schema, limit: int) -> bool:
        """Read every slot's rows whole, under ``schema``'s names and types, when together they
        decode to at most ``limit`` bytes (counted as they are read, never taken from a figure on
        storage): :meth:`keys` and :meth:`rows` then read nothing more. A few small flushes are
        read once so, where their key columns, a sample of rows and the rows themselves were three
        reads each (a rollup's reads were a third of its cost beside a writer flushing every
        second, issue 82). False, holding nothing, past ``limit``: the reads stay bounded."""
        held: dict[int, pa.Table] = {}
        size = 0
        for slot in range(len(self.refs)):
            parts = []
            for t in self._conformed(slot, schema, tombstone=True):
                size += t.nbytes
                if size > limit:
                    return False
                parts.append(t)
            held[slot] = pa.concat_tables(parts) if parts else schema.empty_table()
        self._held = held
        return True

    def split(self, keys: pa.Table) -> dict[str, pa.Table]:
        """What :meth:`keys` read of every slot, per folder URI, for ``known`` (its rows come slot
        by slot, in order)."""
        counts = np.bincount(keys.column(SLOT).to_numpy(), minlength=len(self.refs))
        starts = np.r_[0, np.cumsum(counts)]
        cols = keys.select([*self.pk, TOMBSTONE])
        return {r.uri: cols.slice(int(starts[slot]), int(counts[slot])) for slot, r in enumerate(self.refs)}

    def scan(self, slot: int, schema: pa.Schema) -> Iterator[tuple[int, pa.Table]]:
        """Every row of generation ``slot`` in order, in bounded batches under the base's names and
        types: ``(position of the batch's first row, rows)``."""
        at = 0
        for t in self._conformed(slot, schema, tombstone=False):
            yield at, t
            at += t.num_rows

    def _conformed(self, slot: int, schema: pa.Schema, *, tombstone: bool) -> Iterator[pa.Table]:
        """Generation ``slot``'s rows in order, in bounded batches under ``schema``'s names and types,
        with its tombstone column last when ``tombstone`` and it has one."""
        ref, ds = self.refs[slot], self.dataset(slot)
        names = _gen_names(ref, schema.names, ds.schema.names)
        back = {g: b for b, g in names.items()}
        cols = [*names.values(), *([TOMBSTONE] if tombstone and TOMBSTONE in ds.schema.names else [])]
        for batch in bounded_scanner(ds, cols).to_batches():
            t = pa.Table.from_batches([batch])
            t = conform(t.rename_columns([back.get(c, c) for c in t.column_names]), schema, ref.uri)
            yield t if tombstone else t.select(schema.names)

    def rows(self, slot: int, offsets: np.ndarray, schema: pa.Schema) -> pa.Table:
        """The rows at ``offsets`` of generation ``slot``, under the base's names and types."""
        if slot in self._held:
            return self._held[slot].take(pa.array(offsets)).select(schema.names)
        ref, ds = self.refs[slot], self.dataset(slot)
        names = _gen_names(ref, schema.names, ds.schema.names)
        t = ds.take(pa.array(offsets), columns=list(names.values()))
        t = t.rename_columns([{g: b for b, g in names.items()}.get(c, c) for c in t.column_names])
        return conform(t, schema, ref.uri).select(schema.names)


def newest_versions(gens: OpenGenerations, proving: Sequence[int], superseding: Sequence[int]) -> pa.Table:
    """Each key's newest version among ``proving`` and ``superseding`` (slots), keeping only those
    whose newest version is in ``proving``; sorted by slot and row position (for takes)."""
    keys = gens.keys([*proving, *superseding])
    if not keys.num_rows:
        return keys
    codes = key_codes(keys, gens.pk)
    order = np.lexsort((keys.column(OFF).to_numpy(), keys.column(GEN).to_numpy(), codes))
    sorted_codes = codes[order]
    last = np.r_[sorted_codes[1:] != sorted_codes[:-1], True]
    newest = keys.take(pa.array(order[last]))
    mine = pc.is_in(newest.column(SLOT), value_set=pa.array(list(proving), pa.int32()))
    newest = newest.filter(mine)
    return newest.take(pc.sort_indices(newest, sort_keys=[(SLOT, "ascending"), (OFF, "ascending")]))


def row_width(gens: OpenGenerations, newest: pa.Table, schema: pa.Schema) -> int:
    """The decoded bytes of one of ``newest``'s rows in ``schema``, from a sample of them."""
    if not newest.num_rows or not schema.names:
        return 1
    slot = int(newest.column(SLOT)[0].as_py())
    offsets = newest.filter(pc.equal(newest.column(SLOT), slot)).column(OFF).to_numpy()[:_SAMPLE_ROWS]
    sample = gens.rows(slot, offsets, schema)
    width: int = max(1, int(sample.nbytes) // max(1, int(sample.num_rows)))
    return width


def batch_rows(width: int) -> int:
    """Rows per batch so that a batch holds about :data:`BATCH_BYTES` decoded bytes, for rows of
    ``width`` decoded bytes (:func:`row_width`: a sample's, taken once by the caller)."""
    rows: int = min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, BATCH_BYTES // max(1, width)))
    return rows


def fetch(gens: OpenGenerations, newest: pa.Table, idx: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The generation rows of ``newest[idx]``, in that order."""
    slots = newest.column(SLOT).to_numpy()[idx]
    offs = newest.column(OFF).to_numpy()[idx]
    parts, where = [], []
    for slot in np.unique(slots):
        at = np.flatnonzero(slots == slot)
        parts.append(gens.rows(int(slot), offs[at], schema))
        where.append(at)
    t = pa.concat_tables(parts)
    return t.take(pa.array(np.argsort(np.concatenate(where), kind="stable")))


__all__ = ["BATCH_BYTES", "GEN", "OFF", "SLOT", "OpenGenerations", "batch_rows", "bounded_scanner", "fetch",
           "newest_versions", "row_width"]
