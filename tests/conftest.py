"""Shared fixtures: MemWAL tables written by pylance's own ShardWriter, with a row model."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# Airflow reads its configuration at first import, wherever a test imports it first:
# keep every in-process Airflow of the run away from ~/airflow, in one place.
_IN_PROCESS_AIRFLOW_HOME = tempfile.mkdtemp(prefix="memwal-airflow-home-")
atexit.register(shutil.rmtree, _IN_PROCESS_AIRFLOW_HOME, True)
os.environ.setdefault("AIRFLOW_HOME", _IN_PROCESS_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from memwal.core.process import quiet_lance  # noqa: E402

quiet_lance()  # as the CLI and memwal.open do, before anything loads Lance

from memwal.demo import Model, Workload, create_base_table, write_generations  # noqa: E402
from memwal.store import Store, open_store  # noqa: E402
from memwal.table import Table, open_table  # noqa: E402

if TYPE_CHECKING:  # moto and boto3 load only when a test asks for the S3 server
    from tests.azureserver import AzureServer
    from tests.interleave import ManualClock
    from tests.raycluster import RayCluster
    from tests.s3server import S3Server
    from tests.sparkconnect import ConnectServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``long`` (a minute or more of the suite: a JVM, an Airflow, a cluster) go to the
    workers first, then the rest, most tests first, as pytest-xdist would order them: started
    last, one long file kept a worker busy for minutes while the other had nothing left
    (decision 0065). The Makefile turns xdist's own reordering off, which would undo this."""
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    tests = Counter(file_of(item) for item in items)
    first_seen = {file_of(item): n for n, item in reversed(list(enumerate(items)))}
    long_files = {file_of(item) for item in items if item.get_closest_marker("long")}
    order = {f: (f not in long_files, -tests[f], first_seen[f]) for f in tests}
    items.sort(key=lambda item: order[file_of(item)])  # stable: a file's tests keep their order


@pytest.fixture
def manual_clock() -> Iterator[ManualClock]:
    """The process's clock (``memwal.core.clock``), moved by the test: leases and checkpoints
    expire without sleeping. It starts an hour ahead of the machine's, so the table's own
    commits lie in its past, as they would in a real run."""
    from memwal.core import clock as clocks
    from tests.interleave import ManualClock

    c = ManualClock(time.time() + 3600)
    with clocks.use(c):
        yield c
    c.close()


@pytest.fixture(autouse=True)
def restore_logging():
    """``memwal.cli.main`` configures our loggers for a process (own stderr handler, no
    propagation); tests that call it in-process must not leave that to later tests."""
    import logging

    names = ("memwal",)
    saved = {
        n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate) for n in names
    }
    yield
    for n, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(n)
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """The process's moto S3 server, started on first use, stopped when the session ends."""
    from tests.s3server import start_s3_server

    server = start_s3_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azure_server() -> Iterator[AzureServer]:
    """The process's Azurite server (Azure Blob Storage on loopback), started on first use,
    stopped when the session ends."""
    from tests.azureserver import start_azure_server

    server = start_azure_server()
    try:
        yield server
    finally:
        server.stop()


STORES = ["local", "memory", "s3", "azure"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh empty store: a local directory, obstore's in-memory store, or a nested prefix
    in a fresh S3 bucket (moto) or Azure container (Azurite). The store contract suite
    (tests/integration/test_storage.py) runs on each."""
    if request.param == "local":
        return open_store(str(tmp_path / "table"))
    if request.param == "memory":
        from memwal.store.object import ObjectStore

        return ObjectStore.memory("memory://bucket/tables/t1")
    server: S3Server | AzureServer = request.getfixturevalue(f"{request.param}_server")
    uri, opts = server.new_table("tables/t1")
    return open_store(uri, opts)


SMALL = Workload(base_rows=300, shards=3, generations=4, rows_per_generation=40, seed=1)


@pytest.fixture
def make_table(tmp_path) -> Callable[..., tuple[Table, Model]]:
    """Build a fresh MemWAL table: ``make_table(workload=..., name=...)``."""
    counter = iter(range(1000))

    def build(
        workload: Workload = SMALL, name: str | None = None, storage_options: dict | None = None, uri: str | None = None
    ) -> tuple[Table, Model]:
        uri = uri or str(tmp_path / (name or f"t{next(counter)}"))
        _, model = create_base_table(uri, workload, storage_options)
        write_generations(uri, workload, model, storage_options=storage_options)
        return open_table(uri, storage_options), model

    return build


def table_rows(table: Table, version: int | None = None) -> list[dict]:
    """The base table's rows sorted by key, for row-for-row comparison with a Model."""
    return sorted(table.dataset(version).to_table().to_pylist(), key=lambda r: r["id"])


def highest_progress_ever(table: Table) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """The highest merge progress per shard and catch-up per (index, shard) that any version of
    the table ever committed: what a guarded MemWAL index rewrite must never lose (H1)."""
    from memwal.table.manifest import list_versions, read_table_manifest

    top_c: dict[str, int] = {}
    top_i: dict[tuple[str, str], int] = {}
    for v in sorted(list_versions(table.store)):
        m = read_table_manifest(table.store, v)
        for shard, g in m.compacted.items():
            top_c[shard] = max(top_c.get(shard, 0), g)
        for idx, per in m.index_catchup.items():
            for shard, g in per.items():
                top_i[(idx, shard)] = max(top_i.get((idx, shard), 0), g)
    return top_c, top_i


def lsm_rows(table: Table) -> list[dict]:
    from memwal.read import lsm_scan

    return sorted(lsm_scan(table).to_pylist(), key=lambda r: r["id"])


@pytest.fixture(scope="session")
def spark_session():
    """One local-mode (classic) SparkSession for the whole run (startup costs seconds), started
    the way the engines start theirs, so an engine made with ``engine="spark"`` uses it too."""
    import logging

    from memwal.spark.engine.session import active_or_local

    # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit,
    # after pytest closed the streams its handlers write to.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = active_or_local("memwal-tests")
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def ray_local():
    """This process's local Ray (a Ray of the machine's cores, 2 here), started the way the ray
    engine starts it, so an engine made with ``engine="ray"`` uses it too."""
    os.environ.pop("RAY_ADDRESS", None)
    from memwal.ray.cluster import connected

    connected()
    import ray

    yield ray
    ray.shutdown()


@pytest.fixture
def ray_cluster(tmp_path) -> Iterator[RayCluster]:
    """A Ray cluster on loopback, a head and a second node of one CPU each (tests/raycluster.py)."""
    from tests.raycluster import ray_cluster as start

    with start(tmp_path, nodes=2) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One Spark Connect server on loopback for the whole run (its JVM takes seconds to start),
    started from PySpark's own jars; a test that kills it restarts it (``restart()``)."""
    from tests.sparkconnect import start_connect_server

    server = start_connect_server(tmp_path_factory.mktemp("spark-connect"))
    try:
        yield server
    finally:
        server.stop()


def commit_shard_manifest(table: Table, shard_id: str, edit: Callable) -> None:
    """Commit the next shard manifest version, edited, the way the spec says any updater
    must (put-if-absent, then the best-effort hint): how tests craft manifest states."""
    import json

    from memwal.table.naming import manifest_key, version_hint_key
    from memwal.table.shards import all_shard_manifests

    st = all_shard_manifests(table.store)[shard_id]
    msg = type(st.manifest)()
    msg.CopyFrom(st.manifest)
    msg.version = st.version + 1
    edit(msg)
    table.store.put_if_absent(manifest_key(shard_id, msg.version), msg.SerializeToString())
    table.store.put(version_hint_key(shard_id), json.dumps({"version": msg.version}).encode())
