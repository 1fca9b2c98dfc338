"""The declared key must be unique in the base for the keys a merge writes (issue 61).

Lance's ``merge_insert`` matches every base row with a source row's key: where the base holds a
key twice (a key declared unique that is not, ``lance-schema:unenforced-primary-key`` is never
enforced), one merged version overwrites both, and rows that were distinct become copies of one
(observed: 5 distinct rows became copies). Nothing a merge could write makes that right, so a
merge plan whose keys the base contradicts is refused before anything is written (exit 2),
naming a key and its count. Only the keys the batch writes are looked up: a one-column key of at
most :data:`memwal.merge.proof.FILTER_MAX_KEYS` keys through a filter (the key's scalar index
when the table has one), others by one scan of the key columns.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from memwal.errors import BadInputError, MemWalError
from memwal.merge.changes import key_mask
from memwal.merge.keys import key_codes
from memwal.merge.model import MergePlan
from memwal.merge.newest import OpenGenerations, bounded_scanner
from memwal.merge.proof import FILTER_MAX_KEYS
from memwal.table import Table


def check_unique_keys(table: Table, plan: MergePlan) -> None:
    """BadInputError when the base at the plan's version holds a key the batch writes twice."""
    data = plan.data_plan()
    refs = data.generations
    pk = list(plan.primary_key)
    if not refs or not pk:
        return
    parts = []
    for ref in refs:
        try:
            parts.append(OpenGenerations([ref], pk, table.storage_options).keys([0]).select(pk))
        except (MemWalError, OSError, ValueError, RuntimeError, pa.ArrowException):
            continue  # the merge's own read stops its shard and names the file: not this check's to say
    if not parts:
        return
    keys = pa.concat_tables(parts, promote_options="permissive")
    keys = keys.take(pa.array(pd.Series(key_codes(keys, pk)).drop_duplicates().index.to_numpy()))
    ds = table.dataset(plan.read_version)
    if len(pk) == 1 and keys.num_rows <= FILTER_MAX_KEYS and keys.column(0).null_count == 0:
        held = ds.to_table(columns=pk, filter=pc.field(pk[0]).isin(keys.column(0).combine_chunks()))
    else:
        parts = []
        for batch in bounded_scanner(ds, pk).to_batches():
            t = pa.Table.from_batches([batch])
            parts.append(t.filter(pa.array(key_mask(t, keys, pk))))
        held = pa.concat_tables(parts) if parts else keys.slice(0, 0)
    if held.num_rows <= 1:
        return
    counts = pd.Series(key_codes(held, pk)).value_counts()
    twice = counts[counts > 1]
    if twice.empty:
        return
    first = int(pd.Series(key_codes(held, pk)).eq(twice.index[0]).to_numpy().argmax())
    row = held.slice(first, 1).to_pylist()[0]
    shown = row[pk[0]] if len(pk) == 1 else {k: row[k] for k in pk}
    raise BadInputError(
        f"{table.uri}: the declared primary key ({', '.join(pk)}) is not unique in the base table: key {shown!r} "
        f"is held by {int(twice.iloc[0])} rows at version {plan.read_version} ({len(twice)} such keys the merge "
        "would write); a merge would make them copies of one row. Delete the copies, or declare a key that is "
        "unique, then merge")


__all__ = ["check_unique_keys"]
