"""The shard snapshot refresh: spec schema, inline and file storage, preserved details, and hazard H1."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from lance.file import LanceFileReader

from memwal.demo_data import Workload, shard_ids_for
from memwal.lease import Lease
from memwal.merge import run_merge
from memwal.pb import mem_wal_index_pb2
from memwal.shard_manifests import all_shard_manifests
from memwal.snapshot import (
    JOURNAL_KEY,
    LocalManifestReader,
    ShardRow,
    analyse_round,
    decode_lance_file,
    desired_after,
    execute_snapshot,
    plan_snapshot,
    read_snapshot,
    run_snapshot,
    snapshot_schema,
)
from memwal.table_manifest import list_versions, read_table_manifest
from tests.conftest import SMALL, lsm_rows, table_rows

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
    plan = plan_snapshot(table)
    assert plan.storage == "inline" and plan.num_shards == 3 and plan.read_version == table.manifest().version
    res = execute_snapshot(table, plan)
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
    res = run_snapshot(table, inline_threshold=1)
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
    run_merge(table, max_generations=1)
    entry = next(i for i in table.manifest().indices if i.name == "__lance_mem_wal")
    assert entry.uuid != res.index_uuid
    assert table.manifest().mem_wal.snapshot_ts_millis == res.snapshot_ts_millis  # merges keep the snapshot
    snap = read_snapshot(table)
    assert snap.storage == "file" and snap.path == res.path and snap.rows == expected_rows(table)
    # A smaller table next time goes inline again, and the old inline bytes never linger.
    again = run_snapshot(table)
    assert again.storage == "inline" and table.manifest().mem_wal.HasField("inline_snapshots")
    assert lsm_rows(table) == model.sorted_rows()


def test_every_other_details_field_is_kept(make_table):
    table, _ = make_table()
    run_merge(table, max_generations=2)
    table.dataset().optimize.optimize_indices()
    before = table.manifest()
    assert before.compacted and before.index_catchup  # progress of both kinds to preserve
    res = run_snapshot(table)
    after = table.manifest()
    assert res.repairs == 0 and after.version == before.version + 1
    assert without_snapshot(after.mem_wal) == without_snapshot(before.mem_wal)
    assert after.mem_wal.maintained_indexes == before.mem_wal.maintained_indexes
    assert after.mem_wal.HasField("maintain_all_indexes") == before.mem_wal.HasField("maintain_all_indexes")
    assert (after.compacted, after.index_catchup) == (before.compacted, before.index_catchup)
    # A second refresh replaces the first: same non-snapshot fields, a newer timestamp.
    res2 = run_snapshot(table)
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


def test_h1_interleaved_merge_and_catchup_are_repaired(make_table):
    """A merge and an index catch-up commit between our read and our commit: H1, repaired."""
    table, model = make_table()
    plan = plan_snapshot(table)
    interleaved = {}

    def step(name: str) -> None:
        if name == "before-commit" and not interleaved:
            run_merge(table, max_generations=2)
            table.dataset().optimize.optimize_indices()
            interleaved["progress"] = progress(table)

    res = execute_snapshot(table, plan, on_step=step)
    assert res.interleaved_commits >= 2 and res.repairs == 1 and res.attempts == 2
    # The first commit really erased the progress (the hazard is real)...
    erased = read_table_manifest(table.store, res.version - 1)
    assert erased.compacted == {} and erased.mem_wal.snapshot_ts_millis == res.snapshot_ts_millis
    # ...and the repair restored every value, with the snapshot still in place.
    assert progress(table) == interleaved["progress"]
    assert set(interleaved["progress"][0].values()) == {2}
    assert {(r["kind"], r["to"]) for r in res.repaired} >= {("compacted", 2), ("index_catchup", 2)}
    assert table.manifest().mem_wal.snapshot_ts_millis == res.snapshot_ts_millis
    run_merge(table)
    assert table_rows(table) == model.sorted_rows()


def test_crash_between_erasing_commit_and_repair_is_repaired_by_the_next_refresh(make_table):
    table, model = make_table()
    plan = plan_snapshot(table)

    class Crash(Exception):
        pass

    def step(name: str) -> None:
        if name == "before-commit":
            run_merge(table, max_generations=1)
        if name == "after-commit":
            raise Crash

    with pytest.raises(Crash):
        execute_snapshot(table, plan, on_step=step)
    assert table.manifest().compacted == {}  # erased, and the job is gone
    assert table.store.exists(JOURNAL_KEY)
    res = run_snapshot(table)
    assert res.recovered and res.repairs == 1
    assert set(table.manifest().compacted.values()) == {1}
    assert not table.store.exists(JOURNAL_KEY)
    run_merge(table)
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


def test_h1_race_merges_and_catchups_against_repeated_refreshes(make_table, tmp_path, record_property):
    """Threads: bounded merges and index catch-ups commit while refreshes run back to back.

    At the end the latest version's progress must equal the highest value ever committed,
    for every shard and every (index, shard); the number of repairs is reported.
    """
    wl = Workload(base_rows=200, shards=3, generations=6, rows_per_generation=20, seed=5)
    table, model = make_table(workload=wl)
    stop = threading.Event()
    errors: list[BaseException] = []
    stats = {"merges": 0, "catchups": 0}

    def merger() -> None:
        try:
            while run_merge(table, max_generations=1, max_attempts=12).version is not None:
                stats["merges"] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            stop.set()

    def catcher() -> None:
        try:
            while not stop.is_set():
                table.dataset().optimize.optimize_indices()
                stats["catchups"] += 1
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    results = []
    threads = [threading.Thread(target=merger), threading.Thread(target=catcher)]
    for t in threads:
        t.start()
    try:
        with Lease(table.store, "snapshot") as lease:
            while not stop.is_set():
                results.append(run_snapshot(table, lease=lease, reader=LocalManifestReader(threads=2)))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    results.append(run_snapshot(table))
    # Highest value ever committed, over every version of the table.
    top_c: dict[str, int] = {}
    top_i: dict[tuple[str, str], int] = {}
    for v in sorted(list_versions(table.store)):
        m = read_table_manifest(table.store, v)
        for s, g in m.compacted.items():
            top_c[s] = max(top_c.get(s, 0), g)
        for idx, per in m.index_catchup.items():
            for s, g in per.items():
                top_i[(idx, s)] = max(top_i.get((idx, s), 0), g)
    latest = table.manifest()
    assert latest.compacted == top_c and set(top_c.values()) == {6}
    assert {(i, s): g for i, per in latest.index_catchup.items() for s, g in per.items()} == top_i
    assert latest.mem_wal.snapshot_ts_millis == results[-1].snapshot_ts_millis
    assert table_rows(table) == model.sorted_rows() and lsm_rows(table) == model.sorted_rows()
    report = {
        "refreshes": len(results),
        "refreshes_with_interleaving": sum(1 for r in results if r.interleaved_commits),
        "interleaved_commits": sum(r.interleaved_commits for r in results),
        "refreshes_repaired": sum(1 for r in results if r.repairs),
        "repairs": sum(r.repairs for r in results),
        "values_restored": sum(len(r.repaired) for r in results),
        # A merge that plans and commits inside the few milliseconds between an erasing commit
        # and its repair merges the newest merged generation again (idempotent: same rows).
        "generations_merged_again": stats["merges"] - wl.generations,
        **stats,
    }
    print("H1 race report:", json.dumps(report))
    record_property("h1_race", json.dumps(report))
    out = os.environ.get("MEMWAL_H1_REPORT") or str(tmp_path / "h1_race.json")
    Path(out).write_text(json.dumps(report, indent=2))
    assert report["refreshes"] >= 3 and report["merges"] >= wl.generations


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
    with Lease(table.store, "snapshot"):
        assert main(["snapshot", table.uri, "--json"]) == 3  # another live holder


def test_spark_reader_reads_the_same_rows(make_table, spark):
    from jobs.spark_snapshot import SparkManifestReader

    table, _ = make_table()
    local = plan_snapshot(table)
    remote = plan_snapshot(table, reader=SparkManifestReader(spark, partitions=2))
    assert remote.engine == "spark" and remote.rows == local.rows == expected_rows(table)
    assert snapshot_schema(remote.columns).names[-1] == "region_field_bucket"
    res = execute_snapshot(table, remote)
    assert read_snapshot(table).rows == local.rows and res.engine == "spark"
