"""MemWAL sharding specs evaluated over Arrow data, plus shard pruning.

Why our own evaluator: the merger, GC and read helpers must know which shard a row (or a
filter literal) belongs to without calling into a writer, and must agree *bit for bit*
with Lance's own routing (``lance.mem_wal.evaluate_sharding_spec``), or pruning would skip
shards that hold matching rows. Every behaviour below was checked against that oracle in
pylance 14.0.2 (tests/test_sharding.py proves it with property-based tests).

What pylance 14.0.2 does (observed, and the source of the rules here):

* Transforms Lance evaluates: ``identity``, ``bucket``, ``unsharded``. Everything else
  (``year``, ``month``, ``day``, ``hour``, ``truncate``, ``multi_bucket``, and specs with
  an ``expression``) is rejected by Lance with ``ValueError: Unsupported MemWAL sharding
  transform``. We still evaluate the first six from the MemWAL spec text (see
  :data:`SPEC_ONLY_TRANSFORMS`) so specs written by a newer Lance can be read, but there
  is no oracle for them, so :func:`prune_shards` does not prune on them by default.
* ``bucket`` is **not** ``abs(murmur3) % N`` as the spec says: it is
  ``(murmur3 & 0x7fffffff) % N`` (so INT32_MIN hashes to bucket 0, never negative), and
  a NULL source value has hash 0, i.e. bucket 0 (never a NULL bucket). The hash input is
  the value widened to Java-style ints: bool, int8/16/32, uint8/16/32 (bit pattern),
  date32 and time32 hash as a 4-byte little-endian int32; int64, uint64, timestamps
  (any unit, any time zone: the raw stored integer) and time64 hash as 8 bytes; float32
  and float64 hash their IEEE bits with -0.0 folded to 0.0 and every NaN folded to the
  canonical NaN. For fixed-width values this is exactly ``mmh3.hash(le_bytes, 0)``.
  Strings (utf8, large_utf8) use the *Spark/Hive variant* of murmur3_x86_32: whole 4-byte
  blocks as usual, but each tail byte is mixed as its own sign-extended block. It equals
  ``mmh3.hash`` only when the UTF-8 length is a multiple of 4 (``"a"`` -> bucket 1 of 8
  in Lance, 2 with ``mmh3``). Binary, date64, decimal, nested and other types are
  rejected, but only when a non-null value of that type is met (an all-null column of an
  unsupported type buckets to 0, like Lance).
* ``identity`` returns the source column unchanged (type, values, nulls).
* ``unsharded`` (``initialize_mem_wal(unsharded=True)`` writes
  ``{'field_id': 'bucket', 'source_ids': [], 'transform': 'unsharded', ...}``) returns
  int32 zeros.
* Output: one column per spec field, named by ``field_id``; a field is marked nullable
  exactly when its column holds a null (arrow-rs ``Array::is_nullable``). A spec with no
  fields is an error. A ``column`` parameter that is not blank overrides ``source_ids``.
  Source ids resolve to names through the Lance schema, nested fields as dotted paths,
  and the name must be a top-level column of the batch.
* Shard manifests written by ``ShardWriter`` carry ``shard_spec_id`` but **no**
  ``shard_field_entries`` (observed for bucket, identity and unsharded tables), so the
  byte encoding of ``ShardFieldEntry.value`` is not observable in pylance 14.0.2; see
  :func:`shard_field_value_from_bytes` for the assumed encoding.
"""

from __future__ import annotations

import itertools
import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import BadInputError

__all__ = [
    "VERIFIED_TRANSFORMS",
    "SPEC_ONLY_TRANSFORMS",
    "spec_to_dict",
    "field_names_from_lance_schema",
    "lance_murmur3_bytes",
    "murmur3_multi",
    "evaluate_sharding_spec",
    "prune_shards",
    "parse_simple_filter",
    "shard_matches",
    "shard_field_value_from_bytes",
    "shard_field_value_to_bytes",
]

#: Transforms whose evaluation is proven equal to Lance's own (pylance 14.0.2).
VERIFIED_TRANSFORMS = frozenset({"identity", "bucket", "unsharded"})
#: Transforms pylance 14.0.2 rejects; evaluated from the MemWAL spec text, no oracle.
SPEC_ONLY_TRANSFORMS = frozenset({"year", "month", "day", "hour", "truncate", "multi_bucket"})

_M32 = 0xFFFFFFFF
_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1
# Most literal combinations we expand when pruning on a multi-column field.
_MAX_PRUNE_COMBINATIONS = 10_000


# ---------------------------------------------------------------------------
# Spec normalisation and field ids
# ---------------------------------------------------------------------------


def spec_to_dict(spec: Any) -> dict[str, Any]:
    """Normalise a sharding spec to the dict shape ``mem_wal_index_details()`` returns.

    Accepts that dict itself, a protobuf ``ShardingSpec`` (proto3 strings: an empty
    ``transform``/``expression`` means unset), or Lance's ``ShardingSpec`` dataclass. We
    duck-type rather than import the message classes so this module stays usable with any
    generated copy of the proto.
    """
    if isinstance(spec, Mapping):
        raw_fields = spec.get("fields") or []
        spec_id = spec.get("spec_id", 0)
    elif hasattr(spec, "fields") and hasattr(spec, "spec_id"):
        raw_fields = list(spec.fields)
        spec_id = spec.spec_id
    else:
        raise BadInputError(f"not a sharding spec: {spec!r}")
    fields = []
    for f in raw_fields:
        if isinstance(f, Mapping):
            get = f.get
        else:

            def get(key: str, default: Any = None, _f: Any = f) -> Any:
                return getattr(_f, key, default)

        fields.append(
            {
                "field_id": str(get("field_id", "") or ""),
                "source_ids": [int(s) for s in (get("source_ids", None) or [])],
                "transform": get("transform", None) or None,
                "expression": get("expression", None) or None,
                "result_type": str(get("result_type", "") or ""),
                "parameters": {str(k): str(v) for k, v in dict(get("parameters", None) or {}).items()},
            }
        )
    return {"spec_id": int(spec_id or 0), "fields": fields}


def field_names_from_lance_schema(schema_or_dataset: Any) -> dict[int, str]:
    """Map Lance field id -> column name, the way Lance resolves ``source_ids``.

    Accepts a ``LanceDataset`` (uses ``.lance_schema``, the only place pylance exposes
    field ids), a ``LanceSchema``, or a ``pyarrow.Schema`` (ids are then assigned afresh in
    pre-order, which matches only a table whose columns were never dropped or reordered).
    Nested fields map to their dotted path (``"struct.child"``), as in Lance.
    """
    obj = schema_or_dataset
    if hasattr(obj, "lance_schema"):
        obj = obj.lance_schema
    if isinstance(obj, pa.Schema):
        from lance.schema import LanceSchema

        obj = LanceSchema.from_pyarrow(obj)
    if not hasattr(obj, "fields"):
        raise BadInputError(f"not a Lance schema or dataset: {type(schema_or_dataset)!r}")
    out: dict[int, str] = {}

    def walk(fields: Iterable[Any], prefix: str) -> None:
        for f in fields:
            name = prefix + f.name()
            out[int(f.id())] = name
            walk(f.children(), name + ".")

    walk(obj.fields(), "")
    return out


# ---------------------------------------------------------------------------
# Murmur3 (x86_32, seed 0), as Lance computes it
# ---------------------------------------------------------------------------


def _rotl_np(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1_np(k: np.ndarray) -> np.ndarray:
    k = k * np.uint32(0xCC9E2D51)
    return _rotl_np(k, 15) * np.uint32(0x1B873593)


def _mix_h1_np(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    return _rotl_np(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix_np(h: np.ndarray, length: int) -> np.ndarray:
    h = h ^ np.uint32(length)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _hash_int32_np(words: np.ndarray) -> np.ndarray:
    """murmur3 of 4-byte LE values (vectorised); equals ``mmh3.hash(pack('<i', v))``."""
    with np.errstate(over="ignore"):
        k = words.astype(np.uint32, copy=False)
        h = _mix_h1_np(np.zeros_like(k), _mix_k1_np(k))
        return _fmix_np(h, 4).view(np.int32)


def _hash_int64_np(values: np.ndarray) -> np.ndarray:
    """murmur3 of 8-byte LE values (vectorised); equals ``mmh3.hash(pack('<q', v))``."""
    with np.errstate(over="ignore"):
        v = values.astype(np.uint64, copy=False)
        low = (v & np.uint64(_M32)).astype(np.uint32)
        high = (v >> np.uint64(32)).astype(np.uint32)
        h = _mix_h1_np(np.zeros_like(low), _mix_k1_np(low))
        h = _mix_h1_np(h, _mix_k1_np(high))
        return _fmix_np(h, 8).view(np.int32)


def _mix_k1(k: int) -> int:
    k = (k * 0xCC9E2D51) & _M32
    k = ((k << 15) | (k >> 17)) & _M32
    return (k * 0x1B873593) & _M32


def _mix_h1(h: int, k: int) -> int:
    h ^= k
    h = ((h << 13) | (h >> 19)) & _M32
    return (h * 5 + 0xE6546B64) & _M32


def _fmix(h: int, length: int) -> int:
    h ^= length & _M32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def lance_murmur3_bytes(data: bytes) -> int:
    """Lance's string hash: murmur3_x86_32 (seed 0) with the Spark/Hive tail.

    Lance (``mem_wal/sharding.rs``, ``hash_bytes``) mixes each trailing byte (after the
    whole 4-byte blocks) as its own sign-extended 32-bit block through the full ``mix_h1``
    step, unlike reference murmur3, which packs the tail into one block. Returns the signed
    32-bit hash.
    """
    n = len(data)
    full = n - n % 4
    h = 0
    for (k,) in struct.iter_unpack("<I", data[:full]):
        h = _mix_h1(h, _mix_k1(k))
    for b in data[full:]:
        h = _mix_h1(h, _mix_k1((b - 256 if b >= 128 else b) & _M32))
    h = _fmix(h, n)
    return h - (1 << 32) if h >= 1 << 31 else h


def _canonical_f32_bits(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32, copy=False).view(np.uint32).copy()
    bits[values == 0] = 0
    bits[np.isnan(values)] = 0x7FC00000
    return bits


def _canonical_f64_bits(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float64, copy=False).view(np.uint64).copy()
    bits[values == 0] = 0
    bits[np.isnan(values)] = 0x7FF8000000000000
    return bits


def _physical_null_count(arr: pa.Array) -> int:
    """Nulls as arrow-rs ``Array::is_null`` sees them (validity bitmap only).

    A NullArray has no bitmap in arrow-rs, so its rows are *not* null there.
    """
    if pa.types.is_null(arr.type):
        return 0
    return arr.null_count


def _lance_hashes(arr: pa.Array) -> np.ndarray:
    """Signed 32-bit hash per row, as Lance's ``hash_array_value`` (NULL -> 0)."""
    t = arr.type
    n = len(arr)
    if pa.types.is_dictionary(t) or not _bucket_type_supported(t):
        if n - _physical_null_count(arr) > 0:
            raise BadInputError(f"Unsupported bucket sharding column type: {t}")
        return np.zeros(n, dtype=np.int32)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    valid = np.ones(n, dtype=bool) if arr.null_count == 0 else ~np.asarray(arr.is_null())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        out = np.zeros(n, dtype=np.int32)
        for i, s in enumerate(arr.to_pylist()):
            if s is not None:
                out[i] = lance_murmur3_bytes(s.encode("utf-8"))
        return out
    if pa.types.is_boolean(t):
        ints = np.asarray(arr.fill_null(False)).astype(np.int32)
        hashes = _hash_int32_np(ints)
    elif pa.types.is_float32(t):
        hashes = _hash_int32_np(_canonical_f32_bits(_numpy_values(arr, np.float32)))
    elif pa.types.is_float64(t):
        hashes = _hash_int64_np(_canonical_f64_bits(_numpy_values(arr, np.float64)))
    else:
        width = t.bit_width
        storage = pa.int32() if width <= 32 else pa.int64()
        if pa.types.is_unsigned_integer(t) and width == 32:
            raw = _numpy_values(arr.view(pa.int32()), np.int32)
        elif pa.types.is_unsigned_integer(t) and width == 64:
            raw = _numpy_values(arr.view(pa.int64()), np.int64)
        elif pa.types.is_integer(t):
            raw = _numpy_values(arr.cast(storage), storage.to_pandas_dtype())
        else:  # temporal types: the stored integer
            raw = _numpy_values(arr.view(storage), storage.to_pandas_dtype())
        hashes = _hash_int32_np(raw) if width <= 32 else _hash_int64_np(raw)
    return np.where(valid, hashes, np.int32(0)).astype(np.int32)


def _bucket_type_supported(t: pa.DataType) -> bool:
    return (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time32(t)
        or pa.types.is_time64(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def _numpy_values(arr: pa.Array, dtype: Any) -> np.ndarray:
    """Values as numpy with nulls replaced by zero (their hash is discarded anyway)."""
    if arr.null_count:
        arr = arr.fill_null(pa.scalar(0, arr.type)) if not pa.types.is_floating(arr.type) else arr.fill_null(0.0)
    return np.asarray(arr.to_numpy(zero_copy_only=False)).astype(dtype, copy=False)


# ---------------------------------------------------------------------------
# murmur3_multi (spec-only, after lance-namespace's DataFusion UDF)
# ---------------------------------------------------------------------------


def _multi_value_bytes(t: pa.DataType, value: Any) -> bytes:
    """Bytes lance-namespace's ``scalar_to_bytes`` feeds to ``murmur3_multi``.

    Native width little-endian for numbers, dates and timestamps (no widening and no float
    canonicalisation), UTF-8 for strings, raw bytes for binary, Arrow's display string for
    booleans. Other types: unsupported here.
    """
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return value.encode("utf-8")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes(value)
    if pa.types.is_boolean(t):
        return b"true" if value else b"false"
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return struct.pack("<f" if t.bit_width == 32 else "<d", value)
    if pa.types.is_integer(t):
        return int(value).to_bytes(t.bit_width // 8, "little", signed=pa.types.is_signed_integer(t))
    raise BadInputError(f"Unsupported multi_bucket column type: {t}")


def murmur3_multi(columns: Sequence[pa.Array]) -> pa.Array:
    """Spec ``murmur3_multi(col0, col1, ...)``: reference murmur3_x86_32 (seed 0) over the
    concatenated bytes of the row's non-null values; NULL only when all are NULL.

    Follows lance-namespace's UDF of that name (the only Lance implementation); MemWAL in
    pylance 14.0.2 has none, so this is not oracle-checked.
    """
    if not columns:
        raise BadInputError("murmur3_multi expects at least 1 argument")
    n = len(columns[0])
    prepared = []
    for col in columns:
        if len(col) != n:
            raise BadInputError("All arguments to murmur3_multi must have the same length")
        t = col.type
        if pa.types.is_date32(t) or pa.types.is_date64(t) or pa.types.is_timestamp(t):
            storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
            prepared.append((storage, col.view(storage).to_pylist()))
        else:
            prepared.append((t, col.to_pylist()))
    out: list[int | None] = []
    for row in range(n):
        buf = b""
        has_value = False
        for t, values in prepared:
            v = values[row]
            if v is None:
                continue
            has_value = True
            buf += _multi_value_bytes(t, v)
        out.append(mmh3.hash(buf, 0, signed=True) if has_value else None)
    return pa.array(out, type=pa.int32())


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


def _as_record_batch(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    if isinstance(batch, pa.RecordBatch):
        return batch
    if isinstance(batch, pa.Table):
        return pa.RecordBatch.from_arrays([c.combine_chunks() for c in batch.columns], schema=batch.schema)
    raise BadInputError(f"expected a pyarrow RecordBatch or Table, got {type(batch)!r}")


def _column_by_name(batch: pa.RecordBatch, name: str) -> pa.Array:
    for i, n in enumerate(batch.schema.names):  # first match, like arrow-rs column_by_name
        if n == name:
            return batch.column(i)
    raise BadInputError(f"Sharding source column '{name}' not found in batch")


def _source_names(field: Mapping[str, Any], field_names: Mapping[int, str], *, all_sources: bool) -> list[str]:
    column = field["parameters"].get("column")
    if column is not None and column.strip():
        return [column]
    if not field["source_ids"]:
        raise BadInputError(f"MemWAL sharding field '{field['field_id']}' has no source column")
    ids = field["source_ids"] if all_sources else field["source_ids"][:1]
    names = []
    for sid in ids:
        if sid not in field_names:
            raise BadInputError(
                f"MemWAL sharding field '{field['field_id']}' source id {sid} was not mapped to a batch column"
            )
        names.append(field_names[sid])
    return names


def _parse_rust_i32(text: str, what: str, field_id: str) -> int:
    """Parse like Rust's ``str::parse::<i32>`` (optional sign, digits, nothing else)."""
    if re.fullmatch(r"[+-]?[0-9]+", text or "") is None or not _I32_MIN <= int(text) <= _I32_MAX:
        raise BadInputError(f"sharding field '{field_id}' has invalid {what} '{text}'")
    return int(text)


def _positive_param(field: Mapping[str, Any], name: str) -> int:
    fid = field["field_id"]
    if name not in field["parameters"]:
        raise BadInputError(f"sharding field '{fid}' missing '{name}' parameter")
    value = _parse_rust_i32(field["parameters"][name], name, fid)
    if value <= 0:
        raise BadInputError(f"sharding field '{fid}' requires positive {name}, got {value}")
    return value


def _date_part(arr: pa.Array, part: str) -> pa.Array:
    t = arr.type
    if not (pa.types.is_date(t) or pa.types.is_timestamp(t)):
        raise BadInputError(f"{part} transform needs a date or timestamp column, got {t}")
    if part == "hour" and pa.types.is_date(t):
        return pc.multiply(pc.year(arr), 0).cast(pa.int32())  # dates have hour 0; keeps nulls
    fn = {"year": pc.year, "month": pc.month, "day": pc.day, "hour": pc.hour}[part]
    # Time-zoned timestamps give local-time parts, like DataFusion's date_part. Arrow's
    # time zone database applies no DST rules after 2037; no oracle exists to say who's right.
    return fn(arr).cast(pa.int32())


def _truncate(arr: pa.Array, width: int) -> pa.Array:
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.utf8_slice_codeunits(arr, 0, width)  # code points, like left()
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        if len(arr) == 0:
            return arr
        mask = np.asarray(arr.is_null()) if arr.null_count else None
        if pa.types.is_floating(t):
            v = _numpy_values(arr, np.float64 if t.bit_width == 64 else np.float32)
            with np.errstate(invalid="ignore"):  # inf % W is NaN, as in DataFusion
                out = v - np.fmod(v, v.dtype.type(width))
        else:
            np_dtype = t.to_pandas_dtype()
            v = _numpy_values(arr, np_dtype)
            if width > np.iinfo(np_dtype).max:
                out = np.zeros_like(v)  # |v| < width: v % width == v
            else:
                # col - col % W with truncated (Rust) remainder: rounds toward zero.
                out = v - np.fmod(v, np_dtype(width))
        return pa.array(out, type=t, mask=mask)
    raise BadInputError(f"truncate transform needs a string or numeric column, got {t}")


def _multi_bucket(columns: Sequence[pa.Array], num_buckets: int) -> pa.Array:
    hashes = murmur3_multi(columns).to_pylist()
    out: list[int | None] = []
    for h in hashes:
        if h is None:
            out.append(None)
        elif h == _I32_MIN:
            # DataFusion's abs() on Int32 is checked: abs(INT32_MIN) is an overflow error.
            raise BadInputError("Int32 overflow on abs(-2147483648) in multi_bucket")
        else:
            out.append(abs(h) % num_buckets)
    return pa.array(out, type=pa.int32())


def _evaluate_field(batch: pa.RecordBatch, field: Mapping[str, Any], field_names: Mapping[int, str]) -> pa.Array:
    transform = field["transform"]
    fid = field["field_id"]
    if transform is None:
        if field["expression"]:
            raise BadInputError(f"custom shard expressions are not supported: field '{fid}': {field['expression']!r}")
        raise BadInputError(f"Unsupported MemWAL sharding transform for field '{fid}': None")
    if transform == "unsharded":
        return pa.array(np.zeros(batch.num_rows, dtype=np.int32), type=pa.int32())
    if transform == "identity":
        return _column_by_name(batch, _source_names(field, field_names, all_sources=False)[0])
    if transform == "bucket":
        n = _positive_param(field, "num_buckets")
        col = _column_by_name(batch, _source_names(field, field_names, all_sources=False)[0])
        hashes = _lance_hashes(col).astype(np.int64)
        return pa.array(((hashes & _I32_MAX) % n).astype(np.int32), type=pa.int32())
    if transform in ("year", "month", "day", "hour"):
        col = _column_by_name(batch, _source_names(field, field_names, all_sources=False)[0])
        return _date_part(col, transform)
    if transform == "truncate":
        width = _positive_param(field, "width")
        col = _column_by_name(batch, _source_names(field, field_names, all_sources=False)[0])
        return _truncate(col, width)
    if transform == "multi_bucket":
        n = _positive_param(field, "num_buckets")
        cols = [_column_by_name(batch, name) for name in _source_names(field, field_names, all_sources=True)]
        return _multi_bucket(cols, n)
    raise BadInputError(f"Unsupported MemWAL sharding transform for field '{fid}': {transform!r}")


def evaluate_sharding_spec(
    batch: pa.RecordBatch | pa.Table,
    spec: Any,
    field_names: Mapping[int, str],
) -> pa.RecordBatch:
    """Compute each row's shard field values, exactly as Lance routes rows.

    Returns one column per spec field (named by ``field_id``), equal to
    ``lance.mem_wal.evaluate_sharding_spec(batch, spec, ds.lance_schema)`` for the
    transforms Lance supports (see the module docstring for the rules). ``field_names``
    maps Lance field ids to column names (:func:`field_names_from_lance_schema`).
    Raises :class:`BadInputError` where Lance raises (unknown transform, missing column,
    bad ``num_buckets``, unsupported type, empty spec).
    """
    rb = _as_record_batch(batch)
    d = spec_to_dict(spec)
    if not d["fields"]:
        raise BadInputError("sharding spec has no fields")
    arrays = []
    fields = []
    for field in d["fields"]:
        arr = _evaluate_field(rb, field, field_names)
        arrays.append(arr)
        # arrow-rs Array::is_nullable(): nullable exactly when a (logical) null is present.
        fields.append(pa.field(field["field_id"], arr.type, nullable=arr.null_count > 0))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# ---------------------------------------------------------------------------
# Pruning
# ---------------------------------------------------------------------------


def _coerce_literals(values: Sequence[Any], t: pa.DataType) -> pa.Array | None:
    """Literals as an array of the column's type, or None when unsure (then: no pruning).

    Only same-kind coercions are made (numbers to numeric columns, strings to string
    columns, booleans to boolean columns); anything SQL might coerce differently is left
    unpruned, which is always safe.
    """
    out: list[Any] = []
    for v in values:
        if isinstance(v, bool):
            if not pa.types.is_boolean(t):
                return None
            out.append(v)
        elif isinstance(v, int):
            if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                return None
            if pa.types.is_floating(t) and float(v) != v:
                return None  # not exactly representable: leave unpruned
            out.append(v)
        elif isinstance(v, float):
            if pa.types.is_floating(t):
                out.append(v)
            elif pa.types.is_integer(t) and math.isfinite(v) and v.is_integer():
                out.append(int(v))
            else:
                return None
        elif isinstance(v, str):
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                return None
            out.append(v)
        else:
            return None
    try:
        arr = pa.array(out, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    if pa.types.is_floating(t) and t.bit_width == 32 and arr.to_pylist() != [float(x) for x in out]:
        return None  # literal not exactly a float32: equality semantics unclear
    return arr


def _column_types(schema: pa.Schema | Mapping[str, pa.DataType] | None) -> Mapping[str, pa.DataType]:
    if schema is None:
        return {}
    if isinstance(schema, pa.Schema):
        return {f.name: f.type for f in schema}
    return dict(schema)


def prune_shards(
    spec: Any,
    field_names: Mapping[int, str],
    predicate: Mapping[str, Sequence[Any]],
    schema: pa.Schema | Mapping[str, pa.DataType] | None = None,
    *,
    trust_spec_only_transforms: bool = False,
) -> dict[str, set[Any]]:
    """Shard values that rows satisfying ``AND(column IN values)`` can have, per field.

    ``predicate`` maps column name -> allowed literals (:func:`parse_simple_filter`).
    ``schema`` (e.g. ``ds.schema``) gives each column's Arrow type, which the hash depends
    on (an int32 and an int64 of equal value hash differently). A field is left out of the
    answer (no pruning on it) when any of its source columns is unconstrained or of
    unknown type, when a literal cannot be coerced to the column type without doubt, when
    its transform is not proven equal to Lance's (unless ``trust_spec_only_transforms``),
    or when evaluation fails. Leaving a field out is always safe; a wrong set would skip a
    shard holding matching rows.
    """
    d = spec_to_dict(spec)
    types = _column_types(schema)
    allowed: dict[str, set[Any]] = {}
    for field in d["fields"]:
        transform = field["transform"]
        if transform == "unsharded":
            allowed[field["field_id"]] = {0}
            continue
        if transform not in VERIFIED_TRANSFORMS and not (
            trust_spec_only_transforms and transform in SPEC_ONLY_TRANSFORMS
        ):
            continue
        try:
            names = _source_names(field, field_names, all_sources=transform == "multi_bucket")
        except BadInputError:
            continue
        if any(n not in predicate or n not in types for n in names):
            continue
        unique_names = list(dict.fromkeys(names))
        literal_arrays = {n: _coerce_literals(list(predicate[n]), types[n]) for n in unique_names}
        if any(a is None for a in literal_arrays.values()):
            continue
        distinct = {n: _distinct(literal_arrays[n]) for n in unique_names}
        combos = math.prod(len(v) for v in distinct.values())
        if combos > _MAX_PRUNE_COMBINATIONS:
            continue
        if combos == 0:
            allowed[field["field_id"]] = set()
            continue
        rows = list(itertools.product(*(distinct[n] for n in unique_names)))
        batch = pa.RecordBatch.from_arrays(
            [pa.array([r[i] for r in rows], type=types[n]) for i, n in enumerate(unique_names)],
            names=unique_names,
        )
        one_field = {"spec_id": d["spec_id"], "fields": [field]}
        try:
            result = evaluate_sharding_spec(batch, one_field, field_names)
        except BadInputError:
            continue
        values = result.column(0).to_pylist()
        if any(v is None for v in values):
            continue  # a NULL shard value: leave it to the caller's judgement, unpruned
        try:
            allowed[field["field_id"]] = set(values)
        except TypeError:
            continue
    return allowed


def _distinct(arr: pa.Array) -> list[Any]:
    seen: dict[Any, None] = {}
    for v in arr.to_pylist():
        seen.setdefault(v, None)
    return list(seen)


def shard_matches(shard_field_values: Mapping[str, Any], allowed: Mapping[str, set[Any] | None]) -> bool:
    """False only when a known shard field value is outside the allowed set.

    Unknown (missing or ``None``) values, fields without a constraint, and values whose
    kind does not compare with the allowed set (e.g. undecoded bytes) all keep the shard:
    pruning must never drop a shard that could hold a matching row.
    """
    for fid, allowed_values in allowed.items():
        if allowed_values is None:
            continue
        value = shard_field_values.get(fid)
        if value is None:
            continue
        if isinstance(value, (bytes, bytearray)) and not all(isinstance(a, (bytes, bytearray)) for a in allowed_values):
            continue
        try:
            if value not in allowed_values:
                return False
        except TypeError:
            continue
    return True


# ---------------------------------------------------------------------------
# A small filter parser: conjunctions of `col = lit` and `col IN (lit, ...)`
# ---------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<str>'(?:[^']|'')*')
  | (?P<num>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<qid>"(?:[^"]|"")*"|`[^`]*`)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<op><>|!=|<=|>=|==|[=<>(),])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_KEYWORDS = {"AND", "OR", "IN", "NOT", "TRUE", "FALSE", "NULL", "IS", "LIKE", "BETWEEN", "CASE", "WHEN", "THEN", "END"}


def _tokenize(expr: str) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    for m in _TOKEN_RE.finditer(expr):
        kind = m.lastgroup
        text = m.group()
        if kind == "ws":
            continue
        if kind == "str":
            tokens.append(("lit", text[1:-1].replace("''", "'")))
        elif kind == "num":
            is_float = any(c in text for c in ".eE")
            tokens.append(("lit", float(text) if is_float else int(text)))
        elif kind == "qid":
            q = text[0]
            tokens.append(("id", text[1:-1].replace(q * 2, q)))
        elif kind == "id":
            up = text.upper()
            if up in ("TRUE", "FALSE"):
                tokens.append(("lit", up == "TRUE"))
            elif up in _KEYWORDS:
                tokens.append(("kw", up))
            else:
                tokens.append(("id", text))
        elif kind == "op":
            tokens.append(("op", text))
        else:
            tokens.append(("other", text))
    return tokens


def _split_top_level(tokens: list[tuple[str, Any]]) -> tuple[list[list[tuple[str, Any]]], bool, bool]:
    """Split on top-level AND. Returns (conjuncts, has_top_level_or, balanced).

    The AND of ``x BETWEEN a AND b`` stays inside its conjunct, so ``b = 3`` in
    ``x BETWEEN a AND b = 3`` is never mistaken for a constraint of its own.
    """
    parts: list[list[tuple[str, Any]]] = [[]]
    depth = 0
    has_or = False
    open_between = False
    for tok in tokens:
        if tok == ("op", "("):
            depth += 1
        elif tok == ("op", ")"):
            depth -= 1
            if depth < 0:
                return [], has_or, False
        if depth == 0 and tok == ("kw", "BETWEEN"):
            open_between = True
        elif depth == 0 and tok == ("kw", "AND"):
            if open_between:
                open_between = False
            else:
                parts.append([])
                continue
        if depth == 0 and tok == ("kw", "OR"):
            has_or = True
        parts[-1].append(tok)
    return parts, has_or, depth == 0


def _wrapped_in_parens(tokens: list[tuple[str, Any]]) -> bool:
    if len(tokens) < 2 or tokens[0] != ("op", "(") or tokens[-1] != ("op", ")"):
        return False
    depth = 0
    for i, tok in enumerate(tokens):
        if tok == ("op", "("):
            depth += 1
        elif tok == ("op", ")"):
            depth -= 1
            if depth == 0 and i != len(tokens) - 1:
                return False
    return True


def _parse_conjunct(tokens: list[tuple[str, Any]]) -> tuple[str, list[Any]] | None:
    if len(tokens) == 3 and tokens[1] == ("op", "="):
        (k1, v1), _, (k2, v2) = tokens
        if k1 == "id" and k2 == "lit":
            return v1, [v2]
        if k1 == "lit" and k2 == "id":
            return v2, [v1]
        return None
    if len(tokens) >= 5 and tokens[0][0] == "id" and tokens[1] == ("kw", "IN") and tokens[2] == ("op", "("):
        if tokens[-1] != ("op", ")"):
            return None
        inner = tokens[3:-1]
        values = []
        for i, tok in enumerate(inner):
            if i % 2 == 0:
                if tok[0] != "lit":
                    return None
                values.append(tok[1])
            elif tok != ("op", ","):
                return None
        if not values or len(inner) % 2 == 0:
            return None
        return tokens[0][1], values
    return None


def _parse_tokens(tokens: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    while _wrapped_in_parens(tokens):
        tokens = tokens[1:-1]
    parts, has_or, balanced = _split_top_level(tokens)
    if has_or or not balanced:
        return {}
    out: dict[str, list[Any]] = {}
    dropped: set[str] = set()
    for part in parts:
        if _wrapped_in_parens(part):
            constraints = _parse_tokens(part)  # a parenthesised conjunction
        else:
            parsed = _parse_conjunct(part)
            constraints = {parsed[0]: parsed[1]} if parsed else {}
        for col, values in constraints.items():
            if col in dropped:
                continue
            if col not in out:
                out[col] = list(dict.fromkeys(values))
                continue
            # The same column constrained twice: intersect, but only when every literal is
            # of one kind (SQL coercion between kinds is not ours to guess).
            kinds = {_literal_kind(v) for v in out[col] + values}
            if len(kinds) != 1:
                del out[col]
                dropped.add(col)
                continue
            out[col] = [v for v in out[col] if v in values]
    return out


def _literal_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "num"
    return type(v).__name__


def parse_simple_filter(expr: str) -> dict[str, list[Any]]:
    """Column -> allowed literals implied by a Lance/SQL filter, conservatively.

    Understands conjunctions (``AND``, any nesting of parentheses) of ``col = literal``,
    ``literal = col`` and ``col IN (lit, ...)`` with integer, float, single-quoted string
    and boolean literals. Any other conjunct (ranges, ``NOT``, ``IS NULL``, functions,
    parenthesised ``OR``, ``BETWEEN``) is ignored, which only loosens the result. An ``OR``
    at the top level, or any ``CASE``, makes the whole answer ``{}``.
    A column constrained twice gets the intersection of its literals.
    """
    if not expr or not expr.strip():
        return {}
    tokens = _tokenize(expr)
    if ("kw", "CASE") in tokens:
        return {}  # ANDs inside CASE ... END are not conjuncts of the filter
    return _parse_tokens(tokens)


# ---------------------------------------------------------------------------
# ShardFieldEntry.value bytes
# ---------------------------------------------------------------------------

_FIXED_FORMATS = {
    "int8": "<b",
    "int16": "<h",
    "int32": "<i",
    "int64": "<q",
    "uint8": "<B",
    "uint16": "<H",
    "uint32": "<I",
    "uint64": "<Q",
    "float": "<f",
    "float32": "<f",
    "double": "<d",
    "float64": "<d",
    "date32": "<i",
    "date32:day": "<i",
    "date64": "<q",
    "date64:ms": "<q",
}
_STRING_TYPES = {"utf8", "string", "large_utf8", "large_string"}
_BINARY_TYPES = {"binary", "large_binary"}
_BOOL_TYPES = {"bool", "boolean"}


def _norm_type(result_type: str) -> str:
    return (result_type or "").strip().lower()


def shard_field_value_from_bytes(result_type: str, value: bytes) -> Any:
    """Decode ``ShardFieldEntry.value`` to the Python value evaluation produces.

    Assumed encoding (pylance 14.0.2's writers never fill ``shard_field_entries``, so it
    could not be observed): fixed-width types are little-endian of their own width
    (``int32`` bucket ids: 4 bytes LE, matching Arrow's in-memory layout and the 4-byte
    LE hashing Lance uses), booleans one byte, strings UTF-8, binary raw; date32/date64
    decode to ``datetime.date`` like pyarrow's ``to_pylist``. Empty bytes for a
    fixed-width type decode to ``None`` (a NULL shard value). Raises
    :class:`BadInputError` for unknown types or wrong lengths.
    """
    t = _norm_type(result_type)
    raw = bytes(value)
    if t in _STRING_TYPES:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInputError(f"shard field value is not UTF-8 for type {result_type!r}: {e}") from e
    if t in _BINARY_TYPES:
        return raw
    if not raw:
        if t in _BOOL_TYPES or t in _FIXED_FORMATS:
            return None
        raise BadInputError(f"unsupported shard field result type {result_type!r}")
    if t in _BOOL_TYPES:
        if len(raw) != 1 or raw[0] not in (0, 1):
            raise BadInputError(f"bad boolean shard field value {raw!r}")
        return raw == b"\x01"
    fmt = _FIXED_FORMATS.get(t)
    if fmt is None:
        raise BadInputError(f"unsupported shard field result type {result_type!r}")
    if len(raw) != struct.calcsize(fmt):
        raise BadInputError(
            f"shard field value of type {result_type!r} has {len(raw)} bytes, expected {struct.calcsize(fmt)}"
        )
    (v,) = struct.unpack(fmt, raw)
    if t.startswith("date32"):
        return pa.array([v], pa.int32()).view(pa.date32()).to_pylist()[0]
    if t.startswith("date64"):
        return pa.array([v], pa.int64()).view(pa.date64()).to_pylist()[0]
    return v


def shard_field_value_to_bytes(result_type: str, value: Any) -> bytes:
    """Inverse of :func:`shard_field_value_from_bytes` (same assumed encoding)."""
    t = _norm_type(result_type)
    if t in _STRING_TYPES:
        return str(value).encode("utf-8")
    if t in _BINARY_TYPES:
        return bytes(value)
    if value is None:
        if t in _BOOL_TYPES or t in _FIXED_FORMATS:
            return b""
        raise BadInputError(f"unsupported shard field result type {result_type!r}")
    if t in _BOOL_TYPES:
        return b"\x01" if value else b"\x00"
    fmt = _FIXED_FORMATS.get(t)
    if fmt is None:
        raise BadInputError(f"unsupported shard field result type {result_type!r}")
    if t.startswith("date32"):
        value = pa.array([value], pa.date32()).view(pa.int32()).to_pylist()[0]
    elif t.startswith("date64"):
        value = pa.array([value], pa.date64()).view(pa.int64()).to_pylist()[0]
    try:
        return struct.pack(fmt, value)
    except struct.error as e:
        raise BadInputError(f"value {value!r} does not fit shard field type {result_type!r}: {e}") from e
