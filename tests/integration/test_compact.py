"""Compaction of a MemWAL base table: few fragments, same rows, progress and catch-up kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import memwal
from memwal.actions import run_action
from memwal.compact.engine import one_task_at_a_time
from memwal.core import clock as clocks
from memwal.core import steps
from memwal.demo import Model, Workload, create_base_table, shard_ids_for, write_generations
from memwal.errors import BadInputError, LeaseHeldError, LeaseLostError
from memwal.lease import Lease, LeaseRecord, lease_key
from memwal.table import Table, open_table
from memwal.table.manifest import maintained_indexes
from memwal.table.shards import list_generation_dirs
from tests.conftest import SMALL, lsm_rows, table_rows
from tests.helpers import ROOT, assert_one_line_error, run_cli, tree_digest
from tests.interleave import ScriptedClock

# Many generations, each merged on its own: one new fragment (and deletion files) per merge.
MANY = Workload(base_rows=200, shards=2, generations=20, rows_per_generation=15, seed=21)


def build_many_merged(uri: str, storage_options: dict | None = None) -> tuple[Table, Model]:
    """A table after one merge per generation, with its indexes caught up."""
    _, model = create_base_table(uri, MANY, storage_options)
    write_generations(uri, MANY, model, storage_options=storage_options)
    t = memwal.open(uri, storage_options)
    for _ in range(MANY.generations):
        assert t.merge(max_generations=1).ok
    assert t.catchup().ok
    return open_table(uri, storage_options), model


@pytest.fixture(scope="module")
def many_merged(tmp_path_factory) -> tuple[str, Model]:
    root = tmp_path_factory.mktemp("many")
    table, model = build_many_merged(str(root / "t"))
    return table.uri, model


@pytest.fixture
def fresh(many_merged, tmp_path) -> tuple[Table, Model]:
    """A private copy of the many-merged table (building it costs seconds)."""
    uri, model = many_merged
    shutil.copytree(uri, tmp_path / "t", symlinks=True)
    return open_table(str(tmp_path / "t")), model


def fragments(table: Table) -> int:
    return len(table.dataset().get_fragments())


def all_generations_collected(table: Table, shards: list[str]) -> bool:
    return all(not list_generation_dirs(table.store, s) for s in shards)


def test_compaction_after_many_merges_keeps_rows_progress_and_catchup_then_gc_collects(fresh):
    table, model = fresh
    before = table.manifest()
    assert fragments(table) >= 20
    assert before.index_catchup == {"id_idx": before.compacted, "vec_idx": before.compacted}

    doc = memwal.open(table.uri).compact().to_dict()

    assert doc["version"] is not None and doc["engine"] == "local"
    assert doc["fragments_before"] >= 20 and doc["fragments_after"] == fragments(table) <= 3
    assert doc["fragments_removed"] >= 20 and doc["fragments_added"] >= 1
    assert doc["deletions_materialized"] > 0
    after = table.manifest()
    assert table_rows(table) == model.sorted_rows()
    assert after.compacted == before.compacted == {s: MANY.generations for s in shard_ids_for(MANY)}
    assert after.index_catchup == before.index_catchup  # read back from the table manifest
    assert {i["index_name"]: (i["caught_up"], i["recorded"], i["kept"]) for i in doc["indexes"]} == {
        n: (before.compacted, True, True) for n in maintained_indexes(after)}
    assert table.dataset().stats.index_stats("id_idx")["num_unindexed_rows"] == 0
    assert table.dataset().to_table(filter="id = 7").num_rows == (1 if 7 in model.rows else 0)

    gc = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert not gc["blocked"], gc["blocked"]
    assert len(gc["deleted"]) == MANY.shards * MANY.generations
    assert all_generations_collected(table, shard_ids_for(MANY))
    assert table_rows(table) == lsm_rows(table) == model.sorted_rows()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: Lance's tasks run one at a time")
def test_the_local_engine_runs_lances_tasks_side_by_side(fresh):
    """Lance's rewrite tasks run ``num_threads`` at a time, the machine's cores unless said otherwise,
    as Lance's own ``compact_files`` runs them (one at a time kept one core of two busy): held at
    its step, the first task goes on only once a second has started. Rows, progress and catch-up
    are what one at a time leaves."""
    table, model = fresh
    before = table.manifest()
    arrived: list[str] = []
    two = threading.Event()

    def hold(name: str) -> None:
        if name == "local.compact.task":
            arrived.append(threading.current_thread().name)
            if len(arrived) >= 2:
                two.set()
            assert two.wait(60), "a second task never started while the first was held"

    with steps.hooked(hold):
        doc = memwal.open(table.uri).compact(target_rows_per_fragment=100).to_dict()
    assert len(arrived) >= 2 and len(set(arrived[:2])) == 2, arrived
    assert doc["fragments_after"] == fragments(table) < doc["fragments_before"]
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().compacted == before.compacted
    assert table.manifest().index_catchup == before.index_catchup


def test_a_fleets_task_rewrites_one_lance_task_at_a_time(fresh):
    """Inside a cluster's task (a fleet's small table on Spark or Ray: one core of the cluster's),
    the local engine runs Lance's tasks one after the other, in the task's own thread."""
    table, model = fresh
    arrived: list[str] = []

    def seen(name: str) -> None:
        if name == "local.compact.task":
            arrived.append(threading.current_thread().name)

    with steps.hooked(seen), one_task_at_a_time():
        doc = memwal.open(table.uri).compact(target_rows_per_fragment=100).to_dict()
    assert len(arrived) >= 2 and set(arrived) == {threading.current_thread().name}, arrived
    assert doc["fragments_after"] == fragments(table) < doc["fragments_before"]
    assert table_rows(table) == model.sorted_rows()


def test_lance_compact_files_drops_catchup_and_compact_re_earns_it(fresh):
    """Hazard H4 as users hit it: a hand-run compact_files blocks GC; `memwal compact` repairs."""
    table, model = fresh
    before = table.manifest()
    table.dataset().optimize.compact_files()
    assert table.manifest().index_catchup == {} and table.manifest().compacted == before.compacted
    blocked = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True).to_dict()["blocked"]
    assert blocked and all(b["reason"].startswith("index-not-caught-up") for b in blocked)
    dry = memwal.open(table.uri).compact(dry_run=True).to_dict()  # the repair is a step of the plan
    assert dry["tasks"] == [] and dry["catchup_repair"] == sorted(before.index_catchup)
    assert table.manifest().index_catchup == {}  # the dry run wrote nothing

    result = memwal.open(table.uri).compact().value

    assert result.catchup_repaired and result.version is not None and result.fragments_removed == 0
    assert table.manifest().index_catchup == before.index_catchup
    assert all(i.recorded for i in result.indexes)
    assert memwal.open(table.uri).compact().value.version is None  # repaired: nothing more to do
    assert memwal.open(table.uri).compact(dry_run=True).to_dict()["catchup_repair"] == []
    assert table_rows(table) == model.sorted_rows()


def test_nothing_to_compact_commits_nothing(fresh):
    table, _ = fresh
    assert memwal.open(table.uri).compact().ok
    version = table.dataset().version
    digest = tree_digest(table.uri)
    doc = run_action("compact", table)
    assert doc["version"] is None and doc["fragments_removed"] == 0
    assert all(i["recorded"] for i in doc["indexes"])
    assert table.dataset().version == version
    after = tree_digest(table.uri)
    changed = {k for k in set(digest) | set(after) if digest.get(k) != after.get(k)}
    assert changed and all(k.startswith("_mem_wal/_jobs/") for k in changed)  # only our lease object


def test_dry_run_writes_nothing_and_shows_the_plan(fresh):
    table, _ = fresh
    before = tree_digest(table.uri)
    run = run_cli("compact", table.uri, "--dry-run", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["dry_run"] is True and doc["read_version"] == table.dataset().version
    assert doc["fragments_to_rewrite"] >= 20 and doc["tasks"] and doc["deletions_to_materialize"] > 0
    assert tree_digest(table.uri) == before
    human = run_cli("compact", table.uri, "--dry-run")
    assert human.rc == 0 and "would rewrite" in human.stdout and len(human.stdout.splitlines()) == 1
    assert tree_digest(table.uri) == before


def test_cli_json_and_human_output(fresh):
    table, model = fresh
    run = run_cli("compact", table.uri, "--target-rows-per-fragment", "100000", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    for key in ("version", "fragments_before", "fragments_after", "fragments_removed", "fragments_added",
                "deletions_materialized", "indexes", "engine"):
        assert key in doc
    assert doc["fragments_after"] < doc["fragments_before"]
    again = run_cli("compact", table.uri)
    assert again.rc == 0 and "nothing to compact" in again.stdout and len(again.stdout.splitlines()) == 1
    assert table_rows(table) == model.sorted_rows()


HOSTILE = [
    ("--target-rows-per-fragment", "0"),
    ("--target-rows-per-fragment", "-5"),
    ("--target-rows-per-fragment", "abc"),
    ("--max-rows-per-group", "0"),
    ("--max-rows-per-group", "1.5"),
    ("--max-fragments", "0"),
    ("--max-fragments", "-1"),
    ("--materialize-deletions-threshold", "1.5"),
    ("--materialize-deletions-threshold", "-0.1"),
    ("--materialize-deletions-threshold", "nan"),
    ("--materialize-deletions-threshold", "inf"),
    ("--materialize-deletions-threshold", "half"),
    ("--engine", "dask"),
    ("--lease-ttl", "0"),
    ("--lease-ttl", "nan"),
]


@pytest.fixture(scope="module")
def small_table(tmp_path_factory) -> Table:
    """One table for the hostile inputs: each must leave it byte-for-byte unchanged."""
    uri = str(tmp_path_factory.mktemp("small") / "t")
    _, model = create_base_table(uri, SMALL)
    write_generations(uri, SMALL, model)
    assert memwal.open(uri).merge(max_generations=1).ok
    return open_table(uri)


@pytest.mark.parametrize(("flag", "value"), HOSTILE)
def test_bad_options_exit_2_and_write_nothing(small_table, flag, value):
    table = small_table
    before = tree_digest(table.uri)
    run = run_cli("compact", table.uri, flag, value)
    assert_one_line_error(run, 2, flag)
    assert tree_digest(table.uri) == before


@pytest.mark.parametrize("options", [
    {"target_rows_per_fragment": 0},
    {"max_rows_per_group": -1},
    {"max_fragments": True},
    {"max_fragments": 2.5},
    {"materialize_deletions_threshold": float("nan")},
    {"materialize_deletions_threshold": 2},
])
def test_bad_options_from_the_python_api_write_nothing(small_table, options):
    table = small_table
    before = tree_digest(table.uri)
    with pytest.raises(BadInputError, match=next(iter(options))):
        run_action("compact", table, **options)
    assert tree_digest(table.uri) == before


def test_unknown_engine_from_the_python_api_writes_nothing(small_table):
    table = small_table
    before = tree_digest(table.uri)
    with pytest.raises(BadInputError, match="engine"):
        run_action("compact", table, engine="dask")
    assert tree_digest(table.uri) == before


def test_max_fragments_bounds_one_run(fresh):
    table, model = fresh
    n = fragments(table)
    result = memwal.open(table.uri).compact(max_fragments=5).value
    assert result.fragments_removed <= 5 and fragments(table) > n - 5
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().index_catchup["id_idx"] == table.manifest().compacted


def test_held_compact_lease_exits_3(fresh):
    table, _ = fresh
    with Lease(table.store, "compact"):
        version = table.dataset().version
        with pytest.raises(LeaseHeldError):
            run_action("compact", table)
        run = run_cli("compact", table.uri)
        assert_one_line_error(run, 3, "compact lease")
        assert table.dataset().version == version


def test_lease_lost_before_the_commit_commits_nothing(fresh):
    table, model = fresh
    now = [1000.0]
    version = table.dataset().version

    def stall(step: str) -> None:
        if step == "compact.after-tasks":
            now[0] += 120  # the rewrite outlived the lease (its heartbeat never wakes)

    with clocks.use(ScriptedClock(lambda: now[0])), steps.hooked(stall), pytest.raises(LeaseLostError):
        memwal.open(table.uri).compact(lease_ttl=60)
    assert table.dataset().version == version
    assert table_rows(table) == model.sorted_rows()


def test_crash_after_tasks_before_commit_then_rerun_converges(fresh, tmp_path):
    """A process killed between the rewrite and the commit: nothing committed, rerun finishes."""
    table, model = fresh
    version, digest_versions = table.dataset().version, sorted(os.listdir(Path(table.uri) / "_versions"))
    script = tmp_path / "crash.py"
    script.write_text(
        "import os, sys\n"
        "import memwal\n"
        "from memwal.core import steps\n"
        "def kill(step):\n"
        "    if step == 'compact.after-tasks':\n"
        "        os._exit(9)\n"
        "with steps.hooked(kill):\n"
        "    memwal.open(sys.argv[1]).compact(lease_ttl=60)\n"
    )
    proc = subprocess.run([sys.executable, str(script), table.uri], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert table.dataset().version == version
    assert sorted(os.listdir(Path(table.uri) / "_versions")) == digest_versions
    assert table_rows(table) == model.sorted_rows()

    result = memwal.open(table.uri).compact().value  # takes over the dead process's lease
    assert LeaseRecord.from_json(table.store.get(lease_key("compact"))).token == 2
    assert result.version is not None and fragments(table) <= 3
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().index_catchup == {"id_idx": table.manifest().compacted,
                                              "vec_idx": table.manifest().compacted}


def test_crash_after_commit_before_catchup_then_rerun_re_earns_it(fresh):
    table, model = fresh
    before = table.manifest()

    def crash(step: str) -> None:
        if step == "compact.after-commit":
            raise RuntimeError("killed")

    with steps.hooked(crash), pytest.raises(RuntimeError, match="killed"):
        memwal.open(table.uri).compact()
    assert fragments(table) <= 3 and table.manifest().index_catchup == {}  # H4: the record is gone

    result = memwal.open(table.uri).compact().value
    assert result.catchup_repaired and result.fragments_removed == 0
    assert table.manifest().index_catchup == before.index_catchup
    assert table.manifest().compacted == before.compacted
    assert table_rows(table) == model.sorted_rows()


def test_compaction_on_s3(s3_server):
    uri, opts = s3_server.new_table("compact")
    _, model = create_base_table(uri, SMALL, opts)
    write_generations(uri, SMALL, model, storage_options=opts)
    table = open_table(uri, opts)
    t = memwal.open(uri, opts)
    for _ in range(SMALL.generations):
        assert t.merge(max_generations=1).ok
    assert t.catchup().ok
    before = table.manifest()
    n = fragments(table)
    assert t.compact(dry_run=True).value.tasks
    result = run_action("compact", uri, opts)
    assert result["version"] is not None and result["fragments_after"] < n
    assert table_rows(table) == model.sorted_rows()
    after = table.manifest()
    assert after.compacted == before.compacted and after.index_catchup == before.index_catchup
    gc = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert len(gc["deleted"]) == SMALL.shards * SMALL.generations
    assert all_generations_collected(table, shard_ids_for(SMALL))
    assert table_rows(table) == model.sorted_rows()


def test_a_followers_tail_pass_rewrites_only_the_small_fragments_merges_appended(fresh):
    """The tail pass (memwal.follow.table.tail_pass) runs every few merges: it must leave a large
    fragment as it is, its deletions included (the whole compaction materialises them), so its cost
    is what was merged since, not the table."""
    from memwal.actions.options import CompactOptions
    from memwal.follow.table import tail_pass

    table, model = fresh
    before = table.manifest()
    frags = table.dataset().get_fragments()
    large = {f.fragment_id: f.metadata for f in frags if f.metadata.physical_rows >= 100}
    small = {f.fragment_id for f in frags if f.metadata.physical_rows < 100}
    assert large and len(small) >= 20
    # deleted past Lance's threshold (10%): the whole compaction would rewrite it
    assert any(m.num_deletions > 0.1 * m.physical_rows for m in large.values())
    o = tail_pass(CompactOptions(target_rows_per_fragment=100))
    assert o.target_rows_per_fragment == 100 and o.materialize_deletions_threshold == 1.0
    assert tail_pass(None).target_rows_per_fragment == 65_536  # never more than TAIL_ROWS

    doc = memwal.open(table.uri).compact(target_rows_per_fragment=o.target_rows_per_fragment,
                                         materialize_deletions_threshold=o.materialize_deletions_threshold)

    after = {f.fragment_id: f.metadata for f in table.dataset().get_fragments()}
    assert doc.value.version is not None and doc.value.fragments_removed == len(small)
    assert {i: after[i] for i in large} == large  # the same files and deletion files: untouched
    assert not small & set(after) and len(after) - len(large) <= len(small) // 4  # a few in their place
    assert table_rows(table) == lsm_rows(table) == model.sorted_rows()
    assert table.manifest().compacted == before.compacted
    assert table.manifest().index_catchup == before.index_catchup
