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

import threading
from collections.abc import Callable

import lance
import pyarrow as pa
import pytest

from memwal.demo import Model, Workload, bucket_of, create_base_table, shard_ids_for, write_generations
from memwal.errors import LeaseLostError
from memwal.inspect.verify import verify_table
from memwal.lease import Lease
from memwal.merge import plan_merge, run_merge
from memwal.table import Table, open_table
from tests.conftest import table_rows
from tests.helpers import tree_digest
from tests.interleave import ManualClock

WL = Workload(base_rows=200, shards=2, generations=2, rows_per_generation=30, indexes=False, seed=21)
TTL = 60.0


class Clock(ManualClock):
    """A shared wall clock the test moves forward: leases expire without sleeping."""

    def pass_ttl(self) -> None:
        """Two TTLs in one step: no heartbeat can renew in between (a process stopped past its
        TTL), so the stalled job's lease expires and its heartbeat finds it lost."""
        self.advance(2 * TTL)


class Stalled:
    """Job A in a thread, stopped at one named step until :meth:`resume`."""

    def __init__(self, job: Callable[[Callable[[str], None]], object], stall_at: str) -> None:
        self.stall_at = stall_at
        self.reached = threading.Event()
        self.go = threading.Event()
        self.outcome: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        self.thread.start()
        assert self.reached.wait(120), f"job never reached {stall_at}"

    def _hook(self, name: str) -> None:
        if name == self.stall_at and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(300)

    def _run(self, job) -> None:
        try:
            self.outcome = job(self._hook)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc
        finally:
            self.reached.set()

    def resume(self) -> None:
        self.go.set()
        self.thread.join(300)
        assert not self.thread.is_alive()


def build(tmp_path, wl: Workload = WL) -> tuple[Table, Model]:
    uri = str(tmp_path / "t")
    _, model = create_base_table(uri, wl)
    if wl.generations:
        write_generations(uri, wl, model)
    return open_table(uri), model


def planned_delete_keys(table: Table) -> list[int]:
    """Keys whose newest planned version is a tombstone: what merger A will delete."""
    newest: dict[int, bool] = {}
    for ref in plan_merge(table).generations:  # ascending per shard; keys are disjoint across shards
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


def lease(table: Table, kind: str, holder: str, clock: Clock) -> Lease:
    return Lease(table.store, kind, holder=holder, ttl_seconds=TTL, clock=clock).acquire()


def take_over_and_merge(table: Table, clock: Clock, **budget) -> None:
    """Merger B: takes the expired merge lease over and merges (a fresh table handle)."""
    clock.pass_ttl()
    with lease(table, "merge", "merger-B", clock) as b:
        run_merge(open_table(table.uri), lease=b, **budget)


def progress(table: Table) -> dict[str, int]:
    return table.manifest().compacted


def highest_generations(table: Table) -> dict[str, int]:
    from memwal.table.shards import all_shard_manifests

    return {s: max(g.generation for g in st.flushed) for s, st in all_shard_manifests(table.store).items()}


def assert_fenced(a: Stalled) -> None:
    assert isinstance(a.error, LeaseLostError), (a.error, a.outcome)
    assert a.error.exit_code == 3


@pytest.mark.parametrize("stall_at", ["before-delete-commit", "before-marked-commit"])
def test_stalled_merger_cannot_undo_a_newer_merge(tmp_path, stall_at):
    """A stalls before its delete pass (its first write) or before its marked pass; B
    re-puts every key A will delete and merges everything; A's commit is rejected."""
    table, model = build(tmp_path)
    doomed = planned_delete_keys(table)
    assert doomed, "the workload must give A keys to delete"
    clock = Clock()
    mine = lease(table, "merge", "merger-A", clock)
    a = Stalled(lambda hook: run_merge(open_table(table.uri), lease=mine, on_step=hook), stall_at)
    assert a.error is None
    reput(table, model, WL, doomed, "newer")
    take_over_and_merge(table, clock)
    merged_by_b = table_rows(table)
    a.resume()
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
def test_stalled_merger_whose_successor_merged_a_prefix(tmp_path, also_put, stall_at):
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
    clock = Clock()
    mine = lease(table, "merge", "merger-A", clock)
    a = Stalled(lambda hook: run_merge(open_table(table.uri), lease=mine, on_step=hook), stall_at)
    take_over_and_merge(table, clock, max_generations=1)
    assert progress(table) == highest_generations(table), "B must cover A's unfinished batch, not a prefix"
    a.resume()
    assert_fenced(a)
    run_merge(table)
    assert table_rows(table) == model.sorted_rows()
    assert not {r["id"] for r in table_rows(table)} & set(doomed)
    assert progress(table) == highest_generations(table)


def test_stalled_delete_only_merge_cannot_undo_a_newer_merge(tmp_path):
    """A's batch only deletes, so its one commit is the marked delete."""
    wl = Workload(base_rows=200, shards=1, generations=0, indexes=False, seed=23)
    table, model = build(tmp_path, wl)
    shard = shard_ids_for(wl)[0]
    doomed = [5, 6, 7, 8]
    with table.dataset().mem_wal_writer(shard) as w:
        w.delete(pa.table({"id": pa.array(doomed, pa.int64())}))
    model.delete(doomed)
    clock = Clock()
    mine = lease(table, "merge", "merger-A", clock)
    a = Stalled(lambda hook: run_merge(open_table(table.uri), lease=mine, on_step=hook), "before-marked-commit")
    reput(table, model, wl, doomed, "newer")
    take_over_and_merge(table, clock)
    a.resume()
    assert_fenced(a)
    assert table_rows(table) == model.sorted_rows()
    assert [r["name"] for r in table_rows(table) if r["id"] in doomed] == [f"newer-{k}" for k in doomed]
    assert progress(table) == {shard: 2}


def test_merger_that_finds_nothing_left_after_a_takeover_exits_3(tmp_path):
    """B merges exactly A's generations: A's commit conflicts, and its re-plan would find
    nothing left to merge. That must not be reported as a success."""
    table, model = build(tmp_path)
    clock = Clock()
    mine = lease(table, "merge", "merger-A", clock)
    a = Stalled(lambda hook: run_merge(open_table(table.uri), lease=mine, on_step=hook), "before-marked-commit")
    take_over_and_merge(table, clock)
    assert plan_merge(table).is_empty()
    a.resume()
    assert_fenced(a)
    assert table_rows(table) == model.sorted_rows()


def test_stalled_snapshot_refresh_keeps_a_newer_merges_progress(tmp_path):
    """A snapshot refresh stalled past both its leases right before its commit; a merger
    takes the merge lease over and records progress; the refresh must not erase it."""
    from memwal.snapshot import execute_snapshot, plan_snapshot

    table, model = build(tmp_path)
    clock = Clock()
    snap = lease(table, "snapshot", "refresh-A", clock)
    lease(table, "merge", "refresh-A", clock)
    plan = plan_snapshot(table)
    a = Stalled(lambda hook: execute_snapshot(open_table(table.uri), plan, lease=snap, on_step=hook), "before-commit")
    take_over_and_merge(table, clock)
    committed = progress(table)
    assert committed == highest_generations(table)
    a.resume()
    assert a.error is None or isinstance(a.error, LeaseLostError), a.error
    assert progress(table) == committed
    assert table_rows(table) == model.sorted_rows()


def test_gc_that_lost_its_lease_deletes_nothing(tmp_path):
    """GC plans, its lease is taken over before it executes: LeaseLostError, nothing deleted."""
    from memwal.gc import execute_gc, plan_gc

    table, _ = build(tmp_path)
    run_merge(table)
    table.dataset().cleanup_old_versions(older_than=__import__("datetime").timedelta(0),
                                         error_if_tagged_old_versions=False)
    plan = plan_gc(table, grace_seconds=0)
    assert plan.generations, "the plan must have something to delete for the test to mean anything"
    clock = Clock()
    mine = lease(table, "gc", "gc-A", clock)
    clock.pass_ttl()
    lease(table, "gc", "gc-B", clock)
    before = {k: v for k, v in tree_digest(table.uri).items() if "_jobs/leases" not in k}
    with pytest.raises(LeaseLostError) as err:
        execute_gc(open_table(table.uri), plan, lease=mine)
    assert err.value.exit_code == 3
    after = {k: v for k, v in tree_digest(table.uri).items() if "_jobs/leases" not in k}
    assert after == before
