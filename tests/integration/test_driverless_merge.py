"""The driverless Spark merge: executors write the base table, the driver commits metadata in
two commits. A crash at every named step of both commits (SIGKILL of the whole process tree),
readers and GC between the commits, the next merge recognising applied data, and the path
a batch takes (``commit_path``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import LsmScanner, ShardSnapshot

import memwal
from memwal.demo import Workload, shard_ids_for
from memwal.table import Table
from memwal.table.shards import all_shard_manifests
from tests.conftest import SMALL, lsm_rows, table_rows
from tests.helpers import run_cli
from tests.interleave import Barrier, Stalled

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

VENV_BIN = Path(sys.executable).parent


def pylance_view(table: Table) -> list[dict]:
    """What pylance's own ``LsmScanner`` shows, its snapshots built by hand from the shard
    manifests (every flushed generation above the recorded progress), as a user's reader does."""
    m = table.manifest()
    snaps = []
    for sid, st in all_shard_manifests(table.store).items():
        snap = ShardSnapshot(sid).with_current_generation(st.current_generation)
        for g in st.flushed:
            if g.generation > m.compacted_generation(sid):
                snap = snap.with_sstable(g.generation, g.path)
        snaps.append(snap)
    rows = LsmScanner.from_snapshots(table.dataset(m.version), snaps).to_table().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


def data_files(table: Table, version: int | None = None) -> set[str]:
    """The data files the table's fragments name at ``version`` (latest when None)."""
    return {df.path for f in table.dataset(version).get_fragments() for df in f.metadata.files}


def unreferenced(table: Table) -> set[str]:
    """Data and deletion files on disk that no version of the table names."""
    named: set[str] = set()
    for v in table.dataset().versions():
        for f in table.dataset(v["version"]).get_fragments():
            named |= {f"data/{df.path}" for df in f.metadata.files}
            d = f.metadata.deletion_file
            if d is not None:
                named.add(f"_deletions/{f.fragment_id}-{d.read_version}-{d.id}."
                          f"{'arrow' if d.file_type == 'array' else 'bin'}")
    root = Path(table.uri)
    on_disk = {str(p.relative_to(root)) for sub in ("data", "_deletions") for p in (root / sub).glob("*")}
    return on_disk - named


def assert_converged(table: Table, model) -> None:
    rows = table_rows(table)
    assert rows == model.sorted_rows()  # 0 rows lost, 0 duplicated, every value the newest
    assert len({r["id"] for r in rows}) == len(rows) == lance.dataset(table.uri).count_rows()
    verify = run_cli("verify", table.uri, "--json")
    assert verify.rc == 0, verify.stdout


def generation_dirs(table: Table) -> set[str]:
    return {p.name for p in Path(table.uri, "_mem_wal").glob("*/*_gen_*")}


# The named steps of a driverless batch, in order; the first is held inside an executor task.
STEPS = ["spark.merge.read-task", "merge.after-read", "merge.before-data-commit", "merge.after-data-commit",
         "merge.before-marked-commit", "merge.after-marked-commit"]
#: Steps at which the data commit has landed and the marker has not.
WINDOW = {"merge.after-data-commit", "merge.before-marked-commit"}


@pytest.mark.parametrize("kill_at", STEPS)
def test_sigkill_at_every_step_then_rerun_converges(make_table, spark_session, tmp_path, kill_at):
    """``memwal merge --engine spark`` held at a step, SIGKILLed with its JVM and Python
    workers; readers, GC and verify are right in whatever state it left; a rerun converges to
    the row model written by ShardWriter, and after a kill between the two commits it commits
    the marker alone, writing no row again."""
    table, model = make_table()
    before = table_rows(table)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    with Barrier(str(tmp_path / "barrier"), kill_at) as barrier:
        env["MEMWAL_STEP_BARRIER"] = barrier.directory
        proc = subprocess.Popen([str(VENV_BIN / "memwal"), "merge", table.uri, "--engine", "spark"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            barrier.wait_reached()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI, its JVM and the Python workers: one process group
            proc.wait()
    # Whatever the step: readers see every key's newest value, nothing is merged twice.
    assert lsm_rows(table) == pylance_view(table) == model.sorted_rows()
    assert run_cli("verify", table.uri).rc == 0
    landed = table_rows(table) != before
    assert landed == (kill_at in WINDOW | {"merge.after-marked-commit"})
    if kill_at in WINDOW:
        assert table.manifest().compacted == {}  # data without marker: still unmerged
        gens = generation_dirs(table)
        gc = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).value
        assert gc.deleted == () and generation_dirs(table) == gens  # GC keeps what is not merged
        assert {b["reason"].split(":")[0] for b in gc.to_dict()["blocked"]} == {"not-merged"}
    files = data_files(table)
    rerun = memwal.open(table.uri).merge(engine="spark").value
    assert_converged(table, model)
    assert table.manifest().compacted == {s: SMALL.generations for s in shard_ids_for(SMALL)}
    if kill_at in WINDOW:
        # recognised from the data commit's transaction properties: the marker alone
        assert (rerun.commit_path, rerun.commits) == ("marker", 1), rerun
        assert data_files(table) == files and sum(s.rows_upserted for s in rerun.shards) == 0
    elif kill_at == "merge.after-marked-commit":
        assert rerun.version is None
    else:
        assert rerun.commit_path == "driverless" and rerun.commits == 2, rerun


def test_readers_between_the_two_commits_see_every_keys_newest_value(make_table, spark_session):
    """Held between the data commit and the marker: the base already holds the new rows and the
    generations still shadow it with the same rows, so pylance's LsmScanner and memwal's scan
    both show the model; then the marker lands and nothing a reader sees changes."""
    table, model = make_table()
    before = table_rows(table)
    held = Stalled(lambda: memwal.open(table.uri).merge(engine="spark"), "merge.after-data-commit")
    try:
        assert table_rows(table) != before and table.manifest().compacted == {}
        assert pylance_view(table) == model.sorted_rows()
        assert sorted(memwal.open(table.uri).scan().to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()
        assert run_cli("verify", table.uri).rc == 0
    finally:
        held.resume()
    assert held.error is None, held.error
    assert held.outcome.value.commit_path == "driverless"
    assert pylance_view(table) == lsm_rows(table) == model.sorted_rows()
    assert_converged(table, model)


def test_the_result_and_history_say_which_path_committed(make_table, spark_session):
    table, model = make_table()
    t = memwal.open(table.uri)
    first = t.merge(engine="spark", max_generations=2).to_dict()
    assert first["commit_path"] == "driverless" and first["commits"] == 2
    assert t.merge(max_generations=1).to_dict()["commit_path"] == "driver"  # the local engine
    runs = [r for r in json.loads(run_cli("history", table.uri, "--json").stdout)["runs"] if r["job"] == "merge"]
    assert [r["figures"]["commit_path"] for r in runs] == ["driver", "driverless"]
    assert t.merge(engine="spark").ok
    assert_converged(table, model)


def test_a_merge_operator_table_keeps_the_drivers_marked_merge_insert(spark_session, tmp_path):
    """Folding twice would be wrong and a reader between two commits would double-count: a table
    with merge operators commits data and marker in one marked merge_insert, on Spark too."""
    from tests.integration.test_merge_ops import approx, base_rows, build_folding_table

    uri = str(tmp_path / "t")
    model = build_folding_table(uri)
    result = memwal.open(uri).merge(engine="spark").value
    assert result.commit_path == "driver"
    assert approx(base_rows(uri)) == approx(model.rows())


def test_data_applied_before_merge_operators_were_turned_on_is_not_folded_again(make_table, spark_session):
    """A driverless batch stops between its commits; merge operators are turned on; the next
    merge (now folding) finds the applied data and commits the marker alone: the generations'
    values are in the base once, as last write wins had them when the batch was planned."""

    class Crash(Exception):
        pass

    table, model = make_table()

    def crash(name: str) -> None:
        if name == "merge.after-data-commit":
            raise Crash(name)

    from memwal.core import steps

    with steps.hooked(crash), pytest.raises(Crash):
        memwal.open(table.uri).merge(engine="spark")
    applied = table_rows(table)
    assert applied == model.sorted_rows()
    memwal.open(table.uri).merge_ops(set={"value": "sum"}, force=True)
    dry = memwal.open(table.uri).merge(dry_run=True).value.to_dict()
    assert {s["applied_generation"] for s in dry["shards"]} == {SMALL.generations} and len(dry["applied"]) == 1
    done = memwal.open(table.uri).merge().value
    assert (done.commit_path, done.commits) == ("marker", 1)
    assert table_rows(table) == applied  # nothing folded a second time
    assert set(table.manifest().compacted.values()) == {SMALL.generations}


def test_a_table_with_no_fragment_takes_the_driver_path(tmp_path, spark_session):
    """No fragment to fence with: the first batch of an empty base table commits on the driver."""
    from memwal.demo import create_base_table, write_generations

    wl = Workload(base_rows=0, shards=2, generations=2, rows_per_generation=30, indexes=False, seed=4)
    uri = str(tmp_path / "t")
    _, model = create_base_table(uri, wl)
    write_generations(uri, wl, model)
    first = memwal.open(uri).merge(engine="spark").value
    assert first.commit_path == "driver"
    t = memwal.open(uri)
    write_generations(uri, wl, model, generations=1, seed_offset=9)
    assert t.merge(engine="spark").value.commit_path == "driverless"
    rows = sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: r["id"])
    assert rows == model.sorted_rows()


def test_key_lookup_through_the_index_and_the_scan_find_the_same_rows(make_table):
    """The executors' two ways to find a batch's base rows agree (memwal.merge.base_rows): a
    few signed integer keys through Lance's filter, others (here: unsigned) by a scan."""
    from memwal.merge.base_rows import base_addresses

    table, _ = make_table()
    ds = table.dataset()
    wanted = list(range(0, 300, 7)) + [10**9]  # 43 live keys and one that is not in the base
    by_filter = base_addresses(ds, pa.table({"id": pa.array(wanted, pa.int64())}), ["id"])
    by_scan = base_addresses(ds, pa.table({"id": pa.array(wanted, pa.uint64())}), ["id"])
    rows = ds.scanner(columns=["id"], with_row_address=True).to_table()
    want = {a for i, a in zip(rows["id"].to_pylist(), rows["_rowaddr"].to_pylist(), strict=True) if i in wanted}
    assert len(want) == 43 and set(by_filter.tolist()) == set(by_scan.tolist()) == want


def test_applied_data_counts_only_while_no_marker_landed_after_it(make_table, spark_session):
    """A driverless batch stops between its commits; then a stale merger's marked pass (made up
    here with Lance's own API: the driver-path intents keep a real one out of that window)
    writes generation 1's older values of one shard and marks it merged. The next plan must not
    trust the data commit for that shard any more (those rows may be older now): it merges
    generations 2.. of it again, and the table is the model."""
    from lance.mem_wal import CompactedSsTable

    from memwal.core import steps

    class Crash(Exception):
        pass

    def crash(name: str) -> None:
        if name == "merge.after-data-commit":
            raise Crash(name)

    table, model = make_table()
    with steps.hooked(crash), pytest.raises(Crash):
        memwal.open(table.uri).merge(engine="spark")
    sid, st = sorted(all_shard_manifests(table.store).items())[0]
    gen1 = lance.dataset(table.store.uri_for(st.generation_key(st.generation(1)))).to_table()
    stale = gen1.filter(pa.compute.invert(gen1.column("_tombstone"))).drop_columns(["_tombstone"])
    stale = stale.select(table.dataset().schema.names).cast(table.dataset().schema)
    # internal entry: a stale driver-path merger's marked pass of shard generation 1
    table.dataset().merge_insert("id").when_matched_update_all().when_not_matched_insert_all() \
        .mark_sstables_as_compacted([CompactedSsTable(sid, 1)]).execute(stale)
    assert table_rows(table) != model.sorted_rows()
    plan = memwal.open(table.uri).merge(dry_run=True).value
    by_shard = {s.shard_id: s for s in plan.shards}
    assert by_shard[sid].applied_generation == 0 and by_shard[sid].from_generation == 2
    assert {s.applied_generation for k, s in by_shard.items() if k != sid} == {SMALL.generations}
    done = memwal.open(table.uri).merge(engine="spark").value
    assert done.commit_path == "driverless"
    assert_converged(table, model)
