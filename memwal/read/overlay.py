"""A few small generations over a large base: the base less the keys they touch, plus their newest rows.

pylance 14's ``LsmScanner`` merges the base and every listed generation row by row by key: over a
100,000-row base with three 200-row generations it took 40 times a plain read of the same rows
(issue 62), and the cost is its merge, not its I/O. What a writer that never stops leaves between
two merges is exactly that shape: a large base and a few small generations. This reader

1. reads the generations (small: their every column, conformed to the base's schema by field id,
   as the merger reads them: :func:`memwal.merge.read.read_generation`) and keeps each key's newest
   version with the merger's own reduce (:func:`memwal.merge.changes.newest_rows`: highest
   generation, then highest row address; a key written to two shards is refused);
2. reads the base in one plain scan, and drops the rows whose key a generation touched (one hash
   lookup a row: :func:`memwal.merge.changes.key_mask`), tombstoned keys among them;
3. adds the newest versions that are not tombstones.

A ``filter`` applies to each key's newest version: the base's rows through Lance's scan (pushed
down), the generations' through a filtered scan of each generation that says which of its rows
pass, by row address; a key whose newest version fails is dropped even when an older one passes.
A table with merge operators is folded instead (:mod:`memwal.read.fold`, which works the same
way). Rows come in no particular order, as from ``LsmScanner``.

Which reader a scan takes is decided by :func:`overlay_pays`, a rule measured by
``bench/read/overlay.py`` (docs/benchmarks/reads.md, "memwal's own reader").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import lance
import numpy as np
import pyarrow as pa

from memwal.core.pool import parallel_map
from memwal.merge.changes import key_mask, newest_rows
from memwal.merge.columns import BaseFields, dataset_field_ids, renames
from memwal.merge.model import GenerationRef
from memwal.merge.read import GEN, INTERNAL, READ_THREADS, ROWADDR, SHARD, TOMBSTONE, read_generation
from memwal.merge.take import rows_but, take_rows
from memwal.table.generations import open_generation
from memwal.table.paths import generation_key
from memwal.table.schema import primary_key

if TYPE_CHECKING:
    from memwal.read.plan import ReadPlan
    from memwal.table import Table

#: The overlay was faster than ``LsmScanner`` in every shape measured, up to listed generations
#: holding 4 times the base's rows (bench/read/overlay.py, docs/benchmarks/reads.md); past that it is not
#: measured, and ``LsmScanner`` (which streams) reads.
MAX_GENERATION_SHARE = 4.0


def overlay_pays(base_rows: int, generation_rows: int) -> bool:
    """Whether the overlay beats ``LsmScanner`` for a read of ``generation_rows`` listed rows over
    ``base_rows`` base rows (the rule ``bench/read/overlay.py`` measured)."""
    return generation_rows <= MAX_GENERATION_SHARE * max(base_rows, 1)


def _unique(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _refs(table: Table, ds: lance.LanceDataset, plan: ReadPlan) -> list[tuple[GenerationRef, lance.LanceDataset]]:
    """Each listed generation's reference (columns matched by field id) and its dataset."""
    fields = BaseFields.of(ds)

    def one(item: tuple[str, int, str]) -> tuple[GenerationRef, lance.LanceDataset]:
        sid, g, path = item
        key = generation_key(sid, path)
        uri = table.store.uri_for(key)
        gen = open_generation(uri, table.storage_options)
        renamed = renames(dataset_field_ids(gen), fields, f"shard {sid} generation {g}")
        return GenerationRef(sid, g, path, key, uri, 0, 0, renamed=renamed), gen

    return parallel_map(one, plan.generations, _threads(table))


def _threads(table: Table) -> int:
    """Threads for the generations: an object store's requests wait, a disk's hardly do (a pool's
    threads then cost more than they save)."""
    from memwal.store import LocalStore

    return 1 if isinstance(table.store, LocalStore) else READ_THREADS


def overlay_scan(table: Table, ds: lance.LanceDataset, plan: ReadPlan, *, columns: list[str] | None = None,
                 filter: str | None = None, limit: int | None = None,
                 pays: Callable[[int, int], bool] = overlay_pays) -> pa.Table | None:
    """The rows a reader sees (see the module docstring); None when this reader does not pay
    (``pays(base rows, listed rows)``: :func:`overlay_pays`) or cannot say (a filter over a
    generation whose columns were renamed since): the caller reads through ``LsmScanner``."""
    pk = primary_key(ds.lance_schema)
    wanted = _unique([*pk, *(columns if columns is not None else ds.schema.names)])
    if not plan.generations:
        return ds.to_table(columns=columns, filter=filter, limit=limit)
    refs = _refs(table, ds, plan)
    listed = sum(gen.count_rows() for _, gen in refs)
    if not pk or not pays(ds.count_rows(), listed) or (filter and any(r.renamed for r, _ in refs)):
        return None
    # the base and the generations are read at once: Lance reads on threads of its own, and a new
    # process's first reads (each dataset's files opened) overlap
    def read(part: str) -> Any:
        return ds.to_table(columns=wanted, filter=filter) if part == "base" else _newest(table, ds, refs, pk, filter)

    base, (newest, keep) = parallel_map(read, ["base", "generations"], 2)
    untouched = rows_but(base, key_mask(base, newest.select(pk), pk)) if newest.num_rows else base
    schema = pa.schema([ds.schema.field(c) for c in wanted])
    rows = pa.concat_tables([untouched.select(wanted).cast(schema),
                             take_rows(newest.select(wanted), np.flatnonzero(keep)).cast(schema)])
    rows = rows.select(columns) if columns is not None else rows
    return rows.slice(0, limit) if limit is not None else rows


def _newest(table: Table, ds: lance.LanceDataset, refs: list[tuple[GenerationRef, lance.LanceDataset]],
            pk: list[str], filter: str | None) -> tuple[pa.Table, np.ndarray]:
    """Each key's newest version among the generations (every column and the internal ones),
    and which of them a reader sees: not a tombstone, and passing ``filter``."""
    shard_code = {sid: i for i, sid in enumerate(sorted({r.shard_id for r, _ in refs}))}

    def read(item: tuple[GenerationRef, lance.LanceDataset]) -> pa.Table:
        ref, gen = item
        parts = list(read_generation(ref, ds.schema, table.storage_options, shard_code[ref.shard_id], dataset=gen))
        return pa.concat_tables(parts) if parts else pa.table({})

    frames = [t for t in parallel_map(read, refs, _threads(table)) if t.num_columns]
    versions = pa.concat_tables(frames, promote_options="permissive")
    newest = take_rows(versions, newest_rows(versions, pk))
    keep = ~newest.column(TOMBSTONE).fill_null(False).to_numpy(zero_copy_only=False)
    if filter is not None:
        keep &= _passing(newest, refs, shard_code, filter, _threads(table))
    return newest.select([c for c in newest.column_names if c not in INTERNAL or c in (GEN, ROWADDR)]), keep


def _passing(newest: pa.Table, refs: list[tuple[GenerationRef, lance.LanceDataset]], shard_code: dict[str, int],
             filter: str, threads: int) -> np.ndarray:
    """Whether each newest version passes ``filter``, as Lance evaluates it on its generation."""
    def passed(item: tuple[GenerationRef, lance.LanceDataset]) -> tuple[tuple[int, int], np.ndarray]:
        ref, gen = item
        hits = gen.to_table(columns=[], filter=filter, with_row_address=True).column(ROWADDR)
        return (shard_code[ref.shard_id], ref.generation), hits.to_numpy().astype(np.int64)

    shards = newest.column(SHARD).to_numpy()
    gens = newest.column(GEN).to_numpy()
    addrs = newest.column(ROWADDR).to_numpy().astype(np.int64)
    out = np.zeros(newest.num_rows, dtype=bool)
    for (code, g), hits in parallel_map(passed, refs, threads):
        mine = (shards == code) & (gens == g)
        out[mine] = np.isin(addrs[mine], hits)
    return out


__all__ = ["MAX_GENERATION_SHARE", "overlay_pays", "overlay_scan"]
