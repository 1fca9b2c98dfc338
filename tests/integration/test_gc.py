"""Garbage collection: every gate blocks on its own, crashes converge, readers keep working."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from lance.mem_wal import LsmScanner

import memwal
from memwal.core import clock as clocks
from memwal.demo import shard_ids_for
from memwal.gc import LocalGcEngine
from memwal.inspect.status import table_status
from memwal.read import lsm_scan, shard_snapshots
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests, list_generation_dirs, list_wal_entries
from tests.conftest import SMALL, commit_shard_manifest, lsm_rows, table_rows
from tests.helpers import assert_one_line_error, run_cli
from tests.interleave import ScriptedClock


def expire_all(table) -> None:
    """Keep only the latest version (Lance's cleanup keeps tags)."""
    from datetime import timedelta

    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)


def ready_table(make_table, *, merged: int | None = None, catchup: bool = True, expire: bool = True):
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=merged).ok
    if catchup:
        assert t.catchup().ok
    if expire:
        expire_all(table)
    return table, model


def reasons(result) -> set[str]:
    """The blocking reasons a GC plan or result reports. Anything without ``to_dict`` is a
    mistake in the test and fails here: it must not pass as "nothing blocked"."""
    if not hasattr(result, "to_dict"):
        raise TypeError(f"reasons() needs a GC plan or result with to_dict(), got {type(result).__name__}")
    return {b["reason"] for b in result.to_dict()["blocked"]}


def gen_dirs(table) -> dict[str, set[int]]:
    return {s: set(list_generation_dirs(table.store, s).values()) for s in shard_ids_for(SMALL)}


def files(root) -> set[str]:
    return {str(p) for p in Path(root).rglob("*") if p.is_file()}


def test_everything_passes_then_merged_generations_and_their_wal_go(make_table):
    table, model = ready_table(make_table, merged=2)
    wal_before = {s: len(list_wal_entries(table.store, s)) for s in shard_ids_for(SMALL)}
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert {(d["shard_id"], d["generation"]) for d in result["deleted"]} == {
        (s, g) for s in shard_ids_for(SMALL) for g in (1, 2)}
    assert gen_dirs(table) == {s: {3, 4} for s in shard_ids_for(SMALL)}
    assert result["wal_entries_deleted"] > 0 and result["bytes_freed"] > 0
    for s in shard_ids_for(SMALL):
        assert len(list_wal_entries(table.store, s)) < wal_before[s]
    assert {b["reason"] for b in result["blocked"]} == {"not-merged"}
    assert {b["generation"] for b in result["blocked"]} == {3, 4}
    # they left the shard manifests first (clients read every listed generation)
    assert {(d["shard_id"], tuple(d["generations"])) for d in result["drained"]} == {
        (s, (1, 2)) for s in shard_ids_for(SMALL)}
    shards = table_status(table).shards
    assert all(s.collected_generations == [] and s.flushed_generations == [3, 4] and s.merged_generation == 2
               for s in shards)
    # every deletion names the gates that allowed it
    d = result["deleted"][0]
    assert d["gates"]["merged_generation"] == 2 and d["gates"]["index_catchup"] == {"id_idx": 2, "vec_idx": 2}
    assert lsm_rows(table) == model.sorted_rows()
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()


def test_not_merged_blocks(make_table):
    table, _ = make_table()
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == [] and {b["reason"] for b in result["blocked"]} == {"not-merged"}


def test_index_not_caught_up_blocks(make_table):
    table, _ = ready_table(make_table, catchup=False)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == []
    assert {b["reason"] for b in result["blocked"]} == {"index-not-caught-up:id_idx"}
    assert all("index-not-caught-up:vec_idx" in b["reasons"] for b in result["blocked"])


def test_retained_tagged_version_blocks_and_names_the_tag(make_table):
    table, model = make_table()
    before_merge = table.dataset().version
    table.dataset().tags.create("audit-2026", before_merge)
    assert memwal.open(table.uri).merge().ok
    assert memwal.open(table.uri).catchup().ok
    expire_all(table)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == []
    assert {b["reason"] for b in result["blocked"]} == {f"retained-version:{before_merge} (tag audit-2026)"}
    # time travel to the tagged version still reads its rows
    assert table.dataset(before_merge).count_rows() == SMALL.base_rows
    table.dataset().tags.delete("audit-2026")
    expire_all(table)
    assert len(memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()["deleted"]) == 12


def test_wal_entries_stay_with_a_drained_generation_whose_folder_is_kept(make_table):
    """A tag on the version before the merge keeps the merged generations' folders (time travel);
    GC drains them from the listing, and their WAL entries stay with the folders (issue 61: they
    went at the drain), then go with them once the tag is deleted."""
    table, _model = make_table()
    table.dataset().tags.create("audit", table.dataset().version)
    assert memwal.open(table.uri).merge().ok and memwal.open(table.uri).catchup().ok
    wal = {s: {e.key for e in list_wal_entries(table.store, s)} for s in shard_ids_for(SMALL)}
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert result["drained"] and result["deleted"] == [] and result["wal_entries_deleted"] == 0
    assert {s: {e.key for e in list_wal_entries(table.store, s)} for s in shard_ids_for(SMALL)} == wal
    table.dataset().tags.delete("audit")
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert len(result["deleted"]) == 12 and result["wal_entries_deleted"] > 0


def test_an_unreadable_tag_reference_is_exit_2_naming_the_table_and_nothing_goes(make_table):
    table, _ = ready_table(make_table)
    table.dataset().tags.create("audit-2026", table.dataset().version)
    Path(table.uri, "_refs", "tags", "audit-2026.json").write_text("{not json")
    before = files(table.uri)
    run = run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0")
    assert_one_line_error(run, 2, table.uri, "unreadable tag or branch reference")
    assert files(table.uri) == before


def test_old_versions_block_until_expired(make_table):
    table, _ = ready_table(make_table, expire=False)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == [] and all(b["reason"].startswith("retained-version:1") for b in result["blocked"])
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert result["expired_versions"]["old_versions"] > 0
    assert len(result["deleted"]) == 12


def test_branch_versions_are_retained(make_table):
    table, _ = make_table()
    table.dataset().create_branch("experiment", table.dataset().version)
    assert memwal.open(table.uri).merge().ok
    assert memwal.open(table.uri).catchup().ok
    expire_all(table)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == []
    assert all("(branch experiment" in b["reason"] for b in result["blocked"])


def test_grace_period_blocks_recent_merges(make_table):
    table, _ = ready_table(make_table)
    result = memwal.open(table.uri).gc(writer_idle_seconds=0).to_dict()  # default 600 s
    assert result["deleted"] == [] and {b["reason"] for b in result["blocked"]} == {"grace-period"}
    assert result["drained"] == []
    # what readers list is rolled up at once: one entry per shard instead of four
    assert sorted(len(r["replaces"]) for r in result["rolled_up"]) == [4, 4, 4]
    assert all(len(s.flushed) == 1 for s in all_shard_manifests(table.store).values())
    later = time.time() + 601
    with clocks.use(ScriptedClock(lambda: later)):
        # past the grace period after the merge the rollups leave the manifests; the folders
        # they replaced left the manifests more than the grace period ago and go; the rollups'
        # own folders wait as long again, for readers that listed them before the drain
        drained = memwal.open(table.uri).gc(writer_idle_seconds=0).to_dict()
        assert len(drained["deleted"]) == 12 and sum(len(d["generations"]) for d in drained["drained"]) == 3
        assert {b["reason"] for b in drained["blocked"]} == {"drain-grace-period"} and drained["time_will_free"]
    later = time.time() + 1202
    with clocks.use(ScriptedClock(lambda: later)):
        assert len(memwal.open(table.uri).gc(writer_idle_seconds=0).to_dict()["deleted"]) == 3
    assert all(s.flushed == [] for s in all_shard_manifests(table.store).values())


def test_reader_that_listed_generations_before_the_merge_keeps_working(make_table):
    table, model = make_table()
    ds_before = table.dataset()
    snaps_before = shard_snapshots(table)  # lists every generation: nothing merged yet
    assert memwal.open(table.uri).merge().ok
    assert memwal.open(table.uri).catchup().ok
    expire_all(table)
    assert memwal.open(table.uri).gc().ok  # default grace: nothing goes
    old_reader = LsmScanner.from_snapshots(ds_before, snaps_before).to_table()
    assert sorted(old_reader.to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()
    assert memwal.open(table.uri).gc(grace_seconds=0,
                                     writer_idle_seconds=0).ok  # past the grace period the old listing is stale...
    with pytest.raises(Exception, match="not found|Not found"):
        LsmScanner.from_snapshots(ds_before, snaps_before).to_table()
    assert lsm_rows(table) == model.sorted_rows()  # ...while a fresh reader is fine


def test_unsafe_manifest_path_is_refused_and_nothing_outside_is_touched(make_table, tmp_path):
    table, _ = ready_table(make_table)
    victim = shard_ids_for(SMALL)[0]
    outside = Path(table.uri, "_mem_wal", "precious_gen_1")
    outside.mkdir()
    (outside / "keep.txt").write_text("must survive")
    commit_shard_manifest(table, victim, lambda m: setattr(m.sstables[0], "path", "../precious_gen_1"))
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert {"shard_id": victim, "generation": 1, "reason": "unsafe-path"}.items() <= next(
        b for b in result["blocked"] if b["shard_id"] == victim and b["generation"] == 1).items()
    assert (outside / "keep.txt").read_text() == "must survive"
    # drains take a prefix of the listing: the victim's generation 1 stays listed, so do 2-4
    assert len(result["deleted"]) == 8
    assert {b["generation"] for b in result["blocked"] if b["shard_id"] == victim and b["reason"] == "drain-order"} \
        == {2, 3, 4}


def test_wal_past_replay_position_is_kept(make_table):
    table, _ = ready_table(make_table)
    victim = shard_ids_for(SMALL)[0]
    commit_shard_manifest(table, victim, lambda m: setattr(m, "replay_after_wal_entry_position", 0))
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    kept = [k for k in result["kept_wal_entries"] if k["reason"] == "wal-needed-for-replay"]
    assert kept and {k["shard_id"] for k in kept} == {victim}
    assert sorted(e.position for e in list_wal_entries(table.store, victim)) == sorted(k["position"] for k in kept)
    assert gen_dirs(table)[victim] == set()  # the generations themselves could go...
    assert {b["reason"] for b in result["blocked"]} == set()  # ...so nothing is reported blocked
    # the next run still keeps them, and still does not call a collected generation blocked
    again = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert again["blocked"] == [] and again["kept_wal_entries"] == result["kept_wal_entries"]


def test_dry_run_deletes_nothing_and_shows_exactly_what_would_go(make_table):
    table, _ = ready_table(make_table, merged=3)
    before = files(table.uri)
    dry = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True).to_dict()
    assert files(table.uri) == before
    real = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    key = lambda d: (d["shard_id"], d["generation"])  # noqa: E731
    assert sorted(map(key, dry["deleted"])) == sorted(map(key, real["deleted"]))
    assert dry["wal_entries_deleted"] == real["wal_entries_deleted"]


def test_crash_mid_gc_then_rerun_finishes(make_table, monkeypatch):
    table, model = ready_table(make_table)

    class Crash(Exception):
        pass

    real = LocalGcEngine.delete_prefixes

    def two_then_crash(self, table, targets, lease, done=None):
        """The real engine, stopped after two generations (as a killed process would be)."""
        real(self, table, targets[:2], lease, done)
        raise Crash()

    monkeypatch.setattr(LocalGcEngine, "delete_prefixes", two_then_crash)
    with pytest.raises(Crash):  # a crash between two generations' deletions, which no step marks
        memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0)
    monkeypatch.undo()
    assert lsm_rows(table) == model.sorted_rows()
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert len(result["deleted"]) == 10
    assert gen_dirs(table) == {s: set() for s in shard_ids_for(SMALL)}
    assert memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()["deleted"] == []
    assert lsm_rows(table) == model.sorted_rows()


def test_partially_deleted_generation_is_finished_on_rerun(make_table):
    table, _ = ready_table(make_table)
    shard = shard_ids_for(SMALL)[0]
    st = all_shard_manifests(table.store)[shard]
    gen = Path(table.uri, st.generation_key(st.generation(1)))
    shutil.rmtree(gen / "_versions")  # a crash right after the manifests went
    assert gen.exists()
    assert memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).ok
    assert not gen.exists()


def test_orphans_are_reported_and_removed_only_when_asked(make_table):
    table, _ = ready_table(make_table)
    shard = shard_ids_for(SMALL)[0]
    st = all_shard_manifests(table.store)[shard]
    src = Path(table.uri, st.generation_key(st.generation(4)))
    orphan = src.with_name("deadbeef_gen_4")  # a failed flush's retry left this behind
    shutil.copytree(src, orphan)
    staging = Path(table.uri, "_mem_wal", "_staging", "merge-crashed")
    staging.mkdir(parents=True)
    (staging / "part.lance").write_bytes(b"x" * 10)
    old = time.time() - 7200
    for p in [*orphan.rglob("*"), *staging.rglob("*")]:
        os.utime(p, (old, old))
    fresh = src.with_name("cafebabe_gen_5")  # a flush in progress: too young to touch
    shutil.copytree(src, fresh)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    kinds = {(o["kind"], o["path"]) for o in result["orphans"]}
    assert kinds == {("generation", "deadbeef_gen_4"), ("staging", "merge-crashed")}
    assert orphan.exists() and staging.exists()
    # The run drained generation 4 from the manifest: the failed attempt of it goes with it now
    # (a folder of a generation no manifest lists, at or below the merge progress), asked or not;
    # the staging is an orphan still, removed only when asked.
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert ("deadbeef_gen_4", 4) in {(d["path"], d["generation"]) for d in result["deleted"]}
    assert result["orphans_deleted"] == 0 and not orphan.exists() and staging.exists()
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, orphans=True).to_dict()
    assert result["orphans_deleted"] == 1
    assert not staging.exists() and fresh.exists()


def test_audit_record_is_written(make_table):
    table, _ = ready_table(make_table)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, audit=True).to_dict()
    doc = json.loads(table.store.get(result["audit_key"]))
    assert doc["bytes_freed"] == result["bytes_freed"] and len(doc["deleted"]) == 12


def test_full_cycle_on_s3(s3_server, tmp_path):
    from memwal.demo import create_base_table, write_generations

    uri, opts = s3_server.new_table("cycle")
    _, model = create_base_table(uri, SMALL, opts)
    write_generations(uri, SMALL, model, storage_options=opts)
    table = open_table(uri, opts)
    t = memwal.open(uri, opts)
    assert sorted(lsm_scan(table).to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()
    assert t.merge().ok
    assert table_rows(table) == model.sorted_rows()
    assert t.catchup().ok
    assert table_rows(table) == model.sorted_rows()
    result = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert len(result["deleted"]) == 12 and result["wal_entries_deleted"] > 0
    assert all(not list_generation_dirs(table.store, s) for s in shard_ids_for(SMALL))
    assert table_rows(table) == model.sorted_rows()
    assert sorted(lsm_scan(table).to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()


def test_plan_is_pure(make_table):
    table, _ = ready_table(make_table)
    before = files(table.uri)
    dry = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True).to_dict()
    assert len(dry["deleted"]) == 12
    assert files(table.uri) == before


def test_the_dry_run_lists_exactly_what_the_run_deletes_when_versions_expire(make_table):
    """The version expiry is a step of the plan: the dry run names the versions it expires and
    lists the generations, WAL entries, objects and bytes the run then deletes (it used to
    list none, all held by versions the run expired first, then delete 26)."""
    import memwal

    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    options = {"grace_seconds": 0, "writer_idle_seconds": 0, "expire_versions": 0}
    dry = t.gc(dry_run=True, **options).to_dict()
    run = t.gc(**options).to_dict()
    assert dry["deleted"] and len(dry["deleted"]) == SMALL.shards * SMALL.generations
    key = lambda d: (d["shard_id"], d["generation"], d["path"], d["objects"], d["bytes"])  # noqa: E731
    assert [key(d) for d in run["deleted"]] == [key(d) for d in dry["deleted"]]
    for field in ("wal_entries_deleted", "objects_deleted", "bytes_freed"):
        assert run[field] == dry[field] > 0, field
    assert run["expired_versions"]["planned"] == dry["expired_versions"]["planned"]
    assert run["expired_versions"]["old_versions"] == len(dry["expired_versions"]["planned"]) > 0
    assert lsm_rows(table) == model.sorted_rows()
