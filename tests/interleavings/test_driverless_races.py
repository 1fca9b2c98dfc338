"""The driverless Spark merge racing stale mergers, compactions and index catch-up, one side
held at a named step (deterministic interleavings through the step hooks): rows stay those of
the row model, every lost race re-plans, and a stale merger's commit is refused, never applied."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

import memwal
from memwal.core import clock as clocks
from memwal.demo import Workload, shard_ids_for
from memwal.errors import LeaseLostError
from tests.conftest import lsm_rows, table_rows
from tests.integration.test_driverless_merge import assert_converged, pylance_view, unreferenced
from tests.interleave import ManualClock, Stalled

WL = Workload(base_rows=300, shards=2, generations=6, rows_per_generation=30, seed=9)


#: Only new keys: no batch touches a base fragment but the fence (the case the fence is for).
INSERTS = {"update_fraction": 0.0, "delete_fraction": 0.0}


@pytest.mark.parametrize("newer, writes", [("local", {}), ("local", INSERTS), ("spark", INSERTS)])
def test_a_stale_driverless_data_commit_is_refused_by_the_fence(make_table, spark_session, newer, writes):
    """A (Spark, driverless) passed its lease check and guard and stalls right before its data
    commit, past its lease TTL; B takes the merge over and merges everything (the local engine
    with the driver's merge_insert, or Spark driverless). Bound to its read version alone, A's
    data commit would land over B's rows and the keys A inserts would live twice (observed);
    B's first commit named the fence fragment (the local engine: in its bound delete pass, or,
    with no delete, in a claim of its own), so Lance refuses A's. A ends fenced (exit 3), its
    files are removed, and the table is the model."""
    table, model = make_table(replace(WL, **writes))
    clock = ManualClock(time.time() + 3600)
    with clocks.use(clock):
        a = Stalled(lambda: memwal.open(table.uri).merge(engine="spark", lease_ttl=30), "merge.before-data-commit")
        with clock.frozen():
            clock.advance(61)
            b = memwal.open(table.uri).merge(lease_ttl=30, engine=newer).value
        a.resume()
    clock.close()
    assert_converged(table, model)  # without the fence, the keys A inserts are in the base twice
    assert isinstance(a.error, LeaseLostError) and a.error.exit_code == 3, (a.error, a.outcome)
    assert b.commit_path == ("driver" if newer == "local" else "driverless"), b
    assert b.commits == 2  # local: the delete pass naming the fence, or the claim; then the marked pass
    assert set(table.manifest().compacted.values()) == {WL.generations}
    assert not unreferenced(table)  # A's refused fragments and deletion files are gone


def test_driverless_waits_for_an_unfinished_driver_path_merge(make_table, spark_session):
    """A (the driver's merge_insert) stalls before its marked pass past its TTL; B on Spark sees
    A's unfinished intent and commits on the driver too: A's marked pass could otherwise land
    between B's two commits and write older values over rows B already committed."""
    table, model = make_table(WL)
    clock = ManualClock(time.time() + 3600)
    with clocks.use(clock):
        a = Stalled(lambda: memwal.open(table.uri).merge(lease_ttl=30, max_generations=3),
                    "merge.before-marked-commit")
        with clock.frozen():
            clock.advance(61)
            b = memwal.open(table.uri).merge(lease_ttl=30, engine="spark").value
        assert b.commit_path == "driver", b
        a.resume()
    clock.close()
    assert isinstance(a.error, LeaseLostError), (a.error, a.outcome)
    c = memwal.open(table.uri).merge(engine="spark").value  # nothing unfinished left: driverless again
    assert c.version is None or c.commit_path == "driverless"
    assert_converged(table, model)


@pytest.mark.parametrize("held, step", [
    ("merge", "merge.before-data-commit"),   # the merge's rows written, a compaction rewrites their base
    ("compact", "compact.after-tasks"),      # the compaction's rewrite done, a driverless merge commits
    ("merge", "merge.after-data-commit"),    # between the merge's commits, a compaction rewrites its rows too
])
def test_driverless_merge_and_compaction_interleaved(make_table, spark_session, held, step):
    """Whoever commits second lost a race on the same fragments and re-plans (a bound commit is
    refused, never applied over the other); rows, progress and catch-up end right."""
    table, model = make_table(WL)
    t = memwal.open(table.uri)
    for _ in range(2):  # fragments to compact from the start
        assert t.merge(engine="spark", max_generations=1).ok
    merge = lambda: memwal.open(table.uri).merge(engine="spark", max_generations=2)  # noqa: E731
    compact = lambda: memwal.open(table.uri).compact(target_rows_per_fragment=10_000)  # noqa: E731
    first, other = (compact, merge) if held == "compact" else (merge, compact)
    stalled = Stalled(first, step)
    done = other()
    assert done.ok and done.to_dict()["version"] is not None
    stalled.resume()
    assert stalled.error is None, stalled.error
    result = stalled.outcome.to_dict()
    assert result["version"] is not None
    if step != "merge.after-data-commit":
        assert result["attempts"] == 2, result  # its commit met the other's rewrite: re-planned
    else:
        assert result["attempts"] == 1 and result["commit_path"] == "driverless"  # the marker needs no fragment
    while t.merge(engine="spark").to_dict()["version"] is not None:
        pass
    assert_converged(table, model)
    assert table.manifest().compacted == {s: WL.generations for s in shard_ids_for(WL)}
    assert t.catchup().ok
    assert table.manifest().index_catchup == {"id_idx": table.manifest().compacted,
                                              "vec_idx": table.manifest().compacted}
    assert not unreferenced(table) or step == "compact.after-tasks"


def test_index_catchup_between_the_two_commits(make_table, spark_session):
    """Catch-up runs while a driverless batch's data is committed and its marker is not: it
    indexes the new fragments and records the progress it saw; the marker lands after; a
    later catch-up records the new progress, and readers were right all along."""
    table, model = make_table(WL)
    held = Stalled(lambda: memwal.open(table.uri).merge(engine="spark"), "merge.after-data-commit")
    try:
        assert memwal.open(table.uri).catchup().ok
        assert table.manifest().compacted == {}
        assert pylance_view(table) == model.sorted_rows()
    finally:
        held.resume()
    assert held.error is None, held.error
    assert memwal.open(table.uri).catchup().ok
    m = table.manifest()
    assert m.index_catchup == {"id_idx": m.compacted, "vec_idx": m.compacted}
    assert set(m.compacted.values()) == {WL.generations}
    assert lsm_rows(table) == table_rows(table) == model.sorted_rows()
