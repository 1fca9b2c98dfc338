"""Refuse a merge batch whose generations cannot be merged into the base table losslessly.

Runs at plan time, before any lease object or table commit is written, so hostile or
drifted input fails with exit 2 and nothing written. It reads each planned generation's
Lance schema (one manifest read per generation, through a bounded thread pool and one
shared Lance session, whose metadata cache also serves the merge's own reads), checks
each distinct schema once, and, only when a generation declares a primary-key column
nullable, reads that column's values (generations are small MemTable flushes, and
pylance's ShardWriter declares key columns non-nullable, so the data read is normally
skipped). A merge of 10,000 tiny generations pays these costs 10,000 times, so every
one of them is batched or shared rather than dropped.

Lossless means every value of the generation's type has exactly one value of the base
type: widening integers and floats, int to float within the mantissa, string/binary to
their large variants, and lists of such. Anything else (int64 to string, string to int64,
int64 to int32, float64 to int64, ...) is refused even when today's values would happen
to fit, because a later generation with other values would then fail mid-merge or lose
precision silently.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import lance
import pyarrow as pa
import pyarrow.types as pt

from memwal.core.pool import parallel_map
from memwal.errors import BadInputError, MemWalError
from memwal.merge.columns import BaseFields, Renames, dataset_field_ids, describe, renames
from memwal.store import Store
from memwal.table.generations import open_generation

if TYPE_CHECKING:
    from memwal.merge.model import GenerationRef, MergePlan

log = logging.getLogger(__name__)

TOMBSTONE = "_tombstone"
#: Generations opened at once at plan time (opening is mostly I/O and Rust).
OPEN_THREADS = 8

T = TypeVar("T")
R = TypeVar("R")


def links_by_generation(store: Store, shard_prefix: str, keys: Iterable[str]) -> dict[str, list[str]]:
    """Symbolic links in or on the way to each generation directory (``keys``), found with
    one walk of the shard directory instead of one walk per generation.

    A link on the shard directory itself (or above it) is reported for every generation.
    """
    wanted: dict[str, list[str]] = {k: [] for k in keys}
    depth = shard_prefix.rstrip("/").count("/") + 2  # components of a generation key
    for link in store.list_links(shard_prefix):
        parts = link.split("/")
        if len(parts) < depth:
            for found in wanted.values():
                found.append(link)
        else:
            under = wanted.get("/".join(parts[:depth]))
            if under is not None:
                under.append(link)
    return wanted

# Bits of a float's significand: integer types of at most this many bits convert exactly.
_MANTISSA_BITS = {16: 11, 32: 24, 64: 53}


def _int_fits(src: pa.DataType, dst: pa.DataType) -> bool:
    s_signed, d_signed = pt.is_signed_integer(src), pt.is_signed_integer(dst)
    if s_signed and not d_signed:
        return False
    if s_signed == d_signed:
        return bool(dst.bit_width >= src.bit_width)
    return bool(dst.bit_width > src.bit_width)  # unsigned into signed needs one more bit


def lossless(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every value of ``src`` converts to ``dst`` exactly (field metadata and
    nullability aside)."""
    if src.equals(dst) or pt.is_null(src):
        return True
    if pt.is_integer(src) and pt.is_integer(dst):
        return _int_fits(src, dst)
    if pt.is_floating(src) and pt.is_floating(dst):
        return bool(dst.bit_width >= src.bit_width)
    if pt.is_integer(src) and pt.is_floating(dst):
        return bool(src.bit_width <= _MANTISSA_BITS[dst.bit_width])
    if (pt.is_string(src) and pt.is_large_string(dst)) or (pt.is_binary(src) and pt.is_large_binary(dst)):
        return True
    if pt.is_date32(src) and pt.is_date64(dst):
        return True
    if pt.is_fixed_size_list(src) and pt.is_fixed_size_list(dst):
        return src.list_size == dst.list_size and lossless(src.value_type, dst.value_type)
    list_to_list = pt.is_list(src) and (pt.is_list(dst) or pt.is_large_list(dst))
    if list_to_list or (pt.is_large_list(src) and pt.is_large_list(dst)):
        return lossless(src.value_type, dst.value_type)
    if pt.is_struct(src) and pt.is_struct(dst):
        names = [src.field(i).name for i in range(src.num_fields)]
        return sorted(names) == sorted(dst.field(i).name for i in range(dst.num_fields)) and all(
            lossless(src.field(n).type, dst.field(n).type) for n in names
        )
    return False


def _where(ref: GenerationRef) -> str:
    return f"shard {ref.shard_id} generation {ref.generation} ({ref.path})"


def check_schema(ref: GenerationRef, schema: pa.Schema, base: pa.Schema, primary_key: list[str],
                 renamed: Renames = ()) -> None:
    """Refuse (BadInputError) a generation schema the base table cannot take as is.

    ``renamed`` are the generation's columns that do not keep their name in the base
    (matched by field id: :func:`memwal.merge.columns.renames`); the checks below see the
    generation's columns under their base names, dropped ones left out.
    """
    where = _where(ref)
    if TOMBSTONE not in schema.names or not pt.is_boolean(schema.field(TOMBSTONE).type):
        raise BadInputError(f"{where}: column {TOMBSTONE} (bool) is missing; not a MemWAL generation")
    mapping = dict(renamed)
    fields = {mapping.get(f.name, f.name): f for f in schema if f.name != TOMBSTONE}
    fields = {name: f for name, f in fields.items() if name is not None}
    for name, f in fields.items():
        if name not in base.names:
            raise BadInputError(
                f"{where}: column {f.name} is not in the base table schema; add it to the base table before merging"
            )
    for f in base:
        if f.name not in fields:
            if f.name in primary_key or not f.nullable:
                kind = "primary key column" if f.name in primary_key else "non-nullable column"
                raise BadInputError(f"{where}: {kind} {f.name} is missing")
            continue  # a column added to the base after this generation was written: nulls
        src = fields[f.name].type
        if not lossless(src, f.type):
            known_as = f" (base column {f.name}, same field id)" if fields[f.name].name != f.name else ""
            raise BadInputError(
                f"{where}: column {fields[f.name].name}{known_as} has type {src}, which does not convert "
                f"losslessly to the base table's {f.type}"
            )


def null_key(ds: lance.LanceDataset, primary_key: list[str], schema: pa.Schema | None = None) -> str | None:
    """The first primary-key column holding a null, read only for nullable key columns
    (a missing one is :func:`check_schema`'s to report)."""
    schema = schema or ds.schema
    nullable = [k for k in primary_key if k in schema.names and schema.field(k).nullable]
    if not nullable:
        return None
    for batch in ds.to_batches(columns=nullable):
        for k in nullable:
            if batch.column(k).null_count:
                return k
    return None


def check_generations(plan: MergePlan, base: lance.LanceDataset, storage_options: dict[str, str] | None,
                      threads: int = OPEN_THREADS) -> MergePlan:
    """Every planned generation must merge losslessly: BadInputError (exit 2) otherwise.

    Returns the plan with each planned generation recording how its columns map to the base
    table's, by field id (``GenerationRef.renamed``), so every engine and reader reads it the same way.

    Generations share a handful of schemas (one per schema change of the table), so each
    distinct schema is checked once, against the first generation that has it. The pool
    returns what it found rather than raising or keeping datasets (10,000 open datasets
    hold hundreds of MiB), and verdicts are given in generation order, as one by one.
    """
    fields = BaseFields.of(base)
    base_schema = base.schema

    def inspect(ref: GenerationRef) -> tuple[pa.Schema | None, dict[str, int], str | None, Exception | None]:
        try:
            ds = open_generation(ref.uri, storage_options)
        except (ValueError, OSError) as exc:
            return None, {}, None, exc
        schema = ds.schema
        return schema, dataset_field_ids(ds), null_key(ds, list(plan.primary_key), schema), None

    refs = plan.generations
    checked: dict[tuple[pa.Schema, tuple[tuple[str, int], ...]], Renames] = {}
    mapped: dict[tuple[str, int], Renames] = {}
    inspected = parallel_map(inspect, refs, threads, name="memwal-plan", chunks_per_thread=4)
    for ref, (schema, ids, null, exc) in zip(refs, inspected, strict=True):
        if exc is not None:
            raise MemWalError(f"{_where(ref)}: cannot open the generation at {ref.uri}: {exc}") from exc
        key = (schema, tuple(sorted(ids.items())))
        if key not in checked:
            renamed = renames(ids, fields, _where(ref))
            check_schema(ref, schema, base_schema, list(plan.primary_key), renamed)
            checked[key] = renamed
            if renamed:
                log.info("%s: columns matched to the base table by field id: %s", _where(ref), describe(renamed))
        if null is not None:
            raise BadInputError(f"{_where(ref)}: primary key column {null} holds null values")
        if checked[key]:
            mapped[(ref.shard_id, ref.generation)] = checked[key]
    if not mapped:
        return plan
    return replace(plan, shards=tuple(
        replace(s, generations=tuple(replace(g, renamed=mapped.get((g.shard_id, g.generation), ()))
                                     for g in s.generations))
        for s in plan.shards))
