"""``memwal.writer.RotatingShardWriter``: a pylance ShardWriter replaced every so often moves its
base, and loses no put: a MemTable half full when the writer is replaced becomes a generation."""

from __future__ import annotations

import uuid

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.writer import RotatingShardWriter
from tests.helpers import run_cli, wait_flushed

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
SHARD = str(uuid.UUID(int=9))


def rows(table: pa.Table) -> list[dict[str, int]]:
    return sorted(table.select(["id", "v"]).to_pylist(), key=lambda r: r["id"])


def test_a_rotation_moves_the_base_and_loses_no_put(tmp_path):
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.Table.from_pylist([{"id": 0, "v": 0}], schema=SCHEMA), uri).initialize_mem_wal(
        unsharded=True)
    now = [0.0]
    w = RotatingShardWriter(uri, SHARD, rotate_seconds=60, clock=lambda: now[0], max_memtable_rows=4,
                            durable_write=False, stats_log_interval_ms=0)
    opened = w.base_version
    model = {0: 0}
    for i in range(1, 11):  # two full generations, then a MemTable of two rows and a delete
        w.put(pa.Table.from_pylist([{"id": i % 7, "v": i}], schema=SCHEMA))
        model[i % 7] = i
    w.delete(pa.table({"id": pa.array([3], pa.int64())}))
    del model[3]
    wait_flushed(w, 2)
    assert run_cli("merge", uri).rc == 0  # what a follower does meanwhile
    assert w.base_version == opened and w.rotations == 0
    now[0] = 61.0
    w.put(pa.Table.from_pylist([{"id": 20, "v": 20}], schema=SCHEMA))  # replaced first, then written
    model[20] = 20
    assert w.rotations == 1 and w.base_version > opened  # the new writer opened the merged base
    assert rows(w.lsm_scanner().to_table()) == [{"id": k, "v": v} for k, v in sorted(model.items())]
    stats = w.stats()  # over both writers (a delete counts as a put), zeros kept
    assert stats["rotations"] == 1 and stats["put_count"] == 12 and stats["memtable_flush_failures"] == 0
    w.close()
    assert run_cli("merge", uri).rc == 0
    assert rows(lance.dataset(uri).to_table()) == [{"id": k, "v": v} for k, v in sorted(model.items())]
    assert rows(memwal.open(uri).scan()) == rows(lance.dataset(uri).to_table())


def test_a_rotation_period_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="rotate_seconds"):
        RotatingShardWriter(str(tmp_path / "t.lance"), SHARD, rotate_seconds=0)
