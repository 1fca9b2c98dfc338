"""The reader helper's lookup and nearest: at a plan's version, folded tables, bad input, failed reads."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import memwal
from memwal.demo import Model, Workload, make_demo_table, write_generations
from memwal.errors import BadInputError, ReadError
from memwal.read import lookup, lsm_scan, nearest, plan_read
from memwal.read.vector import SEARCH_METADATA
from memwal.table import open_table
from tests.helpers import assert_one_line_error, run_cli, tree_digest

WL = Workload(base_rows=400, shards=2, generations=2, rows_per_generation=40, seed=8)


def rows_by_id(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def search_kind(t: pa.Table) -> str:
    return t.schema.metadata[SEARCH_METADATA.encode()].decode()


@pytest.fixture
def demo(tmp_path) -> tuple:
    uri = str(tmp_path / "t")
    model = make_demo_table(uri, WL)
    return open_table(uri), model


def test_a_plan_is_read_at_its_own_version_after_newer_writes_and_merges(demo):
    """What a checkpoint relies on: a plan made earlier names an older base version and the
    generations of that moment; every reader opens the base at that version, not the latest."""
    table, model = demo
    old_model: Model = copy.deepcopy(model)
    plan = plan_read(table)  # nothing merged yet: the base version and every generation
    write_generations(table.uri, WL, model, generations=1, seed_offset=50)  # new rows and deletes
    assert memwal.open(table.uri).merge().ok  # the newest base now holds them too
    assert table.manifest().version > plan.version
    assert model.sorted_rows() != old_model.sorted_rows()
    assert rows_by_id(lsm_scan(table, plan=plan)) == old_model.sorted_rows()
    assert rows_by_id(lsm_scan(table, source="index")) == model.sorted_rows()
    changed = [k for k in set(model.rows) | set(old_model.rows) if model.rows.get(k) != old_model.rows.get(k)][:8]
    assert lookup(table, changed, plan=plan).to_pylist() == [old_model.rows[k] for k in changed if k in old_model.rows]
    assert lookup(table, changed).to_pylist() == [model.rows[k] for k in changed if k in model.rows]
    gone = next(k for k in changed if k in old_model.rows and k not in model.rows)  # deleted since the plan
    found = nearest(table, "vec", old_model.rows[gone]["vec"], k=3, plan=plan)
    assert found.column("id")[0].as_py() == gone
    assert nearest(table, "vec", old_model.rows[gone]["vec"], k=3).column("id")[0].as_py() != gone


def test_lookup_takes_keys_in_every_form(demo):
    table, model = demo
    keys = sorted(model.rows)[:3]
    want = [model.rows[k] for k in keys]
    assert lookup(table, keys).to_pylist() == want
    assert lookup(table, pa.array(keys)).to_pylist() == want
    assert lookup(table, pa.table({"id": keys, "other": [0, 0, 0]})).to_pylist() == want
    assert lookup(table, [{"id": k} for k in keys]).to_pylist() == want
    assert lookup(table, keys[0]).to_pylist() == want[:1]
    assert lookup(table, list(reversed(keys))).to_pylist() == list(reversed(want))
    assert lookup(table, []).num_rows == 0 and lookup(table, []).schema.names == ["id", "name", "value", "vec"]
    t = memwal.open(table.uri)
    assert t.lookup(keys, columns=["value", "id"]).to_pylist() == [{"value": r["value"], "id": r["id"]} for r in want]


@pytest.mark.parametrize("call, needle", [
    (lambda t: lookup(t, ["x"]), "keys: not values of the primary key"),
    (lambda t: lookup(t, [None]), "holds a null"),
    (lambda t: lookup(t, pa.table({"other": [1]})), "no primary-key column id"),
    (lambda t: lookup(t, [1], columns=["nope"]), "no such column nope"),
    (lambda t: nearest(t, "nope", [0.0] * 8), "column nope: not in the table schema"),
    (lambda t: nearest(t, "name", [0.0] * 8), "needs a fixed-size list of floats"),
    (lambda t: nearest(t, "vec", [0.0] * 3), "3 values, column vec holds vectors of 8"),
    (lambda t: nearest(t, "vec", [float("nan")] * 8), "NaN"),
    (lambda t: nearest(t, "vec", ["a"] * 8), "not a vector of numbers"),
    (lambda t: nearest(t, "vec", [0.0] * 8, k=0), "k: 0 is not a positive integer"),
    (lambda t: nearest(t, "vec", [0.0] * 8, metric="hamming"), "metric: 'hamming'"),
    (lambda t: nearest(t, "vec", [0.0] * 8, filter="value >"), "filter 'value >'"),
    (lambda t: nearest(t, "vec", [0.0] * 8, filter="nope = 1"), "No field named nope"),
    (lambda t: lsm_scan(t, filter="id = 'abc'"), "could not convert"),
    (lambda t: lsm_scan(t, filter="_rowid > 1"), "No field named _rowid"),
])
def test_bad_input_is_refused_before_reading(demo, call, needle):
    table, _ = demo
    before = tree_digest(table.uri)
    with pytest.raises(BadInputError, match=None) as err:
        call(table)
    assert needle in str(err.value) and "/home/runner" not in str(err.value) and ".rs:" not in str(err.value)
    assert tree_digest(table.uri) == before


def test_a_failed_read_is_exit_1_naming_the_table_never_a_raw_exception(demo):
    table, model = demo
    data = Path(table.uri, "data")
    victim = sorted(data.iterdir())[0]
    victim.write_bytes(victim.read_bytes()[: os.path.getsize(victim) // 3])  # a torn data file
    t = memwal.open(table.uri)
    for call in (lambda: t.scan(), lambda: t.lookup(sorted(model.rows)[:2]),
                 lambda: t.nearest("vec", model.rows[sorted(model.rows)[0]]["vec"])):
        with pytest.raises(ReadError) as err:
            call()
        assert err.value.exit_code == 1 and str(err.value).startswith(f"{table.uri}: cannot read:")
        assert ".rs:" not in str(err.value)
    run = run_cli("scan", table.uri)
    assert_one_line_error(run, 1, table.uri, "cannot read")
    run = run_cli("scan", table.uri, "--filter", "value >")  # bad input is still exit 2, checked first
    assert_one_line_error(run, 2, "--filter 'value >'")


def test_nearest_on_a_table_with_merge_operators_returns_folded_values(demo):
    """Candidates come from the planner (``vec`` is replaced, so its folded value is the
    newest one), values from the fold; a filter on a folding column searches exactly."""
    table, model = demo
    assert run_cli("merge-ops", table.uri, "--set", "value=sum", "--force").rc == 0
    folded = {r["id"]: r for r in lsm_scan(table).to_pylist()}
    assert folded.keys() == model.rows.keys()
    assert any(folded[k]["value"] != model.rows[k]["value"] for k in folded)  # sums, not the newest operand
    target = max(folded)
    found = nearest(table, "vec", folded[target]["vec"], k=6)
    assert search_kind(found) == "index"
    assert found.column("id")[0].as_py() == target
    assert [{c: r[c] for c in folded[r["id"]]} for r in found.to_pylist()] == [folded[r["id"]]
                                                                             for r in found.to_pylist()]
    assert lookup(table, [target]).to_pylist() == [folded[target]]
    cut = float(np.median([r["value"] for r in folded.values()]))
    hits = nearest(table, "vec", folded[target]["vec"], k=6, filter=f"value > {cut}", columns=["id", "value"])
    assert search_kind(hits).startswith("exact: the filter may name a folding column")
    exact = sorted((r for r in folded.values() if r["value"] > cut),
                   key=lambda r: float(((np.asarray(r["vec"]) - np.asarray(folded[target]["vec"])) ** 2).sum()))
    assert [r["id"] for r in hits.to_pylist()] == [r["id"] for r in exact[:6]]
    assert all(r["value"] == folded[r["id"]]["value"] for r in hits.to_pylist())


def test_nearest_searches_exactly_what_no_index_covers(tmp_path):
    """pylance's planner returns nothing without an index, and nothing for another metric."""
    uri = str(tmp_path / "t")
    model = make_demo_table(uri, Workload(base_rows=300, shards=2, generations=2, rows_per_generation=30, seed=3,
                                          indexes=False))
    table = open_table(uri)
    q = model.rows[max(model.rows)]["vec"]
    vecs = {k: np.asarray(r["vec"], np.float32) for k, r in model.rows.items()}
    for metric, dist in (("l2", lambda v: float(((v - q) ** 2).sum())),
                         ("cosine", lambda v: 1 - float(v @ q) / float(np.linalg.norm(v) * np.linalg.norm(q))),
                         ("dot", lambda v: 1 - float(v @ np.asarray(q, np.float32)))):
        found = nearest(table, "vec", q, k=5, metric=metric, columns=["id"])
        assert search_kind(found) == "exact: no vector index on vec"
        want = sorted(vecs, key=lambda k: dist(vecs[k]))[:5]
        assert found.column("id").to_pylist() == want, metric
        assert found.column("_distance").to_pylist() == pytest.approx([dist(vecs[k]) for k in want], abs=1e-5)
    table.dataset().create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=2, num_sub_vectors=2)
    assert search_kind(nearest(table, "vec", q, k=5)) == f"exact: generation 1 of shard {plan_read(table).generations[0][0]} has no index on vec"  # noqa: E501
    assert memwal.open(table.uri).merge().ok
    table.dataset().optimize.optimize_indices()
    assert search_kind(nearest(table, "vec", q, k=5)) == "index"
    assert search_kind(nearest(table, "vec", q, k=5, metric="cosine")).startswith("exact: metric cosine is not")


def test_api_nearest_and_json_figures(demo):
    table, model = demo
    t = memwal.open(table.uri)
    k = max(model.rows)
    found = t.nearest("vec", np.asarray(model.rows[k]["vec"]), k=2, columns=["id"])
    assert found.column_names == ["id", "_distance"] and found.column("id")[0].as_py() == k
    doc = json.loads(run_cli("scan", table.uri, "--json", "--columns", "id").stdout)
    assert doc["num_rows"] == len(model.rows)


def test_the_planner_never_returns_a_superseded_or_deleted_base_row(demo):
    """A base row updated (its new value no longer matches the filter) or deleted in a
    generation still matches the filter in the base table, at distance 0 from its old
    vector: pylance's planner must drop it, with and without the filter."""
    table, model = demo
    plan = plan_read(table)
    base = {r["id"]: r for r in table.dataset(plan.version).to_table().to_pylist()}
    stale = [k for k in base if k in model.rows and base[k]["value"] > 500 >= model.rows[k]["value"]][:3]
    deleted = [k for k in base if k not in model.rows][:3]
    assert stale and deleted
    for k in stale + deleted:
        for f in ("value > 500", None):
            found = nearest(table, "vec", base[k]["vec"], k=3, filter=f, plan=plan)
            assert search_kind(found) == "index"
            for r in found.to_pylist():  # live rows only (the key itself may come back: its live row)
                assert r == {**model.rows[r["id"]], "_distance": r["_distance"]}
                assert f is None or r["value"] > 500
                gap = np.asarray(r["vec"], np.float32) - np.asarray(base[k]["vec"], np.float32)
                assert r["_distance"] == pytest.approx(float(gap @ gap), abs=1e-4)
