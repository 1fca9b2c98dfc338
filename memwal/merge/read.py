"""Reading a merge batch's generations, each conformed to the base table's schema and tagged.

Every row read carries the internal columns the reduce needs (its generation, shard and
order); a generation whose merge operators need its operands is read from its WAL entries
(:mod:`memwal.merge.operands`). A failure names the generation and its file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import lance
import numpy as np
import pyarrow as pa

from memwal.core.pool import ordered_map
from memwal.errors import BadInputError, first_line
from memwal.merge.columns import arrow_field_ids, dataset_field_ids, to_base_names
from memwal.merge.model import GenerationRef
from memwal.table.generations import GenerationUnreadableError, open_generation

TOMBSTONE = "_tombstone"


ROWADDR = "_rowaddr"


GEN = "__gen"


SHARD = "__shard"


ORD = "__ord"


INTERNAL = (TOMBSTONE, ROWADDR, GEN, SHARD, ORD)


#: Generations read at once. Reads are mostly waiting on storage and Lance's own
#: decoding, which release the GIL: 8 threads read 140 local generations in 0.32 s
#: instead of 0.52 s on 2 cores, and hide the latency of object stores.
READ_THREADS = 8


def conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """Give a generation's rows the base table's schema (plus our internal columns).

    A generation written before a column was added lacks it: fill nulls. A generation
    with a column the base table lacks cannot be merged without losing it: refuse.
    """
    t = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    names = set(schema.names)
    extra = [c for c in t.column_names if c not in names and c not in INTERNAL]
    if extra:
        raise BadInputError(
            f"{where}: column(s) {', '.join(extra)} are not in the base table schema; "
            "add them to the base table before merging"
        )
    cols, fields = [], []
    for f in schema:
        if f.name in t.column_names:
            col = t.column(f.name)
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise BadInputError(
                        f"{where}: column {f.name} has type {col.type}, base table has {f.type}"
                    ) from exc
        else:
            col = pa.nulls(t.num_rows, f.type)
        cols.append(col)
        fields.append(f)
    for name in INTERNAL:
        if name in t.column_names:
            cols.append(t.column(name))
            fields.append(pa.field(name, t.schema.field(name).type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _open_checked(ref: GenerationRef, storage_options: dict | None) -> lance.LanceDataset:
    try:
        ds = open_generation(ref.uri, storage_options)
    except (ValueError, OSError) as exc:
        raise GenerationUnreadableError(ref.shard_id, ref.generation,
                                        f"cannot open {ref.uri}: {first_line(exc)}") from exc
    if TOMBSTONE not in ds.schema.names:
        raise BadInputError(f"{ref.uri}: generation has no {TOMBSTONE} column; not a MemWAL generation")
    return ds


def read_generation(
    ref: GenerationRef,
    schema: pa.Schema,
    storage_options: dict | None,
    shard_code: int,
    batch_size: int = 65536,
    fragment_ids: list[int] | None = None,
) -> Iterator[pa.Table]:
    """Rows of one generation (or some of its fragments) tagged with row address, generation
    and ``shard_code``, the shard's position in :meth:`MergePlan.shard_ids` (a small integer
    is far cheaper to carry through sorts and group-bys than the shard's UUID string)."""
    ds = _open_checked(ref, storage_options)
    if ref.wal_keys:
        yield _tag(conform(_operands(ref, ds, schema, storage_options), schema, ref.uri), ref, shard_code)
        return
    fragments = [ds.get_fragment(i) for i in fragment_ids] if fragment_ids is not None else None
    scanner = ds.scanner(with_row_address=True, batch_size=batch_size, fragments=fragments)
    for batch in _attributed(ref, scanner.to_batches()):
        yield _tag(conform(to_base_names(pa.Table.from_batches([batch]), ref.renamed), schema, ref.uri), ref,
                   shard_code)


@contextmanager
def _reading(ref: GenerationRef) -> Iterator[None]:
    """Lance reading one generation: a failure names the shard, the generation and Lance's
    reason (:class:`GenerationUnreadableError`), so the merge stops that shard there and
    merges the others."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - pyo3 panics derive from BaseException
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise
        raise GenerationUnreadableError(ref.shard_id, ref.generation,
                                        f"unreadable: {ref.uri}: {first_line(exc)}") from exc


def _attributed(ref: GenerationRef, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` of one generation, read under :func:`_reading` (what the consumer does
    with each batch is not attributed to the generation)."""
    batches = iter(batches)
    while True:
        with _reading(ref):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def read_generations(
    refs: Sequence[GenerationRef],
    schema: pa.Schema,
    storage_options: dict | None,
    code_of: dict[str, int],
    *,
    threads: int = READ_THREADS,
    group_rows: int = 1_000_000,
) -> Iterator[pa.Table]:
    """The tagged rows of ``refs`` in order (as :func:`read_generation` gives them), read
    by a bounded thread pool and handed out several generations per table.

    Conforming and tagging cost a few Python calls per table: done per generation, they
    were most of the time of a merge of 10,000 tiny generations. Here consecutive
    generations with one schema (up to ``group_rows`` rows) are concatenated first and
    conformed once, and their generation and shard columns built in one go.
    """
    if any(ref.wal_keys for ref in refs):  # merge operators: operands come from WAL entries
        for tables in ordered_map(
                lambda ref: list(read_generation(ref, schema, storage_options, code_of[ref.shard_id])), refs, threads):
            yield from tables
        return

    def scan(ref: GenerationRef) -> tuple[GenerationRef, pa.Table]:
        ds = _open_checked(ref, storage_options)
        with _reading(ref):
            return ref, ds.scanner(with_row_address=True, batch_size=65536).to_table()

    group: list[tuple[GenerationRef, pa.Table]] = []

    def flush() -> pa.Table:
        t = conform(to_base_names(pa.concat_tables([g[1] for g in group]), group[0][0].renamed), schema,
                    group[0][0].uri)
        counts = [g[1].num_rows for g in group]
        gens = np.repeat(np.array([g[0].generation for g in group], dtype=np.int64), counts)
        shards = np.repeat(np.array([code_of[g[0].shard_id] for g in group], dtype=np.int32), counts)
        group.clear()
        return t.append_column(GEN, pa.array(gens)).append_column(SHARD, pa.array(shards))

    rows = 0
    size = max(1, min(64, len(refs) // (threads * 8)))  # a future per tiny generation costs more than its read
    chunks = [refs[i:i + size] for i in range(0, len(refs), size)]
    scanned = (item for part in ordered_map(lambda chunk: [scan(r) for r in chunk], chunks, threads) for item in part)
    for ref, t in scanned:
        same = t.schema.equals(group[0][1].schema) and ref.renamed == group[0][0].renamed if group else True
        if group and (not same or rows + t.num_rows > group_rows):
            yield flush()
            rows = 0
        group.append((ref, t))
        rows += t.num_rows
    if group:
        yield flush()


def _tag(t: pa.Table, ref: GenerationRef, shard_code: int) -> pa.Table:
    """A generation's rows with its generation number and the shard's code."""
    t = t.append_column(GEN, pa.array(np.full(t.num_rows, ref.generation, dtype=np.int64)))
    return t.append_column(SHARD, pa.array(np.full(t.num_rows, shard_code, dtype=np.int32)))


def _operands(ref: GenerationRef, ds: lance.LanceDataset, schema: pa.Schema, storage_options: dict | None) -> pa.Table:
    """Every operand of a generation from its WAL entries, checked against the flushed rows."""
    from memwal.merge.operands import OperandsIncompleteError, check_complete, read_operands
    from memwal.table.schema import primary_key

    pk = primary_key(schema)
    # A WAL entry names its columns as its writer did and records their field ids: each is
    # named as in the flushed generation (same field ids), then as in the base table.
    names_by_id = {fid: name for name, fid in dataset_field_ids(ds).items()}

    def as_generation(t: pa.Table) -> pa.Table:
        ids = arrow_field_ids(t.schema)
        return t.rename_columns([names_by_id.get(ids[c], c) if c in ids else c for c in t.column_names])

    where = f"shard {ref.shard_id} generation {ref.generation}"
    try:
        operands = read_operands(ref.table_uri, storage_options, ref.wal_keys, as_generation)
        operands = to_base_names(operands, ref.renamed)
        with _reading(ref):
            flushed = to_base_names(ds.to_table(columns=[*pk, TOMBSTONE]), ref.renamed)
        check_complete(operands, flushed, pk, where)
    except OperandsIncompleteError as exc:  # this shard stops here (or re-plans: merged meanwhile)
        detail = str(exc).removeprefix(f"{where}: ")
        raise GenerationUnreadableError(ref.shard_id, ref.generation, f"operands-missing: {detail}") from exc
    return operands
