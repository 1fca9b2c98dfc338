"""A table with thousands of merged generations, built in seconds: GC's input.

Building 10,000 generations through ``ShardWriter`` takes minutes, so the table is built
once (cached by the bench that uses it) and cheaply: pylance's own writer flushes one real
generation per shard (a real Lance dataset, its bloom filter and primary-key index, a real
WAL entry); that directory is then copied as generations ``2..N`` of the shard, each with a
WAL entry written with pyarrow (the real entry's batches, its schema metadata naming the
generation), and one new shard manifest version lists them all. Progress is marked with
Lance's own ``mark_sstables_as_compacted`` on a merge that rewrites the base's own rows (a
merge the history vouches for), and old versions are expired so only the grace period and
the gates GC checks stand.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa


def _rewrite_wal_entry(data: bytes, generation: int) -> bytes:
    """The same Arrow IPC stream with its ``generation`` schema metadata replaced."""
    reader = pa.ipc.open_stream(pa.BufferReader(data))
    meta = dict(reader.schema.metadata or {})
    meta[b"generation"] = str(generation).encode()
    schema = reader.schema.with_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for batch in reader:
            w.write_batch(pa.record_batch(batch.columns, schema=schema))
    return sink.getvalue().to_pybytes()


def _forge_shard(uri: str, shard_id: str, generations: int) -> None:
    """Turn a shard with one real flushed generation into one with ``generations`` of them."""
    from memwal.table import open_table
    from memwal.table.naming import manifest_key, shard_dir, version_hint_key, wal_key
    from memwal.table.shards import latest_shard_manifest, list_wal_entries, read_wal_entry_meta

    store = open_table(uri).store
    state = latest_shard_manifest(store, shard_id)
    first = state.flushed[0]
    entry = next(e for e in list_wal_entries(store, shard_id)
                 if read_wal_entry_meta(store, shard_id, e.position).generation == first.generation)
    template, wal_bytes = Path(uri, shard_dir(shard_id), first.path), store.get(entry.key)
    msg = type(state.manifest)()
    msg.CopyFrom(state.manifest)
    del msg.sstables[:]
    for g in range(1, generations + 1):
        name = f"{g:08x}_gen_{g}"
        if g != first.generation:
            shutil.copytree(template, template.with_name(name))
            store.put(wal_key(shard_id, g), _rewrite_wal_entry(wal_bytes, g))
        sst = msg.sstables.add()
        sst.CopyFrom(state.manifest.sstables[0])
        sst.generation, sst.path = g, (first.path if g == first.generation else name)
    msg.version = state.version + 1
    msg.current_generation = generations + 1
    msg.replay_after_wal_entry_position = msg.wal_entry_position_last_seen = max(generations, entry.position)
    store.put_if_absent(manifest_key(shard_id, msg.version), msg.SerializeToString())
    store.put(version_hint_key(shard_id), json.dumps({"version": msg.version}).encode())


def build(uri: str, generations: int, shards: int) -> float:
    """The pristine table: ``generations`` merged generations over ``shards`` shards."""
    from datetime import timedelta

    from lance.mem_wal import CompactedSsTable

    import memwal
    from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations

    t0 = time.perf_counter()
    wl = Workload(base_rows=100, shards=shards, generations=1, rows_per_generation=4, indexes=False, seed=5)
    ds, model = create_base_table(uri, wl)
    write_generations(uri, wl, model)
    ds = ds.checkout_version(ds.latest_version)
    ds.cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    # generation 1 really in the base: every copy below holds its rows; its merge's commit and
    # the version before it stay, as on a table GC has not yet run on (the history vouches for it)
    assert memwal.open(uri).merge().ok
    per_shard = -(-generations // shards)
    for shard_id in shard_ids_for(wl):
        _forge_shard(uri, shard_id, per_shard)
    ds = ds.checkout_version(ds.latest_version)
    # the marker of the copies, in a commit that writes the rows they hold (the base's own, again):
    # a merge of memwal's own, as GC checks before it drains (memwal.merge.cover)
    markers = [CompactedSsTable(s, per_shard) for s in shard_ids_for(wl)]
    (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
     .mark_sstables_as_compacted(markers).execute(ds.to_table()))
    # ... and its receipt, as memwal's merge writes one: the generations it applied, bound to the commit
    from memwal.history.run import committed
    from memwal.table import open_table

    table = open_table(uri)
    committed(table, table.manifest().version, applied={s: (2, per_shard) for s in shard_ids_for(wl)})
    return time.perf_counter() - t0


if __name__ == "__main__":  # by hand: python -m bench.data.forged PATH GENERATIONS SHARDS
    import sys

    print(f"{build(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])):.1f} s")
