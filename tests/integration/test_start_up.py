"""What start-up loads: ``memwal --help``, ``--version``, every command's ``--help`` and the
DAG files' parse import nothing heavy (issue 49).

A help page or a DAG parse that loads Lance, Arrow or pandas costs most of a second before it
does anything (3 s on a loaded machine); a DAG processor pays it for every file, every parse.
Each check runs in a fresh interpreter (this one has loaded everything) and asserts what was
imported, not how long it took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

#: What start-up must not load: the engines' libraries and the clouds' SDKs.
HEAVY = ("lance", "pyarrow", "pandas", "pyspark", "airflow", "boto3")
#: A DAG file imports Airflow by definition; nothing else of the above.
HEAVY_FOR_A_DAG = ("lance", "pyarrow", "pandas", "pyspark")

#: Runs the CLI with the arguments given (``--help`` exits 0 through SystemExit), then reports
#: the heavy top-level packages this interpreter imported.
CLI_PROBE = """
import json, sys
from memwal.cli import build_parser, main
build_parser()
try:
    rc = main(sys.argv[2:])
except SystemExit as exit:
    rc = exit.code
heavy = json.loads(sys.argv[1])
print(json.dumps({"rc": rc, "loaded": sorted({m.split(".")[0] for m in sys.modules} & set(heavy))}), file=sys.stderr)
"""

#: Imports a DAG file as Airflow's DAG processor does (the module, top to bottom).
DAG_PROBE = """
import importlib.util, json, sys
path, heavy = sys.argv[1], json.loads(sys.argv[2])
spec = importlib.util.spec_from_file_location("dag_under_test", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dags = sorted(k for k, v in vars(module).items() if type(v).__name__ == "DAG")
print(json.dumps({"dags": dags, "loaded": sorted({m.split(".")[0] for m in sys.modules} & set(heavy))}),
      file=sys.stderr)
"""


def _probe(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={**os.environ, **(env or {})})
    assert run.returncode == 0, run.stderr
    report: dict[str, object] = json.loads(run.stderr.strip().splitlines()[-1])
    return report


def _commands() -> list[str]:
    from memwal.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("argv", [["--help"], ["--version"]] + [[c, "--help"] for c in _commands()],
                         ids=lambda a: " ".join(a))
def test_help_and_version_load_no_engine(argv):
    report = _probe(CLI_PROBE, json.dumps(HEAVY), *argv)
    assert report == {"rc": 0, "loaded": []}


DAG_CONFIGS = {
    "memwal_fleet.py": {"MEMWAL_FLEET_CONFIG": str(ROOT / "dags" / "memwal_fleet.local.yaml")},
    "memwal_tables.py": {"MEMWAL_CONFIG": str(ROOT / "dags" / "memwal_tables.example.yaml")},
    "memwal_maintenance.py": {},
}


def test_every_dag_file_is_covered():
    assert sorted(DAG_CONFIGS) == sorted(p.name for p in (ROOT / "dags").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("name", sorted(DAG_CONFIGS))
def test_a_dag_file_parse_loads_no_engine(name):
    """With its config set, so that the parse builds its DAGs (without one, the fleet and tables
    files define none and would prove nothing)."""
    report = _probe(DAG_PROBE, str(ROOT / "dags" / name), json.dumps(HEAVY_FOR_A_DAG), env=DAG_CONFIGS[name])
    assert report["dags"], report
    assert report["loaded"] == [], report


#: Reads a one-shard table written by pylance's ShardWriter (merged once, one generation unmerged)
#: through memwal's reader, and reports the modules the read loaded.
READ_PROBE = """
import json, sys
import memwal
before = set(sys.modules)
rows = memwal.open(sys.argv[1]).scan().num_rows
print(json.dumps({"rows": rows, "loaded": sorted(set(sys.modules) - before)}), file=sys.stderr)
"""


def test_a_read_loads_no_sql_parser_and_no_job_it_does_not_run(tmp_path) -> None:
    """A new process's first read paid 170 ms for sqlglot (only a filter needs it) and some 40 ms for
    the merge's and the snapshot refresh's execution, which a read never runs."""
    import uuid

    import lance
    import pyarrow as pa

    from tests.helpers import run_cli

    pk = {"lance-schema:unenforced-primary-key": "true"}
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=pk), pa.field("v", pa.int64())])
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.Table.from_pylist([{"id": 0, "v": 0}], schema=schema), uri).initialize_mem_wal(
        unsharded=True)
    for v in (1, 2):  # each writer's close flushes a generation
        with lance.dataset(uri).mem_wal_writer(str(uuid.UUID(int=1)), durable_write=False) as w:
            w.put(pa.Table.from_pylist([{"id": v, "v": v}], schema=schema))
        if v == 1:
            assert run_cli("merge", uri).rc == 0
    report = _probe(READ_PROBE, uri)
    loaded = set(report["loaded"])  # type: ignore[arg-type]
    assert report["rows"] == 3
    assert "sqlglot" not in loaded
    assert not loaded & {"memwal.merge.execute", "memwal.snapshot.execute", "memwal.snapshot.guard"}
    assert "memwal.read.scan" in loaded  # the probe did read through memwal's reader


@pytest.mark.parametrize("package", ["memwal.merge", "memwal.snapshot"])
def test_a_lazy_package_serves_every_name_it_exports(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    assert set(module.__all__) == set(module._WHERE)
    for name in module.__all__:
        assert getattr(module, name) is getattr(importlib.import_module(module._WHERE[name]), name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
