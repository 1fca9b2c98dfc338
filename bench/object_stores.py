"""Requests on object stores, counted at the server: ``status`` per shard, GC per deleted object
and against the raw floor, on S3 (moto) and Azure Blob Storage (Azurite) (issue 41).

Usage::

    .venv/bin/python -m bench.object_stores --work /tmp/os-bench [--generations 1000] [--shards 4]

The table is bench/gc_many.py's (``generations`` merged generations built once, cached in
``<work>``), uploaded to a fresh bucket and a fresh container, plus a few table commits for the
version expiry to remove. Requests are counted by the servers themselves (moto's WSGI app,
Azurite's access log), so Lance's own requests (opening the dataset, its cleanup's listing) are
in the counts, split by kind (list, head, get, put, delete, bulk-delete) and by phase: opening
the table, the plan, Lance's cleanup of the expired versions, the deletions, and the rest of the
run (lease, marker, re-check, digests, run record, lag). ``status`` is counted on a table already
opened, before GC (every merged generation still on storage) and after it. GC runs as a user
runs it (``memwal.open(uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0)``).

The raw floor is what deleting the same objects needs at least: one listing of ``_mem_wal/``
(paged) and batched deletes of exactly the keys GC deleted (S3 DeleteObjects of 1,000, Azure
blob batches of 256), made with the server's own client, counted and timed the same way on a
second copy of the table. Goals (issues 41, 49): GC <= 0.02 requests per deleted object, GC within
1.5x of the raw floor in time and in the requests that grow with what it deletes (Lance's
cleanup counted apart, as its own phase: the floor expires no version), status <= 2 requests per
shard. GC's own requests are also split into those that grow with what it deletes (its listing
of ``_mem_wal/``, batched deletes: the floor's shape) and the fixed rest of a run (lease,
checkpoints, shard manifests, re-check, digests, run record), so the ratio at one size says which
part a bigger table would dilute. Nothing is asserted here (the tests assert the counts:
tests/integration/test_requests.py, with the same rule); the JSON document goes to stdout (and
``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GOALS = {"gc_requests_per_deleted_object": 0.02, "gc_vs_raw_floor": 1.5, "status_requests_per_shard": 2.0}

#: GC's phases, by the named step that ends each (then the end of the call).
PHASES = (("plan", "gc.planned"), ("before_expiry", "gc.before-expiry"), ("lance_cleanup", "gc.after-expiry"),
          ("to_deletions", "gc.before-delete"), ("deletions", "gc.after-delete"))


def request_kind(method: str, path: str) -> str:
    """A request's kind from its method and query (S3 and Azure spellings)."""
    if "comp=batch" in path or (method == "POST" and "delete" in path):
        return "bulk-delete"
    if "list-type=2" in path or "comp=list" in path:
        return "list"
    return {"HEAD": "head", "GET": "get", "PUT": "put", "DELETE": "delete", "POST": "post"}.get(method, method)


def table_files(pristine: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(pristine)), p.read_bytes()) for p in sorted(pristine.rglob("*")) if p.is_file()]


def upload(kind: str, server: Any, bucket: str, prefix: str, files: list[tuple[str, bytes]]) -> None:
    """Put the table's files under ``prefix`` (straight into moto's state; 32 at once on Azurite)."""
    if kind == "s3":
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        with server._moto.write_lock:
            for key, body in files:
                backend.put_object(bucket, f"{prefix}/{key}", body)
        return
    import obstore

    store = azure_store(server, bucket)

    async def run() -> None:
        gate = asyncio.Semaphore(32)

        async def one(key: str, body: bytes) -> None:
            async with gate:
                await obstore.put_async(store, f"{prefix}/{key}", body)

        await asyncio.gather(*(one(k, b) for k, b in files))

    asyncio.run(run())


def azure_store(server: Any, container: str) -> Any:
    from obstore.store import AzureStore

    from tests.azureserver import ACCOUNT, ACCOUNT_KEY

    return AzureStore(container, config={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY,
                                         "endpoint": server.endpoint}, client_options={"allow_http": True})


def lists_mem_wal(method: str, path: str, table: str) -> bool:
    """Whether a request is a listing of table ``table``'s whole ``_mem_wal/`` (the floor's one
    paged listing, any page): not a listing of a shard's manifests or of the checkpoints under
    it, nor a listing folder by folder (a delimiter), which are fixed costs of a run."""
    if request_kind(method, path) != "list" or "delimiter" in path:
        return False
    query = dict(urllib.parse.parse_qsl(path.split("?", 1)[1])) if "?" in path else {}
    return query.get("prefix") == f"{table}/_mem_wal/"


def per_object(method: str, path: str, table: str) -> bool:
    """Whether a request is of the kind whose number grows with what is deleted: a listing of
    ``_mem_wal/`` (:func:`lists_mem_wal`) or a batched delete. Every other request is a fixed
    cost of the run, whatever it deletes."""
    return request_kind(method, path) == "bulk-delete" or lists_mem_wal(method, path, table)


class RequestCounter:
    """Requests the server saw between two calls of :meth:`take`, by kind (``bucket``: only
    those to that bucket or container, so that another test's table on the same server, or a
    thread an earlier test left running, is not counted)."""

    def __init__(self, kind: str, server: Any, bucket: str | None = None) -> None:
        self.kind, self.server, self.seen, self.bucket = kind, server, 0, bucket

    def _all(self) -> list[tuple[str, str]]:
        every = self._every()
        if self.bucket is None:
            return every
        mine = f"/{self.bucket}/"
        return [(m, p) for m, p in every if mine in p.split("?", 1)[0] + "/"]

    def _every(self) -> list[tuple[str, str]]:
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

    def take_split(self, table: str) -> tuple[Counter[str], int]:
        """:meth:`take`, and how many of those requests were :func:`per_object` for ``table``."""
        reqs = self.take_requests()
        return Counter(request_kind(m, p) for m, p in reqs), sum(per_object(m, p, table) for m, p in reqs)


def measure(kind: str, server: Any, pristine: Path, shards: int) -> dict[str, Any]:
    """Upload the table, then count status and a GC run on it, phase by phase."""
    import memwal
    from memwal.core import steps
    from memwal.inspect.status import table_status
    from memwal.table import open_table

    uri, opts = server.new_table("bench")
    bucket = server.last_bucket if kind == "s3" else server.last_container
    files = table_files(pristine)
    upload(kind, server, bucket, "bench", files)
    for i in range(3):  # table versions the expiry removes (their progress is the latest's)
        open_table(uri, opts).dataset().update_config({"bench.commit": str(i)})
    counter = RequestCounter(kind, server)
    counter.take()
    table = open_table(uri, opts)
    counter.take()
    status = table_status(table)
    status_reqs = counter.take()
    phases: dict[str, Counter[str]] = {}
    per_object_by_phase: dict[str, int] = {}
    ends = {step: name for name, step in PHASES}

    def close_phase(phase: str) -> None:
        phases[phase], per_object_by_phase[phase] = counter.take_split("bench")

    def at_step(name: str) -> None:
        if name in ends:
            close_phase(ends[name])

    with steps.hooked(at_step):
        t0 = time.perf_counter()
        result = memwal.open(uri, opts).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).value
        elapsed = time.perf_counter() - t0
    close_phase("run_record_and_lag")
    after = open_table(uri, opts)
    counter.take()
    table_status(after)
    status_after = counter.take()
    total: Counter[str] = sum(phases.values(), Counter())
    deleted = result.objects_deleted
    doomed = [k for k, _ in files if "_gen_" in k or "/wal/" in k]
    return {
        "objects_uploaded": len(files), "shards": len(status.shards),
        # status before GC (every merged generation still on storage: its listing pages through
        # their files) and after (what GC keeps it at: the goal's figure)
        "status_before_gc_requests": dict(status_reqs),
        "status_before_gc_requests_per_shard": round(sum(status_reqs.values()) / shards, 2),
        "status_requests": dict(status_after),
        "status_requests_per_shard": round(sum(status_after.values()) / shards, 2),
        "gc_generations_deleted": len(result.deleted), "gc_objects_deleted": deleted,
        "gc_wal_entries_deleted": result.wal_entries_deleted,
        "gc_versions_expired": None if result.expired_versions is None else result.expired_versions.old_versions,
        "gc_requests": dict(total), "gc_requests_total": sum(total.values()),
        "gc_requests_by_phase": {k: dict(v) for k, v in phases.items()},
        # Lance's cleanup of expired versions apart (its own listing of the table's folders), then
        # GC's own requests split into those that grow with what is deleted and the fixed rest.
        "gc_lance_cleanup_requests": sum(phases["lance_cleanup"].values()),
        "gc_per_object_requests": sum(v for k, v in per_object_by_phase.items() if k != "lance_cleanup"),
        "gc_fixed_requests_by_phase": {k: sum(v.values()) - per_object_by_phase[k] for k, v in phases.items()
                                       if k != "lance_cleanup"},
        "gc_requests_per_deleted_object": round(sum(total.values()) / max(deleted, 1), 4),
        "gc_s": round(elapsed, 3), "doomed_keys": doomed, "bucket": bucket,
    }


def raw_floor(kind: str, server: Any, pristine: Path, keys: list[str]) -> dict[str, Any]:
    """Upload the same table again; list ``_mem_wal/`` once and delete GC's keys in batches."""
    server.new_table("raw")
    bucket = server.last_bucket if kind == "s3" else server.last_container
    upload(kind, server, bucket, "raw", table_files(pristine))
    counter = RequestCounter(kind, server)
    counter.take()
    full = [f"raw/{k}" for k in keys]
    t0 = time.perf_counter()
    if kind == "s3":
        client = server.client()
        listed = sum(page.get("KeyCount", 0) for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix="raw/_mem_wal/"))
        t1 = time.perf_counter()
        for i in range(0, len(full), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in full[i:i + 1000]],
                                                         "Quiet": True})
    else:
        import obstore

        store = azure_store(server, bucket)
        listed = sum(len(page) for page in obstore.list(store, "raw/_mem_wal", chunk_size=5000))
        t1 = time.perf_counter()
        for i in range(0, len(full), 256):
            obstore.delete(store, full[i:i + 256])
    t2 = time.perf_counter()
    reqs = counter.take()
    return {"keys_listed": listed, "keys_deleted": len(full), "requests": dict(reqs),
            "requests_total": sum(reqs.values()), "list_s": round(t1 - t0, 3), "delete_s": round(t2 - t1, 3),
            "total_s": round(t2 - t0, 3)}


def compare(run: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any]:
    """GC against the raw floor, and each goal met or not."""
    floor_requests = max(floor["requests_total"], 1)
    own = run["gc_requests_total"] - run["gc_lance_cleanup_requests"]
    out = {"gc_vs_raw_floor_requests": round(run["gc_requests_total"] / floor_requests, 2),
           # GC's own requests (Lance's cleanup apart), and of those only the ones that grow with
           # what is deleted: the part the floor's shape bounds; the fixed rest is a count per run
           "gc_own_vs_raw_floor_requests": round(own / floor_requests, 2),
           "gc_per_object_vs_raw_floor_requests": round(run["gc_per_object_requests"] / floor_requests, 2),
           "gc_fixed_requests": own - run["gc_per_object_requests"],
           "gc_vs_raw_floor_time": round(run["gc_s"] / max(floor["total_s"], 1e-9), 2)}
    out["goals_met"] = {
        "gc_requests_per_deleted_object": run["gc_requests_per_deleted_object"] <= GOALS[
            "gc_requests_per_deleted_object"],
        "gc_vs_raw_floor (time)": out["gc_vs_raw_floor_time"] <= GOALS["gc_vs_raw_floor"],
        # as tests/integration/test_requests.py asserts it: the part a bigger table multiplies
        "gc_vs_raw_floor (requests that grow with the deletes)": out["gc_per_object_vs_raw_floor_requests"] <= GOALS[
            "gc_vs_raw_floor"],
        "status_requests_per_shard": run["status_requests_per_shard"] <= GOALS["status_requests_per_shard"],
    }
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.gc_many import build

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="scratch folder (the pristine table is cached there)")
    p.add_argument("--generations", type=int, default=1000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--azure-generations", type=int, default=700,
                   help="generations for the Azurite run (Azurite deletes slower the fuller a container: "
                        "46 blobs a second at 6,600)")
    p.add_argument("--out", help="also write the document to OUT/object_stores.json")
    args = p.parse_args(argv)

    from tests.azureserver import start_azure_server
    from tests.s3server import start_s3_server

    doc: dict[str, Any] = {"generations": args.generations, "shards": args.shards, "goals": GOALS}
    pristine = {}
    for n in sorted({args.generations, args.azure_generations}):
        path = Path(args.work) / f"pristine-{n}x{args.shards}"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            build(str(path), n, args.shards)
        pristine[n] = path
    for kind, start, n in (("s3", start_s3_server, args.generations),
                           ("azure", start_azure_server, args.azure_generations)):
        server = start()
        try:
            run = measure(kind, server, pristine[n], args.shards)
            floor = raw_floor(kind, server, pristine[n], run.pop("doomed_keys"))
            run.pop("bucket")
            doc["moto" if kind == "s3" else "azurite"] = {"generations": n, **run, "raw_floor": floor,
                                                         **compare(run, floor)}
        finally:
            server.stop()
    json.dump(doc, sys.stdout, indent=1)
    print()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "object_stores.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
