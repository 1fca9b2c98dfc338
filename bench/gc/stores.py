"""Requests on object stores, counted at the server: ``status`` per shard, GC per deleted object
and against the raw floor, on S3 (moto) and Azure Blob Storage (Azurite) (issue 41).

Usage::

    .venv/bin/python -m bench gc stores --work /tmp/os-bench [--generations 1000] [--shards 4]

The table is :mod:`bench.data.forged`'s (``generations`` merged generations built once, cached in
``<work>``), uploaded to a fresh bucket and a fresh container, plus a few table commits for the
version expiry to remove. Requests are counted by the servers themselves (moto's WSGI app, Azurite's
access log: :mod:`bench.harness.requests`), so Lance's own requests (opening the dataset, its
cleanup's listing) are in the counts, split by kind (list, head, get, put, delete, bulk-delete) and
by phase: opening the table, the plan, Lance's cleanup of the expired versions, the deletions, and
the rest of the run (lease, marker, re-check, digests, run record, lag). ``status`` is counted on a
table already opened, before GC (every merged generation still on storage) and after it. GC runs as
a user runs it (``memwal.open(uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0)``).

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
tests/integration/test_requests.py, with the same rule).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.data.forged import build
from bench.harness.requests import RequestCounter, azure_store, bucket_of, table_files, upload
from bench.harness.results import Run, parser

GOALS = {"gc_requests_per_deleted_object": 0.02, "gc_vs_raw_floor": 1.5, "status_requests_per_shard": 2.0}

#: GC's phases, by the named step that ends each (then the end of the call).
PHASES = (("plan", "gc.planned"), ("before_expiry", "gc.before-expiry"), ("lance_cleanup", "gc.after-expiry"),
          ("to_deletions", "gc.before-delete"), ("deletions", "gc.after-delete"))


def measure(kind: str, server: Any, pristine: Path, shards: int) -> dict[str, Any]:
    """Upload the table, then count status and a GC run on it, phase by phase."""
    import memwal
    from memwal.core import steps
    from memwal.inspect.status import table_status
    from memwal.table import open_table

    uri, opts = server.new_table("bench")
    bucket = bucket_of(kind, server)
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
    bucket = bucket_of(kind, server)
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
    p = parser("gc stores", __doc__)
    p.add_argument("--generations", type=int, default=1000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--azure-generations", type=int, default=700,
                   help="generations for the Azurite run (Azurite deletes slower the fuller a container: "
                        "46 blobs a second at 6,600)")
    args = p.parse_args(argv)

    from tests.azureserver import start_azure_server
    from tests.s3server import start_s3_server

    with Run("object_stores", "requests on object stores: status per shard, GC per deleted object", out=args.out,
             work=args.work, generations=args.generations, shards=args.shards, goals=GOALS) as bench:
        pristine = {}
        for n in sorted({args.generations, args.azure_generations}):
            path = bench.work / f"pristine-{n}x{args.shards}"
            if not path.exists():
                build(str(path), n, args.shards)
            pristine[n] = path
        for kind, start, n in (("s3", start_s3_server, args.generations),
                               ("azure", start_azure_server, args.azure_generations)):
            server = start()
            try:
                run = measure(kind, server, pristine[n], args.shards)
                floor = raw_floor(kind, server, pristine[n], run.pop("doomed_keys"))
                run.pop("bucket")
                bench.doc["moto" if kind == "s3" else "azurite"] = {"generations": n, **run, "raw_floor": floor,
                                                                   **compare(run, floor)}
            finally:
                server.stop()
        bench.publish(summary=summary)
    return 0


def summary(doc: dict[str, Any]) -> str:
    return "\n".join(f"{store}: GC {doc[store]['gc_requests_per_deleted_object']} requests per deleted object, "
                     f"status {doc[store]['status_requests_per_shard']} per shard"
                     for store in ("moto", "azurite") if store in doc)


if __name__ == "__main__":
    sys.exit(main())
