"""Reading a merge batch's generations, each conformed to the base table's schema and tagged.

Every row read carries the internal columns the reduce needs (its generation, shard and
order); a generation whose merge operators need its operands is read from its WAL entries
(:mod:`memwal.merge.operands`). A failure names the generation and its file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa

from memwal.core.pool import ordered_map
from memwal.errors import BadInputError, first_line
from memwal.merge.columns import arrow_field_ids, dataset_field_ids, to_base_names
from memwal.merge.model import GenerationRef
from memwal.merge.operands import OperandsIncompleteError, check_complete, decode_operands, fetch_operands
from memwal.table.generations import GenerationUnreadableError, open_generation
from memwal.table.schema import primary_key

TOMBSTONE = "_tombstone"


ROWADDR = "_rowaddr"


GEN = "__gen"


SHARD = "__shard"


ORD = "__ord"


INTERNAL = (TOMBSTONE, ROWADDR, GEN, SHARD, ORD)


#: Generations read at once. Reads are mostly waiting on storage and Lance's own
#: decoding, which release the GIL, so more threads than cores pay, and they hide the
#: latency of object stores (docs/decisions/0017-generations-read-on-eight-threads.md).
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


def _open_checked(ref: GenerationRef, storage_options: dict[str, str] | None) -> lance.LanceDataset:
    try:
        ds = open_generation(ref.uri, storage_options)
    except (ValueError, OSError) as exc:
        raise GenerationUnreadableError(ref.shard_id, ref.generation,
                                        f"cannot open {ref.uri}: {first_line(exc)}") from exc
    return _checked(ref, ds)


def _checked(ref: GenerationRef, ds: lance.LanceDataset) -> lance.LanceDataset:
    if TOMBSTONE not in ds.schema.names:
        raise BadInputError(f"{ref.uri}: generation has no {TOMBSTONE} column; not a MemWAL generation")
    return ds


def read_generation(
    ref: GenerationRef,
    schema: pa.Schema,
    storage_options: dict[str, str] | None,
    shard_code: int,
    batch_size: int = 65536,
    fragment_ids: list[int] | None = None,
    dataset: lance.LanceDataset | None = None,
) -> Iterator[pa.Table]:
    """Rows of one generation (or some of its fragments) tagged with row address, generation
    and ``shard_code``, the shard's position in :meth:`MergePlan.shard_ids` (a small integer
    is far cheaper to carry through sorts and group-bys than the shard's UUID string).
    ``dataset``: the generation, when the caller has opened it already."""
    if ref.wal_keys:
        yield from read_generations([ref], schema, storage_options, {ref.shard_id: shard_code}, threads=1)
        return
    ds = _open_checked(ref, storage_options) if dataset is None else _checked(ref, dataset)
    fragments = _fragments(ds, ref, fragment_ids) if fragment_ids is not None else None
    scanner = ds.scanner(with_row_address=True, batch_size=batch_size, fragments=fragments)
    for batch in _attributed(ref, scanner.to_batches()):
        yield _tag(conform(to_base_names(pa.Table.from_batches([batch]), ref.renamed), schema, ref.uri), ref,
                   shard_code)


def _fragments(ds: lance.LanceDataset, ref: GenerationRef, ids: list[int]) -> list[lance.LanceFragment]:
    """The fragments ``ids`` of a generation: one it does not hold makes it unreadable."""
    out = []
    for i in ids:
        fragment = ds.get_fragment(i)
        if fragment is None:
            raise GenerationUnreadableError(ref.shard_id, ref.generation, f"unreadable: {ref.uri}: no fragment {i}")
        out.append(fragment)
    return out


@contextmanager
def reading(ref: GenerationRef) -> Iterator[None]:
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
    """``batches`` of one generation, read under :func:`reading` (what the consumer does
    with each batch is not attributed to the generation)."""
    batches = iter(batches)
    while True:
        with reading(ref):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


@dataclass(frozen=True)
class _Fetched:
    """A generation's operands before decoding: its WAL entries as fetched, and the
    generation's field ids by name."""

    entries: list[bytes]
    field_ids: dict[str, int]


@dataclass(frozen=True)
class _Scanned:
    """One generation as read: its rows (names as in the base table) and, when its merge
    operators' operands come from its WAL entries, the flushed keys and tombstones they
    must reproduce."""

    ref: GenerationRef
    rows: pa.Table
    flushed: pa.Table | None = None
    #: Operands only, until they are decoded into ``rows``.
    fetched: _Fetched | None = None

    def joins(self, group: list[_Scanned]) -> bool:
        """Whether these rows can be conformed and checked with ``group``'s at once."""
        head = group[0]
        return (self.rows.schema.equals(head.rows.schema) and self.ref.renamed == head.ref.renamed
                and (self.flushed is None) == (head.flushed is None))


def read_generations(
    refs: Sequence[GenerationRef],
    schema: pa.Schema,
    storage_options: dict[str, str] | None,
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
    conformed once, and their generation and shard columns built in one go. Operands of
    merge operators (WAL entries) are checked against their flushed generations the same
    way, one check per group (a failing group is checked again generation by generation,
    so the error names the first generation that fails).
    """
    pk = primary_key(schema) if any(ref.wal_keys for ref in refs) else []

    def scan(ref: GenerationRef) -> _Scanned:
        ds = _open_checked(ref, storage_options)
        if ref.wal_keys:
            return _scan_flushed(ref, ds, pk, storage_options)
        with reading(ref):
            return _Scanned(ref, to_base_names(ds.scanner(with_row_address=True, batch_size=65536).to_table(),
                                               ref.renamed))

    group: list[_Scanned] = []

    def flush() -> pa.Table:
        counts = [g.rows.num_rows for g in group]
        gens = np.repeat(np.array([g.ref.generation for g in group], dtype=np.int64), counts)
        shards = np.repeat(np.array([code_of[g.ref.shard_id] for g in group], dtype=np.int32), counts)
        flushed = [g.flushed for g in group if g.flushed is not None]  # all or none (joins)
        if flushed:
            _check_operands(group, flushed, pk, gens)
        t = conform(pa.concat_tables([g.rows for g in group]), schema, group[0].ref.uri)
        group.clear()
        return t.append_column(GEN, pa.array(gens)).append_column(SHARD, pa.array(shards))

    rows = 0
    size = max(1, min(64, len(refs) // (threads * 8)))  # a future per tiny generation costs more than its read
    chunks = [refs[i:i + size] for i in range(0, len(refs), size)]
    scanned = (item for part in ordered_map(lambda chunk: [scan(r) for r in chunk], chunks, threads) for item in part)
    for item in scanned:
        if item.fetched is not None:
            item = _decoded(item, item.fetched)
        if group and (not item.joins(group) or rows + item.rows.num_rows > group_rows):
            yield flush()
            rows = 0
        group.append(item)
        rows += item.rows.num_rows
    if group:
        yield flush()


def _tag(t: pa.Table, ref: GenerationRef, shard_code: int) -> pa.Table:
    """A generation's rows with its generation number and the shard's code."""
    t = t.append_column(GEN, pa.array(np.full(t.num_rows, ref.generation, dtype=np.int64)))
    return t.append_column(SHARD, pa.array(np.full(t.num_rows, shard_code, dtype=np.int32)))


def _scan_flushed(ref: GenerationRef, ds: lance.LanceDataset, pk: list[str],
                  storage_options: dict[str, str] | None) -> _Scanned:
    """A generation whose operands come from its WAL entries: the entries as fetched, and
    the flushed keys and tombstones they must reproduce."""
    with _operands_of(ref):
        entries = fetch_operands(ref.table_uri, storage_options, ref.wal_keys)
    with reading(ref):
        flushed = ds.to_table(columns=[*pk, TOMBSTONE])
    return _Scanned(ref, pa.table({}), to_base_names(flushed, ref.renamed), _Fetched(entries, dataset_field_ids(ds)))


def _decoded(item: _Scanned, fetched: _Fetched) -> _Scanned:
    """``item`` with its rows: every operand of its generation, decoded from its WAL entries.

    Decoded by the consumer, not the pool: an entry is a small Arrow IPC stream whose
    decoding and renaming are mostly Python; eight threads contending for the GIL over
    them took three times as long as one, while the pool's Lance scans run on.
    """
    # A WAL entry names its columns as its writer did and records their field ids: each is
    # named as in the flushed generation (same field ids), then as in the base table.
    names_by_id = {fid: name for name, fid in fetched.field_ids.items()}

    def as_generation(t: pa.Table) -> pa.Table:
        ids = arrow_field_ids(t.schema)
        return t.rename_columns([names_by_id.get(ids[c], c) if c in ids else c for c in t.column_names])

    with _operands_of(item.ref):
        operands = decode_operands(fetched.entries, as_generation)
    return _Scanned(item.ref, to_base_names(operands, item.ref.renamed), item.flushed)


def _check_operands(group: list[_Scanned], flushed: list[pa.Table], pk: list[str], gens: np.ndarray) -> None:
    """Refuse a group of generations whose WAL entries do not reproduce them (``flushed``:
    each one's flushed keys and tombstones): one check over (generation, key) for the group
    (``gens``: each operand's generation), then, only when it fails, one per generation to
    name the first that fails."""
    if len(group) > 1:
        flushed_gens = np.repeat(np.array([g.ref.generation for g in group], dtype=np.int64),
                                 [f.num_rows for f in flushed])

        def tagged(tables: list[pa.Table], generations: np.ndarray) -> pa.Table:
            return pa.concat_tables(tables).select([*pk, TOMBSTONE]).append_column(GEN, pa.array(generations))

        try:
            check_complete(tagged([g.rows for g in group], gens), tagged(flushed, flushed_gens),
                           pk, "", generation=GEN)
            return
        except OperandsIncompleteError:
            pass
    for g, f in zip(group, flushed, strict=True):
        with _operands_of(g.ref):
            check_complete(g.rows, f, pk, f"shard {g.ref.shard_id} generation {g.ref.generation}")


@contextmanager
def _operands_of(ref: GenerationRef) -> Iterator[None]:
    """Operands that are missing or incomplete stop the shard at this generation (or the
    merge re-plans: it was merged meanwhile)."""
    try:
        yield
    except OperandsIncompleteError as exc:
        detail = str(exc).removeprefix(f"shard {ref.shard_id} generation {ref.generation}: ")
        raise GenerationUnreadableError(ref.shard_id, ref.generation, f"operands-missing: {detail}") from exc
