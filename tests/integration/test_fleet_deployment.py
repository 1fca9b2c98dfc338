"""The fleet as a deployment runs it: two workers and an API server sharing nothing but the bucket.

Three Airflow homes, each with its own metadata database, its own copy of the config, its own
scratch folder and temporary folder; the tables, the fleet's state (probe cache, last plan and
history, run log) and nothing else in moto's S3. Worker A runs the DAG (``airflow dags test``:
the plan task and the mapped table tasks) and drains the lake to its writers' rows, then once
more (nothing to run: its plan leaves the cache of the drained tables); a writer flushes to two
tables; worker B runs it: its plan reads A's cache from the bucket (an idle table costs its two
listings, no folder of it is listed, its manifest is not read again) and its tasks merge the two
tables. The API server, in the third home, serves the fleet page of B's plan with the three
plans in its history, read from the bucket. No home holds a file of the fleet's state.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memwal.demo import Workload, create_base_table, write_generations
from memwal.table import open_table
from tests.airflow_server import api_server, get_with_headers
from tests.browser import browser
from tests.conftest import table_rows
from tests.helpers import migrated_airflow_home

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

WL = Workload(base_rows=120, shards=2, generations=2, rows_per_generation=10, seed=8, indexes=False)
VENV_BIN = Path(sys.executable).parent
STATE_FILES = {"cache.json", "plan.json", "runs.json", "controls.json"}


@pytest.fixture
def lake(s3_server) -> dict:
    first, opts = s3_server.new_table("lake/t0")
    root = first.rsplit("/", 1)[0]
    models = {}
    for i in range(4):
        uri = f"{root}/t{i}"
        models[uri] = create_base_table(uri, WL, opts)[1]
        models[uri] = write_generations(uri, WL, models[uri], storage_options=opts)
    return {"root": root, "opts": opts, "models": models, "bucket": s3_server.last_bucket}


def home(tmp_path: Path, name: str, s3_server, lake: dict) -> dict[str, str]:
    """An Airflow home of its own: database, config copy, scratch and temporary folders."""
    folder = tmp_path / name
    env = migrated_airflow_home(folder)
    (folder / "scratch").mkdir()
    (folder / "tmp").mkdir()
    public = {"allow_http": "true", "aws_region": "us-east-1"}
    config = folder / "fleet.yaml"
    config.write_text(json.dumps({
        "sources": [{"source": lake["root"], "conn_id": "lake", "storage_options": public}], "schedule": None,
        "state": {"uri": f"s3://{lake['bucket']}/_memwal_fleet", "conn_id": "lake", "storage_options": public},
        "budget": {"tables_per_task": 2, "threads": 2},
        "policy": {"defaults": {"thresholds": {"compact_deleted_fraction": 1}}}}))
    conn = {"conn_type": "aws", "login": "testing", "password": "testing",
            "extra": {"endpoint_url": s3_server.endpoint, "region_name": "us-east-1"}}
    return {**env, "MEMWAL_FLEET_CONFIG": str(config), "AIRFLOW_CONN_LAKE": json.dumps(conn),
            "TMPDIR": str(folder / "tmp"), "HOME": str(folder / "scratch")}


def dags_test(env: dict[str, str]) -> str:
    proc = subprocess.run([str(VENV_BIN / "airflow"), "dags", "test", "memwal_fleet"], env=env,
                          cwd=env["HOME"], capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in out, out[-5000:]
    return out


def test_two_workers_and_an_api_server_share_nothing_but_the_bucket(s3_server, lake, tmp_path):
    root, opts, models = lake["root"], lake["opts"], lake["models"]
    worker_a, worker_b = home(tmp_path, "worker-a", s3_server, lake), home(tmp_path, "worker-b", s3_server, lake)
    server = home(tmp_path, "api-server", s3_server, lake)

    out = dags_test(worker_a)
    assert "4 with work in 2 chunks" in out
    for uri, model in models.items():
        assert table_rows(open_table(uri, opts)) == model.sorted_rows()
    assert "0 with work in 0 chunks" in dags_test(worker_a)

    written = [f"{root}/t1", f"{root}/t2"]
    for uri in written:
        models[uri] = write_generations(uri, WL, models[uri], storage_options=opts, generations=1, seed_offset=50)
    mark = len(s3_server.requests)
    out = dags_test(worker_b)
    used = s3_server.requests[mark:]
    # each table: its merge done, and GC after it (it rolls up; its deletions wait for the writers)
    assert "2 with work in 1 chunks" in out and "memwal fleet: 2 tables run (2 done, 2 waiting)" in out
    for uri, model in models.items():
        assert table_rows(open_table(uri, opts)) == model.sorted_rows()
    for idle in ("t0", "t3"):  # B knew them from A's cache in the bucket: two listings each, nothing else
        mine = [(m, p) for m, p in used if f"lake/{idle}/" in p or f"lake%2F{idle}%2F" in p]
        assert len(mine) <= 3, mine
        assert not any(m == "GET" and ".manifest" in p for m, p in mine)

    with api_server(server, tmp_path / "api-server") as (base, _, _):
        status, headers, page = get_with_headers(f"{base}/memwal/fleet")
        # three DAG runs: each plans, and the two that ran tables plan those once more after the run
        assert status == 200 and "5 plans in the history" in page, page[-2000:]
        with browser() as b:
            b.navigate(f"{base}/memwal/fleet")
            seen = b.wait_for("""(() => {
                const rows = document.querySelectorAll('tr.table-row');
                if (document.readyState !== 'complete' || !rows.length) return null;
                return {tables: [...rows].map(r => r.dataset.table), states: [...rows].map(r => r.dataset.state),
                        last: [...rows].map(r => r.querySelectorAll('td')[7].textContent)}; })()""")
            shot = b.call("Page.captureScreenshot", format="png")["data"]
        (tmp_path / "api-server-fleet.png").write_bytes(base64.b64decode(shot))
    assert sorted(seen["tables"]) == sorted(models)
    assert all("merge done" in last for table, last in zip(seen["tables"], seen["last"], strict=True)
               if table in written), seen

    for name in ("worker-a", "worker-b", "api-server"):
        held = [p for p in (tmp_path / name).rglob("*") if p.name in STATE_FILES]
        assert held == [], held  # the fleet's state is in the bucket only
    keys = {o["Key"].rsplit("/", 1)[-1] for o in s3_server.client().list_objects_v2(
        Bucket=lake["bucket"], Prefix="_memwal_fleet/")["Contents"]}
    assert {"cache.json", "plan.json", "runs.json"} <= keys
    assert os.path.getsize(tmp_path / "api-server-fleet.png") > 10_000
