"""The declared key must be unique in the base for the keys a merge writes (issue 61).

Lance's ``merge_insert`` matches every base row with a source row's key: where the base holds a
key twice (a key declared unique that is not, ``lance-schema:unenforced-primary-key`` is never
enforced), one merged version overwrites both, and rows that were distinct become copies of one
(observed: 5 distinct rows became copies). Nothing a merge could write makes that right, so a
merge plan whose keys the base contradicts is refused before anything is written (exit 2),
naming a key and its count. Only the keys the batch writes are looked up, through the join the
merge's own ``merge_insert`` takes (:func:`memwal.merge.base_rows.base_key_rows`): the key's
scalar index for few keys, else one scan of the key columns with the batch's keys indexed once.
The check then costs what the merge's join does, whatever the base's size (issue 82: indexing
the batch's keys again for each base batch made a merge 32 times its floor at 16M rows).
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from memwal.errors import BadInputError, MemWalError
from memwal.merge.base_rows import base_key_rows
from memwal.merge.keys import int_key, key_codes
from memwal.merge.model import MergePlan
from memwal.merge.newest import OpenGenerations
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
    if int_key(keys, pk) is None:  # integers are looked up as a set (base_key_rows): repeats cost nothing there
        keys = keys.take(pa.array(pd.Series(key_codes(keys, pk)).drop_duplicates().index.to_numpy()))
    held = base_key_rows(table.dataset(plan.read_version), keys, pk).select(pk)
    codes = pd.Series(key_codes(held, pk))
    again = codes.duplicated()  # one hash pass; the counts only when the base is wrong
    if not again.any():
        return
    twice = codes[codes.isin(codes[again])].value_counts()
    first = int(codes.eq(twice.index[0]).to_numpy().argmax())
    row = held.slice(first, 1).to_pylist()[0]
    shown = row[pk[0]] if len(pk) == 1 else {k: row[k] for k in pk}
    raise BadInputError(
        f"{table.uri}: the declared primary key ({', '.join(pk)}) is not unique in the base table: key {shown!r} "
        f"is held by {int(twice.iloc[0])} rows at version {plan.read_version} ({len(twice)} such keys the merge "
        "would write); a merge would make them copies of one row. Delete the copies, or declare a key that is "
        "unique, then merge")


__all__ = ["check_unique_keys"]
