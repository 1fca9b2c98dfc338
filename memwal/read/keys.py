"""Keys as a reader passes them, turned into what Lance's point lookup takes.

A caller gives keys as Arrow data or Python values (a composite key as tuples or
mappings); :func:`key_table` makes them one typed, null-free table of the primary-key
columns with each key once. pylance's ``LsmPointLookupPlanner`` takes one key per plan
(observed with pylance 14.0.2: a two-row key array is refused), hence :func:`key_values`
and :func:`lookup_each`; the folded reads and the vector search reuse them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pyarrow as pa

from memwal.core.pool import ordered_map
from memwal.errors import BadInputError
from memwal.merge.keys import key_codes

if TYPE_CHECKING:
    from lance.mem_wal import LsmPointLookupPlanner

#: What ``keys`` may be: Arrow data holding the key columns, or Python values (one key, or an
#: iterable of them; a composite key as a tuple or a mapping by column name).
Keys: TypeAlias = pa.Table | pa.RecordBatch | pa.Array | pa.ChunkedArray | Iterable[object] | object


def key_table(keys: Keys, schema: pa.Schema, primary_key: list[str]) -> pa.Table:
    """``keys`` as a table of the primary-key columns (their types, no nulls, each key once,
    in the order given). A single-column key takes plain values; a composite key takes
    tuples in key-column order or mappings by column name (or Arrow data with the columns)."""
    types = pa.schema([schema.field(k).remove_metadata() for k in primary_key])
    try:
        if isinstance(keys, pa.RecordBatch):
            keys = pa.Table.from_batches([keys])
        if isinstance(keys, pa.Table):
            missing = [k for k in primary_key if k not in keys.column_names]
            if missing:
                raise BadInputError(f"keys: no primary-key column {', '.join(missing)} among {keys.column_names}")
            table = keys.select(primary_key).cast(types)
        elif isinstance(keys, pa.Array | pa.ChunkedArray):
            _single(primary_key, "an Arrow array")
            table = pa.table([keys.cast(types.field(0).type)], schema=types)
        else:
            values = list(keys) if isinstance(keys, Iterable) and not isinstance(keys, str | bytes | Mapping) \
                else [keys]
            table = _from_python(values, types, primary_key)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
        raise BadInputError(f"keys: not values of the primary key {primary_key} ({types}): {exc}") from exc
    for k in primary_key:
        if table.column(k).null_count:
            raise BadInputError(f"keys: primary-key column {k} holds a null")
    return _first_of_each(table, primary_key)


def _single(primary_key: list[str], what: str) -> None:
    if len(primary_key) != 1:
        raise BadInputError(f"keys: the primary key has {len(primary_key)} columns {primary_key}; "
                            f"{what} gives one: pass tuples, mappings or a table")


def _from_python(values: list[object], types: pa.Schema, primary_key: list[str]) -> pa.Table:
    if len(primary_key) == 1:
        if any(isinstance(v, Mapping) for v in values):
            values = [v[primary_key[0]] if isinstance(v, Mapping) else v for v in values]
        elif any(isinstance(v, tuple) for v in values):
            values = [v[0] if isinstance(v, tuple) and len(v) == 1 else v for v in values]
        return pa.table([pa.array(values, types.field(0).type)], schema=types)
    rows = []
    for v in values:
        if isinstance(v, Mapping):
            rows.append([v[k] for k in primary_key])
        elif isinstance(v, tuple | list) and len(v) == len(primary_key):
            rows.append(list(v))
        else:
            raise BadInputError(f"keys: {v!r} is not a key of {primary_key} (a tuple or a mapping)")
    return pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(types)], schema=types)


def _first_of_each(table: pa.Table, primary_key: list[str]) -> pa.Table:
    """Each key once, at its first position."""
    if table.num_rows < 2:
        return table
    _, first = np.unique(key_codes(table, primary_key), return_index=True)
    return table.take(pa.array(np.sort(first)))


def key_values(keys: pa.Table, primary_key: list[str]) -> Iterator[pa.Array]:
    """One planner argument per key: a one-element array, or a one-row struct for a
    composite key (pylance's ``plan_lookup`` contract)."""
    for i in range(keys.num_rows):
        row = keys.slice(i, 1)
        if len(primary_key) == 1:
            yield row.column(0).combine_chunks()
        else:
            yield pa.StructArray.from_arrays([row.column(k).combine_chunks() for k in primary_key], names=primary_key)


#: Lookups planned and run at once: planning one costs about as much as running it (tens of
#: milliseconds over two dozen generations, observed) and both release the GIL.
LOOKUP_THREADS = 8


def lookup_each(planner: LsmPointLookupPlanner, keys: pa.Table, primary_key: list[str], columns: list[str],
                schema: pa.Schema) -> pa.Table:
    """One ``plan_lookup`` per key (a few in parallel), rows in ``keys``' order."""
    values = list(key_values(keys, primary_key))
    parts = ordered_map(lambda v: planner.plan_lookup(v, columns=columns).to_table().select(columns).cast(schema),
                         values, LOOKUP_THREADS)
    return pa.concat_tables(list(parts)) if values else schema.empty_table()


def in_key_order(rows: pa.Table, keys: pa.Table, primary_key: list[str]) -> pa.Table:
    """``rows`` (one per key at most) ordered as ``keys`` (key-only join, then one take)."""
    numbered_keys = keys.append_column("__pos", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
    numbered_rows = rows.select(primary_key).append_column("__row", pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    matched = numbered_rows.join(numbered_keys, primary_key, join_type="inner").sort_by("__pos")
    return rows.take(matched.column("__row"))
