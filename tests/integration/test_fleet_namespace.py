"""Namespace-vended credentials reach the DAG's mapped tasks, and never travel through XCom.

A Lance Namespace behind its REST server on loopback (pylance's ``RestAdapter`` over a directory
namespace on moto's S3) vends each table's storage options, credentials included
(``vend_input_storage_options``); the fleet's config names the namespace and no connection: the
namespace is the only place the credentials come from. The plan task's chunks carry no
credential; the mapped task asks the namespace again for its table's and merges it to the
writer's rows.
"""

from __future__ import annotations

import json
import socket

from memwal.demo import Workload, create_base_table, write_generations
from memwal.table import open_table
from tests.conftest import table_rows
from tests.integration.test_airflow_fleet import context

WL = Workload(base_rows=120, shards=2, generations=2, rows_per_generation=10, seed=9, indexes=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_mapped_task_gets_its_tables_credentials_from_the_namespace(s3_server, tmp_path, monkeypatch):
    import lance.namespace as lns
    from memwal.airflow.fleet_operators import MemWalFleetOperator, MemWalFleetPlanOperator

    root, opts = s3_server.new_table("ns")
    uri = f"{root}/events.lance"
    model = write_generations(uri, WL, create_base_table(uri, WL, opts)[1], storage_options=opts)
    port = free_port()
    server = lns.RestAdapter("dir", {"root": root, "vend_input_storage_options": "true",
                                     **{f"storage.{k}": v for k, v in opts.items()}}, host="127.0.0.1", port=port)
    server.start()
    try:
        config = tmp_path / "fleet.yaml"
        config.write_text(json.dumps({"sources": [{"source": "namespace:rest",
                                                   "properties": {"uri": f"http://127.0.0.1:{port}",
                                                                  "root": root}}],
                                      "schedule": None, "budget": {"tables_per_task": 5}}))
        monkeypatch.setenv("MEMWAL_FLEET_CONFIG", str(config))
        (chunk,) = MemWalFleetPlanOperator(task_id="plan").execute(context())
        assert [w["table"] for w in chunk] == [uri] and chunk[0]["namespace_id"] == ["events"]
        assert opts["aws_secret_access_key"] not in json.dumps(chunk)  # no credential in XCom
        doc = MemWalFleetOperator(task_id="run_tables", work=chunk).execute(context())
    finally:
        server.stop()
    (table,) = doc["tables"]
    assert table["status"] == "ok" and table["jobs"][0]["version"] is not None, table
    assert table_rows(open_table(uri, opts)) == model.sorted_rows()
