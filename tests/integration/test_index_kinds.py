"""Every maintainable index kind through the whole cycle, on both engines.

One table (BTREE on ``id``, IVF_PQ on ``vec``, INVERTED on ``name``, all three maintained
through the MemWAL; data written by pylance's ShardWriter) goes through merge, catch-up
(incremental, then a rebuild), compaction and GC with the local engine, and a copy of it
with the Spark engine. Along the way:

* the reader helper's scan, point lookup and vector search equal the row model, before
  and after each step, and the vector search says whether pylance's planner answered
  (``index``) or the index did not cover the view yet (``exact: ...``);
* each index answers for merged rows by itself once caught up: Lance's ``fast_search``
  searches indexed data only, so a nearest-neighbour query for a merged row's vector, a
  full-text query for a merged row's generation tag and a btree-filtered query for a
  merged key find them only when the index covers them (and do not before catch-up);
* catch-up is recorded (``index_catchup``) for all three indexes after every commit that
  rebuilt or extended them, and GC frees the generations once it is.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import memwal
from memwal.catchup import CatchupThresholds, run_catchup
from memwal.demo import Model, Workload, make_demo_table
from memwal.read import lookup, lsm_scan, nearest, plan_read
from memwal.read.vector import SEARCH_METADATA
from memwal.table import Table, open_table

WL = Workload(base_rows=600, shards=2, generations=3, rows_per_generation=60, full_text=True, seed=21)
INDEXES = ("id_idx", "vec_idx", "name_idx")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[str, Model]:
    uri = str(tmp_path_factory.mktemp("kinds") / "t")
    return uri, make_demo_table(uri, WL)


def rows_by_id(t) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def exact_distance(a, b) -> float:
    d = np.asarray(a, np.float32) - np.asarray(b, np.float32)
    return float(d @ d)


def merged_keys(model: Model) -> list[int]:
    """Keys first written through the MemWAL, still live (they reach the base by merging)."""
    return [k for k in sorted(model.rows) if k >= WL.base_rows]


def check_readers(table: Table, model: Model, search: str) -> None:
    """Scan, lookups and vector search equal the model; ``search`` is how nearest answered."""
    assert rows_by_id(lsm_scan(table, source="index")) == model.sorted_rows()
    live = sorted(model.rows)
    gone = [k for k in range(max(live)) if k not in model.rows][:5]  # deleted (or never written)
    keys = [live[0], *gone, *merged_keys(model)[:5], live[len(live) // 2], 10**9]
    assert lookup(table, keys).to_pylist() == [model.rows[k] for k in keys if k in model.rows]
    assert lookup(table, keys, columns=["name"]).to_pylist() == [
        {"name": model.rows[k]["name"]} for k in keys if k in model.rows]
    for target in (merged_keys(model)[0], merged_keys(model)[-1], live[1]):
        found = nearest(table, "vec", model.rows[target]["vec"], k=5)
        assert found.schema.metadata[SEARCH_METADATA.encode()].decode().startswith(search)
        got = found.to_pylist()
        assert got[0]["id"] == target and got[0]["_distance"] == pytest.approx(0, abs=1e-5)
        for r in got:  # every row is the live row, at its exact distance, nearest first
            assert {c: r[c] for c in model.rows[r["id"]]} == model.rows[r["id"]]
            assert r["_distance"] == pytest.approx(exact_distance(r["vec"], model.rows[target]["vec"]), abs=1e-4)
        assert [r["_distance"] for r in got] == sorted(r["_distance"] for r in got)
    query = model.rows[merged_keys(model)[2]]["vec"]
    filtered = nearest(table, "vec", query, k=8, filter="value > 500", columns=["id", "value"]).to_pylist()
    assert filtered and all(r["value"] > 500 and model.rows[r["id"]]["value"] == r["value"] for r in filtered)


def index_answers(table: Table, model: Model, keys: list[int]) -> dict[str, list[int]]:
    """Per index, which of ``keys`` it finds alone (``fast_search``: indexed data only)."""
    ds = table.dataset()
    found: dict[str, list[int]] = {"vec_idx": [], "name_idx": [], "id_idx": []}
    for k in keys:
        row = model.rows[k]
        # PQ codes are lossy: two near vectors may share a code, so the candidates are reranked
        # by exact distance (refine_factor) and the question stays "does the index hold the row".
        vec = ds.to_table(nearest={"column": "vec", "q": np.asarray(row["vec"], np.float32), "k": 1,
                                   "refine_factor": 50},
                          fast_search=True, columns=["id"]).column("id").to_pylist()
        text = ds.to_table(full_text_query=row["name"].split("-")[0], fast_search=True,
                           columns=["id"]).column("id").to_pylist()
        key = ds.to_table(filter=f"id = {k}", fast_search=True, columns=["id"]).column("id").to_pylist()
        for name, hit in (("vec_idx", vec == [k]), ("name_idx", k in text), ("id_idx", key == [k])):
            if hit:
                found[name].append(k)
    return found


def indexes_answer(table: Table, model: Model, keys: list[int]) -> bool:
    """Whether all three indexes alone find every one of ``keys``."""
    return all(hits == list(keys) for hits in index_answers(table, model, keys).values())


def assert_caught_up(table: Table) -> None:
    m = table.manifest()
    assert set(m.compacted) and all(g > 0 for g in m.compacted.values())
    assert {name: m.index_catchup.get(name) for name in INDEXES} == {name: m.compacted for name in INDEXES}
    ds = table.dataset()
    assert all(ds.stats.index_stats(name)["num_unindexed_rows"] == 0 for name in INDEXES)


def catchup(table: Table, kind: str, spark_session, **thresholds):
    """The catch-up's result: through the API, or on Spark with a segment per fragment."""
    if kind == "local":
        return memwal.open(table.uri).catchup(**thresholds).value
    from memwal.spark.engine.runner import SparkRunner

    from memwal.tasks.catchup import TaskCatchupEngine

    # internal entry: one index segment per fragment (fragments_per_task=1) is no user option
    engine = TaskCatchupEngine(SparkRunner(spark_session), fragments_per_task=1)
    return run_catchup(table, engine=engine, thresholds=CatchupThresholds(**thresholds))


@pytest.mark.parametrize("kind", ["local", "spark"])
def test_every_index_kind_through_the_cycle(source, tmp_path, kind, request):
    uri, model = source
    shutil.copytree(uri, tmp_path / "t")
    table = open_table(str(tmp_path / "t"))
    spark_session = request.getfixturevalue("spark_session") if kind == "spark" else None
    t = memwal.open(table.uri)
    first = merged_keys(model)

    check_readers(table, model, "index")  # every generation carries the maintained indexes

    assert t.merge(max_generations=1, engine=kind).ok
    assert table.manifest().index_catchup == {}  # Lance recorded nothing: the merged rows are unindexed
    check_readers(table, model, "exact: index vec_idx does not cover")
    in_base = [k for k in first if table.dataset().to_table(filter=f"id = {k}", columns=["id"]).num_rows][:4]
    assert in_base and not indexes_answer(table, model, in_base)

    result = catchup(table, kind, spark_session)  # incremental: the unindexed fragments become a delta
    assert result.all_recorded and {i.action for i in result.indexes} == {"optimize"}
    assert_caught_up(table)
    assert index_answers(table, model, in_base) == {name: in_base for name in INDEXES}
    check_readers(table, model, "index")

    assert t.merge(engine=kind).ok
    result = catchup(table, kind, spark_session, max_unindexed_fraction=0.0)
    assert result.all_recorded and {i.action for i in result.indexes} == {"retrain"}
    assert_caught_up(table)
    if kind == "spark":  # rebuilt as segments over fragment groups on executors, one commit
        fragments = len(table.dataset().get_fragments())
        assert fragments > 1
        for name in INDEXES:
            assert table.dataset().stats.index_stats(name)["num_segments"] == fragments, name
    assert index_answers(table, model, first[:3] + first[-3:]) == {name: first[:3] + first[-3:] for name in INDEXES}
    check_readers(table, model, "index")

    compacted = t.compact(engine=kind).value
    assert compacted.version is not None and all(i.recorded for i in compacted.indexes)
    assert_caught_up(table)
    assert index_answers(table, model, first[:3] + first[-3:]) == {name: first[:3] + first[-3:] for name in INDEXES}

    gc = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0, engine=kind).to_dict()
    assert len(gc["deleted"]) == WL.shards * WL.generations and not gc["blocked"]
    assert (gc["engine"], compacted.engine) == (kind, kind)
    assert all(s["generations"] == [] for s in plan_read(table).shards)
    assert rows_by_id(table.dataset().to_table()) == model.sorted_rows()
    check_readers(table, model, "index")
