"""memwal's overlay reader (the base less the keys the generations touch, plus their newest rows)
reads exactly what pylance's ``LsmScanner`` reads and what the model holds, row for row.

Tables are written by pylance's ``ShardWriter``: puts, updates, keys written twice, deletes, over
integer, string and composite keys, several shards; filters, projections and limits; a table
with merge operators is folded (the overlay's counterpart), never overlaid.
"""

from __future__ import annotations

import uuid
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lance.mem_wal import LsmScanner

import memwal
from memwal.demo import Workload, create_base_table, write_generations
from memwal.merge.take import ROWS_PER_SLICE
from memwal.read.overlay import overlay_pays, overlay_scan
from memwal.read.plan import plan_read
from memwal.table import open_table

PK = {"lance-schema:unenforced-primary-key": "true"}
KEYS = {
    "int": pa.schema([pa.field("k", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                      pa.field("tag", pa.string())]),
    "string": pa.schema([pa.field("k", pa.string(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                         pa.field("tag", pa.string())]),
    "composite": pa.schema([pa.field("k", pa.string(), nullable=False, metadata=PK),
                            pa.field("n", pa.int32(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                            pa.field("tag", pa.string())]),
}
FILTERS = [None, "v % 3 = 0", "tag = 'g1' OR v > 40"]


def key_of(kind: str, i: int) -> dict[str, Any]:
    if kind == "int":
        return {"k": i}
    if kind == "string":
        return {"k": f"key-{i:03d}"}
    return {"k": f"key-{i % 4}", "n": i // 4}


def order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple(str(r.get(c)) for c in ("k", "n", "id")))


def both(uri: str, **read: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The overlay's rows and LsmScanner's, over the same plan (the overlay forced: the rule's
    choice is not what is checked here)."""
    table = open_table(uri)
    ds, plan = table.dataset(), plan_read(table)
    overlay = overlay_scan(table, ds, plan, pays=lambda base, listed: True, **read)
    assert overlay is not None
    scanner = LsmScanner.from_snapshots(ds, plan.snapshots)
    if read.get("columns"):
        scanner = scanner.project(read["columns"])
    if read.get("filter"):
        scanner = scanner.filter(read["filter"])
    return order(overlay.to_pylist()), order(scanner.to_table().to_pylist())


# A generation: puts (key index, value) then deletes (key indexes), over a small key space so that
# updates, rewrites and deletes of the same keys come often.
generations = st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 99)), max_size=8),
                                 st.lists(st.integers(0, 11), max_size=3)), min_size=1, max_size=4)


@pytest.mark.parametrize("kind", list(KEYS))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.lists(st.integers(0, 11), max_size=8, unique=True), gens=generations)
def test_the_overlay_reads_what_lsm_scanner_reads_and_the_model_holds(tmp_path_factory, kind, base, gens):
    uri = str(tmp_path_factory.mktemp(kind) / "t.lance")
    schema = KEYS[kind]
    model = {tuple(key_of(kind, i).values()): {**key_of(kind, i), "v": i, "tag": "base"} for i in base}
    lance.write_dataset(pa.Table.from_pylist(list(model.values()), schema=schema), uri).initialize_mem_wal(
        unsharded=True)
    shard = str(uuid.UUID(int=3))
    for g, (puts, deletes) in enumerate(gens, start=1):
        writer = lance.dataset(uri).mem_wal_writer(shard, max_memtable_rows=1000, durable_write=False)
        rows = [{**key_of(kind, i), "v": v, "tag": f"g{g}"} for i, v in puts]
        if rows:
            writer.put(pa.Table.from_pylist(rows, schema=schema))
            for (i, _), r in zip(puts, rows, strict=True):
                model[tuple(key_of(kind, i).values())] = r  # a key put twice: the later row wins
        if deletes:
            keys = [key_of(kind, i) for i in deletes]
            writer.delete(pa.Table.from_pylist(keys, schema=pa.schema([schema.field(c) for c in keys[0]])))
            for key in keys:
                model.pop(tuple(key.values()), None)
        writer.close()  # flushes the MemTable: one generation
    for f in FILTERS:
        overlay, scanned = both(uri, filter=f)
        assert overlay == scanned, f
        if f is None:
            assert overlay == order(list(model.values()))
    overlay, scanned = both(uri, columns=["v"], filter="v > 10")
    assert sorted(r["v"] for r in overlay) == sorted(r["v"] for r in scanned)
    limited = overlay_scan(open_table(uri), lance.dataset(uri), plan_read(open_table(uri)), limit=3,
                           pays=lambda base, listed: True)
    assert limited is not None and limited.num_rows == min(3, len(model))
    assert all(r in model.values() for r in limited.to_pylist())


def test_many_shards_with_updates_duplicates_and_deletes_through_memwal_open(tmp_path):
    uri = str(tmp_path / "t.lance")
    workload = Workload(base_rows=3000, shards=3, generations=3, rows_per_generation=30, indexes=False, seed=62)
    _, model = create_base_table(uri, workload)
    write_generations(uri, workload, model)
    listed = sum(len(s["generations"]) for s in plan_read(open_table(uri)).to_dict()["shards"])
    assert listed == 9 and overlay_pays(3000, 9 * 33)  # the rule picks the overlay here
    rows = memwal.open(uri).scan(columns=["id", "name", "value"])
    assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == model.sorted_rows(["id", "name", "value"])
    overlay, scanned = both(uri, filter="value < 500 AND id % 2 = 0")
    assert overlay == scanned and overlay


def test_a_large_base_with_a_few_replaced_rows_reads_right_through_the_sliced_base(tmp_path):
    """The base rows the generations replaced are dropped by slicing around them (few against
    the base: :func:`memwal.merge.take.rows_but`), not by the filter the small tables above take."""
    uri = str(tmp_path / "t.lance")
    workload = Workload(base_rows=20_000, shards=1, generations=2, rows_per_generation=30, indexes=False, seed=9)
    _, model = create_base_table(uri, workload)
    write_generations(uri, workload, model)
    listed = sum(len(s["generations"]) for s in plan_read(open_table(uri)).to_dict()["shards"])
    assert listed == 2 and 2 * 33 * ROWS_PER_SLICE <= 20_000  # at most that many base rows replaced: sliced
    rows = memwal.open(uri).scan(columns=["id", "name", "value"])
    assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == model.sorted_rows(["id", "name", "value"])
    overlay, scanned = both(uri)
    assert overlay == scanned and len(overlay) == len(model.sorted_rows(["id"]))


def test_a_table_with_merge_operators_is_folded_not_overlaid(tmp_path):
    uri = str(tmp_path / "t.lance")
    schema = KEYS["int"]
    lance.write_dataset(pa.Table.from_pylist([{"k": 1, "v": 10, "tag": "base"}], schema=schema), uri
                        ).initialize_mem_wal(unsharded=True)
    memwal.open(uri).merge_ops(set={"v": "sum"})
    writer = lance.dataset(uri).mem_wal_writer(str(uuid.UUID(int=3)), max_memtable_rows=1000, durable_write=False)
    writer.put(pa.Table.from_pylist([{"k": 1, "v": 5, "tag": "a"}, {"k": 2, "v": 1, "tag": "a"}], schema=schema))
    writer.put(pa.Table.from_pylist([{"k": 1, "v": 7, "tag": "b"}], schema=schema))
    writer.close()
    rows = order(memwal.open(uri).scan().to_pylist())
    assert rows == [{"k": 1, "v": 22, "tag": "b"}, {"k": 2, "v": 1, "tag": "a"}]  # 10 + 5 + 7, folded
