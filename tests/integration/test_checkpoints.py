"""Reader checkpoints (seed 002): a reader reads the view of its moment through merge,
compaction and the most aggressive GC; GC frees what it held once it is released; the
handshake with a concurrent GC run, under step hooks."""

from __future__ import annotations

import copy
import json
import os
from datetime import timedelta

import pytest

import memwal
from memwal.checkpoint import TAG_PREFIX, list_checkpoints
from memwal.demo import write_generations
from memwal.table.shards import list_generation_dirs
from tests.conftest import SMALL, lsm_rows
from tests.helpers import run_cli


def cli_json(*argv: str) -> dict:
    run = run_cli(*argv, "--json")
    assert run.rc == 0, run.stderr
    return json.loads(run.stdout)


def scan_rows(uri: str, *extra: str) -> list[dict]:
    doc = cli_json("scan", uri, *extra)
    return sorted(doc["rows"], key=lambda r: r["id"])


def pinned_dirs(table, ckpt: dict) -> dict[str, set[int]]:
    return {s: set(list_generation_dirs(table.store, s).values()) & set(gens) for s, gens in ckpt["shards"].items()}


def test_a_reader_reads_its_moment_through_merge_compact_and_gc(make_table):
    table, model = make_table()
    uri = table.uri
    ckpt = cli_json("checkpoint", "create", uri, "--lifetime", "3600", "--name", "nightly-export")
    assert set(ckpt) >= {"id", "name", "version", "created_at", "expires_at", "shards"}
    assert ckpt["name"] == "nightly-export" and ckpt["version"] == table.dataset().version
    assert ckpt["shards"] and all(gens == [1, 2, 3, 4] for gens in ckpt["shards"].values())
    assert ckpt["expires_at"] == pytest.approx(ckpt["created_at"] + 3600)
    moment = model.sorted_rows()
    assert scan_rows(uri, "--checkpoint", ckpt["id"]) == moment

    # newer writes, then the whole cycle with no reader grace and no version retention
    later = copy.deepcopy(model)
    write_generations(uri, SMALL, later, generations=2, seed_offset=99)
    for job in (["merge"], ["catchup"], ["compact"], ["snapshot"],
                ["gc", "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0"]):
        cli_json(*job, uri)
    gc = cli_json("gc", uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
    reasons = {(b["shard_id"], b["generation"]): b["reason"] for b in gc["blocked"]}
    for shard, gens in ckpt["shards"].items():
        for g in gens:
            assert reasons[(shard, g)] == f"checkpoint:{ckpt['id']}"
    assert pinned_dirs(table, ckpt) == {s: set(g) for s, g in ckpt["shards"].items()}  # all still there
    assert gc["retention"] and "pinned by checkpoint" in gc["retention"]["hint"]
    assert table.dataset().tags.list()[TAG_PREFIX + ckpt["id"]]["version"] == ckpt["version"]

    assert scan_rows(uri, "--checkpoint", ckpt["id"]) == moment  # the moment, as it was
    assert scan_rows(uri) == later.sorted_rows()  # and now, as it is
    status = cli_json("status", uri)
    [held] = status["checkpoints"]
    assert held["id"] == ckpt["id"] and held["generations_pinned"] == 12
    assert held["generations_held"] == 18 and held["bytes_held"] > 0  # 12 pinned + 6 merged since, on storage

    deleted = cli_json("checkpoint", "delete", uri, ckpt["id"])
    assert deleted["deleted"] is True and TAG_PREFIX + ckpt["id"] not in table.dataset().tags.list()
    freed = cli_json("gc", uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
    assert {(d["shard_id"], d["generation"]) for d in freed["deleted"]} >= set(reasons)
    assert pinned_dirs(table, ckpt) == {s: set() for s in ckpt["shards"]}
    assert not [b for b in freed["blocked"] if b["reason"].startswith("checkpoint:")]
    assert scan_rows(uri) == later.sorted_rows()
    assert cli_json("checkpoint", "list", uri)["checkpoints"] == []


def test_gc_removes_expired_checkpoints_and_its_dry_run_says_so(make_table, manual_clock):
    table, _ = make_table()
    ckpt = cli_json("checkpoint", "create", table.uri, "--lifetime", "60")
    manual_clock.advance(61)
    listed = cli_json("checkpoint", "list", table.uri)["checkpoints"]
    assert [(c["id"], c["live"]) for c in listed] == [(ckpt["id"], False)]
    dry = cli_json("gc", table.uri, "--dry-run")
    assert dry["checkpoints_removed"] == [ckpt["id"]] and dry["checkpoints"] == []
    assert list_checkpoints(table)  # a dry run removes nothing
    run = cli_json("gc", table.uri)
    assert run["checkpoints_removed"] == [ckpt["id"]]
    assert list_checkpoints(table) == [] and not table.dataset().tags.list()
    refused = run_cli("scan", table.uri, "--checkpoint", ckpt["id"])
    assert refused.rc == 2 and "no checkpoint" in refused.stderr


def test_refresh_extends_a_live_checkpoint_only(make_table, manual_clock):
    table, _ = make_table()
    ckpt = cli_json("checkpoint", "create", table.uri, "--lifetime", "60")
    manual_clock.advance(50)
    refreshed = cli_json("checkpoint", "refresh", table.uri, ckpt["id"], "--lifetime", "120")
    assert refreshed["expires_at"] == manual_clock.now + 120
    manual_clock.advance(121)
    late = run_cli("checkpoint", "refresh", table.uri, ckpt["id"], "--lifetime", "120")
    assert late.rc == 2 and "expired" in late.stderr


def test_managed_checkpoint_refreshes_while_held_and_is_deleted_on_exit(make_table, manual_clock):
    table, model = make_table()
    t = memwal.open(table.uri)
    with t.checkpoint(lifetime=30, name="long-query") as cp:
        moment = model.sorted_rows()
        for _ in range(9):  # three lifetimes in refresh-sized steps
            manual_clock.advance(10)
            [c] = list_checkpoints(table)
            assert c.expires_at == manual_clock.now + 30
        assert t.merge().ok
        assert sorted(cp.scan().to_pylist(), key=lambda r: r["id"]) == moment
        assert [c.id for c in t.checkpoints()] == [cp.id]
    assert t.checkpoints() == [] and not table.dataset().tags.list()


def test_checkpoint_record_lives_in_the_tables_store(make_table, s3_server):
    uri, opts = s3_server.new_table("tables/ckpt")
    table, model = make_table(uri=uri, storage_options=opts)
    t = memwal.open(uri, storage_options=opts)
    with t.checkpoint(lifetime=600, refresh=False) as cp:
        keys = [o.key for o in table.store.list("_mem_wal/_jobs/checkpoints/")]
        assert keys == [f"_mem_wal/_jobs/checkpoints/{cp.id}.json"]
        assert sorted(cp.scan().to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()
    assert list(table.store.list("_mem_wal/_jobs/checkpoints/")) == []
    assert os.environ.get("MEMWAL_STEP_BARRIER") is None
    assert lsm_rows(table) == model.sorted_rows()


def test_airflow_setup_and_teardown_hold_a_checkpoint_around_a_reader(make_table):
    from memwal.airflow.checkpoint_operators import MemWalCreateCheckpointOperator, MemWalDeleteCheckpointOperator

    from tests.integration.test_airflow import context

    table, model = make_table()
    pin = MemWalCreateCheckpointOperator(task_id="pin", table=table.uri, lifetime=600)
    doc = pin.execute(context())
    assert (doc["version"], doc["name"]) == (table.dataset().version, "adhoc_airflow.pin")
    memwal.open(table.uri).merge()
    memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0)
    rows = memwal.open(table.uri).scan(checkpoint=doc["id"]).to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == model.sorted_rows()
    release = MemWalDeleteCheckpointOperator(task_id="release", table=table.uri, checkpoint_id=doc["id"])
    assert release.execute(context())["deleted"] is True
    assert release.execute(context()) == {"id": doc["id"], "deleted": False}  # a teardown may run twice
    assert list_checkpoints(table) == []
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="lifetime"):
        MemWalCreateCheckpointOperator(task_id="bad", table=table.uri, lifetime="nan").execute(context())


def test_a_checkpoint_lifetime_may_be_a_timedelta(make_table):
    table, _ = make_table()
    t = memwal.open(table.uri)
    with t.checkpoint(lifetime=timedelta(minutes=10), refresh=False) as cp:
        [listed] = t.checkpoints()
        assert listed.id == cp.id and listed.expires_at - listed.created_at == pytest.approx(600.0)


def test_lookup_and_nearest_read_the_checkpoints_moment(make_table):
    """The three reads (scan, point lookup, vector search) see the same pinned view."""
    table, model = make_table()
    t = memwal.open(table.uri)
    keys = sorted(model.rows)[:5]
    with t.checkpoint(lifetime=600, refresh=False) as cp:
        before = {r["id"]: r for r in cp.lookup(keys).to_pylist()}
        later = copy.deepcopy(model)
        write_generations(table.uri, SMALL, later, generations=2, seed_offset=5)
        assert t.merge().ok and t.catchup().ok
        changed = [k for k in keys if later.rows.get(k) != model.rows.get(k)]
        assert changed, "the newer writes must touch a looked-up key for the test to mean anything"
        assert {r["id"]: r for r in cp.lookup(keys).to_pylist()} == before == {k: model.rows[k] for k in keys}
        assert {r["id"]: r for r in t.lookup(keys, checkpoint=cp.id).to_pylist()} == before
        assert {r["id"]: r for r in t.lookup(keys).to_pylist()} == {k: later.rows[k] for k in keys if k in later.rows}
        row = model.rows[keys[0]]
        hit = cp.nearest("vec", row["vec"], k=1).to_pylist()[0]
        assert hit["id"] == keys[0] and hit["vec"] == row["vec"]
