"""Merge operators: columns that fold (sum, max, partial update) instead of being replaced.

A table declares an operator per column in its Lance config, ``memwal.merge-op.<column>``
(an UpdateConfig commit keeps the MemWAL index details). A column without a key is
``replace``: a table with no such key merges last-write-wins, exactly as before.

Folding is per key in LSM order: the base row first (generation 0), then generations
ascending, then row address. A tombstone clears the key; a put on an absent key takes the
row as it is; a put on a present key combines column by column:

=================================================  ==========================================
``replace``                                        the new value, null included
``sum``, ``min``, ``max``, ``bool_or``, ``bool_and``  combined ignoring nulls; null if both null
``last_non_null``                                  the new value unless it is null
``first_non_null``                                 the old value unless it is null
=================================================  ==========================================

Every operator is associative, so a sequence folds to the same value in any grouping;
:mod:`memwal.merge.fold` folds a batch, and the merger and the reader both call it, so they
cannot disagree. This module holds what the operators are: their config, their types and
their aggregations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import lance
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import BadInputError
from memwal.table import Table

CONFIG_PREFIX = "memwal.merge-op."
#: The field id of the column an operator was set on (see :func:`resolved_keys`).
FIELD_ID_PREFIX = "memwal.merge-op-field-id."

#: Each operator's ordered hash aggregation (pyarrow) and its options.
AGGREGATES: dict[str, tuple[str, pc.FunctionOptions | None]] = {
    "replace": ("last", pc.ScalarAggregateOptions(skip_nulls=False)),
    "sum": ("sum", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "min": ("min", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "max": ("max", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "bool_or": ("any", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "bool_and": ("all", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "last_non_null": ("last", pc.ScalarAggregateOptions(skip_nulls=True)),
    "first_non_null": ("first", pc.ScalarAggregateOptions(skip_nulls=True)),
}
OPERATORS = tuple(AGGREGATES)


def _numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def _orderable(t: pa.DataType) -> bool:
    return (
        _numeric(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_temporal(t)
    )


#: Which column types each operator accepts (None: any type).
_ACCEPTS = {
    "sum": (_numeric, "numeric"),
    "min": (_orderable, "numeric, string or temporal"),
    "max": (_orderable, "numeric, string or temporal"),
    "bool_or": (pa.types.is_boolean, "boolean"),
    "bool_and": (pa.types.is_boolean, "boolean"),
}


@dataclass(frozen=True)
class MergeOps:
    """The operators of a table's columns; only non-``replace`` columns are stored."""

    ops: Mapping[str, str]

    @property
    def active(self) -> bool:
        """Whether any column folds (otherwise merges are plain last-write-wins)."""
        return any(op != "replace" for op in self.ops.values())

    def op(self, column: str) -> str:
        return self.ops.get(column, "replace")

    def folding_columns(self) -> list[str]:
        """Columns whose merged value depends on the base row's value."""
        return [c for c, op in self.ops.items() if op != "replace"]

    def to_dict(self) -> dict[str, str]:
        return dict(sorted(self.ops.items()))


NO_OPS = MergeOps({})


def from_config(config: Mapping[str, str], columns: Mapping[int, str] | None = None) -> MergeOps:
    """The operators recorded in a Lance table config (``ds.config()``).

    With ``columns`` (the table's field id -> column name), each operator applies to the
    column its recorded field id names now (:func:`resolved_keys`), as Lance itself tells a
    renamed column by its field id; without, to the column its key names.
    """
    ops = {k[len(CONFIG_PREFIX):]: v for k, v in config.items() if k.startswith(CONFIG_PREFIX)}
    for column, op in ops.items():
        if op not in AGGREGATES:
            raise BadInputError(f"table config {CONFIG_PREFIX}{column}: unknown merge operator {op!r}")
    if columns is not None:
        resolved: dict[str, str] = {}
        for key, column in resolved_keys(config, columns).items():
            op = ops[key]
            if resolved.get(column, op) != op:
                raise BadInputError(f"column {column}: two merge operators apply ({resolved[column]} and {op}); "
                                    f"unset one with memwal merge-ops --unset")
            resolved[column] = op
        ops = resolved
    return MergeOps({c: op for c, op in ops.items() if op != "replace"})


def resolved_keys(config: Mapping[str, str], columns: Mapping[int, str], *, strict: bool = True) -> dict[str, str]:
    """Each operator key's column (key column -> current column name).

    An operator set by ``memwal merge-ops`` records the column's field id
    (``memwal.merge-op-field-id.<column>``): after ``alter_columns`` renamed the column it
    still applies to it, and it goes with the column when the column is dropped (a column
    re-added under the old name is a new column, with a new field id, and no operator).
    A key without a recorded field id (set by hand) names its column; when no column has
    that name any more it was renamed or dropped, and guessing which could sum a counter
    into the wrong column: refused (exit 2) with the way forward (``strict=False``: it
    names its column, so that ``memwal merge-ops --unset`` can remove it).
    """
    names = set(columns.values())
    out: dict[str, str] = {}
    for key in config:
        if not key.startswith(CONFIG_PREFIX):
            continue
        column = key[len(CONFIG_PREFIX):]
        raw = (config.get(FIELD_ID_PREFIX + column) or "").strip()
        if raw.isdigit():
            if int(raw) in columns:
                out[column] = columns[int(raw)]
        elif column in names or not strict:
            out[column] = column
        elif config[key] != "replace":
            raise BadInputError(
                f"table config {key}: merge operator {config[key]} for column {column}, which the table no longer "
                f"has (renamed or dropped); set the operator on the column's current name and unset this one: "
                f"memwal merge-ops TABLE --unset {column} [--set NEW_NAME={config[key]}] --force"
            )
    return out


def table_ops(ds: lance.LanceDataset) -> MergeOps:
    """The operators of one version of a Lance dataset, each on the column its field id names."""
    return from_config(ds.config(), {f.id(): f.name() for f in ds.lance_schema.fields()})


def validate(ops: Mapping[str, str], schema: pa.Schema, primary_key: list[str]) -> None:
    """Refuse an operator the column cannot take (exit 2), naming the column."""
    for column, op in ops.items():
        if op not in AGGREGATES:
            known = ", ".join(OPERATORS)
            raise BadInputError(f"column {column}: unknown merge operator {op!r} (expected one of {known})")
        if column not in schema.names:
            raise BadInputError(f"column {column}: not in the table schema")
        if column in primary_key and op != "replace":
            raise BadInputError(f"column {column}: a primary-key column cannot have a merge operator")
        check = _ACCEPTS.get(op)
        ctype = schema.field(column).type
        if check and not check[0](ctype):
            raise BadInputError(f"column {column}: merge operator {op} needs a {check[1]} column, not {ctype}")


def table_merge_ops(table: Table, version: int | None = None) -> MergeOps:
    """The operators a table declares at ``version`` (latest by default)."""
    return table_ops(table.dataset(version))
