"""Tables for the base-growth series: the same change set size merged into ever larger bases.

``bench.data.tables`` builds its base through ``memwal.demo``, which keeps every live key in
Python sets and rebuilds them per generation: fine at 1M rows, many minutes at 16M. Here the
base table is written column by column with numpy and pyarrow (the demo schema: ``id``
primary key, ``name``, ``value``, an 8-float ``vec``), with a BTREE on the key, and the
generations are still written by pylance's ``ShardWriter``: per shard, ``generations``
flushes of about ``change_rows / (shards * generations)`` rows each, half of them updates of
base keys drawn uniformly from the whole base (so the rows a merge rewrites are spread over
every fragment, as real updates are), the rest new keys, a few keys written twice in one
batch, and one delete batch of base keys per generation. Keys go to shards by Lance's own
routing (``evaluate_sharding_spec``), computed once for a pool of candidate keys.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.mem_wal import evaluate_sharding_spec

from memwal.demo import demo_schema

DIM = 8


@dataclass
class GrowthSpec:
    base_rows: int
    change_rows: int = 200_000
    shards: int = 4
    generations_per_shard: int = 35
    update_fraction: float = 0.5
    delete_fraction: float = 0.1
    duplicate_fraction: float = 0.05
    seed: int = 23
    #: Rows per base data file (Lance's default is 1M): more fragments at a bigger base.
    rows_per_file: int = 1_000_000

    @property
    def rows_per_generation(self) -> int:
        # stored rows per unit: puts (minus the duplicates the MemTable folds) plus tombstones
        per_unit = 1 - self.duplicate_fraction + self.delete_fraction
        return max(4, round(self.change_rows / (self.shards * self.generations_per_shard * per_unit)))


def _vectors(rng: np.random.Generator, n: int) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM)


def _rows(schema: pa.Schema, ids: np.ndarray, tag: str, rng: np.random.Generator) -> pa.Table:
    id_arr = pa.array(ids, pa.int64())
    names = pc.binary_join_element_wise(pa.scalar(f"{tag}-"), pc.cast(id_arr, pa.string()), "")
    return pa.table({"id": id_arr, "name": names, "value": pa.array(rng.random(len(ids)) * 1000),
                     "vec": _vectors(rng, len(ids))}, schema=schema)


def _base_batches(schema: pa.Schema, n: int, rng: np.random.Generator, chunk: int = 1_000_000):
    for start in range(0, n, chunk):
        ids = np.arange(start, min(n, start + chunk), dtype=np.int64)
        yield from _rows(schema, ids, "base", rng).to_batches()


def _buckets(ds: lance.LanceDataset, keys: np.ndarray) -> np.ndarray:
    spec = ds.mem_wal_index_details()["sharding_specs"][0]
    out = []
    for i in range(0, len(keys), 1_000_000):
        batch = pa.record_batch({"id": pa.array(keys[i:i + 1_000_000], pa.int64())})
        out.append(evaluate_sharding_spec(batch, spec, ds.lance_schema).column(0).to_numpy(zero_copy_only=False))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def shard_uuids(spec: GrowthSpec) -> list[str]:
    import uuid

    rng = np.random.default_rng(spec.seed + 1)
    return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(spec.shards)]


def build_growth_table(path: str, spec: GrowthSpec) -> dict:
    """Write the base (numpy, BTREE on ``id``, MemWAL with ``id_idx`` maintained) and every
    generation (``ShardWriter``); returns what was written and how long it took."""
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(spec.seed)
    schema = demo_schema(DIM)
    t0 = time.perf_counter()
    reader = pa.RecordBatchReader.from_batches(schema, _base_batches(schema, spec.base_rows, rng))
    ds = lance.write_dataset(reader, path, max_rows_per_file=spec.rows_per_file)
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    ds.initialize_mem_wal(bucket_column="id", num_buckets=spec.shards, maintained_indexes=["id_idx"])
    ds = lance.dataset(path)
    t1 = time.perf_counter()

    n = spec.rows_per_generation
    n_upd = int(n * spec.update_fraction)
    n_dup = int(n * spec.duplicate_fraction)
    n_new = n - n_upd - n_dup
    n_del = max(1, int(n * spec.delete_fraction))
    gens = spec.generations_per_shard
    # candidate keys per shard: base keys (updates, deletes) and fresh keys (inserts)
    want_base = spec.shards * gens * (n_upd + n_del) * 2 + 1024
    base_pool = np.unique(rng.integers(0, spec.base_rows, size=min(want_base, spec.base_rows * 4)))
    rng.shuffle(base_pool)
    fresh_pool = np.arange(spec.base_rows, spec.base_rows + spec.shards * gens * n_new * 2 + 1024, dtype=np.int64)
    base_by = _buckets(ds, base_pool)
    fresh_by = _buckets(ds, fresh_pool)
    for bucket, shard_id in enumerate(shard_uuids(spec)):
        olds = base_pool[base_by == bucket]
        news = fresh_pool[fresh_by == bucket]
        if len(olds) < gens * (n_upd + n_del) or len(news) < gens * n_new:
            raise ValueError(f"key pool too small for bucket {bucket}: base {spec.base_rows:,} rows")
        writer = ds.mem_wal_writer(shard_id, max_memtable_rows=n + n_del, durable_write=False)
        try:
            for g in range(gens):
                upd = olds[g * (n_upd + n_del): g * (n_upd + n_del) + n_upd]
                dels = olds[g * (n_upd + n_del) + n_upd: (g + 1) * (n_upd + n_del)]
                new = news[g * n_new:(g + 1) * n_new]
                ids = np.concatenate([upd, new])
                ids = np.concatenate([ids, rng.choice(ids, n_dup, replace=False)])
                rng.shuffle(ids)
                writer.put(_rows(schema, ids, f"s{bucket}g{g}", rng))
                writer.delete(pa.table({"id": pa.array(dels, pa.int64())}))
        finally:
            writer.close()
    t2 = time.perf_counter()
    from bench.data.tables import dir_bytes, generation_stats

    info = {**asdict(spec), "rows_per_generation": n, "base_write_seconds": round(t1 - t0, 2),
            "generations_write_seconds": round(t2 - t1, 2), "bytes": dir_bytes(path),
            "base_fragments": len(ds.get_fragments())}
    info.update(generation_stats(path))
    return info


if __name__ == "__main__":  # by hand: python -m bench.data.growth PATH BASE_ROWS
    import json
    import sys

    print(json.dumps(build_growth_table(sys.argv[1], GrowthSpec(int(sys.argv[2]))), indent=1))
