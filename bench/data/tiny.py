"""Many tiny generations: the per-generation costs of a merge, amortised or not.

A shard that flushes often (a small MemTable, a low-traffic shard) leaves thousands of
generations of a few rows each. Merging them is then dominated by what a merge pays per
generation: listing, link checks, schema checks, opening and scanning each dataset. The
table is written by pylance's own ``ShardWriter`` (a MemTable of ``rows`` rows flushes
once per put), then every shard manifest version but the latest is removed, as a
collected table would have it (each flush rewrites the whole manifest, so keeping them
would make the table's size quadratic in its generations, gigabytes at 10,000).
"""

from __future__ import annotations

import os
import shutil
import time

import lance
import numpy as np
import pyarrow as pa

from memwal.demo import Workload, create_base_table, shard_ids_for
from memwal.store import open_store
from memwal.table.naming import manifest_key
from memwal.table.shards import latest_shard_version, list_manifest_versions


def build_tiny(path: str, generations: int, *, shards: int = 4, rows: int = 2, seed: int = 11) -> dict:
    """A table with ``generations`` generations of ``rows`` puts each, spread over ``shards``."""
    shutil.rmtree(path, ignore_errors=True)
    w = Workload(base_rows=1000, shards=shards, indexes=False, seed=seed)
    t0 = time.perf_counter()
    ds, _ = create_base_table(path, w)
    schema = ds.schema
    rng = np.random.default_rng(seed)
    per_shard = [generations // shards + (1 if i < generations % shards else 0) for i in range(shards)]
    for bucket, (shard_id, count) in enumerate(zip(shard_ids_for(w), per_shard, strict=True)):
        writer = ds.mem_wal_writer(shard_id, max_memtable_rows=rows, durable_write=False)
        try:
            for _ in range(count):
                # One shard per key range: keys stay disjoint across shards, as routing makes them.
                ids = rng.integers(0, 1000, rows) * shards + bucket
                writer.put(_rows(schema, ids))
        finally:
            writer.close()
    t1 = time.perf_counter()
    pruned = prune_manifests(path)
    return {"generations": generations, "shards": shards, "rows_per_generation": rows,
            "write_seconds": round(t1 - t0, 2), "manifest_versions_pruned": pruned,
            "bytes": sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)}


def _rows(schema: pa.Schema, ids: np.ndarray) -> pa.Table:
    n = len(ids)
    dim = schema.field("vec").type.list_size
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": [f"t{i}" for i in ids],
        "value": pa.array(np.arange(n, dtype=np.float64)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(n * dim, dtype=np.float32)), dim),
    }, schema=schema)


def prune_manifests(path: str) -> int:
    """Delete every shard manifest version below the latest (no gap is left)."""
    store = open_store(path, {})
    pruned = 0
    for shard in os.listdir(os.path.join(path, "_mem_wal")):
        if shard.startswith("_"):
            continue
        latest = latest_shard_version(store, shard)
        old = [manifest_key(shard, v) for v in list_manifest_versions(store, shard) if v < latest]
        pruned += store.delete_many(old)
    return pruned


if __name__ == "__main__":  # build one table by hand: python -m bench.data.tiny PATH N
    import sys

    print(build_tiny(sys.argv[1], int(sys.argv[2])))
    print(lance.dataset(sys.argv[1]).count_rows())
