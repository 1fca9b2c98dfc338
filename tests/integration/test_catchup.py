"""Index catch-up: plans name each index's lag; execution makes Lance record the catch-up."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import memwal
from memwal.catchup import OPTIMIZE, RETRAIN, WAIT
from memwal.cli import main
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations
from memwal.errors import BadInputError
from memwal.table import open_table
from tests.conftest import SMALL, lsm_rows


def test_plan_reports_lag_per_shard_and_unindexed_rows(make_table):
    table, _ = make_table()
    plan = memwal.open(table.uri).catchup(dry_run=True).value
    assert [i.index_name for i in plan.indexes] == ["id_idx", "vec_idx"]
    assert all(i.action == "none" and i.unindexed_rows == 0 for i in plan.indexes)
    assert memwal.open(table.uri).merge(max_generations=2).ok
    plan = memwal.open(table.uri).catchup(dry_run=True).value
    for ip in plan.indexes:
        assert ip.lag == {s: 2 for s in shard_ids_for(SMALL)}
        assert ip.caught_up == {s: 0 for s in shard_ids_for(SMALL)}
        assert ip.unindexed_rows > 0 and ip.action in (OPTIMIZE, RETRAIN)


def test_incremental_catchup_is_recorded_by_lance(make_table):
    table, model = make_table()
    assert memwal.open(table.uri).merge(max_generations=1).ok
    plan = memwal.open(table.uri).catchup(max_unindexed_fraction=1.0, dry_run=True).value
    assert {i.action for i in plan.indexes} == {OPTIMIZE}
    result = memwal.open(table.uri).catchup(max_unindexed_fraction=1.0).value
    assert result.all_recorded
    assert all(i.caught_up == {s: 1 for s in shard_ids_for(SMALL)} for i in result.indexes)
    stats = table.dataset().stats.index_stats("id_idx")
    assert stats["num_unindexed_rows"] == 0
    assert table.manifest().index_catchup == {"id_idx": table.manifest().compacted,
                                              "vec_idx": table.manifest().compacted}
    assert lsm_rows(table) == model.sorted_rows()


def test_retrain_when_too_many_deltas(make_table):
    table, model = make_table()
    loose = {"max_deltas": 100, "max_unindexed_fraction": 1.0}
    for _ in range(3):  # three merges, three incremental deltas
        assert memwal.open(table.uri).merge(max_generations=1).ok
        table.dataset().optimize.optimize_indices(index_names=["id_idx"], num_indices_to_merge=0)
    deltas = len(table.dataset().stats.index_stats("id_idx")["num_indexed_rows_per_delta"])
    assert deltas >= 3
    assert memwal.open(table.uri).merge(max_generations=1).ok
    plan = memwal.open(table.uri).catchup(indexes=["id_idx"], max_deltas=3, dry_run=True).value
    assert plan.indexes[0].action == RETRAIN and "deltas" in plan.indexes[0].reason
    result = memwal.open(table.uri).catchup(indexes=["id_idx"], max_deltas=3).value
    assert result.all_recorded
    assert len(table.dataset().stats.index_stats("id_idx")["num_indexed_rows_per_delta"]) == 1
    assert memwal.open(table.uri).catchup(indexes=["id_idx"], **loose, dry_run=True).value.indexes[0].action == "none"
    assert lsm_rows(table) == model.sorted_rows()


def test_delete_only_merge_is_caught_up_too(tmp_path):
    """A merge that only deleted rows leaves nothing unindexed, yet catch-up must be recorded
    (GC waits for it)."""
    wl = Workload(base_rows=300, shards=1, generations=0, seed=5)
    uri = str(tmp_path / "t")
    ds, _ = create_base_table(uri, wl)
    shard = shard_ids_for(wl)[0]
    with ds.mem_wal_writer(shard) as w:
        w.delete(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    table = open_table(uri)
    assert memwal.open(table.uri).merge().ok
    plan = memwal.open(table.uri).catchup(dry_run=True).value
    assert all(i.unindexed_rows == 0 and i.lag == {shard: 1} for i in plan.indexes)
    result = memwal.open(table.uri).catchup().value
    assert result.all_recorded and table.manifest().index_catchup["id_idx"] == {shard: 1}


def test_unknown_index_is_bad_input(make_table):
    table, _ = make_table()
    with pytest.raises(BadInputError, match="no such index"):
        memwal.open(table.uri).catchup(indexes=["nope"], dry_run=True)


def test_a_vector_index_too_small_to_train_waits_with_its_reason(tmp_path, capsys):
    """Below 256 rows Lance builds IVF_PQ empty (its statistics say ``index_type: N/A``) and no
    optimisation or retrain indexes or records anything: the plan says the index waits, and
    why, the run exits 0 with the other indexes recorded; once the table has rows enough, the
    same job trains it and Lance records its catch-up."""
    wl = Workload(base_rows=100, shards=2, generations=2, rows_per_generation=20, seed=3)
    uri = str(tmp_path / "t")
    _, model = create_base_table(uri, wl)
    write_generations(uri, wl, model)
    table = open_table(uri)
    assert memwal.open(uri).merge().ok
    plan = memwal.open(uri).catchup(dry_run=True).value
    vec = next(i for i in plan.indexes if i.index_name == "vec_idx")
    rows = table.dataset().count_rows()
    assert rows < 256 and vec.is_vector and vec.index_type == "N/A"
    assert vec.action == WAIT and vec.reason.startswith(f"{rows} rows, too few to train")
    assert [i.index_name for i in plan.work()] == ["id_idx"]
    run = memwal.open(uri).catchup()
    assert run.ok, run.problems
    result = run.value
    assert result.all_recorded
    by_name = {i.index_name: i for i in result.indexes}
    assert by_name["id_idx"].recorded and by_name["vec_idx"].action == WAIT and not by_name["vec_idx"].recorded
    assert table.manifest().index_catchup.get("id_idx") == table.manifest().compacted
    assert not any(table.manifest().index_catchup.get("vec_idx", {}).values())
    assert main(["catchup", uri]) == 0  # the CLI too: nothing to run, nothing failed
    assert "vec_idx: waits for rows enough to train it" in capsys.readouterr().out

    write_generations(uri, dataclasses.replace(wl, rows_per_generation=100), model, generations=3,
                      seed_offset=100)  # past 256 rows
    assert memwal.open(uri).merge().ok
    assert table.dataset().count_rows() >= 256
    plan = memwal.open(uri).catchup(dry_run=True).value
    assert next(i for i in plan.indexes if i.index_name == "vec_idx").action == RETRAIN
    assert memwal.open(uri).catchup().value.all_recorded
    assert table.manifest().index_catchup["vec_idx"] == table.manifest().compacted
    stats = table.dataset().stats.index_stats("vec_idx")
    assert stats["num_indexed_rows"] == table.dataset().count_rows() and stats["num_unindexed_rows"] == 0
    assert lsm_rows(table) == model.sorted_rows()
