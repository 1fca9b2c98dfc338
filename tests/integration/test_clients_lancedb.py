"""LanceDB 0.40.0, the client most people write Lance with, reads every row after every job (issue 55).

Tables are written through LanceDB's own LSM write path (``set_unenforced_primary_key``,
``set_lsm_write_spec``, ``merge_insert``, ``close_lsm_writers``) by a long-lived LanceDB
process in its own virtual environment (``make lancedb``; Lance 13 inside), each table kept
open across the jobs as its users keep it: its shard writer stays cached with rows in its
MemTable across each job. It reads with ``read_consistency_interval`` 0 (the latest version at
every read); a table open at LanceDB's default (no interval: the version it opened, for good)
is followed too, and new connections and a new process read at the end. Every read (full
scan, a filter on the BTree-indexed column, full-text search) is compared with an
independent model of what was written; vector search by its recall against the same index
built fresh on the same rows.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pytest

import memwal
from memwal.demo import bucket_of
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.clients.jobs import ZERO, every_job
from tests.clients.lancedb_client import DIM, LanceDBProcess, LanceDBTable, available
from tests.clients.piped import ClientError
from tests.clients.pylance_client import client_view
from tests.helpers import run_cli

pytestmark = [
    pytest.mark.skipif(not available(), reason="LanceDB's venv is missing: make lancedb"),
    pytest.mark.long,  # the workers start this file first (tests/conftest.py)
]

SPECS: dict[str, dict[str, Any]] = {
    "bucket": {"kind": "bucket", "column": "id", "buckets": 2},
    "identity": {"kind": "identity", "column": "cat"},
    "unsharded": {"kind": "unsharded"},
}
INDEXES = ["scalar", "fts", "vector"]
WORDS = ["apple", "birch", "cedar", "delta", "ember", "fjord", "grove"]
#: A full-text query and a filter on the BTree-indexed column ``v`` (``v`` is generation * 10,000 + key).
WORD, SINCE = "cedar", 20_000


@pytest.fixture(scope="module")
def ldb() -> Iterator[LanceDBProcess]:
    """The module's LanceDB process (starting one costs seconds), serving every table."""
    with LanceDBProcess() as process:
        yield process


class Writer:
    """A LanceDB table, held open in the LanceDB process that writes it, and the model of its
    rows: ``model`` all it wrote, ``flushed`` what its flushed generations hold."""

    def __init__(self, ldb: LanceDBProcess, db_uri: str, spec: dict[str, Any] | None, *, name: str = "t",
                 key: tuple[str, ...] = ("id",), base_rows: int = 300, indexes: list[str] = INDEXES,
                 read_consistency_interval: float | None = 0, storage_options: dict[str, str] | None = None,
                 seed: int = 0) -> None:
        self.ldb, self.db_uri, self.spec, self.key, self.options = ldb, db_uri, spec, key, storage_options
        self.rng = np.random.default_rng(seed)
        self.fresh = itertools.count(base_rows)
        self.n = 0
        base = [self.row(k) for k in range(base_rows)]
        self.live = ldb.table(db_uri, name, create={"rows": base, "key": list(key), "spec": spec, "indexes": indexes},
                              storage_options=storage_options, read_consistency_interval=read_consistency_interval)
        self.uri = self.live.uri
        self.model = {self.key_of(r): r for r in base}
        self.flushed = dict(self.model)

    def row(self, key: int, cat: str | None = None) -> dict[str, Any]:
        return {"id": key, "cat": cat or "abc"[key % 3], "v": self.n * 10_000 + key,
                "text": f"{WORDS[key % 7]} {WORDS[(key * (self.n + 2)) % 7]}",
                "vec": self.rng.random(DIM, dtype=np.float32).tolist()}

    def key_of(self, r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(r[k] for k in self.key)

    def generation(self, size: int = 30) -> None:
        """One write by the live table: updates of a third of ``size`` live rows, and new keys.
        Each shard's rows go in a ``merge_insert`` of their own (LanceDB's rule); the writer open
        before is closed first (LanceDB keeps one open), which flushes its rows as a generation.
        The last shard's writer stays open, its rows in its MemTable, until the next write."""
        self.n += 1
        old = [self.model[k] for k in sorted(self.model)[self.n % 7::11][: size // 3]]
        rows = [self.row(r["id"], r["cat"]) for r in old] + [self.row(next(self.fresh)) for _ in range(size - len(old))]
        for group in self.by_shard(rows):
            self.flush()
            self.live.merge_insert(group)
            self.model.update({self.key_of(r): r for r in group})

    def by_shard(self, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """``rows`` by the shard LanceDB routes them to; for a bucket spec, routed by Lance's own
        routing (``evaluate_sharding_spec``, which LanceDB's Lance shares)."""
        kind = (self.spec or {"kind": "unsharded"})["kind"]
        if kind == "unsharded":
            return [rows]
        if kind == "identity":
            shard_of = [r[self.spec["column"]] for r in rows] if self.spec else []
        else:
            shard_of = bucket_of(lance.dataset(self.uri, storage_options=self.options), [r["id"] for r in rows])
        groups: dict[Any, list[dict[str, Any]]] = {}
        for r, s in zip(rows, shard_of, strict=True):
            groups.setdefault(s, []).append(r)
        return list(groups.values())

    def flush(self) -> None:
        """``close_lsm_writers()``: what the open writer holds becomes a generation."""
        self.live.close_writers()
        self.flushed = dict(self.model)

    def reads_match(self, table: LanceDBTable | None = None, *, search: bool = True) -> None:
        """Full scan, filter and (``search``) full-text search of ``table`` against the model:
        the live table (by default) reads its own MemTable too, any other what was flushed."""
        t = table or self.live
        model = self.model if t is self.live else self.flushed
        assert self.keyed(t.scan()) == model, "LanceDB's scan differs from the model"
        assert self.keyed(t.filter(f"v >= {SINCE}")) == {k: r for k, r in model.items() if r["v"] >= SINCE}
        if search:
            assert t.fts(WORD) == sorted(r["id"] for r in model.values() if WORD in r["text"].split())

    def keyed(self, rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        out = {self.key_of(r): r for r in rows}
        assert len(out) == len(rows), "LanceDB returned a key twice"
        return out

    def reopened(self, ldb: LanceDBProcess | None = None, **args: Any) -> LanceDBTable:
        """The table through a new connection (in ``ldb``, a new process, when given)."""
        return (ldb or self.ldb).table(self.db_uri, self.live.name, storage_options=self.options, **args)


def listed(uri: str) -> dict[str, list[int]]:
    """The generations each shard manifest lists."""
    return {sid: [g.generation for g in s.flushed] for sid, s in all_shard_manifests(open_table(uri).store).items()}


def stored(uri: str) -> dict[str, list[int]]:
    """The generation folders on storage, by shard (a local table)."""
    return {shard.name: sorted(int(p.name.rsplit("_", 1)[1]) for p in shard.iterdir() if "_gen_" in p.name)
            for shard in Path(uri, "_mem_wal").iterdir() if not shard.name.startswith("_")}


def verify(uri: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(run_cli("verify", uri, "--json").stdout)
    return doc


@pytest.mark.parametrize("spec", list(SPECS))
def test_every_job_follows_lancedbs_writes_and_lancedb_reads_every_row(ldb: LanceDBProcess, tmp_path: Path,
                                                                       spec: str) -> None:
    """Each job (merge, catchup, compact, snapshot, gc with no grace and every old version
    expired, ``memwal cycle``, ``memwal fleet run`` over the LanceDB database folder) runs
    after a LanceDB write, and LanceDB writes again on its commits; LanceDB's reads equal the
    model after each, through the table kept open. Once the writer is gone, GC frees every
    merged generation, and LanceDB writes and reads on through a new connection."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS[spec])
    w.generation()
    for name, job in every_job(w.uri, tmp_path):
        w.generation()
        assert job(), name
        w.reads_match()
    assert all(g > 1 for g in open_table(w.uri).manifest().compacted.values())
    assert verify(w.uri)["ok"]

    w.live.close()  # the writer is gone: GC frees every merged generation, and LanceDB writes on
    w.flushed = dict(w.model)
    assert memwal.open(w.uri).gc(**ZERO, writer_idle_seconds=0).ok
    merged = open_table(w.uri).manifest().compacted
    assert stored(w.uri) == listed(w.uri) == {s: [g for g in gens if g > merged.get(s, 0)]
                                              for s, gens in listed(w.uri).items()}
    w.live = w.reopened()
    w.reads_match()
    w.generation()
    w.flush()
    w.reads_match()
    assert verify(w.uri)["ok"]


def test_a_table_kept_at_lancedbs_default_consistency(ldb: LanceDBProcess, tmp_path: Path) -> None:
    """LanceDB's default (no ``read_consistency_interval``) keeps the version the table opened
    for as long as the process lives, while each writer it reopens claims a new epoch: memwal
    cannot tell that view's age from storage. With GC keeping old versions (its default), the
    table reads every row after every job; once they expire, its read fails (never wrong
    rows) until ``checkout_latest()``, and a new process reads every row."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS["unsharded"], read_consistency_interval=None)
    for name, job in every_job(w.uri, tmp_path, expire_versions=False):
        w.generation()
        assert job(), name
        w.reads_match()
    w.flush()
    assert memwal.open(w.uri).gc(**ZERO).ok
    with pytest.raises(ClientError, match="Not found"):
        w.live.scan()
    w.live.checkout_latest()
    w.reads_match()
    with LanceDBProcess() as other:
        w.reads_match(w.reopened(other))


def test_a_composite_key_in_both_engines(ldb: LanceDBProcess, tmp_path: Path, spark_session: object) -> None:
    """A key of two columns, declared in an order that is not the schema's (``cat, id``),
    identity-sharded by ``cat``: merge by the local engine, then every job the Spark engine
    runs (merge, catchup, compact, gc), each after a LanceDB write. LanceDB's reads, memwal's
    scan and point lookups by (cat, id) equal the model after each; verify agrees."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS["identity"], key=("cat", "id"), base_rows=60)
    w.generation()
    t = memwal.open(w.uri)
    spark = [("merge", lambda: t.merge(engine="spark")), ("catchup", lambda: t.catchup(engine="spark")),
             ("compact", lambda: t.compact(target_rows_per_fragment=100_000, engine="spark")),
             ("gc", lambda: t.gc(**ZERO, engine="spark"))]
    for name, job in [("merge local", lambda: t.merge()), *spark]:
        w.generation()
        assert job().ok, name
        w.reads_match()
        w.flush()
        assert w.keyed(t.scan().to_pylist()) == w.model
        some = sorted(w.model)[::9]
        assert [w.key_of(r) for r in t.lookup(some).to_pylist()] == some
    assert open_table(w.uri).manifest().compacted and verify(w.uri)["ok"]


def test_catch_up_relieves_lancedbs_index_searches_and_verify_reads_as_lancedb(ldb: LanceDBProcess,
                                                                              tmp_path: Path) -> None:
    """After a merge, LanceDB's scans skip the merged generations but its full-text and vector
    searches still open them (the index has not caught up); after catch-up they do not. Shown
    with LanceDB's own reads on copies of the table, and ``memwal verify``'s
    ``lancedb-view-readable`` says the same: on a copy whose first merged generation's folder is
    deleted while still listed, and on one where LanceDB deleted a merged row from the base
    table (its searches still find it in the generation, its scans do not)."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS["unsharded"], indexes=["fts", "vector"])
    for _ in range(2):
        w.generation()
    w.flush()
    t = memwal.open(w.uri)
    key, word = next((r["id"], r["text"].split()[0]) for r in w.model.values() if 10_000 <= r["v"] < 20_000)

    def copy(name: str, *, drop_generation: bool = False) -> tuple[LanceDBTable, list[str]]:
        """A copy of the table (without its first generation's folder), opened in LanceDB, and
        what verify's ``lancedb-view-readable`` finds in it."""
        db = tmp_path / name
        shutil.copytree(tmp_path / "db", db)
        if drop_generation:
            (gen1,) = Path(db, "t.lance", "_mem_wal").glob("*/*_gen_1")
            shutil.rmtree(gen1)
        found = [p["detail"] for p in verify(f"{db}/t.lance")["problems"] if p["check"] == "lancedb-view-readable"]
        return ldb.table(str(db), "t", read_consistency_interval=0), found

    assert t.merge().ok
    merged, found = copy("merged", drop_generation=True)
    w.reads_match(merged, search=False)  # scans and filters: the merged generation is not opened
    for search in (lambda: merged.fts(WORD), lambda: merged.vector([[0.5] * DIM])):
        with pytest.raises(ClientError, match="_gen_1"):
            search()
    assert [d.split(" fail:")[0] for d in found] == ["LanceDB's searches of index text_idx, searches of index vec_idx"]

    deleted, _ = copy("deleted")
    deleted.call("delete", where=f"id = {key}")
    assert key not in {r["id"] for r in deleted.scan()} and key in deleted.fts(word)
    found = [p["detail"] for p in verify(deleted.uri)["problems"] if p["check"] == "lancedb-view-readable"]
    assert found == [f"LanceDB's searches of index text_idx, searches of index vec_idx see {len(w.model)} rows, "
                     f"its scans {len(w.model) - 1}"]

    assert t.catchup().ok
    caught_up, found = copy("caught-up", drop_generation=True)
    w.reads_match(caught_up)
    assert len(caught_up.vector([[0.5] * DIM])[0]) == 10
    assert found == []


def test_vector_search_recalls_as_well_as_the_same_index_built_fresh(ldb: LanceDBProcess, tmp_path: Path) -> None:
    """LanceDB's vector search (IVF_PQ, 16 dimensions, 8 sub-vectors), once the merged rows
    are caught up and after compaction, recalls the true 10 nearest as well as the same index
    built fresh on the same rows. PQ training is random: over 150 queries, fresh builds on
    these rows spread about 0.01 (measured), so the bar is their mean less 0.03."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS["unsharded"], base_rows=2000, indexes=["vector"])
    queries = np.random.default_rng(7).random((150, DIM), dtype=np.float32).tolist()

    def recall(table: LanceDBTable) -> float:
        ids = np.array([r["id"] for r in w.model.values()])
        vectors = np.array([r["vec"] for r in w.model.values()], dtype=np.float32)
        hits = 0
        for q, found in zip(queries, table.vector(queries, k=10), strict=True):
            nearest = ids[np.argsort(((vectors - np.array(q, dtype=np.float32)) ** 2).sum(axis=1))[:10]]
            hits += len(set(found) & set(nearest.tolist()))
        return hits / (10 * len(queries))

    for _ in range(3):
        w.generation(size=100)
    w.flush()
    rows = list(w.model.values())
    fresh = [recall(ldb.table(str(tmp_path / f"fresh{i}"), "t", create={
        "rows": rows, "key": ["id"], "spec": None, "indexes": ["vector"]})) for i in range(3)]
    bar = float(np.mean(fresh)) - 0.03
    t = memwal.open(w.uri)
    assert t.merge().ok
    for name, job in [("catchup", lambda: t.catchup().ok), ("compact and catchup", lambda: t.compact(
            target_rows_per_fragment=100_000).ok and t.catchup().ok)]:
        assert job(), name
        got = recall(w.live)
        assert got >= bar, (name, got, fresh)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_lancedb_database_is_a_fleet_source(ldb: LanceDBProcess, tmp_path: Path, where: str,
                                              request: pytest.FixtureRequest) -> None:
    """A LanceDB database folder holds its tables as ``<name>.lance``: the fleet finds those
    with an LSM spec (a plain LanceDB table is skipped, with the reason), maintains them, and
    LanceDB reads every row of each after the run."""
    if where == "s3":
        db, options = request.getfixturevalue("s3_server").new_table("lake/db")
    else:
        db, options = str(tmp_path / "db"), {}
    writers = [Writer(ldb, db, SPECS[spec], name=spec, base_rows=30, indexes=["fts"], storage_options=options)
               for spec in ("identity", "unsharded")]
    ldb.table(db, "plain", create={"rows": [], "key": [], "spec": None}, storage_options=options)
    for w in writers:
        w.generation()
        w.flush()
    args = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    plan = json.loads(run_cli("fleet", "plan", db, "--json", *args).stdout)
    assert sorted(t["table"] for t in plan["tables"]) == [f"{db}/identity.lance", f"{db}/unsharded.lance"]
    assert [(s["path"], s["reason"]) for s in plan["skipped"]] == [
        (f"{db}/plain.lance", "a Lance table without a MemWAL index")]
    run = run_cli("fleet", "run", db, *args)
    assert run.rc == 0, run.stderr
    for w in writers:
        assert open_table(w.uri, options).manifest().compacted
        w.reads_match()
        w.reads_match(w.reopened())


def test_the_drivers_benchmark_commands(ldb: LanceDBProcess, tmp_path: Path) -> None:
    """What a benchmark asks of the driver in one command each: G flushed generations of R rows
    (a third updates), a timed full read, and the rows LanceDB shows against those of the base."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS["unsharded"], base_rows=50, indexes=[])
    assert w.live.call("fill", generations=3, rows=30, start=50) == 50 + 3 * 20
    assert [len(g) for g in listed(w.uri).values()] == [3]
    assert w.live.call("timed_scan")["rows"] == 110
    counted = w.live.call("row_count")
    assert (counted["visible"], counted["base"]) == (110, 50) and counted["seconds"] > 0
    assert memwal.open(w.uri).merge().ok
    counted = w.live.call("row_count")
    assert (counted["visible"], counted["base"]) == (110, 110)


def test_a_lancedb_writer_that_never_stops_keeps_a_bounded_listing(ldb: LanceDBProcess, tmp_path: Path) -> None:
    """The production shape (issue 54): the table kept open writes between cycles of every job
    with default settings. What a list-reading client opens stays a few generations, and
    LanceDB's reads equal the model at every step (it skips what the merge covered anyway)."""
    w = Writer(ldb, str(tmp_path / "db"), {"kind": "unsharded"}, indexes=[], base_rows=100)
    seen = []
    for _ in range(6):
        for _ in range(3):
            w.generation()
        w.flush()
        assert run_cli("cycle", w.uri).rc == 0
        w.reads_match(search=False)
        seen.append(max(len(v) for v in listed(w.uri).values()))
    assert max(seen) <= 2, seen
    assert verify(w.uri)["ok"]


def test_lancedbs_own_delete_and_update_on_the_base_survive_every_job(ldb: LanceDBProcess, tmp_path: Path) -> None:
    """Issue 61: memwal merges, then the table's owner deletes and updates rows through LanceDB's
    own ``table.delete`` and ``table.update`` (on the base, as LanceDB users do). No job brings a
    deleted row back or reverts an update; GC drains the merged generations; a new LanceDB
    connection, pylance's list readers and verify all read the owner's writes; LanceDB writes on."""
    w = Writer(ldb, str(tmp_path / "db"), SPECS["bucket"])
    for _ in range(3):
        w.generation()
    w.flush()
    assert memwal.open(w.uri).merge().ok
    w.live.call("delete", where="id >= 10 AND id < 15")
    w.live.call("update", where="id < 5", values_sql={"text": "'the owner'"})
    for k in [k for k in w.model if 10 <= k[0] < 15]:
        del w.model[k]
    for k in [k for k in w.model if k[0] < 5]:
        w.model[k] = {**w.model[k], "text": "the owner"}
    w.flushed = dict(w.model)
    w.live.close()
    for name, job in every_job(w.uri, tmp_path):
        assert job(), name
    assert memwal.open(w.uri).gc(**ZERO, writer_idle_seconds=0).ok
    merged = open_table(w.uri).manifest().compacted
    assert all(g > merged.get(s, 0) for s, gens in listed(w.uri).items() for g in gens)  # every merged one drained
    w.live = w.reopened()
    w.reads_match(search=False)
    assert {tuple([r["id"]]): r for r in client_view(w.uri)} == w.model
    assert verify(w.uri)["ok"]
    w.generation()
    w.flush()
    w.reads_match(search=False)
