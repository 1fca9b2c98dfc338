"""The CLI contract (JSON shapes, exit codes, one-line errors, nothing written).

The CLI runs in-process (``tests.helpers.run_cli``: the same ``main`` without a Python
start-up per command); the last tests start the real programs, ``python -m memwal.cli``
and the ``memwal`` console script, end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memwal.table.manifest import read_table_manifest
from memwal.table.naming import manifest_key
from memwal.table.shards import all_shard_manifests
from tests.conftest import table_rows
from tests.helpers import CliRun, assert_one_line_error, run_cli, tree_digest


def memwal(*args: str, rc: int = 0) -> CliRun:
    """``memwal ARGS`` in-process, asserting its exit code."""
    run = run_cli(*args)
    assert run.rc == rc, (run.rc, run.stdout, run.stderr)
    return run


def memwal_json(*args: str, rc: int = 0) -> dict:
    return json.loads(memwal(*args, rc=rc).stdout)


def test_status_json_contract(make_table):
    table, _ = make_table()
    doc = memwal_json("status", table.uri, "--json")
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
    # the totals over shards, as the Python TableStatus has them
    assert doc["unmerged_generations"] == 12 and doc["unmerged_rows"] == 3 * 4 * 44
    assert doc["unmerged_bytes"] == sum(s["unmerged_bytes"] for s in doc["shards"])
    assert doc["oldest_unmerged_age_seconds"] == max(s["oldest_unmerged_age_seconds"] for s in doc["shards"])
    assert doc["broken_shards"] == [] and doc["checkpoints"] == [] and doc["unreadable_checkpoints"] == []
    human = memwal("status", table.uri).stdout
    assert "3 shards, 12 unmerged generations" in human


def test_merge_json_contract_and_dry_run_writes_nothing(make_table):
    table, model = make_table()
    before = tree_digest(table.uri)
    plan = memwal_json("merge", table.uri, "--dry-run", "--json", "--max-generations", "3")
    assert plan["dry_run"] is True
    assert {(s["from_generation"], s["to_generation"]) for s in plan["shards"]} == {(1, 3)}
    assert tree_digest(table.uri) == before
    doc = memwal_json("merge", table.uri, "--json", "--max-generations", "3")
    assert doc["version"] == table.manifest().version
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 3)}
    assert all(s["rows_upserted"] > 0 and s["rows_deleted"] > 0 for s in doc["shards"])
    status = memwal_json("status", table.uri, "--json")
    assert all(s["compacted_generation"] == 3 and s["unmerged_generations"] == [4] for s in status["shards"])
    empty = memwal_json("merge", table.uri, "--json", "--max-generations", "1")
    assert {(s["from_generation"], s["to_generation"]) for s in empty["shards"]} == {(4, 4)}
    nothing = memwal_json("merge", table.uri, "--json")
    # every run names its run in the history, even one with nothing to merge
    assert nothing.pop("run_id") == memwal_json("history", table.uri, "--json", "--limit", "1")["runs"][0]["run_id"]
    assert nothing == {
        "table": table.uri,
        "version": None,
        "shards": [],
        "blocked": [],
        "commits": 0,
        "attempts": 1,
        "engine": "local",
        "commit_path": None,
    }
    memwal("verify", table.uri)


def test_merge_with_a_gap_exits_nonzero_naming_the_shard(make_table):
    table, _ = make_table()
    shard_id, st = next(iter(all_shard_manifests(table.store).items()))
    gen = Path(table.uri, st.generation_key(st.generation(3)))
    gen.rename(gen.with_name("elsewhere"))
    run = memwal("merge", table.uri, "--json", rc=1)
    doc = json.loads(run.stdout)
    assert doc["blocked"][0]["shard_id"] == shard_id and doc["blocked"][0]["generation"] == 3
    assert f"shard {shard_id} stopped at generation 3" in run.stderr
    assert table.manifest().compacted[shard_id] == 2


def test_an_unknown_option_names_its_command_and_the_option_meant(tmp_path):
    """An option a command does not know is that command's error: one line pointing to its own
    --help, with the option meant when one is close; nothing is opened or written."""
    uri = str(tmp_path / "nope")
    assert_one_line_error(run_cli("cycle", uri, "--expire-verions", "5"), 2,
                          "unrecognized arguments: --expire-verions 5", "did you mean --expire-versions?",
                          "see memwal cycle --help")
    assert_one_line_error(run_cli("fleet", "status", "--jsn"), 2, "did you mean --json?",
                          "see memwal fleet status --help")
    far = run_cli("status", uri, "--zzzzzz")
    assert_one_line_error(far, 2, "unrecognized arguments: --zzzzzz", "see memwal status --help")
    assert "did you mean" not in far.error_lines[0]
    assert not (tmp_path / "nope").exists()


def test_missing_table_is_bad_input(tmp_path):
    assert_one_line_error(run_cli("status", str(tmp_path / "nope")), 2, "nope")
    assert not (tmp_path / "nope").exists()


def test_table_without_mem_wal_index_is_bad_input(tmp_path):
    uri = str(tmp_path / "plain")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri)
    before = tree_digest(uri)
    for cmd in ("status", "merge", "verify"):
        assert_one_line_error(run_cli(cmd, uri), 2, "no MemWAL index")
    assert tree_digest(uri) == before


def test_corrupt_shard_manifest_stops_that_shard_only(make_table):
    table, _ = make_table()
    shard_id, st = next(iter(all_shard_manifests(table.store).items()))
    Path(table.uri, manifest_key(shard_id, st.version)).write_bytes(b"\x0a\xff\xff")
    before = tree_digest(table.uri)
    assert_one_line_error(run_cli("status", table.uri), 1, "corrupt shard manifest", shard_id)
    assert tree_digest(table.uri) == before
    assert_one_line_error(run_cli("merge", table.uri), 1, "corrupt shard manifest", shard_id)
    compacted = table.manifest().compacted
    assert shard_id not in compacted and len(compacted) == 2  # the other shards merged


def test_truncated_table_manifest_is_bad_input(make_table):
    table, _ = make_table()
    path = Path(table.uri, read_table_manifest(table.store).key)
    path.write_bytes(path.read_bytes()[:40])
    assert_one_line_error(run_cli("status", table.uri), 2, "truncated", path.name)


def test_bad_storage_option_is_bad_input(make_table):
    table, _ = make_table()
    before = tree_digest(table.uri)
    assert_one_line_error(run_cli("status", table.uri, "--storage-option", "novalue"), 2, "KEY=VALUE")
    assert_one_line_error(
        run_cli("status", "s3://bucket/t", "--storage-option", "allow_http=maybe"), 2, "allow_http"
    )
    assert tree_digest(table.uri) == before


@pytest.mark.parametrize(
    "argv",
    [("merge",), ("merge", "/x", "--max-generations", "0"), ("frobnicate",)],
    ids=["no-table", "zero-budget", "unknown-command"],
)
def test_bad_usage_exits_2(argv):
    run = memwal(*argv, rc=2)
    assert "Traceback" not in run.stderr and run.stdout == ""


def test_debug_shows_the_traceback(tmp_path):
    run = memwal("status", str(tmp_path / "nope"), "--debug", rc=2)
    assert "Traceback" in run.stderr


def test_held_lease_exits_3(make_table):
    from memwal.lease import Lease

    table, _ = make_table()
    with Lease(table.store, "merge", holder="another-merger"):
        before = tree_digest(table.uri)
        # --lease-wait 0: give up at once rather than sit out the other holder
        assert_one_line_error(run_cli("merge", table.uri, "--lease-wait", "0"), 3, "another-merger")
        assert tree_digest(table.uri) == before
    assert table.manifest().compacted == {}


@pytest.mark.parametrize("cmd", ["status", "merge", "verify"])
def test_help_works(cmd):
    run = memwal(cmd, "--help")
    assert run.stdout.startswith("usage:") and f"memwal {cmd}" in run.stdout.splitlines()[0]


# ------------------------------------------------------------------ end to end: real processes


def program(argv: list[str], rc: int) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_python_m_memwal_cli_status(make_table):
    table, _ = make_table()
    doc = json.loads(program([sys.executable, "-m", "memwal.cli", "status", table.uri, "--json"], 0).stdout)
    assert doc["table"] == table.uri and doc["version"] == table.manifest().version
    assert [s["unmerged_generations"] for s in doc["shards"]] == [[1, 2, 3, 4]] * 3


def test_console_script_merges(make_table):
    table, model = make_table()
    exe = str(Path(sys.executable).parent / "memwal")
    doc = json.loads(program([exe, "merge", table.uri, "--json"], 0).stdout)
    assert doc["version"] == table.manifest().version
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 4)}
    assert table_rows(table) == model.sorted_rows()


def test_failing_command_exit_code_and_one_line_error(tmp_path):
    proc = program([sys.executable, "-m", "memwal.cli", "status", str(tmp_path / "nope")], 2)
    assert_one_line_error(CliRun(proc.returncode, proc.stdout, proc.stderr), 2, "nope")


@pytest.mark.parametrize(("preset", "pyarrow_first", "pool"), [
    (None, False, "system"),  # the CLI's choice (memwal.core.process.configure_process)
    ("mimalloc", False, "mimalloc"),  # the user's choice wins
    (None, True, "mimalloc"),  # a host that imported pyarrow first keeps its pool
])
def test_cli_merges_on_the_system_allocator_unless_chosen(make_table, preset, pyarrow_first, pool):
    table, model = make_table()
    script = ("import os, sys\n"
              + ("import pyarrow\n" if pyarrow_first else "")
              + "from memwal.cli import main\n"
              f"code = main(['merge', {table.uri!r}, '--json'])\n"
              "import pyarrow\n"
              "print(pyarrow.default_memory_pool().backend_name, os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))\n"
              "sys.exit(code)\n")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if preset:
        env["ARROW_DEFAULT_MEMORY_POOL"] = preset
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    backend, variable = proc.stdout.splitlines()[-1].split()
    assert backend == pool
    assert variable == (preset or ("None" if pyarrow_first else "system"))
    assert table_rows(table) == model.sorted_rows()
