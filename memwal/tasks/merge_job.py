"""The driver's half of a distributed merge (Spark, Ray): a job's shared target, what its tasks
returned, and how that becomes the core's changes.

Whatever the engine, the driver commits metadata only (:mod:`memwal.merge.driverless`): on the
**driverless** path (last-write-wins tables) tasks write the upserts as base-table fragments
and one deletion file per base fragment, and :meth:`MergeJob.table_changes` hands their
metadata to the core's commit; on the **driver** path (merge operators, or
``driverless=False``) tasks stage upserts under ``_mem_wal/_staging/<run>/`` and return delete
keys, and :func:`assemble` opens them for the driver's marked ``merge_insert`` (data and
marker in one commit, H2). A failed job's folder is closed and what its tasks wrote removed
(:meth:`MergeJob.remove_written`); a killed driver leaves that folder to ``gc --orphans`` and
the files to Lance's ``cleanup_old_versions``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata

from memwal.errors import MemWalError
from memwal.merge.changes import NetChanges, empty_keys
from memwal.merge.driverless import TableChanges, data_file_keys, deletion_file_key, remove_uncommitted
from memwal.merge.local import DEFAULT_MEMORY_BUDGET
from memwal.merge.model import GenerationRef, MergePlan
from memwal.merge.take import own_chunks
from memwal.table import Table
from memwal.table.naming import STAGING_DIR
from memwal.tasks import task_uri
from memwal.tasks.merge_tasks import (
    CLOSED,
    DOC,
    RETIRED,
    SPENT,
    Item,
    Payload,
    Row,
    Target,
    close,
    keys_disjoint,
    read_tasks,
    ref_bytes,
    shard_tasks,
)

log = logging.getLogger(__name__)

#: Bytes of generation data (the shard manifests' in-memory size) one read task takes.
READ_TASK_BYTES = 64 << 20
#: Bytes of change rows one reduce task deduplicates (or folds) and writes.
PARTITION_BYTES = 128 << 20
#: A shard's change set one by-shard task may hold whole (larger: the keyed shuffle).
SHARD_MAX_BYTES = 4 * PARTITION_BYTES
#: Change rows up to which a batch may run by shard: the net keys' 8-byte hashes come to
#: the driver for the disjointness check (16M rows: at most 128 MiB there).
BY_SHARD_MAX_ROWS = 16_000_000

#: Staged upserts up to this many bytes on storage are read into one table on the driver for
#: the marked ``merge_insert`` (Arrow in memory is larger than Lance's files: half the budget).
STAGED_TABLE_BYTES = DEFAULT_MEMORY_BUDGET // 2
#: A task's receipt larger than this is not read (storage is untrusted input).
RECEIPT_MAX_BYTES = 16 << 20


class MergeJob:
    """What every task of one merge job shares: options and its write target.

    Its folder under ``_mem_wal/_staging/`` holds the staging dataset (driver path) or the
    tasks' receipts of the files they wrote into the table (driverless)."""

    def __init__(self, table: Table, plan: MergePlan, schema: pa.Schema, parallelism: int, *,
                 driverless: bool) -> None:
        uri = task_uri(table)
        self.plan, self.options = for_tasks(plan, uri), dict(table.storage_options)
        self.driverless = driverless
        self.folder = f"{STAGING_DIR}/merge-{uuid.uuid4().hex[:12]}"
        self.target = Target(uri if driverless else table.store.uri_for(self.folder), uri, self.folder,
                             plan.read_version if driverless else None)
        self.schema_bytes = schema.serialize().to_pybytes()
        #: Partitions of the retire stage: the base fragments at the read version, at most the parallelism.
        self.retire_parts = (max(1, min(len(table.dataset(plan.read_version).get_fragments()), parallelism))
                             if driverless else 0)

    def remove_written(self, table: Table, *, keep: frozenset[str] = frozenset(), settled: bool = True) -> None:
        """Close the job's folder (:func:`memwal.tasks.merge_tasks.close`: a task still
        running writes nothing more), then remove it and, driverless, every file its receipts
        list but ``keep`` (what the driver will commit): a failed job's, a retried task
        attempt's. Unless every task is known to have ended (``settled``), the closed mark
        stays: the folder is then an orphan for ``gc --orphans``."""
        store = table.store
        close(table, self.folder)
        folder = [o.key for o in store.list(f"{self.folder}/")]
        if self.driverless:
            listed: set[str] = set()
            for key in folder:
                if not key.endswith(".json"):
                    continue
                try:
                    doc = json.loads(store.get(key, max_bytes=RECEIPT_MAX_BYTES))
                except (MemWalError, ValueError) as exc:  # a receipt not ours: its files stay for Lance's cleanup
                    log.warning("merge %s: receipt %s not read: %s", table.uri, store.uri_for(key), exc)
                    continue
                listed |= {k for k in doc if isinstance(k, str)} if isinstance(doc, list) else set()
            remove_uncommitted(table, sorted(listed - keep))
        store.delete_many([k for k in folder if settled or not k.endswith(f"/{CLOSED}")])

    @contextmanager
    def removed_on_failure(self, table: Table, settled: Callable[[], bool]) -> Iterator[None]:
        """If the block fails (an interrupted process too), what the job's tasks wrote is not left
        behind: :meth:`remove_written`, ``settled()`` saying whether every task has ended (the
        engine stops them first). The job's own error then propagates: it matters more than a
        failed cleanup, whose leftovers GC collects as staging orphans."""
        try:
            yield
        except BaseException:
            try:
                self.remove_written(table, settled=settled())
            except Exception as left:
                log.warning("merge %s: files left under %s: %s", table.uri, self.folder, left)
            raise

    def table_changes(self, table: Table, out: Output) -> TableChanges:
        """The driverless path's half: the fragments and deletion files the tasks wrote into
        the base table, for the core's commit (what else they wrote is removed first)."""
        self.remove_written(table, keep=frozenset(out.written()))
        removed = sorted(fid for fid, m in out.retired if m is None)
        return TableChanges(new_fragments=out.new_fragments(), removed_fragment_ids=removed,
                            updated_fragments=[m for _, m in sorted(out.retired, key=lambda r: r[0]) if m is not None],
                            rows_upserted=out.counts("upserted"), rows_deleted=out.counts("deleted"),
                            written=out.written())


class TaskMergeEngine:
    """A merge batch computed in an engine's tasks: by shard when it may, else (or when a key
    hash came from two tasks) as the keyed shuffle (:mod:`memwal.tasks.merge_tasks`). An engine
    brings how its stages run (:meth:`_by_shard`, :meth:`_shuffled`) and its cores."""

    name = "tasks"

    def __init__(
        self,
        *,
        partitions: int | None = None,
        read_task_bytes: int = READ_TASK_BYTES,
        partition_bytes: int = PARTITION_BYTES,
        shard_max_bytes: int = SHARD_MAX_BYTES,
        driverless: bool = True,
    ) -> None:
        #: Set, it makes every batch a keyed shuffle into this many partitions.
        self.partitions = partitions
        self.read_task_bytes = read_task_bytes
        self.partition_bytes = partition_bytes
        self.shard_max_bytes = shard_max_bytes
        #: Whether last-write-wins batches are written by the tasks (the core decides per batch).
        self.driverless = driverless
        #: Wall and task seconds of the last run, for ``bench/spark/breakdown.py``.
        self.last_timings: dict[str, Any] = {}

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges:
        """The driver path: upserts staged by the tasks, delete keys returned to the driver."""
        job, out = self._collect(table, plan, schema, driverless=False)
        t1 = time.perf_counter()
        net = assemble(table, schema, job, out)
        self.last_timings["staging_commit_seconds"] = time.perf_counter() - t1
        return net

    def table_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> TableChanges:
        """The driverless path: fragments and deletion files written into the base table."""
        job, out = self._collect(table, plan, schema, driverless=True)
        self.last_timings["staging_commit_seconds"] = 0.0
        return job.table_changes(table, out)

    def _parallelism(self) -> int:
        """The engine's cores, once it is up (waited for when a batch first needs it: a merge
        with nothing to merge never waits)."""
        raise NotImplementedError

    def _by_shard(self, table: Table, job: MergeJob, tasks: list[list[Payload]]) -> Output:
        """One stage of whole-shard tasks (then the retire stage, driverless), run."""
        raise NotImplementedError

    def _shuffled(self, table: Table, job: MergeJob, tasks: list[list[Item]], parts: int) -> Output:
        """Read tasks, their rows by bucket to ``parts`` reduce tasks (then the retire stage), run."""
        raise NotImplementedError

    def _timings(self) -> dict[str, Any]:
        """What an engine adds to :attr:`last_timings`."""
        return {}

    def _collect(self, table: Table, plan: MergePlan, schema: pa.Schema, *,
                 driverless: bool) -> tuple[MergeJob, Output]:
        """Run the batch's job, by shard when it may, else (or when a key hash came from two
        tasks) as the keyed shuffle."""
        waited = time.perf_counter()
        parallelism = self._parallelism()
        t0 = time.perf_counter()
        job = MergeJob(table, plan, schema, parallelism, driverless=driverless)
        change_bytes = sum(ref_bytes(r) for r in plan.generations)
        shape, tasks, out = "shuffle", None, None
        count = 0
        if self.partitions is None and plan.total_rows <= BY_SHARD_MAX_ROWS:
            tasks = shard_tasks(job.plan, self.partition_bytes, self.shard_max_bytes, parallelism)
        if tasks:
            count = len(tasks)
            out = self._by_shard(table, job, tasks)
            if keys_disjoint(out.hashes):
                shape = "by-shard"
            else:  # a key in two tasks: its own error, or a hash collision, comes from the shuffle
                log.warning("merge %s: a net key hash appears in two by-shard tasks; merging with a keyed shuffle",
                            plan.table)
                job.remove_written(table)
                job, out = MergeJob(table, plan, schema, parallelism, driverless=driverless), None
        parts = 0
        if out is None:
            read = read_tasks(job.plan.generations, self.read_task_bytes, job.options)
            parts = self.partitions or max(parallelism, -(-change_bytes // self.partition_bytes))
            out = self._shuffled(table, job, read, parts)
            count = len(read)
        self.last_timings = {
            "shape": shape,
            "commit_path": "driverless" if driverless else "driver",
            **self._timings(),
            "context_wait_seconds": t0 - waited,
            "executors_wall_seconds": time.perf_counter() - t0,
            **{f"{phase}_task_seconds": out.spent.get(phase, 0.0)
               for phase in ("read", "reduce", "write", "find", "retire")},
            "read_tasks": count,
            "partitions": count if shape == "by-shard" else parts,
            "retire_partitions": job.retire_parts,
            "change_bytes": change_bytes,
        }
        return job, out


def for_tasks(plan: MergePlan, uri: str) -> MergePlan:
    """The plan as tasks get it: the table's URI (and each generation's) as :func:`task_uri` gives it."""
    def ref(g: GenerationRef) -> GenerationRef:
        return replace(g, table_uri=uri) if g.table_uri else g

    shards = tuple(replace(s, generations=tuple(ref(g) for g in s.generations)) for s in plan.shards)
    return replace(plan, table=uri, shards=shards)


@dataclass
class Output:
    """What a job's tasks returned, whatever its shape and path."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    retired: list[tuple[int, FragmentMetadata | None]] = field(default_factory=list)
    spent: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, rows: Iterable[Row]) -> Output:
        """A job's rows (:data:`memwal.tasks.merge_tasks.ROW_SCHEMA`), sorted out."""
        out = cls()
        for _, kind, text, blob in rows:
            if kind == DOC:
                out.docs.append(json.loads(text))
                out.hashes.append(blob)
            elif kind == RETIRED:
                out.retired += [(int(fid), FragmentMetadata.from_json(json.dumps(m)) if m else None)
                                for fid, m in json.loads(text)]
            elif kind == SPENT:
                out.spent.update(json.loads(text))
        return out

    def new_fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_json(json.dumps(f)) for o in self.docs for f in o["fragments"]]

    def written(self) -> list[str]:
        """Store keys of the files a driverless job wrote into the base table."""
        keys = [k for f in self.new_fragments() for k in data_file_keys(f)]
        return keys + [deletion_file_key(m) for _, m in self.retired if m is not None]

    def counts(self, kind: str) -> Counter[str]:
        out: Counter[str] = Counter()
        for o in self.docs:
            out.update(o[kind])
        return out


def assemble(table: Table, schema: pa.Schema, job: MergeJob, out: Output) -> NetChanges:
    """The driver path's half: one commit of the staged fragments (a dataset of its own under
    ``_staging``, never the table), the delete keys and the counts."""
    pk = list(job.plan.primary_key)
    fragments = out.new_fragments()
    net = NetChanges(schema=schema, primary_key=pk, delete_keys=empty_keys(schema, pk),
                     open_upserts=lambda: pa.RecordBatchReader.from_batches(schema, iter(())),
                     cleanups=[lambda: job.remove_written(table)])
    if fragments:
        staged = lance.LanceDataset.commit(job.target.uri, lance.LanceOperation.Overwrite(schema, fragments),
                                           storage_options=table.storage_options or None)
        net.open_upserts = lambda: _staged_upserts(staged, schema)
        staged_bytes = sum(f["file_size_bytes"] for o in out.docs for fr in o["fragments"] for f in fr["files"])
        if staged_bytes <= STAGED_TABLE_BYTES:
            # as the local engine does within its budget: Lance's merge_insert of a table is
            # faster than of a stream (docs/decisions/0005-spark-merge-shapes.md)
            net.upsert_table = own_chunks(staged.to_table(columns=schema.names).cast(schema))
    keys = [pa.ipc.open_stream(bytes.fromhex(o["deletes"])).read_all() for o in out.docs if o["deletes"]]
    if keys:
        net.delete_keys = pa.concat_tables(keys).cast(pa.schema([schema.field(k) for k in pk]))
    net.rows_upserted.update(out.counts("upserted"))
    net.rows_deleted.update(out.counts("deleted"))
    return net


def schema_of(schema_bytes: bytes) -> pa.Schema:
    """The table schema a task receives as IPC bytes (:attr:`MergeJob.schema_bytes`)."""
    return pa.ipc.read_schema(pa.py_buffer(schema_bytes))


def _staged_upserts(staged: lance.LanceDataset, schema: pa.Schema) -> pa.RecordBatchReader:
    reader = staged.scanner(columns=schema.names).to_reader()
    return pa.RecordBatchReader.from_batches(schema, (b.cast(schema) for b in reader))
