"""A rollup's rows: each key's newest version across its run, a key whose newest is a delete kept as
a delete, the same whether the run is read whole (a few small flushes: one read of each) or keys
first and rows fetched by position (a run that decodes past a batch, issue 61)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from memwal.rollup.plan import Entry, RollupPlan
from memwal.rollup.write import rollup_rows
from memwal.table import open_table
from memwal.table.shards import read_shard_manifests
from tests.helpers import wait_flushed

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                    pa.field("s", pa.string())])
ROWS = 40  # a MemTable's rows: each put or delete below of 40 flushes one generation


def batch(keys: range, g: int) -> pa.Table:
    return pa.table({"id": pa.array(list(keys), pa.int64()), "v": pa.array([1000 * g + k for k in keys], pa.int64()),
                     "s": [f"g{g}-{k}" for k in keys]}, schema=SCHEMA)


@pytest.fixture
def run(tmp_path: Path) -> tuple[str, RollupPlan, dict[int, tuple[int, str] | None]]:
    """Six generations flushed by pylance's ``ShardWriter``: puts that overwrite the ones before,
    deletes of keys written and never written, a key put again after its delete; the plan of a
    rollup of all six, and the model (each key's newest row, None for a delete)."""
    uri = str(tmp_path / "t")
    lance.write_dataset(batch(range(0, 1), 0), uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).initialize_mem_wal(unsharded=True)
    sid = str(uuid.uuid4())
    writer = lance.dataset(uri).mem_wal_writer(sid, max_memtable_rows=ROWS, durable_write=False)
    model: dict[int, tuple[int, str] | None] = {}
    ops: list[tuple[str, range, int]] = [("put", range(0, 40), 1), ("put", range(20, 60), 2),
                                         ("delete", range(10, 50), 3), ("put", range(30, 70), 4),
                                         ("delete", range(100, 140), 5), ("put", range(5, 45), 6)]
    for op, keys, g in ops:
        if op == "put":
            writer.put(batch(keys, g))
            model.update({k: (1000 * g + k, f"g{g}-{k}") for k in keys})
        else:
            writer.delete(pa.table({"id": pa.array(list(keys), pa.int64())}))
            model.update({k: None for k in keys})
    wait_flushed(writer, len(ops))
    writer.close()
    state = read_shard_manifests(open_table(uri).store).states[sid]
    assert len(state.flushed) == len(ops)
    return uri, RollupPlan(sid, tuple(Entry(f.generation, f.path, 1) for f in state.flushed)), model


def read(uri: str, plan: RollupPlan, monkeypatch: pytest.MonkeyPatch, **bound: Any) -> tuple[dict, set[int], int]:  # type: ignore[type-arg]
    """The rollup's rows by key, its deleted keys, and the takes (reads by position) it made."""
    takes = [0]
    take = lance.LanceDataset.take

    def counted(self: lance.LanceDataset, *args: Any, **kwargs: Any) -> pa.Table:
        takes[0] += 1
        return take(self, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "take", counted)
    table = open_table(uri)
    rows = rollup_rows(table, table.dataset(), plan, **bound)
    upserts = pa.concat_tables(list(rows.upserts())).to_pylist()
    monkeypatch.setattr(lance.LanceDataset, "take", take)
    assert rows.upsert_count == len(upserts)
    assert rows.deletes.schema.names == ["id"]
    return {r["id"]: (r["v"], r["s"]) for r in upserts}, set(rows.deletes.column("id").to_pylist()), takes[0]


def test_a_run_of_small_flushes_is_read_once_whole_with_the_rows_of_a_read_by_keys(
        run: tuple[str, RollupPlan, dict[int, tuple[int, str] | None]], monkeypatch: pytest.MonkeyPatch) -> None:
    uri, plan, model = run
    kept = {k: row for k, row in model.items() if row is not None}
    deleted = {k for k, row in model.items() if row is None}
    assert len(kept) == 70 and len(deleted) == 40  # 10..49 were put again after their delete; 100..139 never
    whole, whole_deletes, whole_takes = read(uri, plan, monkeypatch)
    assert (whole, whole_deletes, whole_takes) == (kept, deleted, 0)  # no row fetched again by position
    keyed, keyed_deletes, keyed_takes = read(uri, plan, monkeypatch, held_bytes=0)  # past the bound: keys first
    assert (keyed, keyed_deletes) == (kept, deleted)
    assert keyed_takes >= len(plan.entries) - 2  # a sample and the rows, by position (the two deletes' have none)
