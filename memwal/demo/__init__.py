"""Realistic MemWAL tables written by pylance's own ``ShardWriter``.

The demo, the tests and the benchmarks all need the same thing: a base table with indexes,
a bucket sharding spec, and many flushed generations of puts, updates, duplicate keys and
deletes, written by the writer our users run. A :class:`Model` tracks the rows a reader
must see afterwards, so tests can compare the table row for row.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import lance
import numpy as np
import pyarrow as pa
from lance.mem_wal import evaluate_sharding_spec

from memwal.errors import BadInputError

PK_META = {"lance-schema:unenforced-primary-key": "true"}


def demo_schema(dim: int = 8) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata=PK_META),
            pa.field("name", pa.string()),
            pa.field("value", pa.float64()),
            pa.field("vec", pa.list_(pa.float32(), dim)),
        ]
    )


@dataclass
class Workload:
    """Shape of the data: how many shards, generations and rows, and what kind of writes."""

    base_rows: int = 1000
    shards: int = 4
    generations: int = 5
    rows_per_generation: int = 100
    update_fraction: float = 0.5
    delete_fraction: float = 0.1
    duplicate_fraction: float = 0.05
    dim: int = 8
    indexes: bool = True
    #: Also a full-text (INVERTED) index on ``name``, maintained like the others. Names are
    #: ``<tag>-<id>`` with a tag per shard and generation (``s1g2``), so a full-text query
    #: for a tag finds exactly the live rows that generation wrote.
    full_text: bool = False
    #: Whether the writers maintain the vector index too (their MemTables then keep an HNSW
    #: graph, which costs most of a write at 100k-row MemTables); the base table has it either way.
    maintain_vector_index: bool = True
    seed: int = 0


#: One row as ``pa.Table.to_pylist`` gives it: column -> value.
Row = dict[str, Any]


@dataclass
class Model:
    """The live rows a reader must see: primary key -> row dict."""

    rows: dict[int, Row] = field(default_factory=dict)

    def put(self, table: pa.Table) -> None:
        for row in table.to_pylist():  # later rows win, as within a generation
            self.rows[row["id"]] = row

    def delete(self, keys: list[int]) -> None:
        for k in keys:
            self.rows.pop(k, None)

    def sorted_rows(self, columns: list[str] | None = None) -> list[Row]:
        out = [self.rows[k] for k in sorted(self.rows)]
        if columns:
            out = [{c: r[c] for c in columns} for r in out]
        return out


class _RowFactory:
    def __init__(self, schema: pa.Schema, dim: int, rng: random.Random) -> None:
        self.schema, self.dim, self.rng = schema, dim, rng
        self.np_rng = np.random.default_rng(rng.randrange(1 << 32))
        self.counter = 0

    def table(self, ids: list[int], tag: str) -> pa.Table:
        self.counter += 1
        n = len(ids)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(self.np_rng.random(n * self.dim, dtype=np.float32)), self.dim)
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "name": [f"{tag}-{i}" for i in ids],
                "value": pa.array([self.rng.random() * 1000 for _ in ids], pa.float64()),
                "vec": vec,
            },
            schema=self.schema,
        )


def create_base_table(
    uri: str, workload: Workload, storage_options: dict[str, str] | None = None
) -> tuple[lance.LanceDataset, Model]:
    """Write the base table, its indexes and the MemWAL index (bucket sharding on ``id``)."""
    rng = random.Random(workload.seed)
    schema = demo_schema(workload.dim)
    rows = _RowFactory(schema, workload.dim, rng)
    base = rows.table(list(range(workload.base_rows)), "base")
    ds = lance.write_dataset(base, uri, storage_options=storage_options)
    maintained = []
    if workload.indexes:
        ds.create_scalar_index("id", "BTREE", name="id_idx")
        ds.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=2, num_sub_vectors=2)
        maintained = ["id_idx", "vec_idx"] if workload.maintain_vector_index else ["id_idx"]
    if workload.full_text:
        ds.create_scalar_index("name", "INVERTED", name="name_idx")
        maintained.append("name_idx")
    ds.initialize_mem_wal(bucket_column="id", num_buckets=workload.shards, maintained_indexes=maintained)
    model = Model()
    model.put(base)
    return lance.dataset(uri, storage_options=storage_options), model


def bucket_of(ds: lance.LanceDataset, ids: list[int]) -> list[int]:
    """Lance's own routing of primary keys to buckets (the oracle our users route with)."""
    details = ds.mem_wal_index_details()
    if details is None:
        raise BadInputError(f"{ds.uri}: the table has no MemWAL index")
    batch = pa.record_batch({"id": pa.array(ids, pa.int64())})
    routed = evaluate_sharding_spec(batch, details["sharding_specs"][0], ds.lance_schema)
    buckets: list[int] = routed.column(0).to_pylist()
    return buckets


def keys_by_bucket(ds: lance.LanceDataset, keys: list[int], buckets: int) -> dict[int, list[int]]:
    """``keys`` grouped by the bucket Lance routes each to (:func:`bucket_of`), in their order;
    every bucket ``0..buckets-1`` is present, so a writer of each shard finds its own keys."""
    out: dict[int, list[int]] = {b: [] for b in range(buckets)}
    for k, b in zip(keys, bucket_of(ds, keys) if keys else [], strict=True):
        out[b].append(k)
    return out


def shard_ids_for(workload: Workload) -> list[str]:
    """Stable shard UUIDs per bucket so reruns of a seed address the same shards."""
    rng = random.Random(workload.seed * 7919 + 17)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(workload.shards)]


def write_generations(
    uri: str,
    workload: Workload,
    model: Model,
    *,
    storage_options: dict[str, str] | None = None,
    generations: int | None = None,
    seed_offset: int = 0,
) -> Model:
    """Write ``generations`` flushed generations to every shard through ``ShardWriter``.

    Each generation holds one put batch (new keys, updates of live keys, and a few keys
    written twice) and one delete batch of live keys; the MemTable row limit makes the
    writer flush exactly once per generation.
    """
    generations = workload.generations if generations is None else generations
    rng = random.Random(workload.seed * 1_000_003 + seed_offset + 1)
    ds = lance.dataset(uri, storage_options=storage_options)
    schema = ds.schema
    rows = _RowFactory(schema, workload.dim, rng)
    # Key pool per bucket: existing live keys and fresh keys.
    next_key = max(model.rows, default=-1) + 1
    live_by_bucket = keys_by_bucket(ds, sorted(model.rows), workload.shards)
    fresh_by_bucket: dict[int, list[int]] = {b: [] for b in range(workload.shards)}
    need = workload.rows_per_generation * generations + 16
    while min(len(v) for v in fresh_by_bucket.values()) < need:
        chunk = list(range(next_key, next_key + 4096))
        next_key += 4096
        for b, ks in keys_by_bucket(ds, chunk, workload.shards).items():
            fresh_by_bucket[b] += ks

    n = workload.rows_per_generation
    n_del = max(1, int(n * workload.delete_fraction)) if workload.delete_fraction > 0 else 0
    for bucket, shard_id in enumerate(shard_ids_for(workload)):
        writer = ds.mem_wal_writer(shard_id, max_memtable_rows=n + n_del, durable_write=False)
        try:
            for g in range(generations):
                live_keys = live_by_bucket[bucket]
                n_upd = min(len(live_keys), int(n * workload.update_fraction))
                n_dup = int(n * workload.duplicate_fraction)
                updates = rng.sample(live_keys, n_upd)
                fresh = [fresh_by_bucket[bucket].pop() for _ in range(n - n_upd - n_dup)]
                ids = updates + fresh
                ids += rng.sample(ids, min(n_dup, len(ids)))  # the same key twice: the later row wins
                rng.shuffle(ids)
                batch = rows.table(ids, f"s{bucket}g{g}")
                writer.put(batch)
                model.put(batch)
                live_set = set(live_keys) | set(fresh)
                deletes = rng.sample(sorted(live_set), min(n_del, len(live_set))) if n_del else []
                if deletes:
                    writer.delete(pa.table({"id": pa.array(deletes, pa.int64())}))
                    model.delete(deletes)
                    live_set -= set(deletes)
                live_by_bucket[bucket] = sorted(live_set)
        finally:
            writer.close()
    return model


def make_demo_table(uri: str, workload: Workload | None = None, storage_options: dict[str, str] | None = None) -> Model:
    workload = workload or Workload()
    _, model = create_base_table(uri, workload, storage_options)
    return write_generations(uri, workload, model, storage_options=storage_options)
