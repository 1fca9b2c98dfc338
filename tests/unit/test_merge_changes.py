"""The local engine's net change set: newest row per key, threaded reads, the memory budget,
and planning checks batched over many generations (same verdicts as one at a time)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import memwal
from memwal.demo import Workload
from memwal.errors import MemWalError
from memwal.merge import changes as C
from memwal.merge import local as L
from memwal.merge import read as R
from memwal.merge.engine import LocalMergeEngine
from memwal.merge.execute import run_merge
from memwal.merge.fold import fold
from memwal.merge.ops import MergeOps
from memwal.merge.plan import WALK_SHARD_ABOVE, plan_merge
from memwal.table import open_table
from tests.conftest import lsm_rows, table_rows


def reference_newest(t: pa.Table, pk: list[str]) -> pa.Table:
    """Each key's newest row by the definition: sort by (keys, generation, row address), keep the last."""
    t = t.take(pc.sort_indices(t, [(k, "ascending") for k in pk] + [(R.GEN, "ascending"), (R.ROWADDR, "ascending")]))
    rows = t.to_pylist()
    last = {tuple(r[k] for k in pk): r for r in rows}
    return pa.Table.from_pylist(list(last.values()), schema=t.schema)


def changes_table(rng: np.random.Generator, n: int, shards: int, *, string_keys: bool, two_keys: bool) -> pa.Table:
    shard = np.sort(rng.integers(0, shards, n)).astype(np.int32)
    key = rng.integers(0, max(1, n // 3), n) * shards + shard  # keys disjoint across shards
    cols: dict = {"id": [f"k{x}" for x in key] if string_keys else key}
    if two_keys:
        cols["part"] = pa.array((key % 3).astype(np.int32))
    cols.update({
        "v": np.arange(n),
        R.TOMBSTONE: rng.random(n) < 0.2,
        R.ROWADDR: pa.array(rng.permutation(n), pa.uint64()),
        R.GEN: rng.integers(1, 6, n),
        R.SHARD: shard,
    })
    return pa.table(cols)


@pytest.mark.parametrize("lsm_order", [True, False])
@pytest.mark.parametrize(("string_keys", "two_keys"), [(False, False), (True, False), (False, True), (True, True)])
def test_newest_versions_keep_each_keys_newest_row(lsm_order, string_keys, two_keys):
    rng = np.random.default_rng(7)
    pk = ["id", "part"] if two_keys else ["id"]
    for n, shards in ((0, 1), (1, 1), (50, 1), (300, 3), (2000, 4)):
        t = changes_table(rng, n, shards, string_keys=string_keys, two_keys=two_keys)
        if lsm_order:  # as the engines read: shard by shard, generation then row address ascending
            t = t.take(pc.sort_indices(t, [(R.SHARD, "ascending"), (R.GEN, "ascending"), (R.ROWADDR, "ascending")]))
        if n > 1:  # several chunks, as concatenated generations are
            t = pa.concat_tables([t.slice(0, n // 2), t.slice(n // 2)])
        order = [(k, "ascending") for k in pk]
        got = C.newest_versions(t, pk)
        expect = reference_newest(t, pk).sort_by(order)
        tomb = expect.column(R.TOMBSTONE)
        assert got.upserts.sort_by(order).to_pylist() == \
            expect.filter(pc.invert(tomb)).drop_columns([R.GEN, R.ROWADDR, R.TOMBSTONE]).to_pylist()
        assert got.deletes.sort_by(order).to_pylist() == expect.filter(tomb).select([*pk, R.SHARD]).to_pylist()


@pytest.mark.parametrize("lsm_order", [True, False])
def test_newest_versions_refuse_a_key_written_to_two_shards(lsm_order):
    t = pa.table({
        "id": [1, 2, 3, 1],
        R.TOMBSTONE: [False] * 4,
        R.ROWADDR: pa.array([0, 1, 0, 2] if lsm_order else [5, 1, 0, 2], pa.uint64()),
        R.GEN: [1, 1, 1, 1],
        R.SHARD: pa.array([0, 0, 1, 1], pa.int32()),
    })
    with pytest.raises(MemWalError, match=r"primary key \{'id': 1\} was written to more than one shard"):
        C.newest_versions(t, ["id"])


def test_fold_replaces_vector_columns_with_the_last_row():
    """Merge operators on a table with a vector column: pyarrow has no ordered hash
    aggregate for nested types, so the replaced vector is taken from the last live row."""
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.float32)), 2)
    t = pa.table({"id": [1, 1, 2, 1], "v": [1.0, 2.0, 3.0, 4.0], "vec": vec,
                  "g": [1, 2, 1, 3], "t": [False, False, False, True]})
    upserts, deleted = fold(t.slice(0, 3), ["id"], MergeOps({"v": "sum"}), order=["g"], tombstone="t")
    assert upserts.sort_by("id").to_pylist() == [
        {"id": 1, "v": 3.0, "vec": [2.0, 3.0]},
        {"id": 2, "v": 3.0, "vec": [4.0, 5.0]},
    ]
    assert deleted.num_rows == 0
    upserts, deleted = fold(t, ["id"], MergeOps({"v": "sum"}), order=["g"], tombstone="t")
    assert upserts.column("id").to_pylist() == [2] and deleted.column("id").to_pylist() == [1]


def test_threaded_reads_keep_plan_order(make_table):
    table, _ = make_table(Workload(base_rows=200, shards=3, generations=6, rows_per_generation=30, seed=3))
    plan = plan_merge(table)
    schema = table.dataset(plan.read_version).schema
    code_of = {sid: i for i, sid in enumerate(plan.shard_ids)}
    one = pa.concat_tables(R.read_generations(plan.generations, schema, None, code_of, threads=1))
    many = pa.concat_tables(R.read_generations(plan.generations, schema, None, code_of, threads=8, group_rows=50))
    assert many.equals(one)
    expected = [(code_of[r.shard_id], r.generation) for r in plan.generations]
    seen = list(dict.fromkeys(zip(one.column(R.SHARD).to_pylist(), one.column(R.GEN).to_pylist(), strict=True)))
    assert seen == expected


@pytest.mark.parametrize("budget", [0, L.DEFAULT_MEMORY_BUDGET])
def test_streamed_and_materialised_upserts_merge_the_same(make_table, budget):
    """Above the memory budget the upserts stream; at or below it they go as one table."""
    table, model = make_table(Workload(base_rows=300, shards=2, generations=4, rows_per_generation=40, seed=5))
    expected = lsm_rows(table)
    plan = plan_merge(table)
    net = L.local_net_changes(plan, table.dataset(plan.read_version).schema, memory_budget=budget)
    try:
        assert (net.upsert_table is None) == (budget == 0)
        assert isinstance(net.upsert_data(), pa.RecordBatchReader if budget == 0 else pa.Table)
    finally:
        net.close()
    # internal entry: the engine's memory budget is no user option
    result = run_merge(table, engine=LocalMergeEngine(memory_budget=budget))
    assert result.version is not None
    assert table_rows(table) == expected == model.sorted_rows()


def plant_link(table, generation_path: str, name: str) -> None:
    target = os.path.join(table.uri, "outside")
    os.makedirs(target, exist_ok=True)
    os.symlink(target, os.path.join(generation_path, name))


def generation_dirs(table) -> dict[int, str]:
    from memwal.table.naming import parse_generation_dir

    root = os.path.join(table.uri, "_mem_wal")
    shard = next(d for d in os.listdir(root) if not d.startswith("_"))
    return {parse_generation_dir(d): os.path.join(root, shard, d) for d in os.listdir(os.path.join(root, shard))
            if parse_generation_dir(d) is not None}


@pytest.mark.parametrize("damage", ["link-inside", "link-deep", "missing-manifest"])
def test_many_generations_stop_at_the_first_bad_one(make_table, damage):
    """Past WALK_SHARD_ABOVE generations, links are found by one walk of the shard and
    readability by opening in a pool: the plan still stops exactly where one-by-one would."""
    count = WALK_SHARD_ABOVE + 6
    table, _ = make_table(Workload(base_rows=50, shards=1, generations=count, rows_per_generation=4,
                                   indexes=False, seed=2))
    gens = generation_dirs(table)
    bad = WALK_SHARD_ABOVE // 2 + 3
    if damage == "link-inside":
        plant_link(table, gens[bad], "extra")
    elif damage == "link-deep":
        plant_link(table, os.path.join(gens[bad], "data"), "deep")
    else:
        shutil.rmtree(os.path.join(gens[bad], "_versions"))
    plan = plan_merge(table)
    assert [g.generation for g in plan.generations] == list(range(1, bad))
    (blocked,) = plan.blocked
    assert blocked.generation == bad
    assert blocked.reason.startswith("unsafe-path:" if damage.startswith("link") else "missing:")
    # The shard merges up to the bad generation and no further.
    run = memwal.open(table.uri).merge()
    assert not run.ok and [b["generation"] for b in run.to_dict()["blocked"]] == [bad]  # exit 1, naming it
    assert open_table(table.uri).manifest().compacted_generation(plan.shard_ids[0]) == bad - 1
