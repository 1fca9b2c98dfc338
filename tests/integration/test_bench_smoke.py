"""Every bench with a smoke runs end to end at its tiny size and writes its documented JSON and chart.

No timing assertions: performance is measured by ``make bench`` as ratios, never asserted
in tests. This only checks that the harness works and each document has the expected shape.
The cases and their smoke arguments come from the benches' own registry (``bench/cases.py``,
each concept's ``CASES``): a case registered with a smoke is run here with no test to write;
what its document must hold beyond the harness's frame is :data:`CHECKS`'s.

Marked ``bench``: ``make bench-smoke`` runs them (and ``make bench`` first of all), ``make test``
does not. They check the harness, not memwal, and took 756 of the suite's 3,639 test-seconds
(21%), more than any other file: CI's 30 minutes are for what memwal does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.cases import Case, every
from tests.helpers import ROOT

pytestmark = pytest.mark.bench

Check = Callable[[dict[str, Any], Path], None]
CHECKS: dict[str, Check] = {}


def check(key: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        CHECKS[key] = fn
        return fn
    return register


SMOKES = [(concept, case) for concept, cases in every().items() for case in cases if case.smoke is not None]


@pytest.mark.parametrize(("concept", "case"), SMOKES, ids=[f"{c}-{case.name}" for c, case in SMOKES])
def test_bench_smoke(concept: str, case: Case, tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    assert case.smoke is not None
    argv = case.argv(case.smoke, str(out), str(work))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "bench", concept, case.name, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads((out / f"{case.json}.json").read_text())
    # the harness's frame, the same for every case
    assert doc["benchmark"] and doc["started_at"] and doc["total_seconds"] >= 0
    assert doc["machine"]["cores"] > 0 and doc["machine"]["pylance"]
    assert len(doc["machine"]["load_average_at_start"]) == len(doc["machine"]["load_average_at_end"]) == 3
    if case.chart:
        assert (out / f"{case.json}.png").stat().st_size > 0
    CHECKS[f"{concept} {case.name}"](doc, out)


def test_every_smoke_has_its_checks() -> None:
    """A case with a smoke says what its document holds (an entry of CHECKS), and no check is stale."""
    assert {f"{c} {case.name}" for c, case in SMOKES} == set(CHECKS)


def test_the_entry_point_lists_every_case() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    for concept, cases in every().items():
        assert f"\n  {concept}\n" in proc.stdout
        assert all(f" {case.name} " in proc.stdout for case in cases)
    unknown = subprocess.run([sys.executable, "-m", "bench", "merge", "nothing"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert unknown.returncode == 2 and "no case 'nothing' in merge" in unknown.stderr


@check("merge main")
def _merge_main(doc: dict[str, Any], out: Path) -> None:
    for key in ("mode", "machine", "table", "contenders", "ratios", "targets", "growth", "identical", "ok"):
        assert key in doc, key
    assert doc["mode"] == "smoke" and doc["ok"] and doc["identical"] and doc["matches_lsm_view"]

    table = doc["table"]
    for key in ("base_rows", "change_rows", "generations", "put_rows", "tombstone_rows", "shards"):
        assert table[key] > 0, key
    assert "indexes" in table and table["indexes_decision"]

    assert {"loop", "ours", "floor"} <= set(doc["contenders"])
    for name, c in doc["contenders"].items():
        assert c["whole_seconds"] > 0 and c["inner_seconds"] > 0, name
        assert c["identical"] is True, name
        assert c["runs"] and all(r["whole_seconds"] > 0 for r in c["runs"]), name
    # the hand-written loop commits once or twice per generation; ours and the floor at most twice
    assert doc["contenders"]["loop"]["commits"] >= table["generations"]
    assert doc["contenders"]["ours"]["commits"] <= 2 and doc["contenders"]["floor"]["commits"] <= 2

    for key in ("loop_over_ours", "ours_over_floor", "loop_over_ours_inner", "ours_over_floor_inner"):
        assert doc["ratios"][key] > 0, key
    targets = doc["targets"]
    assert targets["loop_over_ours_min"] == 10 and targets["ours_over_floor_max"] == 1.1
    assert targets["ours_over_floor_peak_rss_max"] == 1.2
    assert isinstance(targets["met"], bool)
    for name, c in doc["contenders"].items():
        assert c["peak_rss_mb"] > 0, name
    assert doc["ratios"]["ours_over_floor_peak_rss"] > 0
    # a job's fixed costs, each command a whole process, beside its floor
    fixed = doc["fixed_costs"]
    assert set(fixed["commands"]) == {"python", "import_lance", "open_lance", "help", "merge_noop", "status"}
    assert all(c["wall_seconds"] > 0 and c["cpu_seconds"] > 0 for c in fixed["commands"].values())
    assert all(r > 0 for r in fixed["ratios"].values()) and isinstance(fixed["goals_met"]["help"], bool)

    ops = doc["merge_ops"]
    assert ops["same_progress"] and ops["ops_over_plain_inner"] > 0 and ops["target_max"] == 1.5
    tiny = doc["tiny_generations"]
    assert tiny["all_merged"] and tiny["table"]["generations"] > 0 and tiny["inner_seconds"] > 0

    for key in ("change_rows", "base_rows"):
        points = doc["growth"][key]
        assert len(points) >= 2, key
        assert len({p[key] for p in points}) == len(points), key
        for p in points:
            assert p["identical"] is True
            for c in ("ours", "floor"):
                assert p[c]["whole_seconds"] > 0 and p[c]["inner_seconds"] > 0

    assert set(doc["profile"]) >= {"ours", "floor"}
    assert doc["profile"]["ours"]["functions"]


@check("merge growth")
def _merge_growth(doc: dict[str, Any], out: Path) -> None:
    """Every contender gave ours's table, the ratios, the per-function profile of ours and the
    use_index sweep are in the document."""
    assert doc["ok"] and not doc["failures"] and len(doc["points"]) == 2
    for p in doc["points"]:
        for c in ("ours", "floor", "floor-scan", "floor-sorted"):
            assert p[c]["whole_seconds"] > 0 and p[c]["peak_rss_mb"] > 0, c
        assert p["rows_after"] > p["base_rows"]  # the change set inserted new keys
        assert p["best_floor"] in ("floor", "floor-scan", "floor-sorted")
        assert p["ratios"]["ours_over_best_floor"] > 0 and p["ratios"]["floor_over_floor_scan"] > 0
        assert p["ours_timers"]["exit_code"] == 0
        assert "memwal.merge.execute:marked_pass" in p["ours_timers"]["functions"]
        assert all(q["upsert_index"] > 0 and q["upsert_scan"] > 0 for q in p["index_sweep"]["points"])


@check("merge ops")
def _merge_ops(doc: dict[str, Any], out: Path) -> None:
    """The same progress with and without the operator, a ratio, a profile."""
    (p,) = doc["points"]
    assert p["same_progress"] and p["ops_over_plain_inner"] > 0
    assert "memwal.merge.changes:fold_changes" in p["timers"]["ops"]["functions"]
    assert "memwal.merge.changes:fold_changes" not in p["timers"]["plain"]["functions"]


@check("gc many")
def _gc_many(doc: dict[str, Any], out: Path) -> None:
    """GC deleted every generation and WAL entry of the forged table, rm -rf and the threaded
    unlinks deleted the same files."""
    (run,) = doc["runs"]
    assert run["generations_deleted"] == doc["generations"] and run["total_s"] > 0
    assert doc["rm_rf_floor_s"] > 0 and set(doc["threaded_unlink_median_s"]) == {"1", "4", "8"}
    assert doc["gc_over_rm_rf"] > 0 and doc["filesystem"]


@check("gc stores")
def _gc_stores(doc: dict[str, Any], out: Path) -> None:
    """Requests counted on moto and Azurite, GC deleted every generation, the raw DeleteObjects
    baseline deleted the same keys."""
    for store, generations in (("moto", 8), ("azurite", 4)):
        run = doc[store]
        assert run["gc_generations_deleted"] == generations and run["gc_wal_entries_deleted"] == generations
        assert run["status_requests_per_shard"] > 0 and run["gc_requests_per_deleted_object"] > 0
        assert run["gc_requests"].get("bulk-delete", 0) >= 1  # batched, not one request per object
        assert sum(sum(p.values()) for p in run["gc_requests_by_phase"].values()) == run["gc_requests_total"]
        floor = run["raw_floor"]  # the same keys, listed once and deleted in batches by hand
        assert floor["keys_deleted"] >= run["gc_generations_deleted"] + run["gc_wal_entries_deleted"]
        assert floor["requests_total"] <= run["gc_requests_total"] and run["gc_vs_raw_floor_requests"] >= 1
        # Lance's cleanup apart; GC's own requests = those that grow with the deletes + the fixed rest
        assert (run["gc_lance_cleanup_requests"] + run["gc_per_object_requests"] + run["gc_fixed_requests"]
                == run["gc_requests_total"]) and run["gc_fixed_requests"] == sum(
                    run["gc_fixed_requests_by_phase"].values())
        own_deletes = run["gc_requests"]["bulk-delete"] - run["gc_requests_by_phase"]["lance_cleanup"].get(
            "bulk-delete", 0)  # GC's own batches: Lance's cleanup deletes in batches too, counted apart
        assert run["gc_per_object_requests"] >= own_deletes + 1  # and its listing of _mem_wal/
        assert set(run["goals_met"]) == {"gc_requests_per_deleted_object", "gc_vs_raw_floor (time)",
                                         "gc_vs_raw_floor (requests that grow with the deletes)",
                                         "status_requests_per_shard"}


@check("read status")
def _read_status(doc: dict[str, Any], out: Path) -> None:
    """Every command ran on every table, ratios to the baseline."""
    assert doc["ok"] and doc["build"]["history_records"] == 4 * 365
    assert set(doc["commands"]) == {"status", "status-html", "gc-plan", "merge-noop"}
    for per in doc["commands"].values():
        assert set(per) == {"v10", "v40", "v10+history", "v40+history"}
        assert per["v10"]["over_baseline"] == 1.0
        assert all(v["seconds"] > 0 and v["exit_code"] == 0 for v in per.values())


@check("read snapshot")
def _read_snapshot(doc: dict[str, Any], out: Path) -> None:
    """The refresh read every shard with 1 and 16 threads, an idle refresh committed nothing, readers
    listed from the snapshot and from the manifests."""
    assert doc["shards"] == 4 and doc["spark"] == {"skipped": "spark=False"}
    local = doc["local"]
    assert local["read_seconds_1_thread"] > 0 and local["read_seconds_16_threads"] > 0 and local["snapshot_bytes"] > 0
    assert doc["reader"]["manifests_seconds"] > 0 and doc["reader"]["index_seconds"] > 0
    assert doc["ratios"]["read_16_threads_over_1_thread"] > 0


@check("read steady")
def _read_steady(doc: dict[str, Any], out: Path) -> None:
    """Two minutes of the pylance arm, its cycle given options: every minute recorded, every
    read right, the goals reported."""
    arm = doc["arms"]["pylance"]
    assert [m["minute"] for m in arm["minutes"]] == [1, 2] and arm["cycle_args"] == ["--grace-seconds", "0"]
    assert arm["failures"] == [] and arm["goals"]["every_read_right"]["met"]
    assert all(m["maintenance"]["rc"] == 0 for m in arm["minutes"])


@check("read floor")
def _read_floor(doc: dict[str, Any], out: Path) -> None:
    """The three listings read, each row count checked."""
    reads = doc["reads"]
    assert list(reads) == ["nothing listed", "one small generation", "one generation of every key"]
    assert reads["nothing listed"]["over_nothing_listed"] == 1.0


@check("spark driver-share")
def _spark_driver_share(doc: dict[str, Any], out: Path) -> None:
    """On local[2] both commit paths gave the same table, bytes were counted from /proc for the
    driver and the executors. Byte counts, not times: the driverless driver writes a small
    fraction of what the driver's merge_insert writes, which is about the data itself."""
    assert doc["mode"] == "smoke" and doc["identical"] and isinstance(doc["goals"]["met"], bool)
    (p,) = doc["local"]["points"]
    driverless, driver = p["driverless"], p["driver"]
    assert (driverless["commit_path"], driver["commit_path"]) == ("driverless", "driver")
    assert driverless["data_bytes_added"] > 0 and driverless["whole_seconds"] > 0
    run = driverless["runs"][0]
    assert run["driver"]["wchar"] > 0 and sum(run["executors"]["write_bytes"].values()) > run["data_bytes_added"] / 2
    assert driver["driver_share_wchar"] > 0.9  # the driver's merge_insert writes the data again
    assert driverless["driver_share_wchar"] < driver["driver_share_wchar"] / 10


@check("fleet plan")
def _fleet_plan(doc: dict[str, Any], out: Path) -> None:
    """The plan timed at each fleet size, requests counted on moto and Azurite for idle and busy
    tables, and what today's per-table shape costs beside them."""
    assert doc["lake"]["tables"] == 8 and doc["lake"]["files"] > 0
    points = doc["local"]["points"]
    assert [p["tables"] for p in points] == [4, 8] and [p["discovered"] for p in points] == [4, 8]
    for p in points:
        assert p["with_work"] == p["tables"] and p["problems"] == 0
        assert p["cli_cold_seconds"] > 0 and p["cli_warm_seconds"] > 0 and p["ms_per_table_in_process"] > 0
    assert isinstance(doc["local"]["goal_met"], bool) and isinstance(doc["local"]["linear_met"], bool)
    for store in ("moto", "azurite"):
        s = doc[store]
        assert s["drain_failed"] == []
        assert s["idle_warm"]["with_work"] == 0 and s["idle_warm"]["discovered"] == 2
        assert s["idle_warm"]["per_table_max"] <= 4  # a count: the goal of an idle table
        assert s["work_cold"]["with_work"] == 2 and s["work_warm_after_a_flush"]["with_work"] == 2
        assert s["maintained_warm_after_a_flush"]["with_work"] == 2
        assert s["today_per_idle_table"]["cycle"]["per_table"] > s["today_per_idle_table"]["status"]["per_table"] > 0


@check("fleet sim")
def _fleet_sim(doc: dict[str, Any], out: Path) -> None:
    """Both phases ran live writers, every generation's lag, the starvation, GC backlog, requests
    and load figures are in the document, and every table holds exactly the rows its writers put
    once merged to the end."""
    assert set(doc["phases"]) == {"fleet", "fixed"}
    for mode, phase in doc["phases"].items():
        assert phase["writer_exit_codes"] == [0, 0], mode
        assert phase["check"]["rows_ok"], (mode, phase["check"])
        assert phase["classes"] == {"hot": 1, "cold": 2, "idle": 2}
        lag = phase["lag"]
        assert lag["generations"] == phase["generations_flushed"] > 0 and phase["puts"] > 0
        assert {"p50", "p99", "max"} <= set(lag["ticks"]) and {"p50", "p99", "max"} <= set(lag["seconds"])
        assert len(phase["gc_backlog"]["series"]) == 5 and len(phase["ticks"]) == 5
        assert set(phase["requests"]["per_table_per_tick"]) == {"hot", "cold", "idle"}
        assert phase["starvation"]["threshold_ticks"] == 3 and "starved" in phase["starvation"]
        slo = phase["slo"]  # breaches of the service level (1.5 ticks), counted at each tick's start
        assert slo["target_seconds"] == 3.0 and len(slo["per_tick"]) == 5 and slo["breaches"] == sum(slo["per_tick"])
        goals = phase["goals"]
        for key in ("p99_met", "fairness_met", "fairness_from_flush_met", "idle_met", "under_capacity"):
            assert isinstance(goals[key], bool), key
    assert doc["phases"]["fixed"]["job_statuses"].get("merge done", 0) > 0


@check("fleet events")
def _fleet_events(doc: dict[str, Any], out: Path) -> None:
    """A warm plan of idle tables and the SQS trigger's cycles counted at moto's server, scaled to
    a day, events against polling."""
    assert doc["plan"]["tables"] == 4 and 0 < doc["plan"]["per_table"] <= 4
    assert doc["trigger"]["cycles"] == 2 and doc["trigger"]["per_cycle"] >= 1
    assert doc["polling_per_day"] > doc["events_per_day"] > 0 and isinstance(doc["goal_met"], bool)


@check("read age")
def _read_age(doc: dict[str, Any], out: Path) -> None:
    """Each age measured in its own process: every cost, memwal's records, and each cost's growth."""
    assert [p["flushes"] for p in doc["points"]] == [20, 60]
    for point in doc["points"]:
        for key in ("flush_cpu", "gc_dry_run_cpu", "status_cpu", "scan_cpu", "lance_open_cpu", "lance_versions_cpu"):
            assert point[key] > 0, (point["flushes"], key)
        assert point["jobs_files"] > 0 and point["jobs_bytes"] > 0 and point["seconds_to_reach"] > 0
    assert set(doc["growth"]) >= {"flush_cpu", "gc_dry_run_cpu", "status_cpu"}


@check("read store-age")
def _read_store_age(doc: dict[str, Any], out: Path) -> None:
    """Past the rule's one page at both sizes: the lag, the listing pass, status and an idle probe send
    the same requests at both, none of them a page of the whole listing."""
    young, old = (doc[str(k)] for k in doc["kept"])
    assert doc["kept"] == [120, 240] and doc["whole_pages"] == 1 and old["keys"] > young["keys"] > 1000
    for key in ("lag, next", "listing pass", "status", "probe, within the hour", "probe, idle"):
        assert young[key] == old[key] and old[key][1] == 0, (key, young[key], old[key])
    assert old["probe, cold"][1] > young["probe, cold"][1] > 1  # the hourly whole listing grows


@check("fleet aged")
def _fleet_aged(doc: dict[str, Any], out: Path) -> None:
    """Both arms ran the same fleet to the same outcomes; each arm's seconds and the ratio and goal."""
    assert doc["tables"] == 2 and doc["source_versions"] > 20 and doc["flushes"] == 30
    assert set(doc["arms"]) == {"local", "ray-cluster"}
    for arm in doc["arms"].values():
        (run,) = arm["runs"]
        assert run["seconds"] > 0 and run["machine_busy_seconds"] > 0 and run["rounds"] >= 1
        assert run["outcomes"]["failed"] == 0 and run["outcomes"]["done"] > 0
        assert arm["seconds"]["min"] == arm["seconds"]["max"] == run["seconds"]
    assert doc["ray_cluster_over_local"] > 0 and isinstance(doc["goals"]["ray_cluster_beats_local"]["met"], bool)


@check("fleet follow")
def _fleet_follow(doc: dict[str, Any], out: Path) -> None:
    """The follower ran beside the writer until its SIGTERM and exited 0; flushes were counted after the
    warm-up, its CPU a flush and one merge_insert's were measured, and every table read right."""
    assert doc["config"]["tables"] == 2 and doc["failures"] == [] and doc["writer"]["exit_code"] == 0
    follower = doc["follower"]
    assert follower["exit_code"] == 0 and follower["flushes"] > 0 and follower["cpu_ms_per_flush"] > 0
    assert follower["peak_rss_mb"] > 0 and 0 < follower["core_share"]
    assert doc["warmup_seconds"] == 14.4 and follower["from_seconds"] >= 14
    assert doc["merge_insert"]["calls"] == 20 and doc["merge_insert"]["median_ms"] > 0
    assert len(doc["machine_reference_cpu_seconds"]) == 2 and doc["follower_over_merge_insert"] > 0
    assert isinstance(doc["goals"]["follower_over_merge_insert"]["met"], bool)
    assert doc["every_read_right"] and set(doc["reads_right"]) == {"t0000", "t0001"}
