"""The base is the truth for what the merge mark covers (issue 61), with the writers users run.

memwal changes rows of the base only by merging generations in ascending order. What the table's
owner writes on the base after a merge (pylance's ``ds.delete``/``ds.update``, LanceDB's own
``table.delete``/``table.update``) survives every job, and once GC drains the merged generations
every list reader (pylance's ``lsm_scanner()``, ``LsmScanner`` over the manifests) sees it too.
A claim with no rows behind it (a marker one rewritten row carries, a drain someone wrote) never
makes GC drain or delete a generation: it stays listed and on storage, named, for ``memwal
repair`` (a dry run, then what the operator confirms). Each test compares every reader with a
model of what the writers and the owner wrote, and the folders on storage.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import CompactedSsTable

import memwal
from memwal.demo import shard_ids_for
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests, list_wal_entries, read_wal_entry_metas
from tests.clients.jobs import ZERO, every_job
from tests.clients.pylance_client import LiveWriter, client_view, rows_for
from tests.conftest import commit_shard_manifest, table_rows
from tests.helpers import run_cli
from tests.integration.test_clients_pylance import ONE, Writes, folders, listed
from tests.interleave import running_at

NONE = ("--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")



def written(w: LiveWriter, generations: int) -> None:
    keys = Writes()
    for _ in range(generations):
        w.generation(keys.keys(w))


def reads_the_model(uri: str, model: dict[int, dict[str, Any]]) -> None:
    rows = sorted(model.values(), key=lambda r: r["id"])
    assert client_view(uri) == rows, "a reader of the shard manifests differs from the model"
    assert sorted(memwal.open(uri).scan().to_pylist(), key=lambda r: r["id"]) == rows, "memwal's reader differs"


def test_the_owners_deletes_and_updates_on_the_base_survive_every_job(live: LiveWriter, tmp_path: Path) -> None:
    """Merged, then the owner deletes one key and updates another on the base (pylance's own
    API). No job brings the deleted row back or reverts the update; once GC drains the merged
    generations, a list reader reads the owner's writes; verify agrees."""
    written(live, 4)
    live.close()
    assert memwal.open(live.uri).merge().ok
    gone, changed = sorted(live.model.rows)[:2]
    ds = lance.dataset(live.uri)
    ds.delete(f"id = {gone}")
    ds.update({"name": "'the owner'"}, where=f"id = {changed}")
    model = {k: dict(r) for k, r in live.model.rows.items() if k != gone}
    model[changed]["name"] = "the owner"
    for name, job in every_job(live.uri, tmp_path):
        assert job(), name
        assert table_rows(open_table(live.uri)) == sorted(model.values(), key=lambda r: r["id"]), name
    # the writer is closed: once GC no longer waits for it, the merged generations leave the listing
    assert memwal.open(live.uri).gc(**ZERO, writer_idle_seconds=0).ok
    assert listed(live.uri) == [] and folders(live.uri) == set()
    reads_the_model(live.uri, model)
    assert run_cli("verify", live.uri).rc == 0


def test_a_delete_flushed_and_merged_while_gc_is_held_stays_deleted(live: LiveWriter) -> None:
    """The race of issue 61: GC is held right before its drain; meanwhile the writer flushes a
    delete of a key the base no longer holds (the owner deleted it), and memwal merges it. GC
    writes no row (nothing brings the key back), and the next GC drains the delete: the key stays
    deleted for every reader."""
    written(live, 3)
    assert memwal.open(live.uri).merge().ok
    victim = sorted(live.model.rows)[0]
    lance.dataset(live.uri).delete(f"id = {victim}")

    def writer_deletes_and_memwal_merges() -> None:
        live.writer.delete(pa.table({"id": pa.array([victim], pa.int64())}))
        live.model.delete([victim])
        live.n += 1
        live.writer.close()
        assert memwal.open(live.uri).merge().ok

    with running_at("gc.before-drain", writer_deletes_and_memwal_merges) as reached:
        assert memwal.open(live.uri).gc(**ZERO, writer_idle_seconds=0).ok
    assert reached == ["gc.before-drain"]
    assert memwal.open(live.uri).gc(**ZERO, writer_idle_seconds=0).ok
    assert listed(live.uri) == []
    assert victim not in {r["id"] for r in table_rows(open_table(live.uri))}
    reads_the_model(live.uri, live.model.rows)


def wal_of(uri: str, shard: str, generations: set[int]) -> list[str]:
    """The WAL entries of ``generations`` on storage."""
    store = open_table(uri).store
    entries = list_wal_entries(store, shard)
    metas = read_wal_entry_metas(store, shard, [e.position for e in entries])
    return sorted(e.key for e, m in zip(entries, metas, strict=True) if m is not None and m.generation in generations)


def plan_id(uri: str) -> str:
    run = run_cli("repair", uri, "--dry-run", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["dry_run"] and doc["plan_id"], doc
    return str(doc["plan_id"])


def test_a_marker_one_row_carries_proves_nothing_and_repair_writes_what_the_operator_confirms(live: LiveWriter) -> None:
    """pylance's public ``merge_insert(...).mark_sstables_as_compacted([generation 5])`` with one
    unchanged row, while generations 3-5 were never merged. GC takes no range for proof: 3-5 stay
    listed and on storage with their WAL entries, named; every list reader reads every row;
    verify fails. ``memwal repair`` shows each key (generation's value, base's), refuses a plan id
    it did not print (exit 2, nothing written), then writes exactly that plan; GC drains."""
    written(live, 5)
    live.close()
    assert memwal.open(live.uri).merge(max_generations=2).ok
    shard = shard_ids_for(ONE)[0]
    ds = lance.dataset(live.uri)
    one = ds.to_table(limit=1)
    ds.merge_insert("id").when_matched_update_all().mark_sstables_as_compacted([CompactedSsTable(shard, 5)]).execute(
        one
    )
    wal = wal_of(live.uri, shard, {3, 4, 5})
    assert wal and memwal.open(live.uri).catchup().ok
    gc = json.loads(run_cli("gc", live.uri, *NONE, "--json").stdout)
    assert {b["generation"] for b in gc["blocked"] if b["reason"] == "progress-unproven"} == {3, 4, 5}
    assert {3, 4, 5} <= set(listed(live.uri)) and {3, 4, 5} <= folders(live.uri)
    assert wal_of(live.uri, shard, {3, 4, 5}) == wal  # the WAL entries stay with their generations
    rows = sorted(live.model.rows.values(), key=lambda r: r["id"])
    assert client_view(live.uri) == rows  # list readers read 3-5; readers that honour the mark read the base
    check = run_cli("verify", live.uri)
    assert check.rc == 1 and "merged-data-in-base" in check.stdout

    shown = json.loads(run_cli("repair", live.uri, "--json").stdout)
    (s,) = shown["shards"]
    assert [g["generation"] for g in s["generations"]] == [3, 4, 5] and s["keys"] > 0
    assert all(k["generation_value"] is None or k["generation_value"]["id"] == k["key"] for k in s["shown"])
    before = table_rows(open_table(live.uri))
    bad = run_cli("repair", live.uri, "--apply", "--confirm", "000000000000")
    assert bad.rc == 2 and "not '000000000000'" in bad.stderr
    assert table_rows(open_table(live.uri)) == before
    done = run_cli("repair", live.uri, "--apply", "--confirm", plan_id(live.uri))
    assert done.rc == 0, done.stderr
    assert run_cli("repair", live.uri, "--json").rc == 0 and plan_id_or_none(live.uri) is None
    assert run_cli("cycle", live.uri, *NONE).rc == 0
    assert listed(live.uri) == []
    assert table_rows(open_table(live.uri)) == live.model.sorted_rows()
    reads_the_model(live.uri, live.model.rows)
    assert run_cli("verify", live.uri).rc == 0


def plan_id_or_none(uri: str) -> str | None:
    doc = json.loads(run_cli("repair", uri, "--json").stdout)
    return doc["plan_id"] or None


def test_a_drain_someone_wrote_then_a_merge_above_it_deletes_no_only_copy(live: LiveWriter) -> None:
    """A drain someone wrote takes generations 1-4 out of the shard manifest (3-4 never merged);
    memwal's merge then merges 5-8 and records progress 8. GC deletes 1-2 (memwal merged them)
    and 5-8, never 3-4 (nothing proves their rows are in the base): their folders stay, named;
    verify fails until an operator accepts or re-applies; ``--accept`` keeps the base as it is."""
    written(live, 8)
    live.close()
    assert memwal.open(live.uri).merge(max_generations=2).ok
    shard = shard_ids_for(ONE)[0]
    table = open_table(live.uri)
    commit_shard_manifest(table, shard, lambda m: [m.sstables.remove(s) for s in list(m.sstables) if s.generation <= 4])
    assert memwal.open(live.uri).merge().ok and table.manifest().compacted[shard] == 8
    assert memwal.open(live.uri).catchup().ok
    gc = json.loads(run_cli("gc", live.uri, *NONE, "--json").stdout)
    assert {b["generation"] for b in gc["blocked"] if b["reason"] == "progress-unproven"} == {3, 4}
    assert folders(live.uri) == {3, 4}
    check = run_cli("verify", live.uri)
    assert check.rc == 1 and "merged-data-in-base" in check.stdout
    rows = table_rows(open_table(live.uri))
    assert run_cli("repair", live.uri, "--accept", "--confirm", plan_id(live.uri)).rc == 0
    assert table_rows(open_table(live.uri)) == rows  # accepting writes no row
    assert run_cli("gc", live.uri, *NONE).rc == 0 and folders(live.uri) == set()


def test_two_gcs_at_once_keep_a_live_writers_rollup(live: LiveWriter) -> None:
    """Two GCs (two schedulers, a fleet run beside a manual one): one plans, and before it holds
    its lease the other runs to the end and rolls up what the live writer's view needs. The first
    then finds the shard manifest written since its plan and writes nothing for it: the rollup
    stays listed and the live writer reads every row, before and after its next flush."""
    written(live, 6)
    assert memwal.open(live.uri).merge().ok
    first: dict[str, Any] = {}

    def other_gc() -> None:
        first.update(memwal.open(live.uri).gc(grace_seconds=0).to_dict())

    with running_at("gc.planned", other_gc) as reached:
        second = memwal.open(live.uri).gc(grace_seconds=0).to_dict()
    assert reached == ["gc.planned"] and first["rolled_up"]
    rollup = first["rolled_up"][0]["path"]
    assert second["rolled_up"] == [] and any(b["reason"].startswith("changed-since-plan") for b in second["blocked"])
    (state,) = all_shard_manifests(open_table(live.uri).store).values()
    assert rollup in {g.path for g in state.flushed}
    assert live.view() == live.model.sorted_rows()
    written(live, 1)
    assert live.view() == live.model.sorted_rows()
    assert client_view(live.uri) == live.model.sorted_rows()


@pytest.mark.parametrize("step", ["gc.planned", "gc.before-rollup", "gc.before-manifest", "gc.before-delete"])
def test_a_merge_and_a_flush_while_gc_is_held_keep_every_reader_right(live: LiveWriter, step: str) -> None:
    """GC is held at each of its steps while the live writer flushes a generation (updates of
    merged keys, a delete) and memwal merges it, then goes on with what it planned. The writer's
    reads, a new reader's and the base stay right, then and after another GC and the writer's next
    flush: a drain or rollup planned before the merge never takes in what it did not plan."""
    keys = Writes()
    written(live, 5)
    assert memwal.open(live.uri).merge().ok

    def flush_and_merge() -> None:
        live.generation(keys.keys(live))
        assert memwal.open(live.uri).merge().ok

    with running_at(step, flush_and_merge) as reached:
        assert memwal.open(live.uri).gc(grace_seconds=0).ok
    assert reached == [step]
    assert live.view() == live.model.sorted_rows()
    assert client_view(live.uri) == live.model.sorted_rows()
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    live.generation(keys.keys(live))
    assert live.view() == live.model.sorted_rows()
    assert client_view(live.uri) == live.model.sorted_rows()


@pytest.mark.parametrize("step", ["merge.after-read", "merge.before-marked-commit"])
def test_gc_while_a_merge_is_held_keeps_every_reader_right(live: LiveWriter, step: str) -> None:
    """A merge is held at a step while GC runs to the end (it rolls up for the live writer and
    keeps what it cannot prove): the merge then commits, and every reader stays right."""
    written(live, 5)
    assert memwal.open(live.uri).merge(max_generations=2).ok

    def gc() -> None:
        assert memwal.open(live.uri).gc(grace_seconds=0).ok

    with running_at(step, gc) as reached:
        assert memwal.open(live.uri).merge().ok
    assert reached == [step]
    assert live.view() == live.model.sorted_rows()
    assert client_view(live.uri) == live.model.sorted_rows()
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    assert client_view(live.uri) == live.model.sorted_rows()


def test_a_merged_nan_is_the_same_nan(live: LiveWriter) -> None:
    """A NaN a generation wrote and the merge put in the base is the value the base holds:
    verify passes and GC drains (before, NaN differed from itself and the shard stayed
    ``progress-unproven`` for good)."""
    batch = rows_for([5, 6], "nan", seed=1)
    batch = batch.set_column(batch.schema.get_field_index("value"), "value", pa.array([float("nan")] * 2))
    live.writer.put(batch)
    live.model.put(batch)
    live.close()
    assert run_cli("cycle", live.uri, *NONE).rc == 0
    assert listed(live.uri) == []
    assert run_cli("verify", live.uri).rc == 0
    assert re.search(r"nan", str(table_rows(open_table(live.uri))[5:7]))


def test_a_declared_key_the_base_holds_twice_is_refused_with_nothing_written(live: LiveWriter) -> None:
    """The declared key is not enforced: the base holds one key twice (appended by hand). A merge
    of generations that write that key would turn two distinct rows into copies of one; merge
    refuses (exit 2, its dry run too), naming the key and its count, with nothing written."""
    from tests.helpers import tree_digest

    written(live, 2)
    live.close()
    ds = lance.dataset(live.uri)
    key = next(k for k in sorted(live.model.rows) if k < 10_000)  # one the generations updated
    copy = ds.to_table(filter=f"id = {key}")
    lance.write_dataset(copy.set_column(1, "name", pa.array(["a distinct row"])), live.uri, mode="append")
    before = tree_digest(live.uri)
    for args in (("--dry-run",), ()):
        run = run_cli("merge", live.uri, *args)
        assert run.rc == 2, run.stderr
        assert f"key {key} is held by 2 rows" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert tree_digest(live.uri) == before


def test_status_shows_the_writers_own_last_write_not_gcs(live: LiveWriter) -> None:
    """Issue 64: ``memwal status`` took GC's drain or rollup (a manifest version GC writes) for the
    writer's last write. GC remembers the versions it writes; status shows the writer's own."""
    written(live, 2)
    manifests = Path(live.uri, "_mem_wal", shard_ids_for(ONE)[0], "manifest")

    def newest() -> float:
        return max(p.stat().st_mtime for p in manifests.glob("*.binpb"))

    wrote = newest()  # the writer's last flush
    assert memwal.open(live.uri).merge().ok and memwal.open(live.uri).catchup().ok
    # a listing pass's rollup (a follower's, every few seconds), then a whole run's
    assert memwal.open(live.uri).gc(**ZERO, listed_only=True).to_dict()["rolled_up"]
    assert newest() > wrote
    (s,) = memwal.open(live.uri).status().shards
    assert s.writer_live and s.writer_last_activity == pytest.approx(wrote, abs=1e-3)
    written(live, 1)
    wrote = newest()
    assert memwal.open(live.uri).merge().ok and memwal.open(live.uri).catchup().ok
    assert memwal.open(live.uri).gc(**ZERO).to_dict()["rolled_up"]  # the writer is live: GC's rollup version
    assert newest() > wrote
    (s,) = memwal.open(live.uri).status().shards
    assert s.writer_live and s.writer_last_activity == pytest.approx(wrote, abs=1e-3)
    live.close()  # nothing left in its MemTable: its close writes no version
    assert memwal.open(live.uri).gc(**ZERO, writer_idle_seconds=0).to_dict()["drained"]  # GC's drain version
    assert newest() > wrote
    (s,) = memwal.open(live.uri).status().shards
    assert s.writer_last_activity == pytest.approx(wrote, abs=1e-3)
