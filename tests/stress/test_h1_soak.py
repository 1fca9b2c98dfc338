"""Stress: free threads hammering one table, for a report, not for CI.

The suite proves races as deterministic interleavings (step hooks). These soaks run real
threads against real tables to look for what no interleaving anticipated; they are
deselected by default (``-m stress`` runs them) and print a report.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from memwal.demo import Workload
from memwal.lease import Lease
from memwal.merge import run_merge
from memwal.snapshot import LocalSnapshotEngine, run_snapshot
from tests.conftest import highest_progress_ever, lsm_rows, table_rows

pytestmark = pytest.mark.stress


def test_h1_soak_merges_and_catchups_against_repeated_refreshes(make_table, tmp_path, record_property):
    """Threads: bounded merges and index catch-ups commit while refreshes run back to back.

    At the end the latest version's progress must equal the highest value ever committed,
    for every shard and every (index, shard); the number of repairs is reported.
    """
    wl = Workload(base_rows=200, shards=3, generations=6, rows_per_generation=20, seed=5)
    table, model = make_table(workload=wl)
    stop = threading.Event()
    errors: list[BaseException] = []
    stats = {"merges": 0, "generations_merged": 0, "catchups": 0}

    def merger() -> None:
        try:
            # internal entry: a merger outside memwal's merge lease, racing the refreshes (H1)
            while (r := run_merge(table, max_generations=1, max_attempts=12)).version is not None:
                stats["merges"] += 1
                # A re-plan after a lost race may take more than one generation (a merge intent
                # lifts the budget), so count generations, not merges.
                stats["generations_merged"] += max(s.to_generation - s.from_generation + 1 for s in r.shards)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            stop.set()

    def catcher() -> None:
        try:
            while not stop.is_set():
                table.dataset().optimize.optimize_indices()
                stats["catchups"] += 1
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    results = []
    threads = [threading.Thread(target=merger), threading.Thread(target=catcher)]
    for t in threads:
        t.start()
    try:
        with Lease(table.store, "snapshot") as lease:
            while not stop.is_set():
                # Merges change no shard manifest, so only a forced refresh commits here.
                # internal entry: force is no user option; the lease is the test's own
                results.append(run_snapshot(table, lease=lease, reader=LocalSnapshotEngine(threads=2), force=True))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    results.append(run_snapshot(table, force=True))  # internal entry: force is no user option
    top_c, top_i = highest_progress_ever(table)  # the highest ever committed, over every version
    latest = table.manifest()
    assert latest.compacted == top_c and set(top_c.values()) == {6}
    assert {(i, s): g for i, per in latest.index_catchup.items() for s, g in per.items()} == top_i
    assert latest.mem_wal.snapshot_ts_millis == results[-1].snapshot_ts_millis
    assert table_rows(table) == model.sorted_rows() and lsm_rows(table) == model.sorted_rows()
    report = {
        "refreshes": len(results),
        "refreshes_with_interleaving": sum(1 for r in results if r.interleaved_commits),
        "interleaved_commits": sum(r.interleaved_commits for r in results),
        "refreshes_repaired": sum(1 for r in results if r.repairs),
        "repairs": sum(r.repairs for r in results),
        "values_restored": sum(len(r.repaired) for r in results),
        # A merge that plans and commits inside the few milliseconds between an erasing commit
        # and its repair merges the newest merged generation again (idempotent: same rows).
        "generations_merged_again": stats["generations_merged"] - wl.generations,
        **stats,
    }
    print("H1 race report:", json.dumps(report))
    record_property("h1_race", json.dumps(report))
    out = os.environ.get("MEMWAL_H1_REPORT") or str(tmp_path / "h1_race.json")
    Path(out).write_text(json.dumps(report, indent=2))
    assert report["refreshes"] >= 3 and report["generations_merged"] >= wl.generations
