"""The Spark engine in local mode: same plan, same table as the local engine; spark-submit works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from memwal.spark.engine.merge import SparkMergeEngine

import memwal
from memwal.demo import Workload
from memwal.merge import run_merge
from memwal.table import open_table
from tests.conftest import table_rows
from tests.helpers import ROOT
from tests.integration.test_driverless_merge import unreferenced

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

#: The two shapes of a Spark merge job. The keyed shuffle with tiny read tasks (one generation
#: each), so it really joins several tasks' rows; by shard, as users run it (two tasks on local[2]).
# internal entry: the read task size and the partitions are no user options
SHAPES = {"shuffle": dict(partitions=4, read_task_bytes=1), "by-shard": {}}


@pytest.mark.parametrize("path", ["driverless", "driver"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_spark_engine_gives_the_same_table_as_the_local_engine(make_table, spark_session, tmp_path, shape, path):
    """Both shapes, both commit paths (the driver's is the one merge operators take; asked of
    a last-write-wins table here): the local engine's table, row for row."""
    table, model = make_table(Workload(base_rows=400, shards=3, generations=5, rows_per_generation=50, seed=11))
    copy = tmp_path / "copy"
    shutil.copytree(table.uri, copy)
    local = memwal.open(table.uri).merge().value
    other = open_table(str(copy))
    # internal entry: the commit path is the core's choice, no user option
    engine = SparkMergeEngine(spark_session, **SHAPES[shape], driverless=path == "driverless")
    distributed = run_merge(other, engine=engine)
    assert distributed.engine == "spark" and engine.last_timings["shape"] == shape
    assert (distributed.commit_path, local.commit_path) == (path, "driver")
    assert table_rows(other) == table_rows(table) == model.sorted_rows()
    assert other.manifest().compacted == table.manifest().compacted
    key = lambda r: r.shard_id  # noqa: E731
    assert sorted(local.shards, key=key) == sorted(distributed.shards, key=key)
    staging = copy / "_mem_wal" / "_staging"
    assert not staging.exists() or not any(staging.rglob("*.lance"))


def test_spark_submit_entry_point(make_table, tmp_path):
    table, model = make_table()
    result = tmp_path / "result.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "jobs/merge.py"),
            table.uri,
            "--max-generations",
            "2",
            "--result-file",
            str(result),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(result.read_text())
    assert doc["engine"] == "spark"
    assert {(s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {(1, 2)}
    assert set(table.manifest().compacted.values()) == {2}
    assert memwal.open(table.uri).merge().ok
    assert table_rows(table) == model.sorted_rows()


def test_spark_engine_refuses_a_key_in_two_shards(make_table, spark_session, caplog):
    """By shard, the two shards of the key are two tasks (two shards on local[2]): the driver
    finds the key's hash in both, stages nothing more, and the keyed shuffle names the key."""
    from memwal.errors import MemWalError
    from tests.integration.test_merge import write_key_to_wrong_shard

    table, _ = make_table(Workload(base_rows=200, shards=2, generations=3, rows_per_generation=20, seed=5))
    key = write_key_to_wrong_shard(table)
    with pytest.raises(MemWalError, match=f"'id': {key}.*more than one shard"):
        memwal.open(table.uri).merge(engine="spark")
    assert "appears in two by-shard tasks" in caplog.text
    assert table.manifest().compacted == {}
    staging = Path(table.uri) / "_mem_wal" / "_staging"
    assert not staging.exists() or not any(staging.rglob("*.lance"))  # what the by-shard tasks staged is gone
    assert not unreferenced(table)  # and what they wrote into the table, driverless


@pytest.mark.parametrize("shape", list(SHAPES))
def test_spark_folds_merge_operators_exactly_like_the_local_engine(spark_session, tmp_path, shape):
    """Same Python fold on executors: identical base tables on copies of one folding table."""
    import lance

    from tests.integration.test_merge_ops import approx, base_rows, build_folding_table

    uri = str(tmp_path / "t")
    model = build_folding_table(uri)
    copy = tmp_path / "copy"
    shutil.copytree(uri, copy)
    local = memwal.open(uri).merge().value
    engine = SparkMergeEngine(spark_session, **SHAPES[shape])
    # internal entry: the engine's own timings are read, and its partitions are no user option
    distributed = run_merge(open_table(str(copy)), engine=engine)
    assert engine.last_timings["shape"] == shape and distributed.commit_path == "driver"  # folding: one commit
    if shape == "shuffle":
        assert engine.last_timings["partitions"] == 4 and engine.last_timings["read_tasks"] > 1
    assert base_rows(str(copy)) == base_rows(uri)
    assert approx(base_rows(uri)) == approx(model.rows())
    assert open_table(str(copy)).manifest().compacted == open_table(uri).manifest().compacted
    key = lambda r: r.shard_id  # noqa: E731
    assert sorted(local.shards, key=key) == sorted(distributed.shards, key=key)
    assert lance.dataset(str(copy)).count_rows() == len(model.rows())


def test_read_tasks_pack_generations_by_bytes():
    from memwal.merge.model import GenerationRef
    from memwal.tasks.merge_tasks import read_tasks

    refs = [GenerationRef("s", g, f"p{g}", f"k{g}", f"u{g}", rows=10, bytes=b, wal_keys=("w",) if g == 5 else ())
            for g, b in enumerate([30, 30, 50, 10, 10, 500], start=0)]
    tasks = read_tasks(refs, 64, {})
    assert [[item[0]["generation"] for item in task] for task in tasks] == [[0, 1], [2, 3], [4], [5]]
    assert all(item[1] is None for task in tasks for item in task)  # whole generations; g5 has WAL operands
