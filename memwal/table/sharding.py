"""MemWAL sharding specs: normalisation, field ids, and the shard field value codec.

Rows are routed by Lance itself (``lance.mem_wal.evaluate_sharding_spec(batch, spec,
ds.lance_schema)``; pylance 14.0.2 evaluates the ``identity``, ``bucket`` and ``unsharded``
transforms and rejects the others). This module keeps only what Lance does not offer:

* :func:`spec_to_dict`: one dict shape for a spec whether it comes from
  ``mem_wal_index_details()``, our protobuf messages or Lance's dataclasses.
* :func:`field_names_from_lance_schema`: Lance field id -> column name, to name the columns a
  spec reads (Lance resolves ``source_ids`` the same way).
* :func:`shard_field_value_from_bytes` / :func:`shard_field_value_to_bytes`: the bytes of a
  shard manifest's ``ShardFieldEntry.value``. ``ShardWriter`` in pylance 14.0.2 records
  ``shard_spec_id`` but no ``shard_field_entries``, so the encoding is assumed (see there).

Shard pruning on top of Lance's routing lives in :mod:`memwal.read.pruning`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from datetime import date
from typing import TYPE_CHECKING, Any, TypedDict

import pyarrow as pa

from memwal.errors import BadInputError

if TYPE_CHECKING:  # Lance itself loads only when a spec is resolved
    import lance
    from lance.lance.schema import LanceField
    from lance.schema import LanceSchema

__all__ = [
    "ShardValue",
    "ShardingFieldDict",
    "ShardingSpecDict",
    "spec_to_dict",
    "field_names_from_lance_schema",
    "shard_field_value_from_bytes",
    "shard_field_value_to_bytes",
]

#: A shard field's value, as Lance's evaluation (and pyarrow's ``to_pylist``) gives it; None is NULL.
ShardValue = str | bytes | bool | int | float | date | None


class ShardingFieldDict(TypedDict):
    """One field of a sharding spec, as ``mem_wal_index_details()`` gives it."""

    field_id: str
    source_ids: list[int]
    transform: str | None
    expression: str | None
    result_type: str
    parameters: dict[str, str]


class ShardingSpecDict(TypedDict):
    """A sharding spec, as ``mem_wal_index_details()`` gives it (and Lance's routing takes it)."""

    spec_id: int
    fields: list[ShardingFieldDict]


def spec_to_dict(spec: object) -> ShardingSpecDict:
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
    fields: list[ShardingFieldDict] = []
    for f in raw_fields:
        fields.append(
            {
                "field_id": str(_field_value(f, "field_id") or ""),
                "source_ids": [int(s) for s in (_field_value(f, "source_ids") or [])],
                "transform": _field_value(f, "transform") or None,
                "expression": _field_value(f, "expression") or None,
                "result_type": str(_field_value(f, "result_type") or ""),
                "parameters": {str(k): str(v) for k, v in dict(_field_value(f, "parameters") or {}).items()},
            }
        )
    return {"spec_id": int(spec_id or 0), "fields": fields}


def _field_value(field: object, key: str) -> Any:
    """``key`` of a sharding field given as a dict, a protobuf message or Lance's dataclass
    (None when absent): the one place the three shapes are read alike."""
    return field.get(key) if isinstance(field, Mapping) else getattr(field, key, None)


def field_names_from_lance_schema(schema_or_dataset: lance.LanceDataset | LanceSchema | pa.Schema) -> dict[int, str]:
    """Map Lance field id -> column name, the way Lance resolves ``source_ids``.

    Accepts a ``LanceDataset`` (uses ``.lance_schema``, the only place pylance exposes
    field ids), a ``LanceSchema``, or a ``pyarrow.Schema`` (ids are then assigned afresh in
    pre-order, which matches only a table whose columns were never dropped or reordered).
    Nested fields map to their dotted path (``"struct.child"``), as in Lance.
    """
    from lance.schema import LanceSchema

    obj: object = schema_or_dataset
    if hasattr(obj, "lance_schema"):
        obj = obj.lance_schema
    if isinstance(obj, pa.Schema):
        obj = LanceSchema.from_pyarrow(obj)
    if not isinstance(obj, LanceSchema):
        raise BadInputError(f"not a Lance schema or dataset: {type(schema_or_dataset)!r}")
    out: dict[int, str] = {}

    def walk(fields: Iterable[LanceField], prefix: str) -> None:
        for f in fields:
            name = prefix + f.name()
            out[int(f.id())] = name
            walk(f.children(), name + ".")

    walk(obj.fields(), "")
    return out


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


def shard_field_value_from_bytes(result_type: str, value: bytes) -> ShardValue:
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
    day: date
    if t.startswith("date32"):
        day = pa.array([v], pa.int32()).view(pa.date32()).to_pylist()[0]
        return day
    if t.startswith("date64"):
        day = pa.array([v], pa.int64()).view(pa.date64()).to_pylist()[0]
        return day
    number: int | float = v
    return number


def shard_field_value_to_bytes(result_type: str, value: ShardValue) -> bytes:
    """Inverse of :func:`shard_field_value_from_bytes` (same assumed encoding)."""
    t = _norm_type(result_type)
    if t in _STRING_TYPES:
        return str(value).encode("utf-8")
    if t in _BINARY_TYPES:
        if not isinstance(value, bytes):
            raise BadInputError(f"value {value!r} of shard field type {result_type!r} is not bytes")
        return value
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
