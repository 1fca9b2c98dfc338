"""The CLI contract (DESIGN.md section 5): JSON shapes, exit codes, one-line errors, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal.naming import manifest_key
from memwal.shard_manifests import all_shard_manifests
from memwal.table_manifest import read_table_manifest


def memwal(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "memwal.cli", *args], capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def snapshot_files(root: str) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in Path(root).rglob("*") if p.is_file()}


def test_status_json_contract(make_table):
    table, _ = make_table()
    doc = json.loads(memwal("status", table.uri, "--json").stdout)
    assert doc["table"] == table.uri and doc["version"] == table.manifest().version
    assert len(doc["shards"]) == 3
    for s in doc["shards"]:
        assert s["flushed_generations"] == [1, 2, 3, 4]
        assert s["collected_generations"] == []
        assert s["compacted_generation"] == 0
        assert s["unmerged_generations"] == [1, 2, 3, 4]
        assert s["current_generation"] == 5
        assert s["index_catchup"] == {"id_idx": 0, "vec_idx": 0}
        assert s["unmerged_rows"] == 4 * 44 and s["unmerged_bytes"] > 0
        assert s["oldest_unmerged_age_seconds"] >= 0
        assert s["writer_epoch"] == 1 and s["status"] == "active"
    human = memwal("status", table.uri).stdout
    assert "3 shards, 12 unmerged generations" in human


def test_merge_json_contract_and_dry_run_writes_nothing(make_table):
    table, model = make_table()
    before = snapshot_files(table.uri)
    plan = json.loads(memwal("merge", table.uri, "--dry-run", "--json", "--max-generations", "3").stdout)
    assert plan["dry_run"] is True
    assert {(s["from_generation"], s["to_generation"]) for s in plan["shards"]} == {(1, 3)}
    assert snapshot_files(table.uri) == before
    doc = json.loads(memwal("merge", table.uri, "--json", "--max-generations", "3").stdout)
    assert doc["version"] == table.manifest().version
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 3)}
    assert all(s["rows_upserted"] > 0 and s["rows_deleted"] > 0 for s in doc["shards"])
    status = json.loads(memwal("status", table.uri, "--json").stdout)
    assert all(s["compacted_generation"] == 3 and s["unmerged_generations"] == [4] for s in status["shards"])
    empty = json.loads(memwal("merge", table.uri, "--json", "--max-generations", "1").stdout)
    assert {(s["from_generation"], s["to_generation"]) for s in empty["shards"]} == {(4, 4)}
    assert json.loads(memwal("merge", table.uri, "--json").stdout) == {
        "table": table.uri,
        "version": None,
        "shards": [],
        "blocked": [],
        "commits": 0,
        "attempts": 1,
        "engine": "local",
    }
    assert memwal("verify", table.uri).returncode == 0


def test_merge_with_a_gap_exits_nonzero_naming_the_shard(make_table):
    table, _ = make_table()
    shard_id, st = next(iter(all_shard_manifests(table.store).items()))
    gen = Path(table.uri, st.generation_key(st.generation(3)))
    gen.rename(gen.with_name("elsewhere"))
    proc = memwal("merge", table.uri, "--json", check_rc=1)
    doc = json.loads(proc.stdout)
    assert doc["blocked"][0]["shard_id"] == shard_id and doc["blocked"][0]["generation"] == 3
    assert f"shard {shard_id} stopped at generation 3" in proc.stderr
    assert table.manifest().compacted[shard_id] == 2


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("memwal: error:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_missing_table_is_bad_input(tmp_path):
    proc = memwal("status", str(tmp_path / "nope"), check_rc=2)
    _one_line_error(proc, "nope")


def test_table_without_mem_wal_index_is_bad_input(tmp_path):
    uri = str(tmp_path / "plain")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri)
    before = snapshot_files(uri)
    for cmd in ("status", "merge", "verify"):
        _one_line_error(memwal(cmd, uri, check_rc=2), "no MemWAL index")
    assert snapshot_files(uri) == before


def test_corrupt_shard_manifest_stops_that_shard_only(make_table):
    table, _ = make_table()
    shard_id, st = next(iter(all_shard_manifests(table.store).items()))
    Path(table.uri, manifest_key(shard_id, st.version)).write_bytes(b"\x0a\xff\xff")
    before = snapshot_files(table.uri)
    _one_line_error(memwal("status", table.uri, check_rc=1), "corrupt shard manifest", shard_id)
    assert snapshot_files(table.uri) == before
    _one_line_error(memwal("merge", table.uri, check_rc=1), "corrupt shard manifest", shard_id)
    compacted = table.manifest().compacted
    assert shard_id not in compacted and len(compacted) == 2  # the other shards merged


def test_truncated_table_manifest_is_bad_input(make_table):
    table, _ = make_table()
    path = Path(table.uri, read_table_manifest(table.store).key)
    path.write_bytes(path.read_bytes()[:40])
    _one_line_error(memwal("status", table.uri, check_rc=2), "truncated", path.name)


def test_bad_storage_option_is_bad_input(make_table):
    table, _ = make_table()
    _one_line_error(memwal("status", table.uri, "--storage-option", "novalue", check_rc=2), "KEY=VALUE")
    _one_line_error(memwal("status", "s3://bucket/t", "--storage-option", "allow_http=maybe", check_rc=2), "allow_http")


def test_bad_usage_exits_2():
    assert memwal("merge", check_rc=2).returncode == 2
    assert memwal("merge", "/x", "--max-generations", "0", check_rc=2).returncode == 2
    assert memwal("frobnicate", check_rc=2).returncode == 2


def test_debug_shows_the_traceback(tmp_path):
    proc = memwal("status", str(tmp_path / "nope"), "--debug", check_rc=2)
    assert "Traceback" in proc.stderr


def test_held_lease_exits_3(make_table):
    from memwal.lease import Lease

    table, _ = make_table()
    with Lease(table.store, "merge", holder="another-merger"):
        _one_line_error(memwal("merge", table.uri, check_rc=3), "another-merger")
    assert table.manifest().compacted == {}


@pytest.mark.parametrize("cmd", ["status", "merge", "verify"])
def test_help_works(cmd):
    assert memwal(cmd, "--help").stdout.startswith("usage:")


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "memwal"
    assert exe.exists() and os.access(exe, os.X_OK)
