"""pylance 14's own readers read every row after every job (issue 46): ``ShardWriter.lsm_scanner()``
through a writer kept open across the jobs and through a new writer, and ``LsmScanner`` over
snapshots built from the shard manifests as users build them (every listed generation). Each
read is compared with the model the writes were tracked in, never with memwal's own reader.

What the writers do (docs/decisions/0025-drain-protocol.md): a writer reads the base table as
it opened it and every generation its manifest lists, so GC takes merged generations out of
the manifest only once the writer opened after their merge or went quiet, rolls up what it
must keep listed (docs/decisions/0054-rollups.md), and deletes a folder only once no manifest a
reader or the writer may hold lists it.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

import memwal
from memwal.demo import Workload, shard_ids_for
from memwal.table import open_table
from memwal.table.naming import ROLLUP_MARKER
from memwal.table.shards import all_shard_manifests
from tests.clients.jobs import ZERO, every_job
from tests.clients.pylance_client import LiveWriter, client_view
from tests.helpers import run_cli

ONE = Workload(base_rows=200, shards=1, generations=0, rows_per_generation=30, seed=3, maintain_vector_index=False)


class Writes:
    """Keys for each generation: half updates of live keys, half new ones."""

    def __init__(self) -> None:
        self.fresh = itertools.count(10_000)

    def keys(self, live: LiveWriter) -> list[int]:
        old = sorted(live.model.rows)[live.n * 7 % 150:][:15]
        return old + [next(self.fresh) for _ in range(15)]



def listed(uri: str) -> list[int]:
    (state,) = all_shard_manifests(open_table(uri).store).values()
    return [g.generation for g in state.flushed]


def folders(uri: str) -> set[int]:
    shard = Path(uri, "_mem_wal", shard_ids_for(ONE)[0])
    return {int(p.name.rsplit("_", 1)[1]) for p in shard.iterdir() if "_gen_" in p.name}


def reads_every_row(w: LiveWriter) -> None:
    assert w.view() == w.model.sorted_rows(), "the live writer's lsm_scanner() differs from the model"
    assert client_view(w.uri) == w.model.sorted_rows(), "a reader of the shard manifests differs from the model"


def test_a_writer_kept_open_reads_every_row_after_every_job(live: LiveWriter, tmp_path: Path) -> None:
    """Every job runs after the writer's last flush, with GC as hard as it goes (no grace, every
    old version expired); the writer kept open reads every row after each. GC keeps what its view
    needs listed (``writer-live``), rolled up into one generation; the folders it replaced go
    once the writer's own flush stopped listing them. Once it closes, GC drains and frees
    everything, and a new writer reads every row."""
    writes = Writes()
    uri = live.uri
    t = memwal.open(uri)
    for name, job in every_job(uri, tmp_path):
        live.generation(writes.keys(live))
        assert job(), name
        reads_every_row(live)
    gc = t.gc(**ZERO).value
    merged = open_table(uri).manifest().compacted_generation(live.shard_id)
    assert merged == live.n and gc.drained == ()
    (state,) = all_shard_manifests(open_table(uri).store).values()
    (rollup,) = state.flushed  # every merged generation listed as one
    assert rollup.generation == merged and rollup_paths(uri) >= {rollup.path}
    assert {b.reason for b in gc.blocked if b.generation == merged} >= {"writer-live"}
    assert len(folder_names(uri)) <= 3  # the rollup, and what the writer's memory still lists
    assert run_cli("verify", uri).rc == 0

    live.close()
    freed = t.gc(**ZERO, writer_idle_seconds=0).value  # the writer is gone
    assert freed.drained[0].generations == (merged,)
    assert listed(uri) == [] and folders(uri) == set()
    with LiveWriter(uri, live.shard_id, live.model, seed=9) as again:
        reads_every_row(again)
        again.generation(writes.keys(again))
        reads_every_row(again)
    assert run_cli("verify", uri).rc == 0


def test_a_writer_that_never_stops_keeps_a_bounded_listing(live: LiveWriter) -> None:
    """The production shape (issue 54): a writer that stays open and writes between cycles of
    every job with default GC settings (grace period, versions kept). What every reader opens
    stays a few generations, the folders on storage stay bounded, and the writer, a new
    process and a reader of the manifests read every row at every step."""
    writes = Writes()
    uri = live.uri
    seen = []
    for _ in range(10):
        for _ in range(3):
            live.generation(writes.keys(live))
        assert run_cli("cycle", uri).rc == 0
        reads_every_row(live)
        seen.append((len(listed(uri)), len(folder_names(uri))))
    assert all(n <= 2 for n, _ in seen), seen  # a rollup, and what the writer flushed during the cycle
    # the grace period (600 s) keeps every replaced folder on storage: bounded by the writes of
    # that period, not by how long the writer has been open
    assert seen[-1][1] <= live.n + len(seen), seen
    with LiveWriter(uri, live.shard_id, live.model, seed=4) as other_process:
        reads_every_row(other_process)


def test_a_replaced_writer_lets_what_was_rolled_up_before_it_opened_leave_the_listing(live: LiveWriter) -> None:
    """The remedy for a writer that never reopens is to replace it now and then (issue 54). What
    was merged and rolled up before the new writer opened must stay in rollups of its own, not
    be rolled into the new writer's: one rollup of both is listed under the newer merge and waits
    for the new writer too, so a writer replaced every so often never saw its listing shrink."""
    writes, uri, t = Writes(), live.uri, memwal.open(live.uri)
    hour = {"grace_seconds": 3600, "expire_versions": 0}  # everything stays listed: for the grace period
    for _ in range(3):
        live.generation(writes.keys(live))
    assert t.merge().ok and t.gc(**hour).ok
    (before,) = listed(uri)  # the first writer's three merged generations, rolled up
    assert rollup_paths(uri)
    live.close()
    with LiveWriter(uri, live.shard_id, live.model, seed=9) as replaced:
        for _ in range(3):
            replaced.generation(writes.keys(replaced))
        assert t.merge().ok and t.gc(**hour).ok
        assert listed(uri)[0] == before, listed(uri)  # rolled up apart from the new writer's merges
        assert len(listed(uri)) == 2, listed(uri)
        reads_every_row(replaced)
        drained = t.gc(**ZERO).value  # the new writer opened after the first rollup's merge
        assert [d.generations for d in drained.drained] == [(before,)], drained.drained
        assert len(listed(uri)) == 1 and listed(uri)[0] > before
        reads_every_row(replaced)
        replaced.generation(writes.keys(replaced))
        reads_every_row(replaced)
    with LiveWriter(uri, live.shard_id, live.model, seed=10) as last:
        reads_every_row(last)


def test_a_writer_opened_for_each_write_keeps_its_flush_in_the_rollup_before_it(live: LiveWriter) -> None:
    """A client that opens a writer for each write (LanceDB claims an epoch at every ``add``) has
    one flush merged since its writer opened: it is rolled up with what came before, not kept
    apart as a second entry; a writer with more than one (a replaced pylance writer, above) is
    split at its open. Every reader reads every row throughout."""
    writes, uri, t = Writes(), live.uri, memwal.open(live.uri)
    hour = {"grace_seconds": 3600, "expire_versions": 0}  # everything stays listed: for the grace period
    for _ in range(3):
        live.generation(writes.keys(live))
    assert t.merge().ok and t.gc(**hour).ok
    (first,) = listed(uri)
    live.close()
    for seed in range(20, 24):
        with LiveWriter(uri, live.shard_id, live.model, seed=seed) as each:
            each.generation(writes.keys(each))
            assert t.merge().ok and t.gc(**hour).ok
            assert len(listed(uri)) == 1, listed(uri)  # one rollup: the writer's one flush went into it
            reads_every_row(each)
    assert listed(uri)[0] > first and len(rollup_paths(uri)) >= 2
    with LiveWriter(uri, live.shard_id, live.model, seed=30) as two:
        for _ in range(2):
            two.generation(writes.keys(two))
        assert t.merge().ok and t.gc(**hour).ok
        assert len(listed(uri)) == 2, listed(uri)  # two flushes since it opened: rolled up apart
        reads_every_row(two)


def rollup_paths(uri: str) -> set[str]:
    shard = Path(uri, "_mem_wal", shard_ids_for(ONE)[0])
    return {p.name for p in shard.iterdir() if (p / ROLLUP_MARKER).exists()}


def folder_names(uri: str) -> set[str]:
    shard = Path(uri, "_mem_wal", shard_ids_for(ONE)[0])
    return {p.name for p in shard.iterdir() if "_gen_" in p.name}


def test_a_writer_opened_after_the_merge_lets_gc_drain_and_keeps_its_folders_until_it_flushes(
        live: LiveWriter) -> None:
    """A new writer claims its epoch after the merge: its view has the merged rows, so GC drains
    them from the manifest at once; but it lists them in memory until its next flush, so their
    folders stay until then (``writer-live``), then go."""
    writes = Writes()
    uri, t = live.uri, memwal.open(live.uri)
    for _ in range(3):
        live.generation(writes.keys(live))
    assert t.merge().ok and t.catchup().ok
    live.close()
    with LiveWriter(uri, live.shard_id, live.model, seed=5) as fresh:
        drained = t.gc(**ZERO).value
        assert [d.generations for d in drained.drained] == [(1, 2, 3)] and drained.deleted == ()
        assert {b.reason for b in drained.blocked} == {"writer-live"} and folders(uri) == {1, 2, 3}
        assert listed(uri) == []
        reads_every_row(fresh)
        fresh.generation(writes.keys(fresh))  # its flush reloads the manifest
        assert listed(uri) == [4]
        freed = t.gc(**ZERO).value
        assert {g.generation for g in freed.deleted} == {1, 2, 3} and folders(uri) == {4}
        reads_every_row(fresh)
    with LiveWriter(uri, live.shard_id, live.model, seed=6) as last:
        reads_every_row(last)


def test_spark_jobs_follow_the_writer_too(live: LiveWriter, spark_session) -> None:
    writes = Writes()
    t = memwal.open(live.uri)
    for job in (lambda: t.merge(engine="spark"), lambda: t.catchup(engine="spark"),
                lambda: t.gc(**ZERO, engine="spark")):
        live.generation(writes.keys(live))
        assert job().ok
        reads_every_row(live)
    live.close()
    freed = t.gc(**ZERO, writer_idle_seconds=0, engine="spark").value
    assert {g.generation for g in freed.deleted} == {1} and listed(live.uri) == [2, 3]  # what was merged
    with LiveWriter(live.uri, live.shard_id, live.model, seed=8) as after:
        reads_every_row(after)


def test_gc_repairs_a_table_an_older_gc_left_unreadable(live: LiveWriter) -> None:
    """An older memwal deleted merged generations its shard manifest still listed: every client
    read fails, and verify says so, naming the shard and the generation. GC drains them (the
    repair), whatever the writer: the clients read every row again."""
    writes = Writes()
    uri, t = live.uri, memwal.open(live.uri)
    for _ in range(2):
        live.generation(writes.keys(live))
    assert t.merge().ok and t.catchup().ok
    live.close()
    (state,) = all_shard_manifests(open_table(uri).store).values()
    shutil.rmtree(Path(uri, "_mem_wal", live.shard_id, state.flushed[0].path))
    with pytest.raises(OSError, match="was not found"):
        client_view(uri)
    run = run_cli("verify", uri)
    assert run.rc == 1 and "listed-generations-readable" in run.stdout and live.shard_id in run.stdout
    assert "merged generation 1 " in run.stdout
    repaired = t.gc().value  # default options: the writer wrote a moment ago
    assert [(d.generations, d.repairs) for d in repaired.drained] == [((1,), (1,))]
    assert listed(uri) == [2]
    assert client_view(uri) == live.model.sorted_rows()
    assert run_cli("verify", uri).rc == 0
