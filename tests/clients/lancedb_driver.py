"""LanceDB tables driven over a pipe: one JSON command a line in, one JSON answer out.

Runs in LanceDB's own virtual environment (``.venv-ldb``: lancedb 0.40.0 with Lance 13 inside,
pinned by ``tests/clients/lancedb.txt``), never in ours: LanceDB as its users run it, one
long-lived process holding its tables open, each with its cached MemWAL shard writer and its
view of the table, across the commands (and so across memwal's jobs).

The process holds any number of *handles*, each a connection and one table open through it,
named by the commands' ``handle`` (``"default"`` when left out). The tables' columns are
fixed: ``id`` int64 (the key), ``cat`` string (a shard value for the identity spec), ``v``
int64 (scalar index), ``text`` string (full-text index) and ``vec`` float32 x 16 (vector
index); rows travel as JSON objects of those columns.

Commands (``{"op": ..., "handle": ..., args}``):

- ``open`` ``db`` (the database URI), ``name``, ``storage_options``,
  ``read_consistency_interval`` (seconds; null, LanceDB's default, keeps the version the table
  opened until ``checkout_latest``), ``create`` (null opens an existing table; else
  ``{"rows": the base table, "key": [columns], "indexes": [...], "spec": {...},
  "max_memtable_rows": N}``: a one-column key goes through ``set_unenforced_primary_key``, a
  composite one is declared in the schema by position, as LanceDB 0.40 refuses it there;
  ``indexes`` of ``scalar`` (BTree on ``v``), ``fts`` (on ``text``), ``vector`` (IVF_PQ on
  ``vec``, 4 partitions, 4 sub-vectors) are built before the spec, so that it maintains
  them; ``spec`` is ``{"kind": "bucket", "column", "buckets"}``, ``{"kind": "identity",
  "column"}``, ``{"kind": "unsharded"}`` or null: a plain table); ``close``: the handle dropped;
- ``merge_insert`` ``rows``: one upsert by the key (its rows must route to one shard, and
  LanceDB keeps one shard writer open at a time); ``delete`` ``where``: LanceDB's
  ``delete()``, which deletes from the base table; ``close_writers``: ``close_lsm_writers()``,
  which flushes the open writer's MemTable as a generation; ``checkout_latest``; ``version``;
- reads, through the LSM unless ``use_lsm`` says otherwise: ``scan`` (every row),
  ``filter`` ``where``, ``fts`` ``query``, ``limit`` (the ids found, sorted), ``vector``
  ``queries``, ``k``, ``nprobes`` (per query the ids of the k nearest), ``count``
  (``count_rows()``, which counts the base table only);
- for a benchmark, where JSON of every row would cost more than the work measured:
  ``fill`` ``generations``, ``rows``, ``start`` (each generation ``rows`` rows, a third of them
  updates of keys written before, one ``merge_insert`` then ``close_lsm_writers()``: one
  flushed generation each; unsharded or identity tables only, as a bucket spec needs its rows
  routed by Lance; answers the next new key), ``timed_scan`` (rows and seconds of one full
  read) and ``row_count`` (``visible``: the rows a read of the key column through the LSM
  gives, ``seconds`` it took; ``base``: ``count_rows()``); for the steady-state bench
  (bench/read/steady.py): ``gen`` ``rows`` (one ``merge_insert`` then ``close_lsm_writers()``: one
  flushed generation) and ``read`` (one full read through the LSM: rows, seconds and the rows'
  digest of :mod:`tests.clients.digest` over ``id`` and ``v``).

Answers: ``{"ok": value}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import lancedb
import pyarrow as pa
from digest import rows_digest  # beside this file (tests/clients/digest.py)
from lancedb import LsmWriteSpec
from lancedb.index import FTS, BTree, IvfPq
from piped import serve  # beside this file: the other end of the pipe (tests/clients/piped.py)

DIM = 16
KEY_POSITION = "lance-schema:unenforced-primary-key:position"
FIELDS = [
    pa.field("id", pa.int64(), nullable=False),
    pa.field("cat", pa.string(), nullable=False),
    pa.field("v", pa.int64()),
    pa.field("text", pa.string()),
    pa.field("vec", pa.list_(pa.float32(), DIM)),
]


def schema_for(key: list[str]) -> pa.Schema:
    """The table's schema; a composite key declared by position, in the key's order."""
    if len(key) < 2:
        return pa.schema(FIELDS)
    return pa.schema([f.with_metadata({KEY_POSITION: str(key.index(f.name) + 1)}) if f.name in key else f
                      for f in FIELDS])


def arrow(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def write_spec(spec: dict[str, Any], max_memtable_rows: int) -> Any:
    kind = spec["kind"]
    if kind == "bucket":
        out = LsmWriteSpec.bucket(spec["column"], spec["buckets"])
    elif kind == "identity":
        out = LsmWriteSpec.identity(spec["column"])
    elif kind == "unsharded":
        out = LsmWriteSpec.unsharded()
    else:
        raise ValueError(f"unknown spec {kind!r}")
    return out.with_writer_config_defaults({"max_memtable_rows": str(max_memtable_rows)})


def create_indexes(table: Any, indexes: list[str]) -> None:
    for kind in indexes:
        if kind == "scalar":
            table.create_index("v", config=BTree())
        elif kind == "fts":
            table.create_index("text", config=FTS())
        elif kind == "vector":
            table.create_index("vec", config=IvfPq(num_partitions=4, num_sub_vectors=8))
        else:
            raise ValueError(f"unknown index {kind!r}")


class Handle:
    """One table held open by the process, with its key."""

    def __init__(self, table: Any, key: list[str]) -> None:
        self.table, self.key = table, key

    def merge_insert(self, rows: list[dict[str, Any]]) -> None:
        data = arrow(rows, self.table.schema)
        self.table.merge_insert(self.key).when_matched_update_all().when_not_matched_insert_all().execute(data)

    def query(self, use_lsm: bool | None) -> Any:
        q = self.table.search()
        return q if use_lsm is None else q.use_lsm(use_lsm)

    def nearest(self, queries: list[list[float]], k: int, nprobes: int | None, use_lsm: bool | None) -> list[list[int]]:
        """Per query the ids of the ``k`` nearest ``vec``: one batch query where LanceDB takes
        one (it numbers each row's query: ``query_index``), one query each through its LSM
        scanner, which takes a single vector."""
        def search(vectors: Any) -> pa.Table:
            q = self.table.search(vectors, vector_column_name="vec").limit(k)
            q = q.nprobes(nprobes) if nprobes else q
            return (q if use_lsm is None else q.use_lsm(use_lsm)).select(["id"]).to_arrow()

        if use_lsm is False or self.table.get_lsm_write_spec() is None:
            found: list[list[int]] = [[] for _ in queries]
            result = search(queries)
            for i, key in zip(result.column("query_index").to_pylist(), result.column("id").to_pylist(), strict=True):
                found[i].append(key)
            return found
        return [search(vector).column("id").to_pylist() for vector in queries]

    def fill(self, generations: int, rows: int, start: int) -> int:
        """``generations`` flushed generations of ``rows`` rows, a third updates; the next new key."""
        spec = self.table.get_lsm_write_spec()
        if spec is not None and spec.spec_type == "bucket":
            raise ValueError("fill: a bucket spec needs its rows routed by Lance; use identity or unsharded")
        fresh = start
        for g in range(generations):
            old = list(dict.fromkeys((fresh - 1 - 3 * i) % fresh for i in range(rows // 3))) if fresh else []
            new = list(range(fresh, fresh + rows - len(old)))
            fresh += len(new)
            self.merge_insert([{"id": k, "cat": "a", "v": g, "text": f"g{g}", "vec": [float(g)] * DIM}
                               for k in old + new])
            self.table.close_lsm_writers()
        return fresh


def open_handle(cmd: dict[str, Any]) -> Handle:
    """Connect to ``db`` (a connection of its own, so that its ``read_consistency_interval``
    is this handle's) and create or open table ``name``."""
    interval = cmd.get("read_consistency_interval")
    db = lancedb.connect(cmd["db"], storage_options=cmd.get("storage_options"),
                         read_consistency_interval=None if interval is None else datetime.timedelta(seconds=interval))
    create = cmd.get("create")
    if create is None:
        table = db.open_table(cmd["name"])
        declared = {f.name: f.metadata.get(KEY_POSITION.encode()) for f in table.schema if f.metadata}
        return Handle(table, sorted((c for c, p in declared.items() if p), key=lambda c: int(declared[c] or 0)))
    key = create["key"]
    schema = schema_for(key)
    table = db.create_table(cmd["name"], arrow(create["rows"], schema), schema=schema)
    if len(key) == 1:
        table.set_unenforced_primary_key(key[0])
    create_indexes(table, create.get("indexes", []))
    if create.get("spec") is not None:
        table.set_lsm_write_spec(write_spec(create["spec"], create.get("max_memtable_rows", 10_000)))
    return Handle(table, key)


def run(handles: dict[str, Handle], op: str, cmd: dict[str, Any]) -> Any:
    name = cmd.get("handle", "default")
    if op == "open":
        handles[name] = open_handle(cmd)
        return None
    h = handles[name]
    t = h.table
    if op == "close":
        del handles[name]  # LanceDB's sync table has no close(): dropped, it is released
        return None
    if op == "merge_insert":
        return h.merge_insert(cmd["rows"])
    if op == "delete":
        return t.delete(cmd["where"])
    if op == "update":
        return t.update(where=cmd["where"], values_sql=cmd["values_sql"])
    if op == "close_writers":
        return t.close_lsm_writers()
    if op == "checkout_latest":
        return t.checkout_latest()
    if op == "version":
        return t.version
    use_lsm = cmd.get("use_lsm")
    if op == "scan":
        return h.query(use_lsm).limit(None).to_arrow().to_pylist()
    if op == "filter":
        return h.query(use_lsm).where(cmd["where"]).limit(None).to_arrow().to_pylist()
    if op == "fts":
        q = t.search(cmd["query"], query_type="fts", fts_columns="text")
        q = q if use_lsm is None else q.use_lsm(use_lsm)
        return sorted(q.limit(cmd.get("limit", 1000)).to_arrow().column("id").to_pylist())
    if op == "vector":
        return h.nearest(cmd["queries"], cmd.get("k", 10), cmd.get("nprobes"), use_lsm)
    if op == "count":
        return t.count_rows()
    if op == "fill":
        return h.fill(cmd["generations"], cmd["rows"], cmd.get("start", 0))
    if op == "gen":
        h.merge_insert(cmd["rows"])
        return t.close_lsm_writers()
    if op == "read":
        t0 = time.perf_counter()
        rows = h.query(None).select(["id", "v"]).limit(None).to_arrow()
        seconds = time.perf_counter() - t0
        return {"rows": rows.num_rows, "seconds": seconds,
                "digest": rows_digest(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True))}
    if op == "timed_scan":
        t0 = time.perf_counter()
        n = h.query(None).limit(None).to_arrow().num_rows
        return {"rows": n, "seconds": time.perf_counter() - t0}
    if op == "row_count":
        t0 = time.perf_counter()
        visible = h.query(None).select(["id"]).limit(None).to_arrow().num_rows
        seconds = time.perf_counter() - t0
        return {"visible": visible, "base": t.count_rows(), "seconds": seconds}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    handles: dict[str, Handle] = {}
    serve(lambda op, cmd: run(handles, op, cmd))
