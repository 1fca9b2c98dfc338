"""The maintenance cycle on Azure Blob Storage (Azurite on loopback), with both engines.

Tables are written by pylance's ShardWriter to ``az://container/table`` (Lance and our
store take the same storage options); every job runs against them and the results are
checked row for row against the workload's model, as the S3 cycle does
(tests/integration/test_gc.py::test_full_cycle_on_s3). The lease race runs on Azurite through the
store-parametrised tests of tests/interleavings/test_lease.py; the store contract through
tests/integration/test_storage.py; credentials and transient failures through tests/integration/test_object_store.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import memwal
from memwal.core.secrets import storage_options_file
from memwal.demo import create_base_table, shard_ids_for, write_generations
from memwal.errors import UnsafePathError
from memwal.gc import delete_objects
from memwal.read import lsm_scan
from memwal.store import open_store
from memwal.table.shards import list_generation_dirs
from tests.adversarial.test_secrets import CmdlineWatch
from tests.azureserver import ACCOUNT_KEY, AzureServer
from tests.conftest import SMALL, table_rows
from tests.helpers import ROOT, assert_one_line_error, run_cli, spark_submit

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)


def _azure_table(azure_server: AzureServer, name: str = "cycle"):
    uri, opts = azure_server.new_table(name)
    _, model = create_base_table(uri, SMALL, opts)
    write_generations(uri, SMALL, model, storage_options=opts)
    return uri, opts, model


def _lsm_rows(table) -> list[dict]:
    return sorted(lsm_scan(table).to_pylist(), key=lambda r: r["id"])


def test_full_cycle_on_azure_local_engine(azure_server: AzureServer, tmp_path: Path) -> None:
    uri, opts, model = _azure_table(azure_server)
    t = memwal.open(uri, opts)
    assert _lsm_rows(t.table) == model.sorted_rows()
    for _ in range(SMALL.generations):  # one generation a merge: fragments for compaction to rewrite
        assert t.merge(max_generations=1).ok
    assert table_rows(t.table) == model.sorted_rows()
    assert t.catchup().to_dict()["all_recorded"] is True
    before = t.table.manifest()
    compact = t.compact().to_dict()
    assert compact["version"] is not None and compact["fragments_after"] < compact["fragments_before"]
    after = t.table.manifest()
    assert after.compacted == before.compacted and after.index_catchup == before.index_catchup
    assert t.snapshot().to_dict()["version"] is not None
    gc = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert len(gc["deleted"]) == SMALL.shards * SMALL.generations and gc["wal_entries_deleted"] > 0
    assert all(not list_generation_dirs(t.table.store, s) for s in shard_ids_for(SMALL))
    assert table_rows(t.table) == model.sorted_rows() and _lsm_rows(t.table) == model.sorted_rows()
    assert t.verify().ok

    path = tmp_path / "opts.json"
    path.write_text(json.dumps(opts))
    run = run_cli("status", uri, "--storage-options-file", str(path), "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["table"] == uri and all(s["unmerged_generations"] == [] for s in doc["shards"])
    assert all(s["compacted_generation"] == SMALL.generations for s in doc["shards"])


def test_full_cycle_on_azure_spark_submit_keeps_the_key_off_every_command_line(azure_server: AzureServer,
                                                                              tmp_path: Path) -> None:
    """The Spark engine (jobs/maintenance.py: merge, catchup, compact, snapshot, gc in one
    application) on Azure, credentials only in a 0600 options file: the account key is on no
    process's command line and in no output."""
    uri, opts, model = _azure_table(azure_server, "spark-cycle")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = tmp_path / "result.json"
    with CmdlineWatch(uri) as watch, storage_options_file(opts) as path:
        proc = subprocess.run(
            spark_submit("--master", "local[2]", "--conf", "spark.ui.enabled=false",
                         str(ROOT / "jobs/maintenance.py"), uri, "--storage-options-file", path, "--result-file",
                         str(result), "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0"),
            capture_output=True, text=True, env=env, timeout=900,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert ACCOUNT_KEY not in proc.stdout + proc.stderr
    watch.assert_no_secret_and_private_file(ACCOUNT_KEY)
    docs = {j["job"]: j["result"] for j in json.loads(result.read_text())["jobs"]}  # memwal cycle's document
    assert set(docs) == {"merge", "catchup", "compact", "snapshot", "gc"}
    assert all(d.get("engine") in (None, "spark") for d in docs.values())
    assert len(docs["gc"]["deleted"]) == SMALL.shards * SMALL.generations
    t = memwal.open(uri, opts)
    assert table_rows(t.table) == model.sorted_rows() and _lsm_rows(t.table) == model.sorted_rows()
    assert all(not list_generation_dirs(t.table.store, s) for s in shard_ids_for(SMALL))


# --------------------------------------------------------------------------- hostile inputs that apply


def test_gc_deletes_only_under_its_own_folders_on_azure(azure_server: AzureServer) -> None:
    """The allowed-prefix rule holds on Azure (no links there: keys)."""
    uri, opts = azure_server.new_table("tables/t")
    store = open_store(uri, opts)
    shard = "00000000-0000-0000-0000-000000000001"
    keep = ["_versions/1.manifest", "data/x.lance", "_mem_wal/notashard/f", "_mem_wal/_other/f"]
    for key in keep + [f"_mem_wal/{shard}/wal/a", "_mem_wal/_staging/s/x"]:
        store.put(key, b"x")
    for key in keep:
        with pytest.raises(UnsafePathError, match="deletions are allowed only under"):
            delete_objects(store, [f"_mem_wal/{shard}/wal/a", key])
    assert all(store.exists(k) for k in keep) and store.exists(f"_mem_wal/{shard}/wal/a")
    assert delete_objects(store, [f"_mem_wal/{shard}/wal/a", "_mem_wal/_staging/s/x"]) == []
    assert [o.key for o in store.list("")] == sorted(keep)


@pytest.mark.parametrize(
    ("pair", "needle"),
    [
        ("azure_storage_acount_key=x", "did you mean 'azure_storage_account_key'"),
        ("azure_storage_endpoint=ftp://h", "expected an http(s):// URL"),
        ("allow_http=sometimes", "expected true or false"),
    ],
)
def test_bad_input_on_azure_writes_nothing(azure_server: AzureServer, tmp_path: Path, pair: str, needle: str) -> None:
    uri, opts, _ = _azure_table(azure_server, "bad-input")
    store = open_store(uri, opts)
    before = {(o.key, o.etag) for o in store.list("")}
    path = tmp_path / "opts.json"
    path.write_text(json.dumps(opts))
    for cmd in ("merge", "gc", "snapshot"):
        run = run_cli(cmd, uri, "--storage-options-file", str(path), "--storage-option", pair)
        assert_one_line_error(run, 2, needle)
    assert {(o.key, o.etag) for o in store.list("")} == before  # not even a lease
