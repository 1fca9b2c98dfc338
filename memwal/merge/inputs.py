"""Refuse a merge batch whose generations cannot be merged into the base table losslessly.

Runs at plan time, before any lease object or table commit is written, so hostile or
drifted input fails with exit 2 and nothing written. It reads each planned generation's
Lance schema (one manifest read per generation) and, only when a generation declares a
primary-key column nullable, that column's values (generations are small MemTable
flushes, and pylance's ShardWriter declares key columns non-nullable, so the data read
is normally skipped).

Lossless means every value of the generation's type has exactly one value of the base
type: widening integers and floats, int to float within the mantissa, string/binary to
their large variants, and lists of such. Anything else (int64 to string, string to int64,
int64 to int32, float64 to int64, ...) is refused even when today's values would happen
to fit, because a later generation with other values would then fail mid-merge or lose
precision silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lance
import pyarrow as pa
import pyarrow.types as pt

from memwal.errors import BadInputError, MemWalError

if TYPE_CHECKING:
    from memwal.merge.plan import GenerationRef, MergePlan

TOMBSTONE = "_tombstone"

# Bits of a float's significand: integer types of at most this many bits convert exactly.
_MANTISSA_BITS = {16: 11, 32: 24, 64: 53}


def _int_fits(src: pa.DataType, dst: pa.DataType) -> bool:
    s_signed, d_signed = pt.is_signed_integer(src), pt.is_signed_integer(dst)
    if s_signed and not d_signed:
        return False
    if s_signed == d_signed:
        return dst.bit_width >= src.bit_width
    return dst.bit_width > src.bit_width  # unsigned into signed needs one more bit


def lossless(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every value of ``src`` converts to ``dst`` exactly (field metadata and
    nullability aside)."""
    if src.equals(dst) or pt.is_null(src):
        return True
    if pt.is_integer(src) and pt.is_integer(dst):
        return _int_fits(src, dst)
    if pt.is_floating(src) and pt.is_floating(dst):
        return dst.bit_width >= src.bit_width
    if pt.is_integer(src) and pt.is_floating(dst):
        return src.bit_width <= _MANTISSA_BITS[dst.bit_width]
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


def check_schema(ref: GenerationRef, schema: pa.Schema, base: pa.Schema, primary_key: list[str]) -> None:
    """Refuse (BadInputError) a generation schema the base table cannot take as is."""
    where = _where(ref)
    if TOMBSTONE not in schema.names or not pt.is_boolean(schema.field(TOMBSTONE).type):
        raise BadInputError(f"{where}: column {TOMBSTONE} (bool) is missing; not a MemWAL generation")
    for f in schema:
        if f.name != TOMBSTONE and f.name not in base.names:
            raise BadInputError(
                f"{where}: column {f.name} is not in the base table schema; add it to the base table before merging"
            )
    for f in base:
        if f.name not in schema.names:
            if f.name in primary_key or not f.nullable:
                kind = "primary key column" if f.name in primary_key else "non-nullable column"
                raise BadInputError(f"{where}: {kind} {f.name} is missing")
            continue  # a column added to the base after this generation was written: nulls
        src = schema.field(f.name).type
        if not lossless(src, f.type):
            raise BadInputError(
                f"{where}: column {f.name} has type {src}, which does not convert losslessly to the "
                f"base table's {f.type}"
            )


def check_keys(ref: GenerationRef, ds: lance.LanceDataset, primary_key: list[str]) -> None:
    """Refuse a generation with a null primary key (read only for nullable key columns)."""
    nullable = [k for k in primary_key if ds.schema.field(k).nullable]
    if not nullable:
        return
    for batch in ds.to_batches(columns=nullable):
        for k in nullable:
            if batch.column(k).null_count:
                raise BadInputError(f"{_where(ref)}: primary key column {k} holds null values")


def check_generations(plan: MergePlan, base: pa.Schema, storage_options: dict | None) -> None:
    """Every planned generation must merge losslessly: BadInputError (exit 2) otherwise."""
    for ref in plan.generations:
        try:
            ds = lance.dataset(ref.uri, storage_options=storage_options or None)
            schema = ds.schema
        except (ValueError, OSError) as exc:
            raise MemWalError(f"{_where(ref)}: cannot open the generation at {ref.uri}: {exc}") from exc
        check_schema(ref, schema, base, plan.primary_key)
        check_keys(ref, ds, plan.primary_key)
