"""Shard pruning (spec: "Shard Pruning") on top of Lance's own shard routing.

Lance routes rows (``lance.mem_wal.evaluate_sharding_spec``) but offers a reader no way to
skip shards. What this module adds, each step conservative (when unsure: no constraint,
which prunes nothing; a wrong constraint would skip a shard holding matching rows):

* :func:`filter_literals`: per column, the finite set of literals a Lance filter allows, read
  with sqlglot (:mod:`memwal.read.filter_sql`, imported only for a filter) from ``col = v``,
  ``v = col``, ``col IN (v, ...)`` and ``AND``/``OR`` nestings of them; anything else (ranges,
  ``NOT``, ``IS NULL``, functions, casts, an unparseable filter) constrains nothing.
  Refusing a filter is Lance's job when it scans.
* :func:`allowed_shard_values`: per shard field, the values those literals route to (Lance's
  routing of a small batch); a field is left out when a source column is unconstrained, a
  literal does not convert exactly, or Lance cannot evaluate the field.
* :func:`routed_values`: the field values Lance gives a shard's rows, when its manifest has none.
* :func:`shard_matches`: False only when a known shard field value is outside the allowed set.

Lance's filter syntax as observed in pylance 14.0.2 (the sqlglot dialect follows it): single
and double quotes both delimit strings (``"id" = 1`` compares a string), backticks quote
identifiers, ``''`` is the only string escape, a column name resolves exactly (``ID`` and
``id`` differ when both exist), and a literal must convert exactly to the column's type or the
filter is rejected (``id = 2.0`` fails on an int64 column): only integer, string and boolean
literals on columns of those kinds are used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from lance.mem_wal import evaluate_sharding_spec

from memwal.table.sharding import (
    ShardingFieldDict,
    ShardingSpecDict,
    ShardValue,
    field_names_from_lance_schema,
    spec_to_dict,
)

if TYPE_CHECKING:
    from lance.schema import LanceSchema

    from memwal.read.filter_sql import LiteralValue

__all__ = [
    "filter_literals",
    "source_columns",
    "allowed_shard_values",
    "routed_values",
    "shard_matches",
]

#: Most literal combinations expanded for a field computed from several columns.
MAX_COMBINATIONS = 10_000

def filter_literals(expr: str | None) -> dict[str, list[LiteralValue]]:
    """Column -> literals (int, str or bool) every row matching ``expr`` has in that column.

    A column not in the answer is unconstrained; an empty list means no row can match. A
    filter sqlglot cannot parse constrains nothing (Lance reports it when it scans). No filter:
    nothing is parsed, and sqlglot is not imported.
    """
    if not expr or not expr.strip():
        return {}
    from memwal.read import filter_sql

    return filter_sql.filter_literals(expr)


# ---------------------------------------------------------------------------
# Shard field values through Lance's routing
# ---------------------------------------------------------------------------


def source_columns(field: ShardingFieldDict, field_names: Mapping[int, str]) -> list[str] | None:
    """Columns a spec field reads (a non-blank ``column`` parameter overrides ``source_ids``,
    as in Lance); None when a source id is unknown; empty for ``unsharded``."""
    column = (field["parameters"].get("column") or "").strip()
    if column:
        return [column]
    names = [field_names.get(i) for i in field["source_ids"]]
    if any(n is None for n in names):
        return None
    return list(dict.fromkeys(n for n in names if n is not None))


def _literal_array(values: list[LiteralValue], t: pa.DataType) -> pa.Array | None:
    """``values`` as an array of type ``t`` when each converts exactly, else None."""
    kinds = {type(v) for v in values}
    allowed: set[type]
    if pa.types.is_integer(t):
        allowed = {int}
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        allowed = {str}
    elif pa.types.is_boolean(t):
        allowed = {bool}
    else:
        return None  # floats (-0.0 = 0.0, NaN), temporals...: Lance's equality is not ours to redo
    if not kinds <= allowed:
        return None
    try:
        return pa.array(values, type=t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return None  # out of the type's range: Lance rejects the filter anyway


def allowed_shard_values(
    spec: object, lance_schema: LanceSchema, literals: Mapping[str, Sequence[LiteralValue]], *,
    max_combinations: int = MAX_COMBINATIONS
) -> dict[str, set[ShardValue]]:
    """Field id -> the shard values a row allowed by ``literals`` can have (Lance's routing).

    ``lance_schema`` is the table's ``ds.lance_schema`` (it resolves source ids and gives
    each column's type, which the hash depends on). Fields left out constrain nothing.
    """
    d = spec_to_dict(spec)
    names = field_names_from_lance_schema(lance_schema)
    types = {f.name: f.type for f in lance_schema.to_pyarrow()}
    out: dict[str, set[ShardValue]] = {}
    for field in d["fields"]:
        cols = source_columns(field, names)
        if not cols or any(c not in literals or c not in types for c in cols):
            continue
        arrays = [a for c in cols if (a := _literal_array(list(literals[c]), types[c])) is not None]
        if len(arrays) != len(cols):
            continue
        distinct = [list(dict.fromkeys(a.to_pylist())) for a in arrays]
        if math.prod(len(v) for v in distinct) > max_combinations:
            continue
        rows = list(itertools.product(*distinct))
        if not rows:
            out[field["field_id"]] = set()  # contradictory literals: no row can match
            continue
        batch = pa.RecordBatch.from_arrays(
            [pa.array([r[i] for r in rows], type=types[c]) for i, c in enumerate(cols)], names=cols
        )
        values = _route(batch, {"spec_id": d["spec_id"], "fields": [field]}, lance_schema)
        if values is not None:
            out[field["field_id"]] = values[field["field_id"]]
    return out


def _route(batch: pa.RecordBatch, spec: ShardingSpecDict,
           lance_schema: LanceSchema) -> dict[str, set[ShardValue]] | None:
    """Lance's shard values of ``batch`` per field; None when any is NULL or Lance refuses."""
    try:
        result = evaluate_sharding_spec(batch, spec, lance_schema)
        out = {name: set(result.column(name).to_pylist()) for name in result.schema.names}
    except (ValueError, TypeError, RuntimeError, OSError):
        return None  # e.g. a transform pylance does not evaluate: no pruning on it
    if any(None in values for values in out.values()):
        return None
    return out


def routed_values(batches: Iterable[pa.RecordBatch], spec: object,
                  lance_schema: LanceSchema) -> dict[str, set[ShardValue]] | None:
    """Every shard field value Lance routes the rows of ``batches`` to; None when unknown.

    Evaluating a shard's own rows (not trusting that its writer routed them correctly)
    gives exactly the values a filter must be checked against.
    """
    d = spec_to_dict(spec)
    out: dict[str, set[ShardValue]] = {f["field_id"]: set() for f in d["fields"]}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        values = _route(batch, d, lance_schema)
        if values is None:
            return None
        for fid, vs in values.items():
            out[fid] |= vs
    return out


def shard_matches(shard_field_values: Mapping[str, ShardValue], allowed: Mapping[str, set[ShardValue] | None]) -> bool:
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
