"""Progress proven, numbers bounded (issue 56, the core cases: H1, H2, H4, M6, L3, L4).

Someone who can write a table's storage plants what a writer or a compactor would write: a
same-epoch drain of generations never merged, a forged driverless claim that matches its
intent, a manifest version named 2**40, a current generation of 2**62, a 10 MB manifest, a
generation whose column a client cannot read, a negative intent version. Each test asserts the
outcome as rows (against the writers' model), folders on storage, exit codes and, where memory
is the attack, the command's own peak; a canary outside the table must not change.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa

from memwal.demo import Workload
from memwal.table.naming import bitrev64
from memwal.table.shards import all_shard_manifests, read_shard_manifests
from tests.adversarial.test_forged_commits import claim, forge_data_commit, plant_intent
from tests.clients.pylance_client import client_view
from tests.conftest import commit_shard_manifest, table_rows
from tests.helpers import memwal_program, run_cli, run_watched

FIVE = Workload(base_rows=200, shards=2, generations=5, rows_per_generation=30, seed=56)
ZERO = ("--grace-seconds", "0", "--writer-idle-seconds", "0")


def folders(table, shard: str) -> dict[int, str]:
    root = Path(table.uri, "_mem_wal", shard)
    return {int(p.name.rsplit("_", 1)[1]): p.name for p in root.iterdir() if "_gen_" in p.name}


def test_a_forged_drain_of_unmerged_generations_is_not_believed(make_table, canary):
    """H1: two shards of five generations, two merged; then a same-epoch drain of shard A's
    generations 1-4 (3 and 4 never merged). GC keeps the folders above the recorded progress
    whose rows the base lacks, and names them; verify fails naming the shard."""
    table, model = make_table(FIVE)
    assert run_cli("merge", table.uri, "--max-generations", "2").rc == 0
    a, _b = sorted(all_shard_manifests(table.store))
    commit_shard_manifest(table, a, lambda m: [m.sstables.remove(s) for s in list(m.sstables) if s.generation <= 4])
    run = run_cli("gc", table.uri, *ZERO, "--expire-versions", "0", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    kept = {b["generation"] for b in doc["blocked"] if b["shard_id"] == a and b["reason"] == "progress-unproven"}
    assert kept == {3, 4}
    assert {3, 4} <= set(folders(table, a))  # the only copy of their rows
    check = run_cli("verify", table.uri)
    assert check.rc == 1 and "merged-data-in-base" in check.stdout and a in check.stdout


def test_a_drain_that_lists_nothing_loses_no_folder(make_table, canary):
    """H1, the other form: the manifest lists nothing (every generation 'drained'): merge
    finds nothing to do, and GC deletes no folder above the recorded progress."""
    table, _ = make_table(FIVE)
    a, _b = sorted(all_shard_manifests(table.store))
    commit_shard_manifest(table, a, lambda m: m.ClearField("sstables"))
    assert run_cli("merge", table.uri).rc == 0
    before = set(folders(table, a))
    run = run_cli("gc", table.uri, *ZERO, "--expire-versions", "0", "--json")
    assert run.rc == 0, run.stderr
    assert set(folders(table, a)) == before == {1, 2, 3, 4, 5}
    assert run_cli("verify", table.uri).rc == 1


def test_a_forged_claim_that_matches_its_intent_exactly_proves_nothing_and_nothing_goes(make_table, canary):
    """H4: an empty Update whose claim equals a pending intent for generations 1-3: merge
    records the shard as merged (the marker), but its receipt names only what memwal's own
    commits applied, not the claim. GC then reads 1-3 back against the version whose mark
    covers them, finds the base lacks them, and keeps them listed and on storage, named, with
    their WAL entries; list readers still read every row; verify fails naming the shard."""
    table, model = make_table(FIVE)
    a, _b = sorted(all_shard_manifests(table.store))
    iid, _ = plant_intent(table, {a: 3})
    forge_data_commit(table, claim(iid, {a: [1, 3]}))
    assert run_cli("merge", table.uri, "--max-generations", "3").rc == 0
    wal_before = sorted(p.name for p in Path(table.uri, "_mem_wal", a, "wal").iterdir())
    run = run_cli("gc", table.uri, *ZERO, "--expire-versions", "0", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    kept = {b["generation"] for b in doc["blocked"] if b["shard_id"] == a and b["reason"] == "progress-unproven"}
    assert kept == {1, 2, 3}  # each named; 4 and 5, proven by the receipt, stay behind them (drain order)
    assert {1, 2, 3} <= set(folders(table, a))
    assert {s.generation for s in read_shard_manifests(table.store).states[a].flushed} >= {1, 2, 3}
    assert sorted(p.name for p in Path(table.uri, "_mem_wal", a, "wal").iterdir()) == wal_before
    assert client_view(table.uri) == model.sorted_rows()
    check = run_cli("verify", table.uri)
    assert check.rc == 1 and "merged-data-in-base" in check.stdout and a in check.stdout


def test_a_manifest_named_version_two_to_the_forty_stops_its_shard_only(make_table, canary, tmp_path):
    """H2: one extra object in a shard's manifest/ folder named as version 2**40 (16 junk
    bytes). status, merge, gc and verify stay small, name the shard, and the other shard is
    merged and collected."""
    table, model = make_table(FIVE)
    a, b = sorted(all_shard_manifests(table.store))
    Path(table.uri, "_mem_wal", a, "manifest", f"{bitrev64(1 << 40)}.binpb").write_bytes(b"\x00" * 16)
    for argv in (["status", table.uri], ["merge", table.uri], ["gc", table.uri, *ZERO, "--expire-versions", "0"],
                 ["verify", table.uri]):
        run = run_watched([memwal_program(), *argv], kill_after=120)
        assert run.peak_mb < 600, (argv, run.peak_mb)
        assert run.rc == 1 and a in run.stdout + run.stderr, (argv, run.stderr)
    assert table.manifest().compacted_generation(b) == FIVE.generations  # the healthy shard was merged
    assert read_shard_manifests(table.store).states[b].flushed == []  # and drained


def test_a_current_generation_of_two_to_the_sixty_two_stops_its_shard_only(make_table, canary):
    """H2: ``current_generation = 2**62`` (and nothing listed, so a drain would 'show' every
    generation merged): the shard is broken, named, and no folder of it goes."""
    table, _ = make_table(FIVE)
    a, b = sorted(all_shard_manifests(table.store))
    commit_shard_manifest(table, a, lambda m: (m.ClearField("sstables"), setattr(m, "current_generation", 1 << 62)))
    run = run_watched([memwal_program(), "gc", table.uri, *ZERO, "--expire-versions", "0"], kill_after=120)
    assert run.peak_mb < 600 and run.rc == 1 and a in run.stdout + run.stderr
    assert set(folders(table, a)) == {1, 2, 3, 4, 5}


def test_a_ten_megabyte_manifest_is_not_read(make_table, canary):
    """L3: a manifest listing 300,000 generations (10 MB): verify stops that shard at once."""
    table, _ = make_table(FIVE)
    a, _b = sorted(all_shard_manifests(table.store))

    def many(m) -> None:
        m.current_generation = 300_001
        for g in range(6, 300_001):
            m.sstables.add(generation=g, path=f"deadbeef_gen_{g}")

    commit_shard_manifest(table, a, many)
    run = run_watched([memwal_program(), "verify", table.uri], kill_after=120)
    assert run.rc == 1 and "bytes, over the" in run.stdout + run.stderr
    assert run.seconds < 60 and run.peak_mb < 600


def test_verify_fails_where_a_clients_read_fails(make_table, canary):
    """M6: an unmerged generation rewritten with ``value`` stored as a string: pylance's readers
    fail on it; verify must say so (it used to read only the key column)."""
    table, _ = make_table(FIVE)
    a, _b = sorted(all_shard_manifests(table.store))
    state = all_shard_manifests(table.store)[a]
    path = Path(table.uri, state.generation_key(state.flushed[-1]))
    gen = lance.dataset(str(path)).to_table()
    gen = gen.set_column(gen.schema.get_field_index("value"), "value", pa.array([str(v) for v in
                                                                                 gen.column("value").to_pylist()]))
    lance.write_dataset(gen, str(path), mode="overwrite")
    run = run_cli("verify", table.uri)
    assert run.rc == 1 and "client-view-readable" in run.stdout, run.stdout


def test_a_negative_intent_version_names_the_intent(make_table, canary):
    """L4: an intent with read version -5: the merge exits naming the intent file."""
    table, _ = make_table(FIVE)
    a, _b = sorted(all_shard_manifests(table.store))
    iid = uuid.uuid4().hex
    doc = {"shards": {a: 3}, "read_version": -5, "holder": "mallory", "written_at": time.time(),
           "commit_path": "driverless"}
    table.store.put_if_absent(f"_mem_wal/_jobs/merge-intents/{iid}.json", json.dumps(doc).encode())
    run = run_cli("merge", table.uri)
    assert run.rc == 1 and iid in run.stderr and "negative" in run.stderr, run.stderr


def _spoil_data(table, shard: str) -> None:
    """Every generation's data files of ``shard`` overwritten with junk: reading one back fails."""
    for f in Path(table.uri, "_mem_wal", shard).glob("*_gen_*/data/*.lance"):
        f.write_bytes(b"junk")


def test_a_merge_its_receipt_names_is_drained_without_reading_its_generations(make_table, canary):
    """Our own merge wrote the rows and its receipt names the generations it applied, bound to
    its commit: GC's proof takes the receipt and reads no generation back (the drain of a long
    backlog costs no request per generation): with every generation's data spoiled after the
    merge, the shard still drains and its folders go; the base holds every row."""
    table, model = make_table(FIVE)
    assert run_cli("merge", table.uri).rc == 0 and run_cli("catchup", table.uri).rc == 0
    a, _b = sorted(all_shard_manifests(table.store))
    _spoil_data(table, a)
    run = run_cli("gc", table.uri, *ZERO, "--expire-versions", "0", "--json")
    assert run.rc == 0, run.stderr
    assert not [b for b in json.loads(run.stdout)["blocked"] if b["shard_id"] == a]
    assert folders(table, a) == {}
    assert table_rows(table) == model.sorted_rows()


def test_generations_with_no_receipt_are_read_back_at_the_version_that_covers_them(make_table, canary):
    """The same merge with its receipts gone (a merge by an older memwal, or receipts lost), its
    versions expired: nothing names the generations, so they are read back against the oldest
    version that covers them, and spoiled ones prove nothing: they stay listed and on storage,
    named ``progress-unproven``."""
    table, _model = make_table(FIVE)
    assert run_cli("merge", table.uri).rc == 0 and run_cli("catchup", table.uri).rc == 0
    shutil.rmtree(Path(table.uri, "_mem_wal", "_jobs", "receipts"))
    ds = table.dataset()
    ds.cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    a, _b = sorted(all_shard_manifests(table.store))
    _spoil_data(table, a)
    run = run_cli("gc", table.uri, *ZERO, "--expire-versions", "0", "--json")
    assert run.rc == 0, run.stderr
    kept = {b["generation"] for b in json.loads(run.stdout)["blocked"]
            if b["shard_id"] == a and b["reason"] == "progress-unproven"}
    assert kept == {1, 2, 3, 4, 5} == set(folders(table, a))


def test_a_receipt_is_bound_to_its_commit_and_the_digest_is_no_evidence(make_table, canary):
    """A receipt names its commit's transaction file: one planted for another version, or read
    against a version whose progress the digest (a cache on storage) remembers wrongly, proves
    nothing; the generations are then read back."""
    from dataclasses import replace

    from memwal.history.receipts import list_receipts
    from memwal.merge.cover import Cover
    from memwal.table.retained import retained_versions

    table, _model = make_table(FIVE)
    assert run_cli("merge", table.uri).rc == 0
    a, _b = sorted(all_shard_manifests(table.store))
    versions = retained_versions(table)
    receipts = list_receipts(table.store)
    cover = Cover(table, versions, receipts, lambda s, e: [], pk=["id"])
    point = cover.receipt_for(a, 5)
    assert point is not None and versions[-1].compacted[a] == 5
    forged = [replace(v, remembered=True, transaction_file=None, compacted={**v.compacted, a: 0})
              if v.version == point else v for v in versions]
    assert Cover(table, forged, receipts, lambda s, e: [], pk=["id"]).receipt_for(a, 5) is None
    moved = Path(table.uri, "_mem_wal", "_jobs", "receipts")
    for f in moved.iterdir():  # the receipt renamed to another version: bound to nothing there
        if f.name.endswith("-merge.json"):
            f.rename(moved / f"{point - 1:020d}-merge.json")
    assert Cover(table, versions, list_receipts(table.store), lambda s, e: [], pk=["id"]).receipt_for(a, 5) is None
