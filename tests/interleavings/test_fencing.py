"""Fencing: a job that stalls past its lease TTL cannot damage what its successor did.

A lease check is not a fence: the stalled job has already passed its last check when it
stalls. Each test runs job A in a real thread, stops it at a hook placed *after* its last
lease check and right before a table write, lets its lease expire (an injected clock, so
nothing depends on timing), has a successor take the lease over and do newer work with
pylance's own ShardWriter and a second merger, then resumes A. A must end with
LeaseLostError (exit 3) and the table must equal the row model: nothing the successor
wrote is lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.demo import Model, Workload, bucket_of, create_base_table, shard_ids_for, write_generations
from memwal.errors import LeaseLostError
from memwal.inspect.verify import verify_table
from memwal.lease import Lease
from memwal.table import Table, open_table
from tests.conftest import table_rows
from tests.helpers import assert_only_run_records, tree_digest
from tests.interleave import ManualClock, Stalled

WL = Workload(base_rows=200, shards=2, generations=2, rows_per_generation=30, indexes=False, seed=21)
TTL = 60.0


def stop_past_ttl(clock: ManualClock) -> contextlib.AbstractContextManager:
    """For the block, the held job's process is stopped (its heartbeat renews nothing) and
    two TTLs pass: its lease expires and another holder can take it over."""

    @contextlib.contextmanager
    def stopped() -> Iterator[None]:
        with clock.frozen():
            clock.advance(2 * TTL)
            yield

    return stopped()


def build(tmp_path, wl: Workload = WL) -> tuple[Table, Model]:
    uri = str(tmp_path / "t")
    _, model = create_base_table(uri, wl)
    if wl.generations:
        write_generations(uri, wl, model)
    return open_table(uri), model


def planned_delete_keys(table: Table) -> list[int]:
    """Keys whose newest planned version is a tombstone: what merger A will delete."""
    newest: dict[int, bool] = {}
    plan = memwal.open(table.uri).merge(dry_run=True).value
    for ref in plan.generations:  # ascending per shard; keys are disjoint across shards
        t = lance.dataset(ref.uri).to_table(columns=["id", "_tombstone"])
        for k, tomb in zip(t["id"].to_pylist(), t["_tombstone"].to_pylist(), strict=True):
            newest[k] = tomb
    return sorted(k for k, tomb in newest.items() if tomb)


def reput(table: Table, model: Model, wl: Workload, keys: list[int], tag: str) -> None:
    """Write a newer generation putting ``keys`` again, through each key's own shard."""
    ds = table.dataset()
    template = ds.to_table(limit=1)
    by_shard: dict[str, list[int]] = {}
    shards = shard_ids_for(wl)
    for k, b in zip(keys, bucket_of(ds, keys), strict=True):
        by_shard.setdefault(shards[b], []).append(k)
    for shard, ids in by_shard.items():
        batch = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "name": [f"{tag}-{i}" for i in ids],
                "value": pa.array([float(i) for i in ids]),
                "vec": pa.array([template["vec"][0].as_py()] * len(ids), template.schema.field("vec").type),
            },
            schema=template.schema,
        )
        with ds.mem_wal_writer(shard) as w:
            w.put(batch)
        model.put(batch)


def merger_a(table: Table, stall_at: str) -> Stalled:
    """Merger A, run as users run it, held at ``merge.<stall_at>``."""
    return Stalled(lambda: memwal.open(table.uri).merge(lease_ttl=TTL), f"merge.{stall_at}")


def take_over_and_merge(table: Table, clock: ManualClock, **budget) -> None:
    """Merger B: while A is stopped past its TTL, takes the expired merge lease over and merges."""
    with stop_past_ttl(clock):
        assert memwal.open(table.uri).merge(lease_ttl=TTL, **budget).ok


def progress(table: Table) -> dict[str, int]:
    return table.manifest().compacted


def highest_generations(table: Table) -> dict[str, int]:
    from memwal.table.shards import all_shard_manifests

    return {s: max(g.generation for g in st.flushed) for s, st in all_shard_manifests(table.store).items()}


def assert_fenced(a: Stalled) -> None:
    a.resume()
    assert isinstance(a.error, LeaseLostError), (a.error, a.outcome)
    assert a.error.exit_code == 3


@pytest.mark.parametrize("stall_at", ["before-delete-commit", "before-marked-commit"])
def test_stalled_merger_cannot_undo_a_newer_merge(tmp_path, manual_clock, stall_at):
    """A stalls before its delete pass (its first write) or before its marked pass; B
    re-puts every key A will delete and merges everything; A's commit is rejected."""
    table, model = build(tmp_path)
    doomed = planned_delete_keys(table)
    assert doomed, "the workload must give A keys to delete"
    a = merger_a(table, stall_at)
    assert a.error is None
    reput(table, model, WL, doomed, "newer")
    take_over_and_merge(table, manual_clock)
    merged_by_b = table_rows(table)
    assert_fenced(a)
    assert table_rows(table) == model.sorted_rows() == merged_by_b
    assert {r["id"] for r in table_rows(table)} >= set(doomed)
    assert progress(table) == highest_generations(table)
    assert verify_table(table).ok


@pytest.mark.parametrize(
    "also_put, stall_at",
    [(False, "before-marked-commit"), (True, "before-delete-commit"), (True, "before-marked-commit")],
    ids=["deletes", "mixed-before-delete", "mixed-after-delete"],
)
def test_stalled_merger_whose_successor_merged_a_prefix(tmp_path, manual_clock, also_put, stall_at):
    """B asks to merge only A's first generation, which re-puts the keys A's second
    generation deletes. Had B merged just that, its recorded progress would stay below A's
    marker and Lance would accept A's marker over B's re-inserted rows (in the
    mixed-after-delete case A's bound delete already ran). A's merge intent makes B merge
    at least A's generations instead, so A's marker is stale and A's deletes still win."""
    wl = Workload(base_rows=200, shards=1, generations=0, indexes=False, seed=22)
    table, model = build(tmp_path, wl)
    shard = shard_ids_for(wl)[0]
    doomed = [1, 2, 3, 900_001]
    reput(table, model, wl, doomed, "gen1")  # generation 1: puts (three base keys, one new)
    with table.dataset().mem_wal_writer(shard) as w:  # generation 2: deletes them
        w.delete(pa.table({"id": pa.array(doomed, pa.int64())}))
    model.delete(doomed)
    if also_put:
        reput(table, model, wl, [900_002], "gen3")
    a = merger_a(table, stall_at)
    take_over_and_merge(table, manual_clock, max_generations=1)
    assert progress(table) == highest_generations(table), "B must cover A's unfinished batch, not a prefix"
    assert_fenced(a)
    assert memwal.open(table.uri).merge(lease_ttl=TTL).ok
    assert table_rows(table) == model.sorted_rows()
    assert not {r["id"] for r in table_rows(table)} & set(doomed)
    assert progress(table) == highest_generations(table)


def test_stalled_delete_only_merge_cannot_undo_a_newer_merge(tmp_path, manual_clock):
    """A's batch only deletes, so its one commit is the marked delete."""
    wl = Workload(base_rows=200, shards=1, generations=0, indexes=False, seed=23)
    table, model = build(tmp_path, wl)
    shard = shard_ids_for(wl)[0]
    doomed = [5, 6, 7, 8]
    with table.dataset().mem_wal_writer(shard) as w:
        w.delete(pa.table({"id": pa.array(doomed, pa.int64())}))
    model.delete(doomed)
    a = merger_a(table, "before-marked-commit")
    reput(table, model, wl, doomed, "newer")
    take_over_and_merge(table, manual_clock)
    assert_fenced(a)
    assert table_rows(table) == model.sorted_rows()
    assert [r["name"] for r in table_rows(table) if r["id"] in doomed] == [f"newer-{k}" for k in doomed]
    assert progress(table) == {shard: 2}


def test_merger_that_finds_nothing_left_after_a_takeover_exits_3(tmp_path, manual_clock):
    """B merges exactly A's generations: A's commit conflicts, and its re-plan would find
    nothing left to merge. That must not be reported as a success."""
    table, model = build(tmp_path)
    a = merger_a(table, "before-marked-commit")
    take_over_and_merge(table, manual_clock)
    assert memwal.open(table.uri).merge(dry_run=True).value.is_empty()
    assert_fenced(a)
    assert table_rows(table) == model.sorted_rows()


def test_stalled_snapshot_refresh_keeps_a_newer_merges_progress(tmp_path, manual_clock):
    """A snapshot refresh stalled past both its leases right before its commit; a merger
    takes the merge lease over and records progress; the refresh must not erase it, and
    ends fenced (exit 3) for the lease it lost."""
    table, model = build(tmp_path)
    a = Stalled(lambda: memwal.open(table.uri).snapshot(lease_ttl=TTL), "snapshot.before-commit")
    take_over_and_merge(table, manual_clock)
    committed = progress(table)
    assert committed == highest_generations(table)
    assert_fenced(a)
    assert progress(table) == committed
    assert table_rows(table) == model.sorted_rows()


def test_gc_that_lost_its_lease_deletes_nothing(tmp_path, manual_clock):
    """GC plans, its lease is taken over before its first change to the table (the drains, then
    the deletions): LeaseLostError, nothing drained, nothing deleted."""
    from memwal.checkpoint.handshake import MARKER_KEY

    table, _ = build(tmp_path)
    assert memwal.open(table.uri).merge().ok
    table.dataset().cleanup_old_versions(older_than=__import__("datetime").timedelta(0),
                                         error_if_tagged_old_versions=False)
    dry = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True).to_dict()
    assert dry["deleted"], "the plan must have something to delete for the test to mean anything"
    before = tree_digest(table.uri)
    a = Stalled(lambda: memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, lease_ttl=TTL),
                "gc.before-drain")
    with stop_past_ttl(manual_clock):
        Lease(table.store, "gc", holder="gc-B", ttl_seconds=TTL).acquire()
    assert_fenced(a)
    # nothing deleted: the run left its history record, its marker and the leases, no more
    assert_only_run_records(before, tree_digest(table.uri), "gc", also=(MARKER_KEY,))
