"""The local engine's net change set: read, reduced and, past a partition's size, hash-partitioned
through temporary Arrow IPC files, so memory follows the partition size, not the change set.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from memwal.merge.changes import NetChanges, count_by_shard, empty_keys, reducer
from memwal.merge.model import MergePlan
from memwal.merge.read import READ_THREADS, SHARD, read_generations
from memwal.merge.take import own_chunks

log = logging.getLogger(__name__)


#: Upserts up to this size (Arrow buffer bytes) go to ``merge_insert`` as one table.
DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024


#: Change rows deduped in one pass; more are hash-partitioned through temporary files.
#: Partitioning bounds memory but costs time, so it starts only where a single pass would
#: need several GiB (docs/decisions/0019-dedupe-partitions-above-8m-rows.md).
DEFAULT_PARTITION_ROWS = 8_000_000


def partition_of(t: pa.Table, primary_key: list[str], partitions: int) -> np.ndarray:
    frame = t.select(primary_key).to_pandas()
    h: np.ndarray = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    return (h % np.uint64(partitions)).astype(np.int64)


def _table_bytes(tables: list[pa.Table], files: list[str]) -> int:
    """Arrow buffer bytes of the upserts: in memory, or in uncompressed IPC files."""
    return sum(int(t.get_total_buffer_size()) for t in tables) + sum(os.path.getsize(f) for f in files)


def _read_ipc(path: str) -> pa.Table:
    with pa.memory_map(path) as src:
        return pa.ipc.open_file(src).read_all()


def local_net_changes(
    plan: MergePlan,
    schema: pa.Schema,
    storage_options: dict[str, str] | None = None,
    *,
    partition_rows: int = DEFAULT_PARTITION_ROWS,
    tempdir: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    read_threads: int = READ_THREADS,
) -> NetChanges:
    """Compute the net change set in-process, partitioned so memory stays bounded.

    Upserts of at most ``memory_budget`` bytes are handed over as one table
    (:attr:`NetChanges.upsert_table`); larger ones stay where they are and are streamed.
    """
    pk = list(plan.primary_key)
    shard_ids = plan.shard_ids
    code_of = {sid: i for i, sid in enumerate(shard_ids)}
    partitions = max(1, -(-plan.total_rows // partition_rows))
    upsert_tables: list[pa.Table] = []
    upsert_files: list[str] = []

    def open_upserts() -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            for t in upsert_tables:
                yield from t.to_batches()
            for path in upsert_files:
                yield from _read_ipc(path).to_batches()

        return pa.RecordBatchReader.from_batches(schema, batches())

    net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk), open_upserts=open_upserts)
    delete_parts: list[pa.Table] = []
    reduce = reducer(plan, storage_options)

    def account(part: pa.Table) -> pa.Table:
        reduced = reduce(part)
        net.rows_upserted.update(count_by_shard(reduced.upserts.column(SHARD), shard_ids))
        net.rows_deleted.update(count_by_shard(reduced.deletes.column(SHARD), shard_ids))
        delete_parts.append(reduced.deletes.select(pk))
        return reduced.upserts.select(schema.names).cast(schema)

    def frames() -> Iterator[pa.Table]:
        return read_generations(plan.generations, schema, storage_options, code_of, threads=read_threads)

    if partitions == 1:
        read = list(frames())
        if read:
            upsert_tables.append(account(pa.concat_tables(read, promote_options="permissive")))
        del read
    else:
        workdir = tempfile.mkdtemp(prefix="memwal-merge-", dir=tempdir)
        net.cleanups.append(lambda: shutil.rmtree(workdir, ignore_errors=True))
        writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
        try:
            for t in frames():
                pid = partition_of(t, pk, partitions)
                for p in np.unique(pid):
                    if p not in writers:
                        writers[p] = pa.ipc.new_file(os.path.join(workdir, f"in-{p}.arrow"), t.schema)
                    writers[p].write_table(t.filter(pa.array(pid == p)))
        finally:
            for w in writers.values():
                w.close()
        for p in sorted(writers):
            path = os.path.join(workdir, f"in-{p}.arrow")
            part = _read_ipc(path)
            os.unlink(path)
            out = os.path.join(workdir, f"up-{p}.arrow")
            with pa.ipc.new_file(out, schema) as w:
                w.write_table(account(part))
            del part
            upsert_files.append(out)
        log.info("net change set built in %d partitions", partitions)
    if delete_parts:
        net.delete_keys = pa.concat_tables(delete_parts)
    size = _table_bytes(upsert_tables, upsert_files)
    if (upsert_tables or upsert_files) and size <= memory_budget:
        net.upsert_table = own_chunks(pa.concat_tables([*upsert_tables, *map(_read_ipc, upsert_files)]))
    else:
        log.info("upserts of %d MiB exceed the %d MiB memory budget: streamed", size >> 20, memory_budget >> 20)
    return net
