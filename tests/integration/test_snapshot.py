"""The shard snapshot refresh: spec schema, inline and file storage, preserved details, and hazard H1."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import memwal
from memwal.core import steps
from memwal.demo import Workload, shard_ids_for, write_generations
from memwal.lease import Lease
from memwal.merge import run_merge
from memwal.pb import mem_wal_index_pb2
from memwal.read import plan_read
from memwal.snapshot import (
    JOURNAL_KEY,
    ShardRow,
    analyse_round,
    decode_lance_file,
    desired_after,
    read_snapshot,
    run_snapshot,
    snapshot_schema,
)
from memwal.table.naming import manifest_key
from memwal.table.shards import ShardManifestError, all_shard_manifests
from tests.conftest import SMALL, commit_shard_manifest, highest_progress_ever, lsm_rows, table_rows
from tests.helpers import assert_one_line_error, assert_only_run_records, run_cli, tree_digest

SNAPSHOT_FIELDS = ("snapshot_ts_millis", "num_shards", "inline_snapshots")


def expected_rows(table) -> list[ShardRow]:
    return sorted(
        (
            ShardRow(
                shard_id=s.shard_id,
                version=s.version,
                shard_spec_id=s.manifest.shard_spec_id,
                writer_epoch=s.writer_epoch,
                replay_after_wal_entry_position=s.replay_after_wal_entry_position,
                wal_entry_position_last_seen=s.manifest.wal_entry_position_last_seen,
                current_generation=s.current_generation,
                flushed_generations=[(g.generation, g.path) for g in s.flushed],
            )
            for s in all_shard_manifests(table.store).values()
        ),
        key=lambda r: r.shard_id,
    )


def without_snapshot(details: mem_wal_index_pb2.MemWalIndexDetails) -> bytes:
    d = mem_wal_index_pb2.MemWalIndexDetails()
    d.CopyFrom(details)
    for f in SNAPSHOT_FIELDS:
        d.ClearField(f)
    return d.SerializeToString(deterministic=True)


def progress(table, version=None) -> tuple[dict, dict]:
    m = table.manifest(version)
    return m.compacted, m.index_catchup


def test_inline_round_trip_has_the_spec_schema(make_table):
    table, _ = make_table()
    assert read_snapshot(table) is None  # initialize_mem_wal sets num_shards but publishes nothing
    t = memwal.open(table.uri)
    plan = t.snapshot(dry_run=True).value
    assert plan.storage == "inline" and plan.num_shards == 3 and plan.read_version == table.manifest().version
    res = t.snapshot().value
    assert res.storage == "inline" and res.repairs == 0 and res.attempts == 1
    assert res.version == table.manifest().version == plan.read_version + 1
    details = table.manifest().mem_wal
    assert details.HasField("inline_snapshots") and details.num_shards == 3
    assert details.snapshot_ts_millis == res.snapshot_ts_millis >= plan.planned_at_ms
    # The inline bytes are a Lance file with the spec's schema, one row per shard.
    tbl = decode_lance_file(details.inline_snapshots)
    expected_schema = pa.schema(
        [
            pa.field("shard_id", pa.binary(16), nullable=False),
            pa.field("version", pa.uint64(), nullable=False),
            pa.field("shard_spec_id", pa.uint32(), nullable=False),
            pa.field("writer_epoch", pa.uint64(), nullable=False),
            pa.field("replay_after_wal_entry_position", pa.uint64(), nullable=False),
            pa.field("wal_entry_position_last_seen", pa.uint64(), nullable=False),
            pa.field("current_generation", pa.uint64(), nullable=False),
            pa.field(
                "flushed_generations",
                pa.list_(pa.struct([("generation", pa.uint64()), ("path", pa.string())])),
                nullable=False,
            ),
            pa.field("region_field_bucket", pa.int32()),
        ]
    )
    assert tbl.schema.remove_metadata().equals(expected_schema)
    assert tbl.num_rows == 3 and tbl.column("region_field_bucket").null_count == 3  # ShardWriter records none
    snap = read_snapshot(table)
    assert snap.storage == "inline" and snap.rows == expected_rows(table)
    assert {r.shard_id for r in snap.rows} == set(shard_ids_for(SMALL))
    assert all(r.flushed_generations and r.current_generation == 5 for r in snap.rows)


def test_file_storage_above_the_threshold_survives_the_uuid_change(make_table):
    wl = Workload(base_rows=100, shards=2, generations=2, rows_per_generation=20, seed=3)
    table, model = make_table(workload=wl)
    res = run_snapshot(table, inline_threshold=1)  # internal entry: the inline threshold is no user option
    assert res.storage == "file" and res.num_shards == 2
    path = Path(table.uri, res.path)
    assert path.is_file() and res.path == f"_indices/{res.index_uuid}/index.lance"
    details = table.manifest().mem_wal
    assert not details.HasField("inline_snapshots") and details.num_shards == 2
    entry = next(i for i in table.manifest().indices if i.name == "__lance_mem_wal")
    assert entry.uuid == res.index_uuid  # the spec's path: _indices/<uuid of the entry>/index.lance
    assert LanceFileReader(str(path)).read_all().to_table().num_rows == 2
    assert read_snapshot(table).rows == expected_rows(table)
    # Hazard H3: a merge gives the entry a new UUID; the reader still finds the file.
    assert memwal.open(table.uri).merge(max_generations=1).ok
    entry = next(i for i in table.manifest().indices if i.name == "__lance_mem_wal")
    assert entry.uuid != res.index_uuid
    assert table.manifest().mem_wal.snapshot_ts_millis == res.snapshot_ts_millis  # merges keep the snapshot
    snap = read_snapshot(table)
    assert snap.storage == "file" and snap.path == res.path and snap.rows == expected_rows(table)
    # A smaller table next time goes inline again, and the old inline bytes never linger.
    again = memwal.open(table.uri).snapshot().value
    assert again.storage == "inline" and table.manifest().mem_wal.HasField("inline_snapshots")
    assert lsm_rows(table) == model.sorted_rows()


def test_every_other_details_field_is_kept(make_table):
    table, _ = make_table()
    assert memwal.open(table.uri).merge(max_generations=2).ok
    table.dataset().optimize.optimize_indices()
    before = table.manifest()
    assert before.compacted and before.index_catchup  # progress of both kinds to preserve
    res = memwal.open(table.uri).snapshot().value
    after = table.manifest()
    assert res.repairs == 0 and after.version == before.version + 1
    assert without_snapshot(after.mem_wal) == without_snapshot(before.mem_wal)
    assert after.mem_wal.maintained_indexes == before.mem_wal.maintained_indexes
    assert after.mem_wal.HasField("maintain_all_indexes") == before.mem_wal.HasField("maintain_all_indexes")
    assert (after.compacted, after.index_catchup) == (before.compacted, before.index_catchup)
    # A second refresh replaces the first: same non-snapshot fields, a newer timestamp.
    # internal entry: force (no user option) commits a refresh although no shard changed
    res2 = run_snapshot(table, force=True)
    assert res2.snapshot_ts_millis > res.snapshot_ts_millis
    assert without_snapshot(table.manifest().mem_wal) == without_snapshot(before.mem_wal)
    # Lance reads the committed details back as we wrote them.
    lance_view = table.dataset().mem_wal_index_details()
    assert lance_view["maintained_indexes"] == ["id_idx", "vec_idx"]
    assert lance_view["sharding_specs"][0]["fields"][0]["transform"] == "bucket"


def test_dry_run_writes_nothing(make_table):
    from memwal.actions import run_action

    table, _ = make_table()
    files = {str(p) for p in Path(table.uri).rglob("*")}
    doc = run_action("snapshot", table, dry_run=True)
    assert doc["dry_run"] is True and doc["num_shards"] == 3 and doc["storage"] == "inline"
    assert [s["flushed_generations"] for s in doc["shards"]] == [[1, 2, 3, 4]] * 3
    assert {str(p) for p in Path(table.uri).rglob("*")} == files


def test_crash_between_erasing_commit_and_repair_is_repaired_by_the_next_refresh(make_table):
    table, model = make_table()

    class Crash(Exception):
        pass

    def step(name: str) -> None:
        if name == "snapshot.before-commit":
            # internal entry: a merger outside memwal's merge lease, which the refresh holds (H1)
            run_merge(table, max_generations=1)
        if name == "snapshot.after-commit":
            raise Crash

    with steps.hooked(step), pytest.raises(Crash):
        memwal.open(table.uri).snapshot()
    assert table.manifest().compacted == {}  # erased, and the job is gone
    assert table.store.exists(JOURNAL_KEY)
    res = memwal.open(table.uri).snapshot().value
    assert res.recovered and res.repairs == 1
    assert set(table.manifest().compacted.values()) == {1}
    assert not table.store.exists(JOURNAL_KEY)
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()


def test_repair_rules_respect_decreases_made_by_others():
    a, b = ("compacted", "s1"), ("catchup", "idx", "s1")
    cfg = ("config", "maintained_indexes")
    # Our commit (read at L) lost a merge's 3 and a catch-up's 2: restore both.
    read, wrote, before = {a: 1, b: 1, cfg: b"x"}, {a: 1, b: 1, cfg: b"x"}, {a: 3, b: 2, cfg: b"x"}
    fixes = analyse_round(read, wrote, before)
    assert fixes == {a: (3, 1), b: (2, 1)}
    # Since then a merge built on our erased 1 recorded 2 (raise: keep the max), and the catch-up
    # was withdrawn below what we wrote (a decision made after us: it stands).
    assert desired_after(fixes, {a: 2, b: None, cfg: b"x"}) == {a: 3, b: None, cfg: b"x"}
    # A restore interleaved (lowered progress below what we read): our stale value must not resurrect.
    assert analyse_round({a: 5}, {a: 5}, {a: 2}) == {a: (2, 5)}
    # A repair round that raised a value keeps it when an interleaved commit raised it too.
    assert analyse_round({a: 1}, {a: 3}, {a: 2}) == {}
    assert analyse_round({a: 1}, {a: 3}, {a: 4}) == {a: (4, 3)}


def test_h1_a_merge_committing_during_the_repair_is_kept(make_table):
    """Another writer merges between the refresh's read and its commit (H1: the commit erases
    that progress), and again between the erasing commit and the repair (it sees the erased
    progress and merges generation 1 again: the same rows). The repair ends with the highest
    value ever committed for every shard and index, never a lower one."""
    table, model = make_table()
    merged: list[dict[str, int]] = []

    def step(name: str) -> None:
        if name in ("snapshot.before-commit", "snapshot.before-repair") and len(merged) < 2:
            # internal entry: a merger that does not take memwal's merge lease (the refresh holds it)
            run_merge(table, max_generations=1)
            table.dataset().optimize.optimize_indices()
            merged.append(progress(table)[0])

    with steps.hooked(step):
        res = memwal.open(table.uri).snapshot().value
    assert len(merged) == 2 and res.repairs >= 1 and res.interleaved_commits >= 2
    top_c, top_i = highest_progress_ever(table)
    compacted, catchup = progress(table)
    assert compacted == top_c and set(top_c.values()) == {1}
    assert {(i, s): g for i, per in catchup.items() for s, g in per.items()} == top_i
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows() and lsm_rows(table) == model.sorted_rows()


def test_snapshot_cli_json_and_lease(make_table):
    from memwal.cli import main

    table, _ = make_table()
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["snapshot", table.uri, "--json"])
    doc = json.loads(buf.getvalue())
    assert rc == 0 and doc["num_shards"] == 3 and doc["storage"] == "inline" and doc["repairs"] == 0
    assert doc["version"] == table.manifest().version and doc["snapshot_ts_millis"] > 0
    # Nothing changed since: the refresh commits nothing and says why; it changes nothing but
    # its leases and adds its record to the run history.
    before = tree_digest(table.uri)
    idle = run_cli("snapshot", table.uri, "--json")
    again = json.loads(idle.stdout)
    assert idle.rc == 0 and again["version"] is None and "no shard changed" in again["reason"]
    assert '"version": null' in idle.stdout and table.manifest().version == doc["version"]
    after = tree_digest(table.uri)
    added = sorted(set(after) - set(before))
    assert len(added) == 1 and added[0].startswith("_mem_wal/_jobs/history/") and "-snapshot-" in added[0]
    assert {k: v for k, v in after.items() if "_jobs/leases" not in k and k not in added} == {
        k: v for k, v in before.items() if "_jobs/leases" not in k
    }
    [idle_run, _] = memwal.open(table.uri).history(job="snapshot").runs
    assert (idle_run["outcome"], idle_run["versions"]) == ("nothing-to-do", [])
    with Lease(table.store, "snapshot"):
        assert main(["snapshot", table.uri, "--json"]) == 3  # another live holder


def test_spark_reader_reads_the_same_rows(make_table, spark_session):
    table, _ = make_table()
    t = memwal.open(table.uri)
    local = t.snapshot(dry_run=True).value  # a dry run reads in-process, whatever the engine
    assert local.engine == "local" and list(local.rows) == expected_rows(table)
    res = t.snapshot(engine="spark").value
    assert list(read_snapshot(table).rows) == list(local.rows) and res.engine == "spark"
    published = decode_lance_file(table.manifest().mem_wal.inline_snapshots)
    assert published.schema.names == snapshot_schema(local.columns).names
    assert published.schema.names[-1] == "region_field_bucket"


# -- an idle refresh commits nothing ------------------------------------------------------


def test_idle_refresh_commits_and_writes_nothing(make_table):
    table, model = make_table()
    t = memwal.open(table.uri)
    first = t.snapshot().value
    assert first.version == table.manifest().version and first.reason is None
    before = tree_digest(table.uri)
    plan = t.snapshot(dry_run=True).value
    assert plan.is_noop and "no shard changed" in plan.noop_reason and plan.to_dict()["noop"] is True
    assert tree_digest(table.uri) == before  # a dry run writes nothing at all
    res = t.snapshot().value
    assert res.version is None and res.reason == plan.noop_reason and res.attempts == 0
    assert res.snapshot_ts_millis == first.snapshot_ts_millis and res.path is None and res.bytes == 0
    doc = json.loads(json.dumps(res.to_dict()))
    assert doc["version"] is None and doc["reason"] == plan.noop_reason
    # no commit, no journal, no snapshot file: only the run's own history record and leases
    assert_only_run_records(before, tree_digest(table.uri), "snapshot")
    assert lsm_rows(table) == model.sorted_rows()
    # One shard's manifest moves on (a new version, same generations): that is a change.
    commit_shard_manifest(table, shard_ids_for(SMALL)[0], lambda m: None)
    assert not t.snapshot(dry_run=True).value.is_noop
    assert t.snapshot().value.version == first.version + 1


def test_refresh_after_a_new_flush_commits_the_new_rows(make_table):
    table, model = make_table()
    t = memwal.open(table.uri)
    first = t.snapshot().value
    write_generations(table.uri, SMALL, model, generations=1, seed_offset=99)  # generation 5 everywhere
    plan = t.snapshot(dry_run=True).value
    assert not plan.is_noop and plan.to_dict()["reason"] is None
    res = t.snapshot().value
    assert res.version == first.version + 1 == table.manifest().version and res.reason is None
    assert res.snapshot_ts_millis > first.snapshot_ts_millis
    snap = read_snapshot(table)
    assert snap.rows == expected_rows(table)
    assert all([g for g, _ in r.flushed_generations] == [1, 2, 3, 4, 5] for r in snap.rows)
    assert plan_read(table).fallbacks == [] and lsm_rows(table) == model.sorted_rows()


def test_refresh_after_only_a_merge_commits_nothing_and_readers_stay_exact(make_table):
    """Merge progress lives in the table manifest, not in the snapshot rows, and readers list only
    generations above it: a merge alone needs no new snapshot."""
    table, model = make_table()
    t = memwal.open(table.uri)
    published = t.snapshot().value
    assert t.merge(max_generations=2).ok
    before = tree_digest(table.uri)
    res = t.snapshot().value
    assert res.version is None
    assert_only_run_records(before, tree_digest(table.uri), "snapshot")
    plan = plan_read(table)
    assert plan.fallbacks == [] and plan.snapshot_ts_millis == published.snapshot_ts_millis
    assert all(s["generations"] == [3, 4] and s["source"] == "index" for s in plan.shards)
    assert lsm_rows(table) == model.sorted_rows()


def test_refresh_republishes_an_unreadable_snapshot_and_a_storage_change(make_table):
    table, _ = make_table()
    # internal entry (the three refreshes below): the inline threshold is no user option (0: always a file)
    res = run_snapshot(table, inline_threshold=0)
    assert res.storage == "file"
    assert run_snapshot(table, inline_threshold=0).version is None  # idle, file storage
    Path(table.uri, res.path).unlink()  # e.g. Lance's version cleanup removed it (H3)
    again = run_snapshot(table, inline_threshold=0)
    assert again.version == res.version + 1 and read_snapshot(table).rows == expected_rows(table)
    inline = memwal.open(table.uri).snapshot().value  # the default threshold stores 3 shards inline: a change
    assert inline.version == again.version + 1 and inline.storage == "inline"
    assert memwal.open(table.uri).snapshot().value.version is None


def test_spark_reader_reports_a_broken_shard_in_one_line(make_table, spark_session):
    """A shard manifest that cannot be read fails the refresh on Spark as it does locally:
    the same one-line error naming the shard, not Spark's wrapped executor trace."""
    table, _ = make_table()
    victim = shard_ids_for(SMALL)[1]
    latest = all_shard_manifests(table.store)[victim].version
    Path(table.uri, manifest_key(victim, latest)).write_bytes(b"\xff\xff garbage")
    before = tree_digest(table.uri)
    with pytest.raises(ShardManifestError) as local:
        memwal.open(table.uri).snapshot()
    with pytest.raises(ShardManifestError) as remote:
        memwal.open(table.uri).snapshot(engine="spark")
    assert str(remote.value) == str(local.value) and remote.value.reason == local.value.reason
    assert victim in str(remote.value) and "\n" not in str(remote.value)
    run = run_cli("snapshot", table.uri, "--engine", "spark", "--json")
    assert_one_line_error(run, 1, victim, "corrupt shard manifest")
    assert tree_digest(table.uri) == before  # planned before any lease: nothing written


def test_a_dry_run_fails_on_a_generation_listed_under_an_unsafe_path(make_table):
    """As merge's and gc's dry runs do: the plan names each unsafe generation and the dry run
    exits 1, writing nothing."""
    table, _ = make_table()
    shard = shard_ids_for(SMALL)[0]

    def outside(m) -> None:
        m.sstables[0].path = "../../../elsewhere"

    commit_shard_manifest(table, shard, outside)
    before = tree_digest(table.uri)
    dry = memwal.open(table.uri).snapshot(dry_run=True)
    assert not dry.ok and len(dry.problems) == 1 and shard in dry.problems[0] and "unsafe-path" in dry.problems[0]
    assert [(u.shard_id, u.reason) for u in dry.value.unsafe_generations] == [(shard, "unsafe-path")]
    run = run_cli("snapshot", table.uri, "--dry-run", "--json")
    assert run.rc == 1, run.stderr
    assert [u["shard_id"] for u in json.loads(run.stdout)["unsafe_generations"]] == [shard]
    assert tree_digest(table.uri) == before


def test_results_and_plans_are_frozen(make_table):
    """A job's result and plan cannot be changed after it returns; their lists are tuples."""
    import dataclasses

    table, _ = make_table()
    t = memwal.open(table.uri)
    values = [t.plan_merge(), t.merge().value, t.plan_catchup(), t.catchup().value, t.plan_compact(),
              t.compact().value, t.plan_snapshot(), t.snapshot().value]
    for value in values:
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
        assert not any(isinstance(getattr(value, f.name), list) for f in dataclasses.fields(value)), value
    assert json.loads(values[-1].to_json())["repaired"] == []
