"""Transient races with maintenance are lost races, retried: never bad input, never a false alarm.

Each test is one deterministic interleaving: job A runs until a named step
(``memwal.core.steps``), job B runs to completion there (a merge, a GC with no grace
period, a version expiry, a compaction), then A goes on (``tests.interleave.running_at``).
A must re-read what moved under it and finish (exit 0), with the table equal to the row
model; before the fix each of these ended in exit 2 (bad input, "nothing written", which
Airflow never retries) or exit 1 (a false problem, a raw Lance conflict).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import lance
import pyarrow as pa
import pytest

import memwal
from memwal import actions
from memwal.actions.merge_ops import change_merge_ops
from memwal.demo import PK_META, Workload, bucket_of, shard_ids_for
from memwal.merge import operands as operands_module
from memwal.merge import run_merge
from memwal.table import Table, open_table
from tests.conftest import table_rows
from tests.helpers import run_cli
from tests.interleave import running_at

WL = Workload(base_rows=150, shards=3, generations=3, rows_per_generation=30, indexes=False, seed=41)
SHARDS = shard_ids_for(WL)


def merge_then_collect(uri: str, *, shards: list[str] | None = None, leased: bool = True) -> Callable[[], None]:
    """Job B: another merger merges (some shards), then GC expires every older version
    (older versions hold the merged generations for time travel) and collects them with
    no grace period. ``leased=False``: a merger outside memwal's merge lease (job A holds it)."""

    def job() -> None:
        if leased:
            assert memwal.open(uri).merge(shards=shards).ok
        else:  # internal entry: A holds the merge lease, so B is a merger that does not take it
            run_merge(open_table(uri), shards=shards)
        doc = actions.run_action("gc", uri, grace_seconds=0, writer_idle_seconds=0, expire_versions=0)
        assert doc["deleted"], doc

    return job


def build(make_table, tmp_path, *, ops: bool = False) -> tuple[Table, list[dict]]:
    """A table and what readers must see. With ``ops`` a counter table: ``hits`` sums
    (set before any write), each generation adding 1 to random keys, some twice; the
    model is the count of puts per key."""
    if not ops:
        table, model = make_table(WL)
        return table, model.sorted_rows()
    uri = str(tmp_path / "counters")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK_META), pa.field("hits", pa.int64())])
    ds = lance.write_dataset(pa.table({"id": list(range(60)), "hits": [0] * 60}, schema=schema), uri)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=len(SHARDS))
    table = open_table(uri)
    change_merge_ops(table, set_ops={"hits": "sum"})
    counts = dict.fromkeys(range(60), 0)
    rng = random.Random(43)
    ds = table.dataset()
    buckets = bucket_of(ds, list(range(80)))
    for b, shard in enumerate(SHARDS):
        keys = [k for k in range(80) if buckets[k] == b]
        with ds.mem_wal_writer(shard, max_memtable_rows=12, durable_write=False) as w:
            for _ in range(6):
                batch = rng.sample(keys, 6)
                w.put(pa.table({"id": batch, "hits": [1] * len(batch)}, schema=schema))
                for k in batch:
                    counts[k] = counts.get(k, 0) + 1
    return table, [{"id": k, "hits": n} for k, n in sorted(counts.items())]


@pytest.mark.parametrize("step", ["operands.after-newest-entry", "operands.after-wal-listing"])
def test_merge_plan_whose_wal_entries_are_collected_meanwhile(make_table, tmp_path, monkeypatch, step):
    """Merge operators: A finds a shard's newest WAL entries (by the name its manifest gives, or
    by the listing where the name cannot be trusted); B merges and collects them; A's reading of
    those entries found them gone (was exit 2: "object not found: .../wal/...")."""
    table, expected = build(make_table, tmp_path, ops=True)
    if step == "operands.after-wal-listing":  # the walk by name not trusted: what a forged manifest gets
        monkeypatch.setattr(operands_module, "_above_wanted", lambda after, highest: False)
    with running_at(step, merge_then_collect(table.uri)) as reached:
        run = run_cli("merge", table.uri)
    assert reached and run.rc == 0, run.stderr
    assert table_rows(table) == expected


def test_merge_executing_a_plan_whose_wal_entries_were_collected(make_table, tmp_path):
    """Merge operators: A planned (WAL entry keys in its plan); B merges and collects; A
    executes its plan (was exit 2 from reading a WAL entry that is gone)."""
    table, expected = build(make_table, tmp_path, ops=True)
    with running_at("merge.planned", merge_then_collect(table.uri, shards=SHARDS[:1])) as reached:
        run = memwal.open(table.uri).merge()
    assert reached and run.ok and run.value.attempts == 2, run
    assert table_rows(table) == expected


def test_merge_plan_whose_read_version_expires_meanwhile(make_table, tmp_path):
    """A read the table manifest (version V); B merges one shard and GC expires every older
    version, V included; A opens V (was exit 2: "cannot open the Lance table: .../_versions/
    ...manifest was not found")."""
    table, expected = build(make_table, tmp_path)
    job_b = merge_then_collect(table.uri, shards=SHARDS[:1])
    with running_at("merge.after-shard-manifests", job_b) as reached:
        run = run_cli("merge", table.uri)
    assert reached and run.rc == 0, run.stderr
    assert table_rows(table) == expected


def test_merge_executing_a_plan_whose_read_version_expired(make_table, tmp_path):
    table, expected = build(make_table, tmp_path)
    with running_at("merge.planned", merge_then_collect(table.uri, shards=SHARDS[:1])) as reached:
        run = memwal.open(table.uri).merge()
    assert reached and run.ok and run.value.attempts == 2, run
    assert table_rows(table) == expected


def test_scan_whose_listed_generations_are_collected_meanwhile(make_table, tmp_path):
    """A reader listed the unmerged generations; B merges and collects them; the read
    (was exit 2, a missing generation reported as a bad filter) reads again."""
    table, expected = build(make_table, tmp_path)
    with running_at("read.after-plan", merge_then_collect(table.uri)) as reached:
        run = run_cli("scan", table.uri, "--json")
    assert reached and run.rc == 0, run.stderr
    assert sorted(json.loads(run.stdout)["rows"], key=lambda r: r["id"]) == expected


def test_scan_of_merge_operators_whose_wal_entries_are_collected_meanwhile(make_table, tmp_path):
    table, expected = build(make_table, tmp_path, ops=True)
    with running_at("read.after-plan", merge_then_collect(table.uri)) as reached:
        run = run_cli("scan", table.uri, "--json")
    assert reached and run.rc == 0, run.stderr
    assert sorted(json.loads(run.stdout)["rows"], key=lambda r: r["id"]) == expected


def test_verify_whose_generations_are_merged_and_collected_meanwhile(make_table, tmp_path):
    """verify read the shard manifests; B merges and collects; the generations verify then
    looks at are gone (was exit 1, "PROBLEMS FOUND (... 0 rows in the LSM view)", OK a
    moment later)."""
    table, expected = build(make_table, tmp_path)
    with running_at("verify.after-shard-manifests", merge_then_collect(table.uri)) as reached:
        run = run_cli("verify", table.uri, "--json")
    assert reached and run.rc == 0, run.stdout
    assert json.loads(run.stdout)["lsm_rows"] == len(expected)
    assert table_rows(table) == expected


def test_catchup_preempted_by_a_compaction_is_retried(make_table, tmp_path):
    """The index commit of catch-up is preempted by a compaction's Rewrite committed while
    it built ("Retryable commit conflict ... preempted by concurrent transaction Rewrite":
    was exit 1, catch-up had no retry)."""
    wl = Workload(base_rows=300, shards=2, generations=3, rows_per_generation=20, seed=42)
    table, model = make_table(wl)
    t = memwal.open(table.uri)
    for _ in range(3):
        assert t.merge(max_generations=1).ok  # several small fragments with deletions: compaction has work
    assert t.catchup(dry_run=True).value.work()

    def compaction() -> None:
        doc = actions.run_action("compact", table.uri, materialize_deletions_threshold=0.0)
        assert doc["fragments_removed"], doc

    with running_at("catchup.before-build", compaction) as reached:
        result = t.catchup().value
    assert reached and result.all_recorded
    assert table_rows(table) == model.sorted_rows()


def test_merge_delete_pass_committed_against_an_expired_read_version(make_table, tmp_path):
    """A's delete pass is bound to its plan's read version V; right before it commits, B
    merges another shard and GC expires every older version, V's manifest included. Lance
    fails on the missing manifest (was exit 1, a raw "Dataset at path .../_versions/N.manifest
    was not found"): nothing was committed, so A plans again and merges."""
    table, expected = build(make_table, tmp_path)
    job_b = merge_then_collect(table.uri, shards=SHARDS[1:2], leased=False)
    with running_at("merge.before-delete-commit", job_b) as reached:
        run = memwal.open(table.uri).merge(shards=SHARDS[:1])
    assert reached and run.ok and run.value.attempts == 2, run
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == expected


def test_compaction_whose_planned_files_are_expired_meanwhile(make_table, tmp_path):
    """A planned a compaction at version V; B merges and GC expires every older version, V
    included; A's commit bound to V (was exit 2: "cannot open the Lance table: .../_versions/
    N.manifest was not found") plans again and compacts."""
    table, expected = build(make_table, tmp_path)
    assert memwal.open(table.uri).merge(max_generations=1).ok
    assert memwal.open(table.uri).merge(max_generations=1).ok
    with running_at("compact.planned", merge_then_collect(table.uri)) as reached:
        doc = actions.run_action("compact", table.uri, materialize_deletions_threshold=0.0)
    assert reached and doc["attempts"] == 2 and doc["fragments_removed"], doc
    assert table_rows(table) == expected
