"""Shard pruning (spec: "Shard Pruning") on top of Lance's own shard routing.

Lance routes rows (``lance.mem_wal.evaluate_sharding_spec``) but offers a reader no way to
skip shards. What this module adds, each step conservative (when unsure: no constraint,
which prunes nothing; a wrong constraint would skip a shard holding matching rows):

* :func:`filter_literals`: per column, the finite set of literals a Lance filter allows, read
  with sqlglot from ``col = v``, ``v = col``, ``col IN (v, ...)`` and ``AND``/``OR`` nestings
  of them; anything else (ranges, ``NOT``, ``IS NULL``, functions, casts, an unparseable
  filter) constrains nothing. Refusing a filter is Lance's job when it scans.
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
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
import sqlglot
from lance.mem_wal import evaluate_sharding_spec
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect

from memwal.table.sharding import (
    ShardingFieldDict,
    ShardingSpecDict,
    ShardValue,
    field_names_from_lance_schema,
    spec_to_dict,
)

if TYPE_CHECKING:
    from lance.schema import LanceSchema

__all__ = [
    "filter_literals",
    "filter_columns",
    "source_columns",
    "allowed_shard_values",
    "routed_values",
    "shard_matches",
]

#: Most literal combinations expanded for a field computed from several columns.
MAX_COMBINATIONS = 10_000

#: A literal a filter compares a column with.
LiteralValue: TypeAlias = int | str | bool
#: A literal with its kind: ``(bool, True)`` and ``(int, 1)`` must stay apart (``True == 1``).
_Lit = tuple[type[int] | type[str] | type[bool], LiteralValue]
#: Column -> the literals it may take; a column absent from the dict is unconstrained.
_Constraints = dict[str, frozenset[_Lit]]


class _LanceFilterDialect(Dialect):
    """sqlglot dialect with Lance's quoting (see the module docstring)."""

    class Tokenizer(tokens.Tokenizer):
        QUOTES = ["'", '"']
        IDENTIFIERS = ["`"]
        STRING_ESCAPES = ["'"]


def filter_literals(expr: str | None) -> dict[str, list[LiteralValue]]:
    """Column -> literals (int, str or bool) every row matching ``expr`` has in that column.

    A column not in the answer is unconstrained; an empty list means no row can match. A
    filter sqlglot cannot parse constrains nothing (Lance reports it when it scans).
    """
    if not expr or not expr.strip():
        return {}
    try:
        tree = sqlglot.parse_one(expr, dialect=_LanceFilterDialect)
    except Exception:  # any parser failure only means "prune nothing", never a failed read
        return {}
    try:
        constraints = _constraints(tree)
    except RecursionError:
        return {}
    return {col: [v for _, v in sorted(lits, key=repr)] for col, lits in constraints.items()}


def filter_columns(expr: str) -> set[str] | None:
    """The column names a filter mentions; None when sqlglot cannot tell (the caller then
    assumes any column)."""
    try:
        tree = sqlglot.parse_one(expr, dialect=_LanceFilterDialect)
        return {c.name for c in tree.find_all(exp.Column)}
    except Exception:  # noqa: BLE001 - any parser failure only means "unknown"
        return None


def _constraints(node: exp.Expr) -> _Constraints:
    """Necessary conditions ``column IN literals`` implied by ``node`` being true."""
    if isinstance(node, exp.Paren):
        return _constraints(node.this)
    if isinstance(node, exp.And):
        return _conjoin(_constraints(node.left), _constraints(node.right))
    if isinstance(node, exp.Or):
        left, right = _constraints(node.left), _constraints(node.right)
        return {col: left[col] | right[col] for col in left.keys() & right.keys()}
    if isinstance(node, exp.EQ):
        for col_node, lit_node in ((node.left, node.right), (node.right, node.left)):
            col, lit = _column_name(col_node), _literal(lit_node)
            if col is not None and lit is not None:
                return {col: frozenset([lit])}
        return {}
    if isinstance(node, exp.In) and {k for k, v in node.args.items() if v} == {"this", "expressions"}:
        col = _column_name(node.this)
        lits = [lit for e in node.expressions if (lit := _literal(e)) is not None]
        if col is not None and lits and len(lits) == len(node.expressions):
            return {col: frozenset(lits)}
    return {}


def _conjoin(left: _Constraints, right: _Constraints) -> _Constraints:
    """AND: intersect a column's literals when both sides agree on their kind.

    Literals of different kinds are not intersected (SQL coercion is not ours to guess):
    the left side alone is still a necessary condition.
    """
    out = dict(left)
    for col, lits in right.items():
        if col not in out:
            out[col] = lits
        elif {k for k, _ in out[col]} == {k for k, _ in lits} and len({k for k, _ in lits}) == 1:
            out[col] = out[col] & lits
    return out


def _column_name(node: exp.Expr) -> str | None:
    """A plain (unqualified) column reference's name, else None."""
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        return node.this.name
    return None


def _literal(node: exp.Expr) -> _Lit | None:
    """An integer, string or boolean literal, else None (floats, NULL, expressions...)."""
    negate = False
    if isinstance(node, exp.Neg):
        negate, node = True, node.this
    if isinstance(node, exp.Boolean) and not negate:
        return (bool, bool(node.this))
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return None if negate else (str, node.this)
    if re.fullmatch(r"[0-9]+", node.this) is None:
        return None
    value = int(node.this)
    return (int, -value if negate else value)


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
