"""Requests on object stores: what ``status`` costs per shard and GC per generation deleted,
on S3 (moto) and Azure Blob Storage (Azurite), and GC against raw batched DeleteObjects.

Usage::

    .venv/bin/python -m bench.object_stores --work /tmp/os-bench [--generations 1000] [--shards 4]

The table is bench/gc_many.py's (``generations`` merged generations built once, cached in
``<work>``), uploaded to a fresh bucket and a fresh container. Requests are counted by the
servers themselves (moto's WSGI app, Azurite's access log), so Lance's own requests (opening
the dataset, expiring versions) are in the counts too; they are split by kind (list, head,
get, put, delete, batch). On moto, GC (plan + execute, under a lease) is timed against
deleting exactly the keys GC deleted with raw ``DeleteObjects`` calls of 1,000 keys, one
after the other (the goal: GC within 1.5x of that), and against the same deletes after one
paginated listing of the MemWAL folder (GC must list what it deletes: a generation is a folder
of files). Nothing is asserted; the JSON document goes to stdout (and ``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def request_kind(method: str, path: str) -> str:
    """A request's kind from its method and query (S3 and Azure spellings)."""
    if "comp=batch" in path or (method == "POST" and "delete" in path):
        return "bulk-delete"
    if "list-type=2" in path or "comp=list" in path:
        return "list"
    return {"HEAD": "head", "GET": "get", "PUT": "put", "DELETE": "delete", "POST": "post"}.get(method, method)


def table_files(pristine: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(pristine)), p.read_bytes()) for p in sorted(pristine.rglob("*")) if p.is_file()]


def upload_s3(server: Any, bucket: str, prefix: str, files: list[tuple[str, bytes]]) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    with server._moto.write_lock:
        for key, body in files:
            backend.put_object(bucket, f"{prefix}/{key}", body)


def upload_azure(server: Any, container: str, prefix: str, files: list[tuple[str, bytes]]) -> None:
    import obstore
    from obstore.store import AzureStore

    from tests.azureserver import ACCOUNT, ACCOUNT_KEY

    store = AzureStore(container, config={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY,
                                          "endpoint": server.endpoint}, client_options={"allow_http": True})

    async def run() -> None:
        gate = asyncio.Semaphore(32)

        async def one(key: str, body: bytes) -> None:
            async with gate:
                await obstore.put_async(store, f"{prefix}/{key}", body)

        await asyncio.gather(*(one(k, b) for k, b in files))

    asyncio.run(run())


class RequestCounter:
    """Requests the server saw between two calls of :meth:`take`."""

    def __init__(self, kind: str, server: Any) -> None:
        self.kind, self.server, self.seen = kind, server, 0

    def _all(self) -> list[tuple[str, str]]:
        if self.kind == "s3":
            return list(self.server.requests)
        from tests.azureserver import request_log

        out = []
        for line in request_log(self.server).splitlines():
            if '"' in line:
                method, path, *_ = line.split('"')[1].split(" ")
                out.append((method, path))
        return out

    def take_requests(self) -> list[tuple[str, str]]:
        """The requests (method, path with query) seen since the last take."""
        reqs = self._all()
        new, self.seen = reqs[self.seen:], len(reqs)
        return new

    def take(self) -> Counter[str]:
        return Counter(request_kind(m, p) for m, p in self.take_requests())


def measure(kind: str, server: Any, pristine: Path, shards: int) -> dict[str, Any]:
    """Upload the table, then count (and time) ``status`` and GC on it."""
    from memwal.gc import prepare_gc, run_gc
    from memwal.inspect.status import table_status
    from memwal.lease import Lease
    from memwal.table import open_table

    uri, opts = server.new_table("bench")
    bucket = server.last_bucket if kind == "s3" else server.last_container
    files = table_files(pristine)
    t0 = time.perf_counter()
    (upload_s3 if kind == "s3" else upload_azure)(server, bucket, "bench", files)
    upload_s = time.perf_counter() - t0
    counter = RequestCounter(kind, server)
    counter.take()
    table = open_table(uri, opts)
    status = table_status(table)
    status_reqs = counter.take()
    t0 = time.perf_counter()
    table = open_table(uri, opts)
    plan = prepare_gc(table, grace_seconds=0)
    t1 = time.perf_counter()
    with Lease(table.store, "gc", ttl_seconds=600) as lease:
        t2 = time.perf_counter()
        result = run_gc(table, lease=lease, grace_seconds=0, plan=plan)
        t3 = time.perf_counter()
    gc_reqs = counter.take()
    deleted = len(result.deleted)
    keys = [k for k, _ in files if "_gen_" in k or "/wal/" in k]
    return {
        "objects_uploaded": len(files), "upload_s": round(upload_s, 1), "shards": len(status.shards),
        "status_requests": dict(status_reqs), "status_requests_per_shard": round(sum(status_reqs.values()) / shards, 2),
        "gc_generations_deleted": deleted, "gc_objects_deleted": result.objects_deleted,
        "gc_wal_entries_deleted": result.wal_entries_deleted, "gc_requests": dict(gc_reqs),
        "gc_requests_per_generation": round(sum(gc_reqs.values()) / max(deleted, 1), 3),
        "gc_plan_s": round(t1 - t0, 3), "gc_execute_s": round(t3 - t2, 3), "gc_total_s": round(t1 - t0 + t3 - t2, 3),
        "doomed_keys": keys, "bucket": bucket,
    }


def raw_delete_objects(server: Any, pristine: Path, keys: list[str]) -> dict[str, Any]:
    """Upload the same table again; delete GC's keys with raw DeleteObjects calls of 1,000 keys."""
    server.new_table("raw")
    bucket = server.last_bucket
    upload_s3(server, bucket, "raw", table_files(pristine))
    client = server.client()
    full = [f"raw/{k}" for k in keys]
    t0 = time.perf_counter()  # what GC cannot skip: finding the files (one listing of the MemWAL folder)
    listed = sum(page.get("KeyCount", 0) for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="raw/_mem_wal/"))
    t1 = time.perf_counter()
    for i in range(0, len(full), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in full[i:i + 1000]],
                                                     "Quiet": True})
    t2 = time.perf_counter()
    left = client.list_objects_v2(Bucket=bucket, Prefix="raw/_mem_wal/").get("KeyCount", 0)
    return {"raw_delete_s": round(t2 - t1, 3), "raw_list_s": round(t1 - t0, 3), "keys_listed": listed,
            "requests": -(-len(full) // 1000), "keys": len(full), "objects_left_under_mem_wal": left}


def main(argv: list[str] | None = None) -> int:
    from bench.gc_many import build

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="scratch folder (the pristine table is cached there)")
    p.add_argument("--generations", type=int, default=1000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--azure-generations", type=int, default=200,
                   help="generations for the Azurite run (Azurite deletes ~200 blobs a second)")
    p.add_argument("--out", help="also write the document to OUT/object_stores.json")
    args = p.parse_args(argv)

    from tests.azureserver import start_azure_server
    from tests.s3server import start_s3_server

    doc: dict[str, Any] = {"generations": args.generations, "shards": args.shards}
    pristine = {}
    for n in sorted({args.generations, args.azure_generations}):
        path = Path(args.work) / f"pristine-{n}x{args.shards}"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            build(str(path), n, args.shards)
        pristine[n] = path
    s3 = start_s3_server()
    try:
        moto = measure("s3", s3, pristine[args.generations], args.shards)
        raw = raw_delete_objects(s3, pristine[args.generations], moto.pop("doomed_keys"))
        moto.pop("bucket")
        doc["moto"] = moto
        doc["moto_raw_delete_objects"] = raw
        doc["gc_vs_raw"] = round(moto["gc_total_s"] / max(raw["raw_delete_s"], 1e-9), 2)
        doc["gc_execute_vs_raw"] = round(moto["gc_execute_s"] / max(raw["raw_delete_s"], 1e-9), 2)
        doc["gc_vs_raw_list_and_delete"] = round(
            moto["gc_total_s"] / max(raw["raw_delete_s"] + raw["raw_list_s"], 1e-9), 2)
        doc["goal"] = "GC of the generations on moto within 1.5x of raw batched DeleteObjects"
    finally:
        s3.stop()
    az = start_azure_server()
    try:
        azure = measure("azure", az, pristine[args.azure_generations], args.shards)
        azure.pop("doomed_keys")
        azure.pop("bucket")
        doc["azurite"] = {"generations": args.azure_generations, **azure}
    finally:
        az.stop()
    json.dump(doc, sys.stdout, indent=1)
    print()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "object_stores.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
