"""Whether the keys a merged generation wrote were *reverted* in the base since its merge.

The base is the truth for what the merge mark covers (:mod:`memwal.merge.cover`), and a value
the table's owner wrote after the merge stands. One thing is not the owner's: another compactor
that reads the listing, not the mark (lance-context's ``cleanup_wal()``), merging an older listed
generation again over newer rows memwal merged (issue 54). Its value is an *older write* of the
same key: the shard's writer wrote it before the generation's own version of the key. So a key
the base at the latest version no longer holds as the generation wrote it is reverted when the
base's row equals an earlier write of that key, found in

* an older generation of the shard still on storage, or
* the shard's WAL entries (every put in write order; lance-context never deletes them, and GC
  deletes an entry only with its generation's folder), before the last entry holding the
  generation's own version of it.

A value no write of the shard's writer holds is the owner's. Rows are compared by their digests
(:mod:`memwal.merge.rowhash`), read in bounded batches and WAL entries one at a time, so memory
follows the failing keys, not the rows. Only a one-column key is looked up (others: none is named
reverted, and the proof point stands).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import lance
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import MemWalError
from memwal.merge.model import GenerationRef
from memwal.merge.newest import bounded_scanner
from memwal.merge.operands import TOMBSTONE
from memwal.merge.proof import Unproven
from memwal.merge.read import conform
from memwal.merge.rowhash import row_digests
from memwal.table import Table
from memwal.table.generations import open_generation
from memwal.table.shards import list_wal_entries

#: WAL entries read at most for one revert check (the newest: older ones are not looked at).
MAX_WAL_ENTRIES = 4096
#: A WAL entry larger than this is not read for a revert check (storage is untrusted input).
WAL_ENTRY_MAX_BYTES = 256 << 20

Digest = tuple[int, int]


def _digests(rows: pa.Table, key: str, compared: list[str]) -> Iterator[tuple[object, Digest]]:
    if not rows.num_rows:
        return
    d = row_digests(rows.select(compared))
    yield from ((k, (int(row[0]), int(row[1]))) for k, row in zip(rows.column(key).to_pylist(), d, strict=True))


def _scanned(ds: lance.LanceDataset, schema: pa.Schema, flt: pc.Expression, where: str) -> Iterator[pa.Table]:
    """The rows of ``ds`` that ``flt`` keeps (puts only), under ``schema``, in bounded batches."""
    cols = [c for c in schema.names if c in ds.schema.names]
    tomb = [TOMBSTONE] if TOMBSTONE in ds.schema.names else []
    for batch in bounded_scanner(ds, [*cols, *tomb], filter=flt).to_batches():
        t = pa.Table.from_batches([batch])
        if tomb:
            t = t.filter(pc.invert(t.column(TOMBSTONE).fill_null(False)))
        yield conform(t.select(cols), schema, where).select(schema.names)


def reverted_keys(table: Table, shard_id: str, ds: lance.LanceDataset, unproven: Unproven,
                  older: Sequence[GenerationRef], compared: list[str],
                  gens_by_number: Mapping[int, GenerationRef]) -> tuple[dict[int, list[object]], set[int]]:
    """Of the keys ``unproven`` names (the base at ``ds`` no longer holds them as their newest
    generation wrote them), those reverted (see the module docstring), per source generation; and
    the older generations that show it (their folders are the evidence: kept)."""
    pk = [c for c in unproven.failing.column_names if c not in ("__gen", TOMBSTONE, "__how")]
    failing = unproven.failing
    if not failing.num_rows or not compared or len(pk) != 1:
        return {}, set()
    key = pk[0]
    schema = pa.schema([ds.schema.field(c) for c in [key, *compared]])
    flt = pc.field(key).isin(failing.column(key).combine_chunks())
    source = dict(zip(failing.column(key).to_pylist(), failing.column("__gen").to_pylist(), strict=True))
    base: dict[object, Digest] = {}
    for t in _scanned(ds, schema, flt, table.uri):
        base.update(_digests(t, key, compared))
    reverted: dict[int, list[object]] = {}
    evidence: set[int] = set()

    def seen(k: object, d: Digest, generation: int | None) -> None:
        if base.get(k) == d and k not in reverted.get(int(source[k]), ()):
            reverted.setdefault(int(source[k]), []).append(k)
            if generation is not None:
                evidence.add(generation)

    for ref in older:
        for t in _scanned(open_generation(ref.uri, table.storage_options), schema, flt, ref.uri):
            for k, d in _digests(t, key, compared):
                if source.get(k, 0) > ref.generation:
                    seen(k, d, ref.generation)
    own: dict[object, Digest] = {}
    for g in sorted({int(g) for g in source.values()}):
        own_ref = gens_by_number.get(g)
        if own_ref is not None:
            mine = pc.field(key).isin(pa.array([k for k, s in source.items() if s == g], schema.field(key).type))
            for t in _scanned(open_generation(own_ref.uri, table.storage_options), schema, mine, own_ref.uri):
                own.update(_digests(t, key, compared))
    writes: list[tuple[object, Digest]] = []  # every put of a failing key, in write order
    for t in _wal_puts(table, shard_id, schema, failing.column(key)):
        writes += _digests(t, key, compared)
    last_own = {k: i for i, (k, d) in enumerate(writes) if own.get(k) == d}
    for i, (k, d) in enumerate(writes):
        if k in last_own and i < last_own[k]:
            seen(k, d, None)
    return reverted, evidence


def _wal_puts(table: Table, shard_id: str, schema: pa.Schema, keys: pa.ChunkedArray) -> Iterator[pa.Table]:
    """The puts of ``keys`` in the shard's WAL entries, entry by entry in position order."""
    try:
        entries = list_wal_entries(table.store, shard_id)[-MAX_WAL_ENTRIES:]
    except (MemWalError, OSError):
        return
    wanted = keys.combine_chunks()
    for e in entries:
        try:
            rows = pa.ipc.open_stream(pa.py_buffer(table.store.get(e.key, max_bytes=WAL_ENTRY_MAX_BYTES))).read_all()
        except (MemWalError, OSError, pa.ArrowException):
            continue
        if schema.field(0).name not in rows.column_names:
            continue
        rows = rows.replace_schema_metadata(None)
        rows = rows.filter(pc.is_in(rows.column(schema.field(0).name), value_set=wanted))
        if TOMBSTONE in rows.column_names:
            rows = rows.filter(pc.invert(rows.column(TOMBSTONE).fill_null(False)))
        if rows.num_rows:
            try:
                yield conform(rows.select([c for c in schema.names if c in rows.column_names]), schema,
                              table.store.uri_for(e.key)).select(schema.names)
            except (MemWalError, pa.ArrowException, ValueError):
                continue


__all__ = ["MAX_WAL_ENTRIES", "reverted_keys"]

