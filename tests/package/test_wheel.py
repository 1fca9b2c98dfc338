"""The package as people install it: the wheel ``make dist`` built, in a clean venv (``make smoke``).

Marked ``smoke``: ``make test`` runs the sources on Python 3.11 and deselects these; ``make smoke``
installs the wheel into a clean venv of each other supported Python (docker/install-memwal.sh, the
image's own install step, then the test extra) and runs them there, with the repository last on
``sys.path`` (``--import-mode=append``), so ``memwal`` is the installed one: the first test proves it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import memwal

pytestmark = pytest.mark.smoke

#: The installed program of this venv.
BIN = Path(sys.executable).parent


def installed_files() -> set[str]:
    files = metadata.distribution("memwal-jobs").files or []
    return {str(f) for f in files}


def test_memwal_is_the_installed_wheel_with_its_folders_under_the_memwal_namespace():
    site = Path(sysconfig.get_path("purelib")).resolve()
    assert Path(memwal.__file__).resolve().parent == site / "memwal", memwal.__file__
    files = installed_files()
    tops = {f.split("/", 1)[0] for f in files if "/" in f and not f.startswith("../")}  # ../: bin/memwal
    # jobs/, airflow_plugins/ and dags/ are installed under memwal: no generic top-level name
    assert tops == {"memwal", "memwal_jobs-" + metadata.version("memwal-jobs") + ".dist-info"}, tops
    for needed in ("memwal/spark/maintenance.py", "memwal/spark/fleet_chunk.py", "memwal/spark/log4j2.properties",
                   "memwal/spark/engine/jvm_archive.py", "memwal/airflow/plugin.py",
                   "memwal/airflow/memwal_fleet.schema.json", "memwal/airflow/example_dags/memwal_fleet.py",
                   "memwal/airflow/example_dags/memwal_fleet.example.yaml", "memwal/inspect/status_page.html.j2",
                   "memwal/fleet/fleet_page.css", "memwal/pb/mem_wal_index_pb2.pyi", "memwal/py.typed"):
        assert needed in files, needed
    # pip compiled the modules as it installed them (what `make install` does for the sources)
    tag = sys.implementation.cache_tag
    assert (site / "memwal" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert (site / "memwal" / "spark" / "engine" / "__pycache__" / f"session.{tag}.pyc").is_file()
    points = {(e.group, e.name): e.value for e in metadata.distribution("memwal-jobs").entry_points}
    assert points[("console_scripts", "memwal")] == "memwal.cli:main"
    assert points[("memwal.engines", "spark")] == "memwal.spark.engine:ENGINES"
    assert points[("airflow.plugins", "memwal")] == "memwal.airflow.plugin:MemWalPlugin"


def test_the_wheel_holds_what_is_installed_and_nothing_of_the_repository_besides():
    wheel = Path(os.environ["MEMWAL_SMOKE_WHEEL"])
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {n for n in names if not n.startswith("memwal/") and ".dist-info/" not in n} == set()
    assert not any(n.startswith(("memwal/tests", "memwal/bench")) for n in names)
    assert {n for n in installed_files() if n.startswith("memwal/") and not n.endswith(".pyc")} == {
        n for n in names if n.startswith("memwal/")}


def memwal_cli(*args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([str(BIN / "memwal"), *args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (args, run.stderr[-3000:])
    return run


def rows(uri: str) -> list[tuple]:
    doc = json.loads(memwal_cli("scan", uri, "--json").stdout)
    return sorted((r["id"], json.dumps(r, sort_keys=True)) for r in doc["rows"])


def test_demo_data_then_a_cycle_by_the_installed_program(tmp_path):
    """``memwal demo-data`` then ``memwal cycle``: every generation merged and collected, the
    readers' rows unchanged, ``verify`` clean, and the base table alone holds them all."""
    import lance

    uri = str(tmp_path / "t")
    memwal_cli("demo-data", uri)
    before = json.loads(memwal_cli("status", uri, "--json").stdout)
    assert sum(len(s["unmerged_generations"]) for s in before["shards"]) > 0
    seen = rows(uri)
    cycle = json.loads(memwal_cli("cycle", uri, "--grace-seconds", "0", "--expire-versions", "0",
                                  "--writer-idle-seconds", "0", "--json").stdout)
    assert [(j["job"], j["status"]) for j in cycle["jobs"]] == [
        (job, "done") for job in ("merge", "catchup", "compact", "gc", "snapshot")], cycle
    after = json.loads(memwal_cli("status", uri, "--json").stdout)
    assert all(s["unmerged_generations"] == [] for s in after["shards"]), after
    assert not list(Path(uri, "_mem_wal").glob("*/*_gen_*")), "a merged generation is still on disk"
    assert rows(uri) == seen
    base = sorted(r["id"] for r in lance.dataset(uri).to_table(columns=["id"]).to_pylist())
    assert base == [i for i, _ in seen]
    assert json.loads(memwal_cli("verify", uri, "--json").stdout)["ok"]
