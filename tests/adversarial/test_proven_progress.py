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
import time
import uuid
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


def test_a_forged_claim_that_matches_its_intent_exactly_is_repaired_before_anything_goes(make_table, canary):
    """H4: an empty Update whose claim equals a pending intent for generations 1-3: merge
    records the shard as merged. GC then proves the drain, finds the base lacks what every
    reader reads from those generations, writes it back (bound to its read version), then
    drains and deletes: no row lost, verify OK."""
    table, model = make_table(FIVE)
    a, _b = sorted(all_shard_manifests(table.store))
    iid, _ = plant_intent(table, {a: 3})
    forge_data_commit(table, claim(iid, {a: [1, 3]}))
    assert run_cli("merge", table.uri, "--max-generations", "3").rc == 0
    run = run_cli("gc", table.uri, *ZERO, "--expire-versions", "0", "--json")
    assert run.rc == 0, run.stderr
    assert any(r["shard_id"] == a for r in json.loads(run.stdout)["repaired"])
    assert run_cli("merge", table.uri).rc == 0
    assert table_rows(table) == model.sorted_rows()
    assert client_view(table.uri) == model.sorted_rows()
    assert run_cli("verify", table.uri).rc == 0


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
