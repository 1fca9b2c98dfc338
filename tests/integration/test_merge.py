"""The merger against a row model: order, tombstones, budgets, gaps, crashes and races."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.core import clock as clocks
from memwal.core import steps
from memwal.demo import Workload, create_base_table, shard_ids_for
from memwal.errors import BadInputError, LeaseHeldError, MemWalError
from memwal.inspect.verify import lsm_view, verify_table
from memwal.lease import Lease, LeaseRecord, lease_key
from memwal.merge import run_merge
from memwal.merge.engine import LocalMergeEngine
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.conftest import SMALL, lsm_rows, table_rows
from tests.helpers import tree_digest
from tests.interleave import ScriptedClock


def progress(table) -> dict[str, int]:
    return table.manifest().compacted


def test_full_merge_equals_model_and_reader_view_is_unchanged(make_table):
    table, model = make_table()
    before = lsm_view(table)
    assert before.to_pylist() == model.sorted_rows()
    result = memwal.open(table.uri).merge().value
    assert result.commits == 2  # one delete pass, one marked upsert pass
    assert table_rows(table) == model.sorted_rows()
    assert lsm_view(table).equals(before)
    assert progress(table) == {s: 4 for s in shard_ids_for(SMALL)}
    assert {(s.from_generation, s.to_generation) for s in result.shards} == {(1, 4)}
    assert sum(s.rows_deleted for s in result.shards) > 0
    assert sum(s.rows_upserted for s in result.shards) > 0
    assert verify_table(table).ok
    again = memwal.open(table.uri).merge().value
    assert again.version is None and again.shards == ()


def test_bounded_runs_leave_a_consistent_table_after_each_commit(make_table):
    table, model = make_table()
    expected_view = model.sorted_rows()
    for step in range(1, 5):
        result = memwal.open(table.uri).merge(max_generations=1).value
        assert {(s.from_generation, s.to_generation) for s in result.shards} == {(step, step)}
        assert set(progress(table).values()) == {step}
        assert lsm_rows(table) == expected_view
        assert verify_table(table).ok
    assert table_rows(table) == expected_view


def test_row_budget_splits_a_backlog(make_table):
    table, model = make_table()
    backlog = memwal.open(table.uri).merge(dry_run=True).value.total_rows
    assert backlog == 12 * 44  # 3 shards x 4 generations of 44 rows
    runs = 0
    while backlog:
        budgeted = memwal.open(table.uri).merge(max_rows=100, dry_run=True).value
        assert 0 < budgeted.total_rows <= 100
        result = memwal.open(table.uri).merge(max_rows=100).value
        runs += 1
        merged = {(s.shard_id, s.from_generation, s.to_generation) for s in result.shards}
        assert merged == {(s.shard_id, s.from_generation, s.to_generation) for s in budgeted.shards}
        # Exactly the budgeted rows left the backlog: nothing skipped, nothing merged twice.
        left = memwal.open(table.uri).merge(dry_run=True).value.total_rows
        assert left == backlog - budgeted.total_rows
        backlog = left
        assert lsm_rows(table) == model.sorted_rows()
    assert memwal.open(table.uri).merge(max_rows=100).value.version is None
    assert runs >= 6  # 12 generations of 44 rows, at most 2 per run
    assert table_rows(table) == model.sorted_rows()


def test_shard_filter_merges_only_that_shard(make_table):
    table, model = make_table()
    first, *others = shard_ids_for(SMALL)
    assert memwal.open(table.uri).merge(shards=[first]).ok
    assert progress(table) == {first: 4}
    with pytest.raises(BadInputError, match="no such shard"):
        memwal.open(table.uri).merge(shards=["00000000-0000-4000-8000-000000000000"], dry_run=True)
    assert lsm_rows(table) == model.sorted_rows()


def test_missing_generation_stops_only_that_shard(make_table):
    table, model = make_table()
    victim = shard_ids_for(SMALL)[0]
    st = all_shard_manifests(table.store)[victim]
    gen2 = Path(table.uri, st.generation_key(st.generation(2)))
    moved = gen2.with_name("moved-away")
    gen2.rename(moved)
    result = memwal.open(table.uri).merge().value
    assert result.to_dict()["blocked"] == [
        {
            "shard_id": victim,
            "generation": 2,
            "reason": f"missing: generation directory {gen2.name} is missing or unreadable",
        }
    ]
    assert progress(table)[victim] == 1
    assert all(v == 4 for k, v in progress(table).items() if k != victim)
    moved.rename(gen2)
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()


def test_only_deletes_commit_once_with_the_marker(tmp_path):
    wl = Workload(base_rows=200, shards=1, generations=0, indexes=False, seed=5)
    uri = str(tmp_path / "t")
    ds, model = create_base_table(uri, wl)
    shard = shard_ids_for(wl)[0]
    with ds.mem_wal_writer(shard) as w:
        w.delete(pa.table({"id": pa.array([1, 2, 3, 500], pa.int64())}))
    model.delete([1, 2, 3])
    table = open_table(uri)
    result = memwal.open(table.uri).merge().value
    assert result.commits == 1
    assert progress(table) == {shard: 1}
    assert table_rows(table) == model.sorted_rows()


@pytest.mark.parametrize("crash_at", ["after-read", "after-delete-pass", "after-upsert-commit", "before-report"])
def test_crash_at_every_step_then_rerun_converges(make_table, crash_at):
    table, model = make_table()

    class Crash(Exception):
        pass

    def on_step(name):
        if name == f"merge.{crash_at}":
            raise Crash(name)

    with steps.hooked(on_step), pytest.raises(Crash):
        memwal.open(table.uri).merge()
    # Readers keep seeing the right rows after the crash.
    assert lsm_rows(table) == model.sorted_rows()
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()
    assert set(progress(table).values()) == {4}
    assert verify_table(table).ok


def test_generation_from_before_a_column_was_added_gets_nulls(make_table):
    table, model = make_table()
    ds = table.dataset()
    ds.add_columns(pa.schema([pa.field("note", pa.string())]))
    assert memwal.open(table.uri).merge().ok
    rows = table_rows(table)
    assert all(r["note"] is None for r in rows)
    assert [{k: v for k, v in r.items() if k != "note"} for r in rows] == model.sorted_rows()


def test_generation_column_dropped_from_the_base_is_not_merged(make_table):
    """A column dropped from the base (its field id gone) is dropped from older generations
    too, as pylance's LsmScanner already shows them: the merge changes no reader's view."""
    table, model = make_table()
    table.dataset().drop_columns(["value"])
    before = lsm_rows(table)
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == before == model.sorted_rows(["id", "name", "vec"])
    assert progress(table)


def test_partitioned_local_engine_equals_in_memory(make_table):
    table, model = make_table()
    # internal entry: the engine's partition size is not an option users set
    result = run_merge(table, engine=LocalMergeEngine(partition_rows=50))
    assert result.commits == 2
    assert table_rows(table) == model.sorted_rows()


def test_merge_takes_the_lease(make_table):
    """The merge action (what the CLI, the API and Airflow run) serialises on the merge
    lease: while another holder has it the action fails (exit code 3) and writes nothing;
    a run takes the lease with the next fencing token and releases it."""
    from memwal import actions

    table, model = make_table()
    with Lease(table.store, "merge", holder="someone-else") as other:
        before = tree_digest(table.uri)
        with pytest.raises(LeaseHeldError, match="someone-else") as err:
            actions.run_action("merge", table.uri, lease_wait=0)  # give up at once
        assert err.value.exit_code == 3
        assert tree_digest(table.uri) == before
    assert progress(table) == {}
    released = LeaseRecord.from_json(table.store.get(lease_key("merge")))
    assert released.holder == "someone-else" and released.expires_at == 0
    doc = actions.run_action("merge", table.uri)
    assert doc["version"] == table.manifest().version
    assert set(progress(table).values()) == {4}
    assert table_rows(table) == model.sorted_rows()
    after = LeaseRecord.from_json(table.store.get(lease_key("merge")))
    assert after.holder != "someone-else"
    assert after.expires_at == 0  # released
    assert after.token == other.token + 1 == released.token + 1


def test_copy_of_table_merges_identically(make_table, tmp_path):
    """Two copies of the same input merged in different batch sizes end up identical."""
    table, model = make_table()
    copy = tmp_path / "copy"
    shutil.copytree(table.uri, copy)
    assert memwal.open(table.uri).merge().ok
    other = open_table(str(copy))
    for _ in range(4):
        assert memwal.open(other.uri).merge(max_generations=1).ok
    assert table_rows(table) == table_rows(other) == model.sorted_rows()


def test_a_merge_that_loses_its_lease_stops_before_its_next_side_effect(make_table):
    """An expired lease is taken over; the old holder's next check fails (exit code 3)
    and nothing it had not committed reaches the table."""
    from memwal.errors import LeaseLostError

    table, model = make_table()
    base_before = table_rows(table)
    clock = {"now": 1000.0}

    def stall(step):
        if step == "merge.after-read":
            clock["now"] += 120  # the merger stalls past its TTL (its heartbeat never wakes)...
            Lease(table.store, "merge", holder="new-merger").acquire()  # ...and is replaced

    with clocks.use(ScriptedClock(lambda: clock["now"])), steps.hooked(stall), \
            pytest.raises(LeaseLostError) as err:
        memwal.open(table.uri).merge(lease_ttl=60)
    assert err.value.exit_code == 3
    assert progress(table) == {}
    assert table_rows(table) == base_before
    assert lsm_rows(table) == model.sorted_rows()


def write_key_to_wrong_shard(table) -> int:
    """Put a key that another shard already holds unmerged: a broken sharding invariant."""
    states = all_shard_manifests(table.store)
    a, b = sorted(states)[:2]
    st_b = states[b]
    key = lance.dataset(table.store.uri_for(st_b.generation_key(st_b.flushed[0]))).to_table(columns=["id"])["id"][0]
    ds = table.dataset()
    row = ds.to_table(limit=1)
    with ds.mem_wal_writer(a) as w:
        w.put(row.set_column(0, "id", pa.array([key.as_py()], pa.int64())))
    return key.as_py()


def test_a_key_in_two_shards_is_refused(make_table):
    table, _ = make_table()
    key = write_key_to_wrong_shard(table)
    with pytest.raises(MemWalError, match=f"'id': {key}.*more than one shard"):
        memwal.open(table.uri).merge()
    assert progress(table) == {}
