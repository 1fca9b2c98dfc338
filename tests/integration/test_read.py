"""The reader helper and ``memwal scan``: index or manifests, shard pruning, stale snapshots."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow as pa

import memwal
from memwal.demo import bucket_of, shard_ids_for, write_generations
from memwal.read import lsm_scan, plan_read, shard_snapshots
from memwal.read.plan import HINT_NEWER
from memwal.snapshot import run_snapshot
from memwal.table.naming import version_hint_key
from memwal.table.shards import all_shard_manifests
from tests.conftest import SMALL, commit_shard_manifest, table_rows


def rows(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def scan(table, source: str, **kw) -> list[dict]:
    return rows(lsm_scan(table, source=source, **kw))


def delete_merged_generations(table) -> int:
    """The real GC once its gates are open: indexes caught up, old versions expired, no grace."""
    t = memwal.open(table.uri)
    assert t.catchup().ok
    return len(t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()["deleted"])


def test_scans_equal_the_model_before_and_after_merge_and_gc(make_table):
    table, model = make_table()
    expected = model.sorted_rows()
    plan = plan_read(table)  # nothing published yet: every shard from its manifest
    assert plan.fallbacks == [{"shard_id": None, "reason": "no shard snapshot published"}]
    assert len(shard_snapshots(table)) == 3
    snap = memwal.open(table.uri).snapshot().value
    plan = plan_read(table)
    assert plan.snapshot_ts_millis == snap.snapshot_ts_millis and plan.fallbacks == []
    assert {s["source"] for s in plan.shards} == {"index"} and all(
        s["generations"] == [1, 2, 3, 4] for s in plan.shards
    )
    assert scan(table, "index") == scan(table, "manifests") == expected
    # the snapshot now lists merged generations: the helper skips them
    assert memwal.open(table.uri).merge(max_generations=2).ok
    plan = plan_read(table)
    assert plan.fallbacks == [] and all(s["generations"] == [3, 4] for s in plan.shards)
    assert scan(table, "index") == scan(table, "manifests") == expected
    assert delete_merged_generations(table) == 6  # GC of generations 1 and 2
    assert scan(table, "index") == scan(table, "manifests") == expected
    assert memwal.open(table.uri).merge().ok
    assert delete_merged_generations(table) == 6
    # GC drained the shard manifests after the snapshot was published: a reader sees their
    # newer versions and reads each shard from its manifest, until the next refresh
    plan = plan_read(table)  # GC's drains wrote each shard's hint after the snapshot: it is not decoded
    assert {f["reason"] for f in plan.fallbacks} == {HINT_NEWER} and plan.snapshot_ts_millis == 0
    assert scan(table, "index") == expected
    assert memwal.open(table.uri).snapshot().ok
    plan = plan_read(table)
    assert plan.fallbacks == [] and all(s["generations"] == [] for s in plan.shards)
    assert scan(table, "index") == scan(table, "manifests") == expected == table_rows(table)
    assert rows(lsm_scan(table, source="index", columns=["id", "name"])) == model.sorted_rows(["id", "name"])


def test_pruning_skips_shards_on_bucket_routed_shards(make_table):
    table, model = make_table()
    assert memwal.open(table.uri).snapshot().ok
    keys = sorted(model.rows)
    buckets = dict(zip(keys, bucket_of(table.dataset(), keys), strict=True))
    shard_of_bucket = shard_ids_for(SMALL)  # demo_data: one shard per bucket, in bucket order
    one = next(k for k in keys if k > 300)  # a key written through the MemWAL
    other = next(k for k in keys if k > 300 and buckets[k] != buckets[one])
    for source in ("index", "manifests"):
        plan = plan_read(table, source=source, filter=f"id = {one}")
        assert len(plan.snapshots) == 1 and len(plan.pruned) == 2
        assert plan.snapshots[0].shard_id == shard_of_bucket[buckets[one]]
        got = scan(table, source, filter=f"id = {one}")
        assert got == [model.rows[one]]
        plan = plan_read(table, source=source, filter=f"id IN ({one}, {other}) AND value >= 0")
        assert len(plan.snapshots) == 2 and len(plan.pruned) == 1
        assert scan(table, source, filter=f"id IN ({one}, {other}) AND value >= 0") == [
            model.rows[k] for k in sorted({one, other}) if model.rows[k]["value"] >= 0
        ]
    # An OR of keys reads only their shards.
    assert len(plan_read(table, filter=f"id = {one} OR id = {other}").pruned) == 1
    assert scan(table, "index", filter=f"id = {one} OR id = {other}") == [model.rows[k] for k in sorted({one, other})]
    # Filters that do not pin the shard field prune nothing, and stay correct.
    for f in ("value > 500", f"name = 'x' AND id > {one}"):
        assert plan_read(table, filter=f).pruned == []
    assert scan(table, "index", filter="value > 500") == [r for r in model.sorted_rows() if r["value"] > 500]
    # A key that exists nowhere: only the shard of its bucket is read.
    gone = max(keys) + 1_000_000
    assert len(plan_read(table, filter=f"id = {gone}").snapshots) == 1
    assert scan(table, "index", filter=f"id = {gone}") == []


def test_pruning_infers_from_every_row_so_a_misrouted_row_is_still_found(make_table):
    """Shards carry no field entries (pylance's writer records none): values are inferred from data."""
    table, model = make_table()
    ds = table.dataset()
    fresh = list(range(900_000, 900_050))
    misrouted = next(k for k, b in zip(fresh, bucket_of(ds, fresh), strict=True) if b != 0)
    shard0 = shard_ids_for(SMALL)[0]  # bucket 0
    batch = table.dataset().to_table(limit=1).to_pylist()[0] | {"id": misrouted, "name": "misrouted"}
    with ds.mem_wal_writer(shard0, durable_write=False) as w:  # the wrong shard for this key
        w.put(pa.Table.from_pylist([batch], schema=ds.schema))
    model.put(pa.Table.from_pylist([batch], schema=ds.schema))
    plan = plan_read(table, source="manifests", filter=f"id = {misrouted}")
    assert shard0 in {s.shard_id for s in plan.snapshots}  # not pruned: one of its rows is in the bucket
    assert scan(table, "manifests", filter=f"id = {misrouted}") == [model.rows[misrouted]]


def test_stale_snapshot_still_gives_correct_rows(make_table):
    wl = SMALL
    table, model = make_table()
    assert memwal.open(table.uri).snapshot().ok
    write_generations(table.uri, wl, model, generations=1, seed_offset=99)  # new generation 5 everywhere
    plan = plan_read(table)
    # every shard's hint was written after the snapshot: it is not even decoded (a disk: a stat a shard)
    assert plan.fallbacks == [{"shard_id": sid, "reason": HINT_NEWER} for sid in sorted(shard_ids_for(wl))]
    assert plan.snapshot_ts_millis == 0
    assert all(s["generations"] == [1, 2, 3, 4, 5] and s["source"] == "manifests" for s in plan.shards)
    assert scan(table, "index") == model.sorted_rows()
    # one shard whose hint says nothing (it is best-effort): the snapshot is read, and each shard it
    # lists is found stale by the next manifest version on storage
    table.store.delete_many([version_hint_key(shard_ids_for(wl)[0])])
    plan = plan_read(table)
    assert {f["shard_id"] for f in plan.fallbacks} == set(shard_ids_for(wl)) and plan.snapshot_ts_millis > 0
    assert all("has a version newer than the snapshot's" in f["reason"] for f in plan.fallbacks)
    assert all(s["generations"] == [1, 2, 3, 4, 5] and s["source"] == "manifests" for s in plan.shards)
    assert scan(table, "index") == model.sorted_rows()
    # Without the freshness check the snapshot's point in time is what a reader sees.
    stale = rows(lsm_scan(table, snapshots=shard_snapshots(table, check_fresh=False)))
    assert stale != model.sorted_rows()
    # A shard created after the snapshot is found too.
    new_shard = "0f0f0f0f-0000-4000-8000-000000000001"
    ds = table.dataset()
    key = 7_000_001
    spec_bucket = bucket_of(ds, [key])[0]
    assert spec_bucket in range(3)
    row = ds.to_table(limit=1).to_pylist()[0] | {"id": key, "name": "new-shard"}
    with ds.mem_wal_writer(new_shard, durable_write=False) as w:
        w.put(pa.Table.from_pylist([row], schema=ds.schema))
    model.put(pa.Table.from_pylist([row], schema=ds.schema))
    plan = plan_read(table)  # the hint deleted above still leaves the snapshot read
    assert {"shard_id": new_shard, "reason": "shard not in the snapshot"} in plan.fallbacks
    assert scan(table, "index") == model.sorted_rows()


def test_snapshot_naming_a_missing_generation_falls_back_to_the_manifest(make_table):
    table, model = make_table()
    assert memwal.open(table.uri).snapshot().ok
    victim = shard_ids_for(SMALL)[1]
    st = all_shard_manifests(table.store)[victim]
    g3 = st.generation(3)
    # A rewrite of generation 3 under a new directory (like a writer's flush retry).
    src = Path(table.uri, st.generation_key(g3))
    dst_name = "abcdef01_gen_3"
    src.rename(src.parent / dst_name)

    def edit(m):
        for s in m.sstables:
            if s.generation == 3:
                s.path = dst_name

    commit_shard_manifest(table, victim, edit)
    plan = plan_read(table)
    assert [f["shard_id"] for f in plan.fallbacks] == [victim]
    assert "generation 3" in plan.fallbacks[0]["reason"] and "missing" in plan.fallbacks[0]["reason"]
    assert scan(table, "index") == model.sorted_rows()


def test_file_snapshot_serves_readers_after_merges(make_table):
    table, model = make_table()
    res = run_snapshot(table, inline_threshold=1)  # internal entry: the inline threshold is no user option
    assert res.storage == "file"
    # a new entry UUID (H3): the reader must still find the file
    assert memwal.open(table.uri).merge(max_generations=1).ok
    plan = plan_read(table)
    assert plan.fallbacks == [] and plan.snapshot_ts_millis == res.snapshot_ts_millis
    assert scan(table, "index") == model.sorted_rows()
    Path(table.uri, res.path).unlink()  # e.g. Lance's cleanup removed it: fall back, still correct
    plan = plan_read(table)
    assert plan.fallbacks[0]["shard_id"] is None and "unreadable" in plan.fallbacks[0]["reason"]
    assert scan(table, "index") == model.sorted_rows()


def run_cli(*argv: str) -> tuple[int, str]:
    from memwal.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(argv))
    return rc, buf.getvalue()


def test_scan_cli_json(make_table):
    table, model = make_table()
    assert run_cli("snapshot", table.uri, "--json")[0] == 0
    keys = sorted(model.rows)
    ds = table.dataset()
    buckets = dict(zip(keys, bucket_of(ds, keys), strict=True))
    a = keys[-1]
    b = next(k for k in reversed(keys) if buckets[k] != buckets[a])
    rc, out = run_cli("scan", table.uri, "--json", "--filter", f"id IN ({a}, {b})", "--columns", "id,name")
    doc = json.loads(out)
    assert rc == 0 and doc["source"] == "index" and doc["columns"] == ["id", "name"]
    assert doc["num_rows"] == 2 and doc["shards_scanned"] == 2 and len(doc["pruned"]) == 1
    got = sorted(doc["rows"], key=lambda r: r["id"])
    assert got == [{"id": k, "name": model.rows[k]["name"]} for k in sorted((a, b))]
    rc, out = run_cli("scan", table.uri, "--json", "--limit", "5", "--source", "manifests")
    doc = json.loads(out)
    assert rc == 0 and doc["num_rows"] == 5 and doc["source"] == "manifests"
    all_rows = {r["id"]: r for r in model.sorted_rows()}
    assert all(r == all_rows[r["id"]] for r in doc["rows"])
    rc, out = run_cli("scan", table.uri)
    assert rc == 0 and f"{len(model.rows)} rows" in out
    assert run_cli("scan", table.uri, "--columns", "nope")[0] == 2
    assert run_cli("scan", table.uri, "--filter", "nope = 1")[0] == 2
