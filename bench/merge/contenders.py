"""One merge contender per process: ``python -m bench.merge.contenders CONTENDER TABLE --result FILE``.

The merge benches (:mod:`bench.merge.compare`) time each contender as a whole process, from start to
exit; the worker writes its own inner time (after imports) and what it did to ``FILE``
(a JSON document; stdout is left alone because Spark's JVM may write to it).

Contenders, each run on its own copy of the same table:

``loop``
    The per-generation loop users hand-write today: for each shard, for each generation
    in ascending order, read it, keep each key's last row, a delete pass when the
    generation has tombstones, then a marked upsert pass (one or two commits per
    generation).
``ours``
    ``memwal merge TABLE --json``: the product path (``memwal.cli.main``, what the
    ``memwal`` console script calls), local engine.
``floor``
    A single pass with nothing else: list the generation directories, read every
    generation once, one vectorised dedupe, one delete pass, one marked upsert pass for
    all shards; it imports nothing from memwal.
``spark``
    ``memwal merge TABLE --engine spark --json``; the local-mode Spark session is started
    first so its start-up (JVM included) is reported on its own.

``--profile FILE`` runs the contender under cProfile and dumps the stats to ``FILE``. The
result records the process's peak RSS (``peak_rss_mb``), so memory is compared between
whole processes that did the same work.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time

T_START = time.perf_counter()

from bench.harness.processes import peak_rss_mb  # noqa: E402 - after the clock: imports count

CONTENDERS = ("loop", "ours", "floor", "floor-index", "floor-scan", "floor-sorted", "spark")


def _generations(table_dir: str) -> dict[str, list[tuple[int, str]]]:
    """Shard id -> [(generation, uri)] ascending, from the shard manifests (what users read too)."""
    from memwal.store import open_store
    from memwal.table.shards import all_shard_manifests

    store = open_store(table_dir, {})
    out = {}
    for shard_id, state in sorted(all_shard_manifests(store).items()):
        out[shard_id] = [(g.generation, store.uri_for(state.generation_key(g))) for g in state.flushed]
    return out


def _generation_dirs(table_dir: str) -> dict[str, list[tuple[int, str]]]:
    """Shard id -> [(generation, path)] ascending, by listing ``_mem_wal/<shard>/<hex>_gen_<g>/``.

    The floor's discovery: a directory listing, no manifest decoding, no memwal imports
    (a local table whose generations were never collected, as here, lists exactly the
    flushed generations).
    """
    root = os.path.join(table_dir, "_mem_wal")
    out = {}
    for shard in sorted(os.listdir(root)):
        if shard.startswith("_") or not os.path.isdir(os.path.join(root, shard)):
            continue
        gens = []
        for name in os.listdir(os.path.join(root, shard)):
            head, sep, tail = name.partition("_gen_")
            if sep and tail.isdigit():
                gens.append((int(tail), os.path.join(root, shard, name)))
        out[shard] = sorted(gens)
    return out


def _primary_key(ds) -> list[str]:
    """The key's top-level columns in Lance's own order (``unenforced_primary_key``: declared
    positions first), as memwal.table.schema reads it; the baseline imports nothing of memwal."""
    return [f.name() for f in ds.lance_schema.unenforced_primary_key()]


def _dedupe(t, pk: list[str], order: list[str]):
    """Each key's last row by ``order`` (ascending): one sort, one group-by max ordinal."""
    import numpy as np
    import pyarrow as pa

    t = t.sort_by([(c, "ascending") for c in order])
    t = t.append_column("__ord", pa.array(np.arange(t.num_rows, dtype=np.int64)))
    g = t.group_by(pk, use_threads=True).aggregate([("__ord", "max")])
    # Taken in 8192-row chunks (Lance's batch size) with buffers of their own: merge_insert
    # accounts a batch sliced from a bigger chunk at the chunk's size, and at 5M change rows
    # the single-chunk table exhausted its 300 MB memory pool (observed).
    return t.take(_chunked(g.column("__ord_max"))).drop_columns(["__ord"])


def _chunked(idx):
    """Take indices in 8192-row chunks (see :func:`_dedupe`)."""
    import pyarrow as pa

    idx = idx.combine_chunks() if isinstance(idx, pa.ChunkedArray) else idx
    return pa.chunked_array([idx.slice(i, 8192) for i in range(0, len(idx), 8192)], type=idx.type)


def run_loop(table_dir: str) -> dict:
    """The hand-written per-generation loop (one or two commits per generation)."""
    import lance
    import pyarrow.compute as pc
    from lance.mem_wal import CompactedSsTable

    gens = _generations(table_dir)
    ds = lance.dataset(table_dir)
    schema = ds.schema
    pk = _primary_key(ds)
    commits = generations = rows = 0
    for shard_id, refs in gens.items():
        for g, uri in refs:
            t = lance.dataset(uri).scanner(with_row_address=True).to_table()
            rows += t.num_rows
            t = _dedupe(t, pk, ["_rowaddr"])
            tomb = t.column("_tombstone")
            deletes = t.filter(tomb).select(pk)
            upserts = t.filter(pc.invert(tomb)).select(schema.names).cast(schema)
            marker = [CompactedSsTable(shard_id, g)]
            ds = lance.dataset(table_dir)
            if deletes.num_rows:
                b = ds.merge_insert(pk).when_matched_delete()
                if not upserts.num_rows:
                    b = b.mark_sstables_as_compacted(marker)
                b.execute(deletes)
                commits += 1
                ds = lance.dataset(table_dir)
            if upserts.num_rows:
                (
                    ds.merge_insert(pk)
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .mark_sstables_as_compacted(marker)
                    .execute(upserts)
                )
                commits += 1
            generations += 1
    return {"commits": commits, "generations": generations, "rows_read": rows}


def run_floor(table_dir: str, use_index: bool | None = None, sort_keys: bool = False) -> dict:
    """The single-pass floor: one read of every generation, one dedupe, two commits.

    ``use_index`` is handed to both ``merge_insert`` builders (``MergeInsertBuilder.use_index``)
    when not None: True asks Lance to join through the BTREE on the key, False forces the
    hash join over a scan of the base table's key column. ``sort_keys`` hands both passes
    their rows sorted by primary key (the dedupe leaves them in LSM order: random keys)."""
    import lance
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from lance.mem_wal import CompactedSsTable

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    gens = _generation_dirs(table_dir)
    ds = lance.dataset(table_dir)
    schema = ds.schema
    pk = _primary_key(ds)
    phases["discover"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    parts = []
    for refs in gens.values():
        for g, uri in refs:
            t = lance.dataset(uri).scanner(with_row_address=True).to_table()
            parts.append(t.append_column("__gen", pa.array(np.full(t.num_rows, g, dtype=np.int64))))
    changes = pa.concat_tables(parts)
    phases["read"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    net = _dedupe(changes, pk, ["__gen", "_rowaddr"])
    tomb = net.column("_tombstone")
    deletes = net.filter(tomb).select(pk)
    upserts = net.filter(pc.invert(tomb)).select(schema.names).cast(schema)
    if sort_keys:
        by_key = [(k, "ascending") for k in pk]
        deletes = deletes.sort_by(by_key)
        upserts = upserts.take(_chunked(pc.sort_indices(upserts.select(pk), sort_keys=by_key)))
    phases["dedupe"] = time.perf_counter() - t0

    markers = [CompactedSsTable(s, refs[-1][0]) for s, refs in gens.items() if refs]
    commits = 0
    t0 = time.perf_counter()
    def builder(ds):
        b = ds.merge_insert(pk)
        return b if use_index is None else b.use_index(use_index)

    if deletes.num_rows:
        b = builder(ds).when_matched_delete()
        if not upserts.num_rows:
            b = b.mark_sstables_as_compacted(markers)
        b.execute(deletes)
        commits += 1
        ds = lance.dataset(table_dir)
    phases["delete_commit"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if upserts.num_rows:
        builder(ds).when_matched_update_all().when_not_matched_insert_all().mark_sstables_as_compacted(
            markers
        ).execute(upserts)
        commits += 1
    phases["upsert_commit"] = time.perf_counter() - t0
    return {
        "commits": commits,
        "generations": sum(len(r) for r in gens.values()),
        "rows_read": changes.num_rows,
        "rows_upserted": upserts.num_rows,
        "rows_deleted": deletes.num_rows,
        "phases": phases,
    }


def _cli_merge(table_dir: str, engine: str) -> dict:
    from memwal.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["merge", table_dir, "--engine", engine, "--json"])
    if code != 0:
        raise SystemExit(f"memwal merge exited {code}")
    doc = json.loads(out.getvalue())
    return {
        "commits": doc["commits"],
        "version": doc["version"],
        "generations": sum(s["to_generation"] - s["from_generation"] + 1 for s in doc["shards"]),
        "rows_upserted": sum(s["rows_upserted"] for s in doc["shards"]),
        "rows_deleted": sum(s["rows_deleted"] for s in doc["shards"]),
        "engine": doc["engine"],
    }


def run_ours(table_dir: str) -> dict:
    return _cli_merge(table_dir, "local")


def run_spark(table_dir: str) -> dict:
    return _cli_merge(table_dir, "spark")


RUNNERS = {"loop": run_loop, "ours": run_ours, "floor": run_floor, "spark": run_spark,
           "floor-index": lambda table_dir: run_floor(table_dir, use_index=True),
           "floor-scan": lambda table_dir: run_floor(table_dir, use_index=False),
           "floor-sorted": lambda table_dir: run_floor(table_dir, sort_keys=True)}


def _preload(contender: str) -> dict:
    """Import what the contender needs (and start Spark) before the inner clock starts."""
    import lance  # noqa: F401
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401
    from lance.mem_wal import CompactedSsTable  # noqa: F401

    if contender == "loop":
        import memwal.table.shards  # noqa: F401
    elif contender in ("ours", "spark"):
        import memwal.actions  # noqa: F401
        import memwal.cli  # noqa: F401
        import memwal.merge  # noqa: F401

    extra: dict = {}
    if contender == "spark":
        t0 = time.perf_counter()
        from memwal.spark.engine.session import active_or_local

        active_or_local("memwal-bench").sparkContext.setLogLevel("ERROR")
        extra["spark_startup_seconds"] = time.perf_counter() - t0
    return extra


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.merge.contenders")
    p.add_argument("contender", choices=CONTENDERS)
    p.add_argument("table")
    p.add_argument("--result", required=True, help="write the worker's JSON document here")
    p.add_argument("--profile", metavar="FILE", help="run under cProfile, dump stats to FILE")
    args = p.parse_args(argv)

    extra = _preload(args.contender)
    t_ready = time.perf_counter()
    runner = RUNNERS[args.contender]
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        info = prof.runcall(runner, args.table)
        prof.dump_stats(args.profile)
    else:
        info = runner(args.table)
    inner = time.perf_counter() - t_ready
    doc = {
        "contender": args.contender,
        "inner_seconds": inner,
        "startup_seconds": t_ready - T_START,
        "peak_rss_mb": peak_rss_mb(),
        **extra,
        **info,
    }
    with open(args.result, "w") as f:
        json.dump(doc, f)
    if args.contender == "spark":
        from memwal.spark.engine.session import active_or_local

        active_or_local().stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
