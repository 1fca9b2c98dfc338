"""Merges racing merges, compactions and snapshot refreshes, one side held at a named step
(deterministic interleavings through the step hooks, never free threads): rows, progress and
catch-up stay right whatever the order, and every side finishes or is fenced."""

from __future__ import annotations

import time

import lance
import pytest

import memwal
from memwal.demo import Workload, shard_ids_for
from memwal.errors import LeaseLostError
from memwal.merge import execute_merge, run_merge
from memwal.merge.engine import LocalMergeEngine
from memwal.merge.execute import StaleProgressError
from memwal.table import Table
from memwal.table.manifest import read_table_manifest
from tests.conftest import lsm_rows, table_rows
from tests.interleave import Stalled


def merged(table: Table) -> dict[str, int]:
    """Merged generation per shard, as the latest table version records it."""
    return table.manifest().compacted


def progress_and_catchup(table: Table) -> tuple[dict, dict]:
    m = table.manifest()
    return m.compacted, m.index_catchup


def test_appendix2_racing_on_the_same_generation(make_table):
    """Merger B planned generation 1 before A committed it: B's commit is refused, then B
    re-plans, skips what A merged and continues (spec appendix 2, scenario 1)."""
    table, model = make_table()
    t = memwal.open(table.uri)
    plan_b = t.merge(max_generations=1, dry_run=True).value
    assert t.merge(max_generations=1).ok  # merger A
    with pytest.raises(StaleProgressError):
        # internal entry: B executes the plan it made before A committed (a stale plan, on purpose)
        execute_merge(table, plan_b, LocalMergeEngine())
    assert set(merged(table).values()) == {1}
    result = t.merge(max_generations=1).value  # B again: re-plans
    assert {(s.from_generation, s.to_generation) for s in result.shards} == {(2, 2)}
    assert t.merge().ok
    assert table_rows(table) == model.sorted_rows()


@pytest.mark.parametrize("step", ["merge.after-read", "merge.before-delete-commit", "merge.before-marked-commit",
                                  "merge.after-upsert-commit"])
def test_appendix2_two_mergers_interleaved_never_regress_or_duplicate(make_table, step):
    """Two mergers on one table (spec appendix 2): A is held at a step, frozen past its lease
    TTL, while B takes the lease over and merges everything in one-generation batches; then A
    goes on. Whatever the step, A ends fenced (exit 3), no row is lost or duplicated, progress
    never goes down, and A's stale work is refused, never applied over B's."""
    from memwal.core import clock as clocks
    from tests.interleave import ManualClock

    table, model = make_table(Workload(base_rows=300, shards=2, generations=6, rows_per_generation=30, seed=9))
    clock = ManualClock(time.time() + 3600)
    with clocks.use(clock):
        a = Stalled(lambda: memwal.open(table.uri).merge(max_generations=2, lease_ttl=30), step)
        with clock.frozen():  # A's process is stopped past its TTL...
            clock.advance(61)
            b = memwal.open(table.uri)  # ...and B takes the merge over
            while (r := b.merge(max_generations=1, lease_ttl=30)).to_dict()["version"] is not None:
                assert r.ok
        a.resume()
    clock.close()
    assert isinstance(a.error, LeaseLostError) and a.error.exit_code == 3, (a.error, a.outcome)
    assert table_rows(table) == model.sorted_rows()
    assert set(merged(table).values()) == {6}
    # progress read back over time never went down for any shard
    versions = sorted(lance.dataset(table.uri).versions(), key=lambda v: v["version"])
    last: dict[str, int] = {}
    for v in versions:
        for shard, g in table.manifest(v["version"]).compacted.items():
            assert g >= last.get(shard, 0)
            last[shard] = g


def progress_history(table: Table) -> list[dict[str, int]]:
    versions = sorted(v["version"] for v in lance.dataset(table.uri).versions())
    return [table.manifest(v).compacted for v in versions]


@pytest.mark.parametrize("held, step", [
    ("compact", "compact.after-tasks"),          # its rewrite done, a merge commits, then it commits
    ("merge", "merge.before-delete-commit"),     # the merge planned, a compaction rewrites its fragments
    ("merge", "merge.before-marked-commit"),     # its delete pass done, a compaction commits before its marker
])
def test_merge_and_compact_interleaved_never_regress_and_converge(make_table, held, step):
    """A merger and a compactor on one table, one held at a step while the other runs to the
    end: rows, progress and catch-up stay right, and both finish (a lost race re-plans)."""
    wl = Workload(base_rows=300, shards=2, generations=10, rows_per_generation=25, seed=33)
    table, model = make_table(wl)
    t = memwal.open(table.uri)
    for _ in range(3):  # some fragments to compact from the start
        assert t.merge(max_generations=1).ok
    merge = lambda: memwal.open(table.uri).merge(max_generations=2)  # noqa: E731
    compact = lambda: memwal.open(table.uri).compact(target_rows_per_fragment=10_000)  # noqa: E731
    first, other = (compact, merge) if held == "compact" else (merge, compact)
    stalled = Stalled(first, step)
    done = other()
    assert done.ok and done.to_dict()["version"] is not None
    stalled.resume()
    assert stalled.error is None, stalled.error
    result = stalled.outcome.to_dict()
    assert result["version"] is not None
    if held == "compact" or step == "merge.before-delete-commit":
        assert result["attempts"] == 2, result  # its first commit lost the race and was re-planned

    while t.merge().to_dict()["version"] is not None:
        pass
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().compacted == {s: wl.generations for s in shard_ids_for(wl)}
    last: dict[str, int] = {}
    for compacted in progress_history(table):
        for shard, g in compacted.items():
            assert g >= last.get(shard, 0)
            last[shard] = g
    assert t.catchup().ok
    assert t.compact(target_rows_per_fragment=10_000).to_dict()["fragments_after"] == 1
    assert t.compact(target_rows_per_fragment=10_000).to_dict()["version"] is None  # converged
    assert table.manifest().index_catchup == {"id_idx": table.manifest().compacted,
                                              "vec_idx": table.manifest().compacted}
    assert lsm_rows(table) == model.sorted_rows()


def test_h1_interleaved_merge_and_catchup_are_repaired(make_table):
    """A merge and an index catch-up commit between our read and our commit: H1, repaired."""
    from memwal.core import steps

    table, model = make_table()
    interleaved = {}

    def step(name: str) -> None:
        if name == "snapshot.before-commit" and not interleaved:
            # internal entry: a merger outside memwal's merge lease, which the refresh holds (H1)
            run_merge(table, max_generations=2)
            table.dataset().optimize.optimize_indices()
            interleaved["progress"] = progress_and_catchup(table)

    with steps.hooked(step):
        res = memwal.open(table.uri).snapshot().value
    assert res.interleaved_commits >= 2 and res.repairs == 1 and res.attempts == 2
    # The first commit really erased the progress (the hazard is real)...
    erased = read_table_manifest(table.store, res.version - 1)
    assert erased.compacted == {} and erased.mem_wal.snapshot_ts_millis == res.snapshot_ts_millis
    # ...and the repair restored every value, with the snapshot still in place.
    assert progress_and_catchup(table) == interleaved["progress"]
    assert set(interleaved["progress"][0].values()) == {2}
    assert {(r.kind, r.restored) for r in res.repaired} >= {("compacted", 2), ("index_catchup", 2)}
    assert table.manifest().mem_wal.snapshot_ts_millis == res.snapshot_ts_millis
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()
