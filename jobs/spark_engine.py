"""The Spark merge engine: same plan, distributed reads, shuffle dedupe, staged net changes.

Executors read generation fragments in parallel (``mapInArrow`` over one task per
fragment), a shuffle keeps each key's newest version (highest generation, then highest
row address), and executors write the net change set as a Lance dataset under
``_mem_wal/_staging/<run>/``. The driver then makes the same two commits as the local
engine, streaming upserts from the staging dataset, and removes the staging directory.
Nothing here assumes local mode: the table URI and storage options travel in closures,
so the same code runs on a cluster whose executors have memwal-jobs and pylance installed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator

import lance
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from memwal.errors import MemWalError
from memwal.merge.changes import (
    GEN,
    ROWADDR,
    SHARD,
    TOMBSTONE,
    NetChanges,
    empty_keys,
    read_generation,
)
from memwal.merge.plan import GenerationRef, MergePlan
from memwal.naming import STAGING_DIR
from memwal.table import Table

log = logging.getLogger(__name__)

STAGED_SHARD = "memwal_shard"


def spark_safe(schema: pa.Schema) -> pa.Schema:
    """Arrow types Spark can carry: fixed-size lists become lists, unsigned ints become signed."""

    def conv(t: pa.DataType) -> pa.DataType:
        if pa.types.is_fixed_size_list(t):
            return pa.list_(conv(t.value_type))
        if pa.types.is_uint64(t) or pa.types.is_uint32(t):
            return pa.int64()
        if pa.types.is_dictionary(t):
            return conv(t.value_type)
        return t

    return pa.schema([pa.field(f.name, conv(f.type), f.nullable) for f in schema])


def local_session(app: str = "memwal-jobs") -> SparkSession:
    """A local-mode session for the CLI and tests; spark-submit jobs use getOrCreate instead."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"))
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("MEMWAL_SPARK_DRIVER_MEMORY", "2g"))
        .getOrCreate()
    )


class SparkMergeEngine:
    name = "spark"

    def __init__(self, spark: SparkSession, *, partitions: int | None = None) -> None:
        self.spark = spark
        self.partitions = partitions

    @classmethod
    def from_active_or_local(cls) -> SparkMergeEngine:
        active = SparkSession.getActiveSession()
        return cls(active or local_session())

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges:
        pk = plan.primary_key
        options = dict(table.storage_options)
        run_id = uuid.uuid4().hex[:12]
        staging_key = f"{STAGING_DIR}/merge-{run_id}"
        staging_uri = table.store.uri_for(staging_key)
        staged_schema = pa.schema([*schema, pa.field(TOMBSTONE, pa.bool_(), False), pa.field(STAGED_SHARD, pa.int32())])
        shard_ids = plan.shard_ids

        tasks = _fragment_tasks(plan, options)
        read_schema = spark_safe(
            pa.schema(
                [
                    *schema,
                    pa.field(TOMBSTONE, pa.bool_()),
                    pa.field(ROWADDR, pa.int64()),
                    pa.field(GEN, pa.int64()),
                    pa.field(SHARD, pa.int32()),
                ]
            )
        )
        spark_read_schema = from_arrow_schema(read_schema)
        schema_bytes = schema.serialize().to_pybytes()

        def read_fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            base = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
            for b in batches:
                for task in b.to_pylist():
                    ref = GenerationRef(**json.loads(task["ref"]))
                    code = shard_ids.index(ref.shard_id)
                    for t in read_generation(ref, base, options, code, fragment_ids=[task["fragment_id"]]):
                        t = t.set_column(t.schema.get_field_index(ROWADDR), ROWADDR, t.column(ROWADDR).cast(pa.int64()))
                        yield from t.cast(read_schema).to_batches()

        n_tasks = max(1, len(tasks))
        df_tasks = self.spark.createDataFrame(tasks, "ref string, fragment_id long").repartition(
            min(n_tasks, self.partitions or n_tasks)
        )
        rows: DataFrame = df_tasks.mapInArrow(read_fn, spark_read_schema)
        by_key = Window.partitionBy(*pk)
        newest = by_key.orderBy(F.col(GEN).desc(), F.col(ROWADDR).desc())
        net_df = (
            rows.withColumn("__rank", F.row_number().over(newest))
            # keys are disjoint across shards (spec): write_fn refuses a key seen in two
            .withColumn("__shards", F.max(SHARD).over(by_key) - F.min(SHARD).over(by_key))
            .where(F.col("__rank") == 1)
            .drop("__rank", GEN, ROWADDR)
            .withColumnRenamed(SHARD, STAGED_SHARD)
        )
        staged_bytes = staged_schema.serialize().to_pybytes()

        def write_fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            target = pa.ipc.read_schema(pa.py_buffer(staged_bytes))
            counts: Counter = Counter()
            collected = []
            for b in batches:
                t = pa.Table.from_batches([b])
                spread = t.filter(pc.greater(t.column("__shards"), 0))
                if spread.num_rows:
                    key = {k: spread.column(k)[0].as_py() for k in pk}
                    raise MemWalError(
                        f"primary key {key} was written to more than one shard; the sharding invariant is broken"
                    )
                t = t.select(target.names).cast(target)
                for row in t.group_by([STAGED_SHARD, TOMBSTONE]).aggregate([([], "count_all")]).to_pylist():
                    counts[(row[STAGED_SHARD], row[TOMBSTONE])] += row["count_all"]
                collected.append(t)
            frags = []
            if collected:
                data = pa.concat_tables(collected)
                frags = lance.fragment.write_fragments(
                    data, staging_uri, schema=target, storage_options=options or None
                )
            yield pa.record_batch(
                {
                    "fragments": [json.dumps([f.to_json() for f in frags])],
                    "counts": [json.dumps([[s, d, n] for (s, d), n in counts.items()])],
                }
            )

        try:
            out = net_df.mapInArrow(write_fn, "fragments string, counts string").collect()
        except Exception as exc:  # a PythonException from an executor: keep our message, drop the JVM trace
            text = str(exc)
            if "sharding invariant is broken" in text:
                line = next(x for x in text.splitlines() if "sharding invariant is broken" in x)
                raise MemWalError(line.split("MemWalError: ", 1)[-1].strip()) from None
            raise

        fragments = [
            lance.fragment.FragmentMetadata.from_json(json.dumps(f)) for r in out for f in json.loads(r["fragments"])
        ]
        counts = [c for r in out for c in json.loads(r["counts"])]
        staged = lance.LanceDataset.commit(
            staging_uri, lance.LanceOperation.Overwrite(staged_schema, fragments), storage_options=options or None
        )

        def cleanup() -> None:
            table.store.delete_many([o.key for o in table.store.list(f"{staging_key}/")])

        net = NetChanges(
            schema=schema,
            primary_key=pk,
            delete_keys=empty_keys(schema, pk),
            open_upserts=lambda: _staged_upserts(staged, schema),
            cleanups=[cleanup],
        )
        for code, dead, n in counts:
            (net.rows_deleted if dead else net.rows_upserted)[shard_ids[code]] += n
        if net.rows_deleted:
            net.delete_keys = staged.to_table(columns=pk, filter=f"{TOMBSTONE} = true").cast(
                pa.schema([schema.field(k) for k in pk])
            )
        return net


def _staged_upserts(staged: lance.LanceDataset, schema: pa.Schema) -> pa.RecordBatchReader:
    scanner = staged.scanner(columns=schema.names, filter=f"{TOMBSTONE} = false")
    reader = scanner.to_reader()

    def batches() -> Iterator[pa.RecordBatch]:
        for b in reader:
            yield b.cast(schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _fragment_tasks(plan: MergePlan, options: dict) -> list[tuple[str, int]]:
    """One task per generation fragment: the unit of parallel reading."""
    tasks = []
    for ref in plan.generations:
        ds = lance.dataset(ref.uri, storage_options=options or None)
        payload = json.dumps(ref.__dict__)
        tasks += [(payload, f.fragment_id) for f in ds.get_fragments()]
    return tasks
