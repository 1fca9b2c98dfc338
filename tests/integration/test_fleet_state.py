"""The fleet's shared state on S3 (moto), and what a plan costs, counted at the server.

Five idle tables written by pylance's ShardWriter and drained by the fleet runner: a small
fleet, where the state's shared reads and writes weigh most on each table's share (issue 64
counted 4.6 and 3.8 requests a table on such a fleet). A cold ``memwal fleet plan`` costs at
most 4 requests a table without a state and 4.5 with it (its reads and writes included); a
second plan from another machine (another process, another folder, nothing on its disk: the
cache and the last plan are in the bucket) at most 3.5. Each figure is also held as its
parts: 3 requests a cold idle table, 2 a known one, and the shared part (the root's listing,
the state's objects, ``plan.json`` read once). ``fleet status --state`` with no source shows
that last plan and plans nothing: it reads the state alone. The counts are the server's own
request log: counts, never times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from memwal.demo import Workload, create_base_table, write_generations
from tests.helpers import ROOT, run_cli

IDLE = 5
WL = Workload(base_rows=120, shards=2, generations=2, rows_per_generation=10, seed=3, indexes=False)
DRAIN = {"defaults": {"options": {"gc": {"grace_seconds": 0, "writer_idle_seconds": 0, "expire_versions": 0}}}}


@pytest.fixture(scope="module")
def idle_fleet(s3_server, tmp_path_factory) -> dict:
    """``IDLE`` tables under ``s3://<bucket>/lake/``, drained (merged, collected), and a file
    holding the storage options (credentials stay off every command line)."""
    from memwal.fleet.policy import policy_from
    from memwal.fleet.run import run_fleet

    first, opts = s3_server.new_table("lake/t00")
    root = first.rsplit("/", 1)[0]
    for i in range(IDLE):
        uri = f"{root}/t{i:02d}"
        model = create_base_table(uri, WL, opts)[1]
        write_generations(uri, WL, model, storage_options=opts)
    drained = run_fleet([root], policy=policy_from(DRAIN), storage_options=opts, workers=2)
    assert not drained.failed
    folder = tmp_path_factory.mktemp("fleet-state")
    options = folder / "storage-options.json"
    options.write_text(json.dumps(opts))
    options.chmod(0o600)
    return {"root": root, "opts": opts, "options_file": str(options),
            "state": f"s3://{s3_server.last_bucket}/_memwal_fleet", "bucket": s3_server.last_bucket}


def _plan(fleet: dict, *extra: str) -> dict:
    run = run_cli("fleet", "plan", fleet["root"], "--storage-options-file", fleet["options_file"], "--json", *extra)
    assert run.rc == 0, run.stderr
    return json.loads(run.stdout)


def _cli(fleet: dict, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """``memwal ARGV`` as its own process, in its own folder and home (another machine)."""
    env = {**os.environ, "HOME": str(cwd), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "memwal.cli", *argv, "--storage-options-file", fleet["options_file"]],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _split(used: list[tuple[str, str]], root: str) -> tuple[int, list[tuple[str, str]]]:
    """How many requests name a table's folder, and the others (the shared part: the root's
    listing and the state's objects)."""
    folder = root.split("/", 3)[3]  # lake
    tables = [(m, p) for m, p in used if f"prefix={folder}%2Ft" in p or f"/{folder}/t" in p]
    return len(tables), [r for r in used if r not in tables]


def _parts(shared: list[tuple[str, str]]) -> Counter[str]:
    """The shared requests by what they are: ``root listing`` or ``METHOD object`` of the state."""
    return Counter("root listing" if "delimiter" in p else f"{m} {p.split('?')[0].rsplit('/', 1)[-1]}"
                   for m, p in shared)


def test_a_cold_plan_costs_at_most_four_requests_an_idle_table_and_4_5_with_the_state(s3_server, idle_fleet):
    mark = len(s3_server.requests)
    alone = _plan(idle_fleet)
    cold = s3_server.requests[mark:]
    assert alone["discovered"] == IDLE and all(t["status"] == "idle" and t["jobs"] == [] for t in alone["tables"])
    print(f"cold plan: {len(cold)} requests for {IDLE} idle tables")
    assert len(cold) / IDLE <= 4, "\n".join(f"{m} {p}" for m, p in cold)
    # per table: _versions/ (discovery's), its manifest, _mem_wal/; shared: the root's listing
    per_table, shared = _split(cold, idle_fleet["root"])
    assert per_table <= 3 * IDLE and len(shared) == 1, cold
    # the same with the shared state: its reads (cache, pauses, run log, last plan) and writes included
    state = f"{idle_fleet['state']}-cold"
    mark = len(s3_server.requests)
    shared_plan = _plan(idle_fleet, "--state", state)
    cold = s3_server.requests[mark:]
    assert [t["table"] for t in shared_plan["tables"]] == [t["table"] for t in alone["tables"]]
    print(f"cold plan with the state: {len(cold)} requests for {IDLE} idle tables")
    assert len(cold) / IDLE <= 4.5, "\n".join(f"{m} {p}" for m, p in cold)
    per_table, shared = _split(cold, idle_fleet["root"])
    assert per_table <= 3 * IDLE, cold
    # the root's listing; cache, run log, pauses and last plan read (the last plan once); cache and plan written
    assert _parts(shared) == {"root listing": 1, "GET cache.json": 1, "GET runs.json": 1, "GET controls.json": 1,
                              "GET plan.json": 1, "PUT cache.json": 1, "PUT plan.json": 1}, shared
    keys = {o["Key"] for o in s3_server.client().list_objects_v2(Bucket=idle_fleet["bucket"],
                                                                Prefix="_memwal_fleet-cold/")["Contents"]}
    assert keys == {"_memwal_fleet-cold/cache.json", "_memwal_fleet-cold/plan.json"}


def test_a_second_plan_on_another_machine_reads_the_shared_state_at_3_5_requests_an_idle_table(
        s3_server, idle_fleet, tmp_path):
    state = idle_fleet["state"]
    for machine in ("machine-a", "machine-b", "machine-c"):
        (tmp_path / machine).mkdir()
    first = _cli(idle_fleet, tmp_path / "machine-a", "fleet", "plan", idle_fleet["root"], "--state", state, "--json")
    assert first.returncode == 0, first.stderr
    mark = len(s3_server.requests)
    second = _cli(idle_fleet, tmp_path / "machine-b", "fleet", "plan", idle_fleet["root"], "--state", state, "--json")
    used = s3_server.requests[mark:]
    assert second.returncode == 0, second.stderr
    doc = json.loads(second.stdout)
    assert doc["discovered"] == IDLE and doc["by_status"]["idle"] == IDLE
    print(f"second plan, another machine: {len(used)} requests for {IDLE} idle tables")
    assert len(used) / IDLE <= 3.5, "\n".join(f"{m} {p}" for m, p in used)
    # 2 a known table (_versions/, _mem_wal/); shared: the root's listing, the state read, the plan written
    per_table, shared = _split(used, idle_fleet["root"])
    assert per_table <= 2 * IDLE, used
    assert _parts(shared) == {"root listing": 1, "GET cache.json": 1, "GET runs.json": 1, "GET controls.json": 1,
                              "GET plan.json": 1, "PUT plan.json": 1}, shared
    # the cache was read, not written again (nothing changed); no table folder was listed
    assert not any(m == "PUT" and "cache.json" in p for m, p in used)
    assert not any("delimiter" in p and "prefix=lake%2Ft0" in p for _, p in used)
    assert list((tmp_path / "machine-b").iterdir()) == []  # nothing kept on this machine's disk

    # a third machine shows that plan without planning: the state's reads alone
    mark = len(s3_server.requests)
    shown = _cli(idle_fleet, tmp_path / "machine-c", "fleet", "status", "--state", state, "--json")
    used = s3_server.requests[mark:]
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["discovered"] == IDLE and status["history"] >= 2
    assert all("/lake/" not in p and "prefix=lake" not in p for _, p in used), used  # no table read
    # the last plan, and read live: each table's last run (runs.json) and the pauses (controls.json)
    assert sorted(p.rsplit("/", 1)[-1] for m, p in used if m == "GET") == ["controls.json", "plan.json", "runs.json"]
    assert len(used) == 3, used
