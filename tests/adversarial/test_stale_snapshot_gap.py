"""The twins of issue 83's two wrong reads (8cee7d7), in the published snapshot and the fleet.

1. A reader through the MemWAL index's shard snapshot judged a shard's snapshot at manifest
   version S fresh when version S+1 was not on storage. GC prunes old versions and may leave a gap
   below the newest 128 (memwal.gc.manifests): with S+1.. pruned, the stale snapshot was read and
   the shard's newer rows were missed. The check now looks GAP_LOOK versions past S, as the probe
   from a hint looks past the end of its chain.
2. The fleet's probe found a table's latest manifest by a naming rule of its own and took a stray
   V2-named copy of an old manifest beside V1 names for the latest. It now refuses such a table as
   every other reader does (memwal.table.manifest.refuse_mixed_names), and the fleet reports it as
   a problem of that table alone.

Every table is written by pylance's ``ShardWriter``; reads are checked against the row model.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pytest

import memwal
from bench.harness.requests import table_files, upload
from memwal.demo import Model, Workload, shard_ids_for, write_generations
from memwal.errors import ReadError
from memwal.fleet.plan import plan_fleet
from memwal.fleet.policy import policy_from
from memwal.fleet.probe import latest_manifest, probe
from memwal.fleet.sources import discover
from memwal.pb import shard_manifest_pb2
from memwal.read import lsm_scan, plan_read, shard_snapshots
from memwal.store import Store, open_store
from memwal.table import Table, open_table
from memwal.table.naming import U64_MAX, manifest_key, version_hint_key
from memwal.table.shards import GAP_LOOK, WHOLE_NEWEST, latest_shard_manifest, list_manifest_versions

# -- 1. a published snapshot whose next versions were pruned --------------------------------------

WL = Workload(base_rows=120, shards=2, generations=3, rows_per_generation=20, indexes=False, seed=7)
VICTIM = shard_ids_for(WL)[0]


def rows_of(table: Table, **kw: Any) -> list[dict[str, Any]]:
    return sorted(lsm_scan(table, **kw).to_pylist(), key=lambda r: r["id"])


def renumber_up_to(uri: str, shard: str, last: int) -> None:
    """Versions after the shard's latest up to ``last``, each the latest's state under its own
    number, as a writer's versions that list nothing new leave them (claims, empty flushes)."""
    top = max(list_manifest_versions(open_table(uri).store, shard))
    state = shard_manifest_pb2.ShardManifest.FromString(Path(uri, manifest_key(shard, top)).read_bytes())
    for v in range(top + 1, last + 1):
        state.version = v
        Path(uri, manifest_key(shard, v)).write_bytes(state.SerializeToString())


def remove_versions(uri: str, shard: str, versions: range) -> None:
    for v in versions:
        Path(uri, manifest_key(shard, v)).unlink()


def snapshot_then_write(make_table: Any) -> tuple[Table, Model, int]:
    """A table whose snapshot is published at the victim's version S, then one more generation
    in every shard (rows the snapshot does not list); S returned."""
    table, model = make_table(WL)
    assert memwal.open(table.uri).snapshot().ok
    plan = plan_read(table)
    assert plan.fallbacks == [] and {s["source"] for s in plan.shards} == {"index"}
    s = next(sh["manifest_version"] for sh in plan.shards if sh["shard_id"] == VICTIM)
    assert s is not None
    write_generations(table.uri, WL, model, generations=1, seed_offset=50)
    latest = latest_shard_manifest(table.store, VICTIM)
    assert latest is not None and latest.version > s
    return table, model, s


@pytest.mark.parametrize("above", [GAP_LOOK, 2 * WHOLE_NEWEST])
def test_a_snapshot_whose_next_versions_were_pruned_is_stale(make_table: Any, above: int) -> None:
    """The victim's snapshot is at S; its newest version is S + 129 (the nearest a gap GC's
    pruning leaves allows) or S + 256 (the farthest the one look past S proves); S+1 up to the
    newest 128 are pruned, and its hint is gone (best-effort, so the snapshot is decoded). The
    reader finds the snapshot stale and reads the shard's newest version: the model's rows."""
    table, model, s = snapshot_then_write(make_table)
    newest = s + above
    renumber_up_to(table.uri, VICTIM, newest)
    remove_versions(table.uri, VICTIM, range(s + 1, newest - WHOLE_NEWEST + 1))
    table.store.delete_many([version_hint_key(VICTIM)])
    kept = list_manifest_versions(table.store, VICTIM)
    assert s in kept and s + 1 not in kept
    assert kept[-WHOLE_NEWEST:] == list(range(newest - WHOLE_NEWEST + 1, newest + 1))

    expected = model.sorted_rows()
    assert rows_of(table) == expected  # row for row, through the snapshot source
    assert memwal.open(table.uri).scan().sort_by("id").to_pylist() == expected
    plan = plan_read(table)
    assert plan.snapshot_ts_millis > 0  # the snapshot was read, not skipped by the hints' times
    reasons = {f["shard_id"]: f["reason"] for f in plan.fallbacks}
    assert f"version {s + GAP_LOOK}, past a gap" in reasons[VICTIM], reasons
    listing = {sh["shard_id"]: sh for sh in plan.shards}
    assert listing[VICTIM]["source"] == "manifests" and listing[VICTIM]["manifest_version"] == newest
    assert listing[VICTIM]["generations"] == [1, 2, 3, 4]
    # the snapshot itself is stale: read as published, it misses the victim's newest rows
    assert rows_of(table, snapshots=shard_snapshots(table, check_fresh=False)) != expected


def test_a_snapshot_above_a_pruned_gap_is_still_fresh(make_table: Any) -> None:
    """The control: versions below the snapshot's S pruned (a gap under S, S the newest) leave the
    snapshot fresh: every shard is read from the index, the model's rows."""
    table, model = make_table(WL)
    renumber_up_to(table.uri, VICTIM, 200)  # S = 200, newest
    remove_versions(table.uri, VICTIM, range(3, 60))
    assert memwal.open(table.uri).snapshot().ok
    table.store.delete_many([version_hint_key(VICTIM)])
    plan = plan_read(table)
    assert plan.fallbacks == [] and {sh["source"] for sh in plan.shards} == {"index"}
    assert next(sh["manifest_version"] for sh in plan.shards if sh["shard_id"] == VICTIM) == 200
    assert rows_of(table) == model.sorted_rows()


# -- 2. the fleet's probe and mixed manifest names ------------------------------------------------

def v2_name(version: int) -> str:
    return f"{U64_MAX - version:020d}.manifest"


def with_stray(template: str, dst: Path, first: str) -> str:
    """A copy of the V1 table with a V2-named copy of version 2's manifest: the first name a
    listing shows is ``first`` ("v1": version 1's is kept; "v2": old versions were cleaned up)."""
    uri = str(dst)
    shutil.copytree(template, uri, symlinks=True)
    stray = Path(uri, "_versions", "2.manifest").read_bytes()
    if first == "v2":
        lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    Path(uri, "_versions", v2_name(2)).write_bytes(stray)
    names = sorted(n for n in (p.name for p in Path(uri, "_versions").iterdir()) if n.endswith(".manifest"))
    assert (names[0] == v2_name(2)) == (first == "v2"), names
    return uri


@pytest.mark.parametrize("first", ["v1", "v2"])
def test_the_fleet_probe_refuses_a_table_with_mixed_manifest_names(v1_template: tuple[str, Model], tmp_path: Path,
                                                                   first: str) -> None:
    """The probe raises the error every reader raises (naming the folder and a name of each
    scheme); discovery under a root still finds the table, and the fleet's plan reports it as a
    problem of its own while the healthy table beside it is planned."""
    lake = tmp_path / "lake"
    lake.mkdir()
    healthy = str(lake / "healthy")
    shutil.copytree(v1_template[0], healthy, symlinks=True)
    mixed = with_stray(v1_template[0], lake / "mixed", first)

    store = open_store(mixed)
    with pytest.raises(ReadError, match="two schemes") as err:
        probe(mixed, store)
    assert f"{mixed}/_versions" in str(err.value) and v2_name(2) in str(err.value)
    assert ".manifest (V1" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ReadError, match="two schemes"):
        latest_manifest(store, refuse_mixed=True)
    with pytest.raises(ReadError, match="two schemes"):
        memwal.open(mixed)  # what the rest of memwal does with it (8cee7d7)
    root = open_store(str(lake))
    assert latest_manifest(root, "mixed/") is None  # no entry discovery would trust
    assert latest_manifest(root, "healthy/") is not None

    found = discover([str(lake)])
    assert sorted(ref.uri for ref in found.tables) == [healthy, mixed] and not found.problems
    fleet = plan_fleet(found, policy_from({}))
    assert [t.table for t in fleet.tables] == [healthy]
    (problem,) = fleet.problems
    assert problem.table == mixed and "two schemes" in problem.error and v2_name(2) in problem.error
    assert fleet.by_status()["problem"] == 1

    # the table itself as the source: the same problem, from the probe's own listing
    alone = plan_fleet(discover([mixed]), policy_from({}))
    assert not alone.tables and [p.table for p in alone.problems] == [mixed]


def test_a_v1_table_alone_is_probed_at_its_latest_version(v1_template: tuple[str, Model]) -> None:
    """The control: the V1 table without the stray is probed at the version Lance reads."""
    uri = v1_template[0]
    facts = probe(uri, open_store(uri))
    assert facts.mem_wal and facts.version == lance.dataset(uri).version


@pytest.mark.parametrize("first", ["v1", "v2"])
def test_the_fleet_probe_refuses_it_on_an_object_store(v1_template: tuple[str, Model], tmp_path: Path,
                                                       s3_server: Any, first: str) -> None:
    """On S3 the names checked are those the listing reads anyway: the whole listing of a
    V1-first table, the first page's names after a first V2 name; a table of V2 names is still
    probed from one listing request of ``_versions/``."""
    local = with_stray(v1_template[0], tmp_path / "t", first)
    uri, opts = s3_server.new_table(f"fleet-mixed-{first}")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    upload("s3", s3_server, bucket, prefix, table_files(Path(local)))
    with pytest.raises(ReadError, match="two schemes"):
        probe(uri, open_store(uri, opts))

    v2_uri, v2_opts = s3_server.new_table(f"fleet-v2-{first}")
    ds = lance.write_dataset(lance.dataset(v1_template[0]).to_table(), v2_uri, storage_options=v2_opts)
    for i in range(3):
        ds.update_config({"n": str(i)})
    store: Store = open_store(v2_uri, v2_opts)
    since = len(s3_server.requests)
    latest = latest_manifest(store, refuse_mixed=True)
    assert latest is not None and latest.key == f"_versions/{v2_name(4)}"
    assert len(s3_server.requests) - since == 1
