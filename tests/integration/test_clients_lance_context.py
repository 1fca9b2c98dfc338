"""lance-context 0.6.7, the production MemWAL client, reads every row after every job (issue 46).

Its store is written by one long-lived lance-context process (Lance 9 inside, in its own
virtual environment: ``make lance-context``), kept open across the jobs, as its users run it;
reads go through that live process and through new processes. Every read is compared with an
independent model of what was written. A *control* copy receives the same writes and never
a job: where a read of the treated store fails, the same read of the control tells whether
lance-context fails there by itself (0.6.7 does: a process that opens a store whose replay
position lags replays the last WAL entry into a generation it indexes twice, and ``list()``
then fails, "RowAddrTreeMap::from_sorted_iter").
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from lance.file import LanceFileReader

import memwal
from memwal.table import open_table
from memwal.table.shards import UNLABELLED, all_shard_manifests, list_wal_entries, read_wal_entry_meta
from tests.clients.context_store import LanceContextStore, available, row
from tests.clients.jobs import ZERO, every_job
from tests.clients.piped import ClientError
from tests.clients.pylance_client import client_view
from tests.helpers import run_cli

pytestmark = pytest.mark.skipif(not available(), reason="lance-context's venv is missing: make lance-context")



class Client:
    """A live lance-context store and its control copy, written alike, and the model of both."""

    def __init__(self, root: Path, name: str = "t") -> None:
        self.uri = str(root / "lake" / name)
        self.control_uri = str(root / "control" / name)
        self.live = LanceContextStore(self.uri, create=True)
        self.control = LanceContextStore(self.control_uri, create=True)
        self.model: dict[str, dict[str, Any]] = {}
        self.fresh = itertools.count()
        self.n = 0

    def generation(self, size: int = 12) -> None:
        """One flushed generation: updates of live keys and new ones, in both stores."""
        self.n += 1
        old = sorted(self.model)[self.n % 5::3][: size // 2]
        rows = [row(k, self.n * 1000 + i, None if i % 4 == 0 else f"g{self.n}") for i, k in enumerate(old)]
        rows += [row(f"k{next(self.fresh):05d}", self.n, f"g{self.n}") for _ in range(size - len(rows))]
        for store in (self.live, self.control):
            store.write(rows)
        self.model.update({r["id"]: r for r in rows})

    def reads_every_row(self) -> None:
        """The live process, a new process, and ``get`` of some keys, against the model."""
        assert self.live.rows() == self.model, "lance-context's live process misses rows"
        for key in sorted(self.model)[::7]:
            assert self.live.get(key) == self.model[key]
        assert self.reopened_rows() == self.model, "a new lance-context process misses rows"

    def reopened_rows(self, uri: str | None = None) -> dict[str, dict[str, Any]]:
        with LanceContextStore(uri or self.uri) as store:
            return store.rows()

    def close(self) -> None:
        self.live.close()
        self.control.close()


@pytest.fixture
def client(tmp_path: Path):
    c = Client(tmp_path)
    yield c
    c.close()


def listed(uri: str) -> list[int]:
    (state,) = all_shard_manifests(open_table(uri).store).values()
    return [g.generation for g in state.flushed]


def folders(uri: str) -> set[int]:
    (shard,) = [p for p in Path(uri, "_mem_wal").iterdir() if not p.name.startswith("_")]
    return {int(p.name.rsplit("_", 1)[1]) for p in shard.iterdir() if "_gen_" in p.name}


def test_every_job_follows_the_live_writer_and_every_process_reads_every_row(client: Client, tmp_path: Path) -> None:
    uri = client.uri
    t = memwal.open(uri)
    client.generation()
    for name, job in every_job(uri, tmp_path):
        client.generation()
        assert job(), name
        client.reads_every_row()
        assert client_view(uri) == client_view(client.control_uri)  # pylance reads it too
    kept = t.gc(**ZERO).value
    merged = open_table(uri).manifest().compacted_generation(next(iter(open_table(uri).manifest().compacted)))
    # what the live writer's view needs stays listed, rolled up: one entry for every merged generation
    assert kept.drained == () and {b.reason for b in kept.blocked} == {"writer-live"}
    assert [g for g in listed(uri) if g <= merged] == [merged] and run_cli("verify", uri).rc == 0

    client.live.close()  # the writer is gone: GC frees what it kept
    freed = t.gc(**ZERO, writer_idle_seconds=0).value
    assert freed.drained[0].generations == (merged,)
    assert listed(uri) == list(range(merged + 1, client.n + 1)) and folders(uri) == set(listed(uri))
    assert client.reopened_rows() == client.model
    with LanceContextStore(uri) as owner:  # lance-context's own merger works on what is left
        assert owner.cleanup_wal() == client.n - merged
        assert owner.rows() == client.model
    assert run_cli("verify", uri).rc == 0


def test_merge_takes_over_after_lance_contexts_own_merger(client: Client) -> None:
    """``cleanup_wal()`` records its progress only by draining the shard manifest (at most 8
    generations a call). memwal reads that as merged: it merges what follows, and verify agrees."""
    for _ in range(11):
        client.generation(6)
    assert client.live.cleanup_wal() == 8
    assert listed(client.uri) == [9, 10, 11]
    status = json.loads(run_cli("status", client.uri, "--json").stdout)
    (shard,) = status["shards"]
    assert (shard["compacted_generation"], shard["merged_generation"], shard["unmerged_generations"]) == (
        0, 8, [9, 10, 11])
    assert run_cli("verify", client.uri).rc == 0
    merged = memwal.open(client.uri).merge().value
    assert [(s.from_generation, s.to_generation) for s in merged.shards] == [(9, 11)]
    client.reads_every_row()
    client.live.close()
    assert memwal.open(client.uri).gc(**ZERO, writer_idle_seconds=0).ok
    assert listed(client.uri) == [] and folders(client.uri) == set()
    assert client.reopened_rows() == client.model and run_cli("verify", client.uri).rc == 0


def test_gc_places_wal_entries_that_name_no_generation(client: Client) -> None:
    """Lance 9 WAL entries carry a writer epoch and no generation: GC places them by position
    (exit 0, never 2), deletes those of deletable generations, and says why it keeps others."""
    for _ in range(4):
        client.generation()
    table = open_table(client.uri)
    (shard,) = all_shard_manifests(table.store)
    entries = list_wal_entries(table.store, shard)
    assert entries and all(read_wal_entry_meta(table.store, shard, e.position).generation == UNLABELLED
                           for e in entries)
    assert memwal.open(client.uri).merge(max_generations=2).ok and memwal.open(client.uri).catchup().ok
    client.live.close()
    run = run_cli("gc", client.uri, "--grace-seconds", "0", "--expire-versions", "0", "--writer-idle-seconds", "0",
                  "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert {d["generation"] for d in doc["deleted"]} == {1, 2}
    assert {k["reason"] for k in doc["kept_wal_entries"]} <= {"wal-generation-unknown", "wal-needed-for-replay"}
    assert doc["kept_wal_entries"]  # not every generation goes: their entries stay, with a reason
    assert client.reopened_rows() == client.model


def test_rows_come_from_the_generation_when_the_manifest_lacks_them(client: Client) -> None:
    """Lance 9 manifests carry no row counts: status reads them from the generations (never
    0), and ``--max-rows`` bounds a merge by them."""
    for _ in range(3):
        client.generation(10)
    (state,) = all_shard_manifests(open_table(client.uri).store).values()
    assert all(g.physical_rows is None for g in state.flushed)
    status = json.loads(run_cli("status", client.uri, "--json").stdout)
    assert status["unmerged_rows"] == 30 and status["shards"][0]["unmerged_rows"] == 30
    merged = memwal.open(client.uri).merge(max_rows=25).value
    assert [(s.from_generation, s.to_generation) for s in merged.shards] == [(1, 2)]
    client.reads_every_row()


def test_spark_merge_and_gc_follow_the_live_writer(client: Client, spark_session) -> None:
    t = memwal.open(client.uri)
    for job in (lambda: t.merge(engine="spark"), lambda: t.gc(**ZERO, engine="spark")):
        client.generation()
        assert job().ok
        client.reads_every_row()


def test_a_zero_grace_fleet_run_leaves_every_store_readable(tmp_path: Path) -> None:
    """The fleet over several stores, each with its live writer, under a zero-grace policy;
    then once more with the writers gone and the writer idle period at zero."""
    clients = [Client(tmp_path, f"t{i}") for i in range(3)]
    try:
        policy = tmp_path / "zero.yaml"
        policy.write_text("defaults: {options: {gc: {grace_seconds: 0, expire_versions: 0}}}\n")
        for c in clients:
            for _ in range(3):
                c.generation()
        assert run_cli("fleet", "run", str(tmp_path / "lake"), "--policy", str(policy)).rc == 0
        for c in clients:
            c.reads_every_row()
            c.live.close()
        policy.write_text("defaults: {options: {gc: {grace_seconds: 0, expire_versions: 0, "
                          "writer_idle_seconds: 0}}}\n")
        assert run_cli("fleet", "run", str(tmp_path / "lake"), "--policy", str(policy)).rc == 0
        for c in clients:
            assert c.reopened_rows() == c.model
            assert folders(c.uri) == set(listed(c.uri))
    finally:
        for c in clients:
            c.close()


def replay_lags(uri: str) -> bool:
    """Whether the shard manifest's replay position is behind its last WAL entry, so that the
    next lance-context process replays that entry (lance-context's flush, called right after
    its ``add``, now and then records the entry before the one it sealed)."""
    store = open_table(uri).store
    (state,) = all_shard_manifests(store).values()
    positions = [e.position for e in list_wal_entries(store, state.shard_id)]
    return state.replay_after_wal_entry_position < max(positions, default=0)


def doubly_indexed(uri: str) -> set[int]:
    """Generations on storage whose ``_pk_index`` lists a row address twice: the input Lance
    9's block list refuses ("RowAddrTreeMap::from_sorted_iter called with non-sorted input")."""
    out: set[int] = set()
    (shard,) = [p for p in Path(uri, "_mem_wal").iterdir() if not p.name.startswith("_")]
    for folder in shard.glob("*_gen_*"):
        ids = LanceFileReader(str(folder / "_pk_index" / "page_data.lance")).read_all().to_table()["ids"]
        if len(ids) != len(set(ids.to_pylist())):
            out.add(int(folder.name.rsplit("_", 1)[1]))
    return out


def restart(uri: str, rows: list[dict[str, Any]], model: dict[str, dict[str, Any]]) -> str:
    """A new lance-context process writes ``rows`` as one generation (none when empty) and reads
    the store whole: "model" when it reads ``model`` and ``rows`` right, else what went wrong."""
    expected = {**model, **{r["id"]: r for r in rows}}
    with LanceContextStore(uri) as store:
        try:
            if rows:
                store.write(rows)
            got = store.rows()
        except ClientError as exc:
            return f"error: {exc}"
    return "model" if got == expected else "wrong rows"


def test_a_restart_reads_alike_with_and_without_memwal_and_memwals_drain_heals_it(tmp_path: Path) -> None:
    """lance-context 0.6.7's restart bug is its own, and memwal neither hastens it nor hides it.

    When its writer exits with the replay position one WAL entry behind (its own flush race), the
    next process replays that entry into its first generation and indexes each replayed row
    twice in the generation's ``_pk_index``; every reader that lists that generation then fails.
    Each state is forked into a treated copy and a byte-identical control, and ``memwal cycle``
    (merge, catchup, compact, GC's drain and WAL deletes, snapshot) runs on the treated one
    only: a restart then reads alike in both, every row when the position was current, the
    client's own error when it lagged. The next cycle, with that process gone, merges and drains
    the doubly indexed generation, and lance-context reads every row again; the control does not."""
    written = str(tmp_path / "written")
    forks: dict[str, dict[str, dict[str, Any]]] = {}  # "current" / "lagging" -> the model at the fork
    model: dict[str, dict[str, Any]] = {}
    with LanceContextStore(written, create=True) as writer:
        for n in range(1, 201):  # the lagging state is lance-context's own flush race: it may take many flushes
            rows = [row(k, 1000 * n, f"g{n}") for k in sorted(model)[n % 3::4][:6]]
            rows += [row(f"k{n:03d}{i}", n) for i in range(12 - len(rows))]
            writer.write(rows)
            model.update({r["id"]: r for r in rows})
            state = "lagging" if replay_lags(written) else "current"
            if state not in forks:
                shutil.copytree(written, tmp_path / state / "treated")
                forks[state] = dict(model)
            if len(forks) == 2:
                break
    assert set(forks) == {"current", "lagging"}, f"lance-context's replay position was only {set(forks)} in 200 flushes"

    cycle = ("--grace-seconds", "0", "--expire-versions", "0", "--writer-idle-seconds", "0")
    after = [row("after", 1, "restart")]
    for state, at in forks.items():
        treated, control = str(tmp_path / state / "treated"), str(tmp_path / state / "control")
        shutil.copytree(treated, control)
        assert run_cli("cycle", treated, *cycle).rc == 0
        assert listed(treated) == [] and replay_lags(treated) == (state == "lagging")
        seen = restart(treated, after, at), restart(control, after, at)
        if state == "current":
            assert seen == ("model", "model"), seen
            assert doubly_indexed(treated) == doubly_indexed(control) == set()
            continue
        assert seen[0] == seen[1] and "from_sorted_iter called with non-sorted input" in seen[1], seen
        assert doubly_indexed(control) == {max(listed(control))} and doubly_indexed(treated) == set(listed(treated))
        check = run_cli("verify", control)  # verify fails where the client's read fails, naming it
        assert check.rc == 1 and "listed-key-indexes-unique" in check.stdout, check.stdout
        assert run_cli("cycle", treated, *cycle).rc == 0  # the replaying process is gone: merged, drained
        assert listed(treated) == [] and folders(treated) == set()
        assert restart(treated, [], {**at, "after": after[0]}) == "model"
        assert "from_sorted_iter" in restart(control, [], at)  # no compactor ran: it stays unreadable


def test_a_store_that_never_stops_keeps_a_bounded_listing(client: Client) -> None:
    """The production shape (issue 54): one lance-context process writes between cycles of
    every job with default settings (grace period, versions kept, the writer live). What every
    reader opens stays a few generations, and the live store, a new process and pylance read
    every row at every step."""
    seen = []
    for _ in range(8):
        for _ in range(3):
            client.generation(8)
        assert run_cli("cycle", client.uri).rc == 0
        client.reads_every_row()
        assert client_view(client.uri) == client_view(client.control_uri)
        seen.append(len(listed(client.uri)))
    assert max(seen) <= 2, seen  # a rollup, and what was flushed during the cycle
    assert run_cli("verify", client.uri).rc == 0


def test_cleanup_wal_as_the_merger_and_memwal_for_the_rest(client: Client) -> None:
    """One merger per table (docs/clients.md): lance-context's ``cleanup_wal()`` in the writer
    process, and memwal's cycle without its merge. Nothing stays listed, memwal merges nothing,
    every process reads every row, and GC frees what ``cleanup_wal()`` merged once it may."""
    rest = ("--jobs", "catchup,compact,gc,snapshot")
    for _ in range(4):
        for _ in range(3):
            client.generation(8)
        assert client.live.cleanup_wal() == 3 and listed(client.uri) == []
        assert run_cli("cycle", client.uri, *rest).rc == 0
        client.reads_every_row()
        assert client_view(client.uri) == client_view(client.control_uri)
    assert open_table(client.uri).manifest().compacted == {}  # memwal's own mark: it merged nothing
    assert run_cli("verify", client.uri).rc == 0
    client.live.close()
    assert run_cli("cycle", client.uri, *rest, "--grace-seconds", "0", "--writer-idle-seconds", "0",
                   "--expire-versions", "0").rc == 0
    assert folders(client.uri) == set() and client.reopened_rows() == client.model
