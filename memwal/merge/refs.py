"""References to generations read outside a merge plan (a rollup's run, a proof's evidence).

A merge plan builds its :class:`GenerationRef` s from the shard manifest and checks each one
(:func:`memwal.merge.inputs.check_generations`); GC's rollups and proofs read generations the
plan of some earlier merge already checked. They only need what a read needs: where the folder
is, and which of its columns do not keep their name in the base table (matched by Lance field
id, :mod:`memwal.merge.columns`), so every reader of a generation reads it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import lance

from memwal.merge.columns import BaseFields, dataset_field_ids, renames
from memwal.merge.model import GenerationRef
from memwal.table import Table
from memwal.table.generations import open_generation
from memwal.table.paths import generation_key


def generation_refs(table: Table, base: lance.LanceDataset, shard_id: str,
                    entries: Sequence[tuple[int, str]]) -> list[GenerationRef]:
    """A read reference for each ``(generation, path)`` of ``shard_id`` (paths validated:
    UnsafePathError for one that leaves its shard), in the order given."""
    fields = BaseFields.of(base)
    out = []
    for g, path in entries:
        key = generation_key(shard_id, path)
        uri = table.store.uri_for(key)
        ids = dataset_field_ids(open_generation(uri, table.storage_options))
        out.append(GenerationRef(shard_id, g, path, key, uri, 0, 0, renamed=renames(ids, fields, uri)))
    return out


__all__ = ["generation_refs"]
