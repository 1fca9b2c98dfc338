"""Merge operators on tables whose other columns have any type: vectors, lists, structs, maps,
binaries, dictionaries. The fold (merger and readers) must carry them; pyarrow's hash join
and ordered aggregates refuse nested types, which is how a folding table with a vector
column once failed every read (``memwal scan`` exit 2, ``memwal verify`` calling a healthy
table broken)."""

from __future__ import annotations

import json
import random

import lance
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwal.merge.fold import fold
from memwal.merge.ops import MergeOps
from tests.helpers import assert_one_line_error, run_cli
from tests.integration.test_merge_ops import model_fold

PK = {"lance-schema:unenforced-primary-key": "true"}
COLUMNS = {
    "n": ("sum", pa.int64()),
    "vec": ("replace", pa.list_(pa.float32(), 2)),
    "tags": ("last_non_null", pa.list_(pa.string())),
    "meta": ("first_non_null", pa.struct([("a", pa.int64()), ("b", pa.string())])),
    "m": ("last_non_null", pa.map_(pa.string(), pa.int64())),
    "bin": ("replace", pa.large_binary()),
    "d": ("first_non_null", pa.dictionary(pa.int32(), pa.string())),
    "w": ("last_non_null", pa.list_(pa.float32(), 2)),
}
OPS = {c: op for c, (op, _) in COLUMNS.items() if op != "replace"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                    *(pa.field(c, t) for c, (_, t) in COLUMNS.items())])

VALUES = {
    "n": st.integers(-5, 5),
    "vec": st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=2, max_size=2),
    "tags": st.lists(st.sampled_from("abc"), max_size=3),
    "meta": st.fixed_dictionaries({"a": st.integers(0, 3), "b": st.sampled_from("xy")}),
    "m": st.lists(st.tuples(st.sampled_from("kl"), st.integers(0, 3)), max_size=2),
    "bin": st.binary(max_size=3),
    "d": st.sampled_from(["u", "v"]),
    "w": st.lists(st.sampled_from([2.0, 3.0]), min_size=2, max_size=2),
}
row = st.fixed_dictionaries({c: st.one_of(st.none(), v) for c, v in VALUES.items()})
event = st.tuples(st.integers(0, 5), st.booleans(), row)


def to_table(events) -> pa.Table:
    cols = {"id": pa.array([k for k, _, _ in events], pa.int64())}
    for c, (_, t) in COLUMNS.items():
        cols[c] = pa.array([None if tomb else r[c] for _, tomb, r in events], t)
    cols["_tombstone"] = pa.array([tomb for _, tomb, _ in events])
    cols["__gen"] = pa.array(range(len(events)), pa.int64())
    return pa.table(cols)


@settings(max_examples=150, deadline=None)
@given(st.lists(event, max_size=30))
def test_fold_carries_every_type_like_the_model(events):
    upserts, deleted = fold(to_table(events), ["id"], MergeOps(OPS), order=["__gen"], tombstone="_tombstone")
    expect = model_fold(events, OPS)
    got = {r["id"]: {c: r[c] for c in COLUMNS} for r in upserts.to_pylist()}
    assert got == {k: v for k, v in expect.items() if v is not None}
    assert sorted(deleted.column("id").to_pylist()) == sorted(k for k, v in expect.items() if v is None)
    if events:
        assert upserts.schema == to_table(events[:0]).select(["id", *COLUMNS]).schema


# ---------------------------------------------------------------- end to end, ShardWriter data


def random_row(rng: random.Random) -> dict:
    pick = {
        "n": lambda: rng.randint(-5, 5),
        "vec": lambda: [rng.choice([0.0, 0.5, 1.0]), rng.choice([0.0, 1.0])],
        "tags": lambda: rng.sample("abcd", rng.randint(0, 2)),
        "meta": lambda: {"a": rng.randint(0, 3), "b": rng.choice("xy")},
        "m": lambda: [(rng.choice("kl"), rng.randint(0, 3))],
        "bin": lambda: rng.randbytes(2),
        "d": lambda: rng.choice(["u", "v", "w"]),
        "w": lambda: [rng.choice([2.0, 3.0]), 1.0],
    }
    return {c: (None if rng.random() < 0.3 else pick[c]()) for c in COLUMNS}


def build(uri: str, *, shards: int = 2, generations: int = 3, seed: int = 11) -> list:
    """Base rows, the operators, then generations by pylance's ShardWriter (duplicate keys in
    a batch, deletes, a key deleted and put again); returns the events in LSM order."""
    from memwal.demo import keys_by_bucket

    rng = random.Random(seed)
    base = [{"id": k, **random_row(rng)} for k in range(30)]
    lance.write_dataset(pa.Table.from_pylist(base, schema=SCHEMA), uri)
    events = [(r["id"], False, {c: r[c] for c in COLUMNS}) for r in base]
    lance.dataset(uri).initialize_mem_wal(bucket_column="id", num_buckets=shards)
    lance.dataset(uri).update_config({f"memwal.merge-op.{c}": op for c, op in OPS.items()})
    ds = lance.dataset(uri)
    by_bucket = keys_by_bucket(ds, list(range(45)), shards)
    for b in range(shards):
        for _ in range(generations):
            writer = ds.mem_wal_writer(f"00000000-0000-4000-8000-{b:012d}", durable_write=False)
            try:
                rows = [{"id": rng.choice(by_bucket[b]), **random_row(rng)} for _ in range(10)]
                writer.put(pa.Table.from_pylist(rows, schema=SCHEMA))
                events += [(r["id"], False, {c: r[c] for c in COLUMNS}) for r in rows]
                gone = sorted(set(rng.sample(by_bucket[b], 2)))
                writer.delete(pa.table({"id": pa.array(gone, pa.int64())}))
                events += [(k, True, {}) for k in gone]
                again = {"id": gone[0], **random_row(rng)}
                writer.put(pa.Table.from_pylist([again], schema=SCHEMA))
                events.append((gone[0], False, {c: again[c] for c in COLUMNS}))
            finally:
                writer.close()
    return events


def model_rows(events) -> dict[int, dict]:
    return {k: {"id": k, **v} for k, v in sorted(model_fold(events, OPS).items()) if v is not None}


def by_id(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


@pytest.fixture(scope="module")
def folding_table(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("fold") / "t")
    return uri, build(uri)


def copy_of(folding_table, tmp_path) -> tuple:
    import shutil

    from memwal.table import open_table

    uri, events = folding_table
    shutil.copytree(uri, tmp_path / "t")
    return open_table(str(tmp_path / "t")), model_rows(events)


def test_reads_fold_every_type_before_and_after_merge(folding_table, tmp_path):
    import memwal
    from memwal.read import lookup, lsm_scan

    table, expect = copy_of(folding_table, tmp_path)
    asked = [44, 3, *list(expect)[:10], 10_000, 3]  # absent, deleted and live keys; one asked twice
    probe = list(dict.fromkeys(asked))
    for when in ("before", "partial", "after"):
        assert by_id(lsm_scan(table)) == list(expect.values()), when
        assert by_id(lsm_scan(table, columns=["id", "n"])) == [{"id": k, "n": r["n"]} for k, r in expect.items()]
        assert by_id(lsm_scan(table, columns=["vec", "id"], filter="n > 0")) == [
            {"id": k, "vec": r["vec"]} for k, r in expect.items() if r["n"] is not None and r["n"] > 0]
        assert lookup(table, asked).to_pylist() == [expect[k] for k in probe if k in expect], when
        assert lookup(table, probe, columns=["tags", "id"]).to_pylist() == [
            {"tags": expect[k]["tags"], "id": k} for k in probe if k in expect]
        if when == "before":
            assert memwal.open(table.uri).merge(max_generations=1).ok
        elif when == "partial":
            assert memwal.open(table.uri).merge().ok
    assert by_id(table.dataset().to_table()) == list(expect.values()), "the base table after the merge"


def test_spark_merge_folds_every_type(folding_table, tmp_path, spark_session):
    import memwal

    table, expect = copy_of(folding_table, tmp_path)
    res = memwal.open(table.uri).merge(engine="spark").value
    assert res.engine == "spark"
    assert by_id(table.dataset().to_table()) == list(expect.values())


def test_issue_repro_scan_verify_and_api_on_the_demo_table(tmp_path):
    """``memwal demo-data``, ``merge-ops --set value=sum``: scan, verify and the API work."""
    import memwal
    from memwal.demo import Workload, make_demo_table

    uri = str(tmp_path / "t")
    model = make_demo_table(uri, Workload(base_rows=200, shards=2, generations=2, rows_per_generation=30, seed=4))
    ops = run_cli("merge-ops", uri, "--set", "value=sum", "--force", "--json")
    assert ops.rc == 0, ops.stderr
    run = run_cli("scan", uri, "--columns", "id,value", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["columns"] == ["id", "value"] and doc["num_rows"] == len(model.rows)
    assert sorted(r["id"] for r in doc["rows"]) == sorted(model.rows)
    verify = run_cli("verify", uri, "--json")
    assert verify.rc == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr
    t = memwal.open(uri)
    rows = t.scan(columns=["id", "vec"])
    assert by_id(rows) == [{"id": k, "vec": model.rows[k]["vec"]} for k in sorted(model.rows)]
    assert_one_line_error(run_cli("scan", uri, "--filter", "value >"), 2, "--filter 'value >'")
    assert "/home/" not in run_cli("scan", uri, "--filter", "nope = 1").stderr
