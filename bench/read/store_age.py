"""Requests on S3 as a table keeps more merged folders: ``python -m bench read store-age`` (issue 82).

Usage::

    .venv/bin/python -m bench read store-age [--kept 300,3000,10000] [--whole-pages 8] [--work DIR] [--out DIR]

Under the default 7-day retention a followed table keeps a week of merged generation folders, some
ten files each. On an object store the reads a follower repeats (the lag after each job, GC's listing
pass after each merge), ``status`` and a fleet's probe at each round list ``_mem_wal/`` whole while it
fits in ``WHOLE_PAGES`` pages and read the folders the shard manifests name past them. The table
(``make_table``'s shape: three shards, two generations merged and caught up, two unmerged, written by
pylance's ``ShardWriter``) is built once in ``--work``; for each of ``--kept`` its first shard is given
that many copies of a merged folder (what the retention keeps) and the table is uploaded to a fresh
bucket on moto. Counted at the server (Lance's own requests included), in one process, one after the
other: the lag twice (the first tries the pages, the next remembers the table as long), a dry run of
GC's listing pass, ``status``, and a fleet's probe cold (a whole listing), then twice within the hour
(the first reads the manifests and the folders above the mark, the next finds nothing changed). Each
count is ``[requests, whole-listing pages]``. Requests are counts, the same from run to run: no spread
to give. ``--whole-pages`` sets the rule's pages (memwal's 8; fewer shows the rule on small tables).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from bench.harness.results import Run, parser


def _source(work: Path) -> tuple[Path, str]:
    """The table every age copies from (built once), and the shard given the kept folders."""
    import memwal
    from memwal.demo import Workload, create_base_table, write_generations
    from memwal.table import open_table

    src = work / "source"
    if not src.exists():
        shape = Workload(base_rows=300, shards=3, generations=4, rows_per_generation=40, seed=1)
        _, model = create_base_table(str(src), shape)
        write_generations(str(src), shape, model)
        t = memwal.open(str(src))
        if not (t.merge(max_generations=2).ok and t.catchup().ok
                and t.gc(grace_seconds=0, expire_versions="never", writer_idle_seconds=0).ok):
            raise SystemExit("store-age: the source table's merge, catch-up or GC failed")
    return src, sorted(open_table(str(src)).manifest().compacted)[0]


def _keep(src: Path, shard: str, kept: int) -> None:
    """Copies of the shard's first merged folder until ``kept`` folders are on storage."""
    from memwal.table.naming import parse_generation_dir

    folder = src / "_mem_wal" / shard
    first = sorted(p for p in folder.iterdir() if parse_generation_dir(p.name) == 1)[0]
    have = sum(1 for p in folder.iterdir() if parse_generation_dir(p.name) is not None)
    for i in range(have, kept):
        shutil.copytree(first, folder / f"{i:08x}_gen_1")


def measure(server: Any, src: Path) -> dict[str, Any]:
    """The counts on ``src`` uploaded to a fresh bucket (see the module docstring)."""
    import memwal
    from bench.harness.requests import RequestCounter, lists_mem_wal, table_files, upload
    from memwal.fleet.cache import ProbeCache
    from memwal.fleet.probe import probe
    from memwal.inspect.status import lag_now, table_status
    from memwal.store import open_store
    from memwal.table import open_table

    uri, opts = server.new_table("t")
    files = table_files(src)
    upload("s3", server, server.last_bucket, "t", files)
    counter = RequestCounter("s3", server, server.last_bucket)
    out: dict[str, Any] = {"keys": len(files)}
    followed, store, cache, now = open_table(uri, opts), open_store(uri, opts), ProbeCache(), time.time()
    for name, run in (("lag", lambda: lag_now(followed)), ("lag, next", lambda: lag_now(followed)),
                      ("listing pass", lambda: memwal.open(uri, storage_options=opts).gc(listed_only=True,
                                                                                         dry_run=True)),
                      ("status", lambda: table_status(open_table(uri, opts))),
                      ("probe, cold", lambda: probe(uri, store, cache, now=now)),
                      ("probe, within the hour", lambda: probe(uri, store, cache, now=now + 60)),
                      ("probe, idle", lambda: probe(uri, store, cache, now=now + 120))):
        counter.take()
        run()
        requests = counter.take_requests()
        out[name] = [len(requests), sum(1 for m, p in requests if lists_mem_wal(m, p, "t"))]
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser("read store-age", __doc__)
    p.add_argument("--kept", default="300,3000,10000", help="merged folders kept, comma-separated, ascending")
    p.add_argument("--whole-pages", type=int, default=None, help="the rule's pages (default: memwal's)")
    args = p.parse_args(argv)
    kept = sorted(int(k) for k in args.kept.split(","))

    from memwal.fleet import probe as probe_module
    from memwal.table import listing
    from tests.s3server import start_s3_server

    if args.whole_pages is not None:
        listing.WHOLE_PAGES = probe_module.WHOLE_PAGES = args.whole_pages
    with Run("store_age", "requests on S3 as a table keeps more merged folders", out=args.out, work=args.work,
             kept=kept, whole_pages=listing.WHOLE_PAGES) as bench:
        src, shard = _source(bench.work)
        server = start_s3_server()
        try:
            for n in kept:
                _keep(src, shard, n)
                listing._long.clear()
                bench.doc[str(n)] = measure(server, src)
                bench.log(f"{n} folders kept: {bench.doc[str(n)]}")
        finally:
            server.stop()
        bench.publish(summary=summary)
    return 0


def summary(doc: dict[str, Any]) -> str:
    return "\n".join(f"{k} folders kept ({doc[k]['keys']} keys): lag {doc[k]['lag, next'][0]}, listing pass "
                     f"{doc[k]['listing pass'][0]}, status {doc[k]['status'][0]}, probe idle {doc[k]['probe, idle'][0]}"
                     for k in map(str, doc["kept"]))


if __name__ == "__main__":
    raise SystemExit(main())
