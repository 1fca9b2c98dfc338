"""Requests are money (issue 41): GC and status at the object store's floor, counted at the server.

moto's own request log and Azurite's access log count every request, Lance's included. The
budgets are counts, never times: ``status`` reads at most 2 requests per shard; a GC run costs
at most 0.02 requests per deleted object, and what grows with the objects (its listing of
``_mem_wal/`` and its deletes) stays within 1.5x of the raw floor, one listing plus batched
deletes of the same keys; gate (e) reads no WAL entry's header that the manifests, the listing
or its own digest already tell, and a header once only.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import memwal
from bench.data.forged import build
from bench.harness.requests import RequestCounter, bucket_of, lists_mem_wal, request_kind, table_files, upload
from memwal.core import steps
from memwal.demo import shard_ids_for, write_generations
from memwal.inspect.status import table_status
from memwal.lease import Lease
from memwal.store import open_store
from memwal.table import open_table
from memwal.table.listing import list_mem_wal
from memwal.table.shards import all_shard_manifests
from memwal.table.wal_digest import DIGEST_KEY
from tests.conftest import SMALL
from tests.helpers import run_cli
from tests.integration.test_gc import expire_all

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

SHARDS = 4
#: Merged generations of the table: on S3 ~6,600 objects, enough that a run's fixed requests are
#: spread thin; Azurite deletes slower the fuller a container (46 blobs a second at 6,600), so
#: there the table is smaller and the budget checked is what grows with the objects.
GENERATIONS = {"s3": 800, "azure": 300}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Tables of GENERATIONS merged generations over SHARDS shards (bench/data/forged.py's), on disk."""
    out = {}
    for n in sorted(set(GENERATIONS.values())):
        out[n] = tmp_path_factory.mktemp("requests") / f"pristine-{n}"
        build(str(out[n]), n, SHARDS)
    return out


@pytest.fixture(params=["s3", "azure"])
def remote(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """moto's server of the run, or an Azurite of the test's own: Azurite slows with every blob it
    holds (these tests upload thousands), so an Azurite shared with the run's other tests made the
    Azure GC test 30 s alone, 87 s after this file's status test and 179 s late in a suite run."""
    if request.param == "s3":
        yield "s3", request.getfixturevalue("s3_server")
        return
    from tests.azureserver import start_azure_server

    server = start_azure_server()
    try:
        yield "azure", server
    finally:
        server.stop()


@pytest.fixture
def pristine(remote: tuple[str, Any], tables: dict[int, Path]) -> Path:
    return tables[GENERATIONS[remote[0]]]


def uploaded(kind: str, server: Any, pristine: Path, name: str = "t") -> tuple[str, dict[str, str], list[str]]:
    """The pristine table in a fresh bucket or container: (uri, options, its keys)."""
    uri, opts = server.new_table(name)
    if kind == "azure":
        # Azurite answers a batch of 256 deletes well within the client's default 30 s when the
        # machine is idle; beside a second `make test` on 2 cores one batch took longer five
        # times over, and every retry of it took as long. With a longer timeout nothing is retried,
        # so the counts below stay the run's own.
        opts = {**opts, "timeout": "300s"}
    bucket = bucket_of(kind, server)
    files = table_files(pristine)
    upload(kind, server, bucket, name, files)
    return uri, opts, [k for k, _ in files]


def test_status_reads_the_listing_it_needs_and_each_shard_manifest(remote, pristine):
    """The table manifest, one listing of ``_mem_wal/``, each shard's latest manifest and the
    checkpoints, nothing per generation: with every merged generation still on storage, the
    listing pages through their files (after GC, 2 requests a shard: below). A live writer
    holding merged generations listed is named with when it opened: a binary search over its
    shard's manifest versions for the first of its epoch, a few reads a shard."""
    kind, server = remote
    uri, opts, keys = uploaded(kind, server, pristine)
    opened = open_table(uri, opts)
    versions = max(len(s.manifests) for s in list_mem_wal(open_store(uri, opts)).shards.values())
    counter = RequestCounter(kind, server, bucket_of(kind, server))
    counter.take()
    backlog = table_status(opened)
    used = counter.take()
    page = 1000 if kind == "s3" else 5000
    assert len(backlog.shards) == SHARDS and backlog.unmerged_generations == 0
    claims = SHARDS * math.ceil(math.log2(versions)) if all(s.writer_live for s in backlog.shards) else 0
    assert sum(used.values()) <= 2 * SHARDS + claims + math.ceil(len(keys) / page), used


def test_gc_costs_at_most_a_fiftieth_of_a_request_per_object_and_scales_like_the_floor(remote, pristine, tmp_path,
                                                                                     monkeypatch):
    """At scale (S3 here) 0.02 requests per deleted object or fewer, Lance's expiry included; what
    grows with the objects within 1.5x of the floor; status after it at most 2 a shard; and the
    run reads each thing once per need (issue 49):

    - its lease record no more often than it checks the lease (the pre-flight inspection, then
      one check before each side effect, which must read): the acquisition starts from what the
      inspection read and the release writes on the last ETag it saw, so every read is a check's;
    - ``_versions/`` listed at most 9 times: memwal's own 5 (opening the table; the plan, one
      listing for all of it; the expiry's hold on the snapshot file just before Lance's cleanup;
      the re-check after the expiry, one listing for the versions left and the latest; the lag
      the run leaves, after its commits), which no two can share, since a commit or the expiry
      comes between each two; and Lance's own 4 (its open of the dataset for the tags and
      branches, and its cleanup's), counted apart as Lance's;
    - the checkpoints folder listed twice: by the plan, and after the GC marker (a checkpoint
      created since the plan keeps what it pins); the lag recorded after the run reads none.
    """
    kind, server = remote
    uri, opts, keys = uploaded(kind, server, pristine)
    for i in range(3):  # versions for the expiry to remove: it counts in the same budget
        open_table(uri, opts).dataset().update_config({"test.commit": str(i)})
    checks = []  # the run's checks of its leases: the pre-flight inspection, then one before each side effect
    real_check, real_inspect = Lease.check, Lease.inspect

    def counted_check(lease: Lease, **kw: Any) -> None:
        checks.append(lease.kind)
        real_check(lease, **kw)

    def counted_inspect(lease: Lease) -> Any:
        checks.append(lease.kind)
        return real_inspect(lease)

    monkeypatch.setattr(Lease, "check", counted_check)
    monkeypatch.setattr(Lease, "inspect", counted_inspect)
    counter = RequestCounter(kind, server, bucket_of(kind, server))
    counter.take()
    start = counter.seen
    deleting: list[int] = []
    with steps.hooked(lambda name: deleting.append(len(counter._all())) if name in DELETION else None):
        result = memwal.open(uri, opts).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).value
    run_requests = counter._all()[start:]
    used = counter.take()
    lease_reads = [p for m, p in run_requests if m == "GET" and _path(p).endswith("/_mem_wal/_jobs/leases/gc.json")]
    assert 0 < len(lease_reads) <= checks.count("gc"), (len(lease_reads), checks)
    version_listings = [p for m, p in run_requests
                        if request_kind(m, p) == "list" and "prefix=t/_versions/" in unquote(p)]
    assert len(version_listings) <= 9, version_listings
    checkpoint_listings = [p for m, p in run_requests
                           if request_kind(m, p) == "list" and "prefix=t/_mem_wal/_jobs/checkpoints/" in unquote(p)]
    assert len(checkpoint_listings) <= 2, checkpoint_listings
    doomed = [k for k in keys if "_gen_" in k or "/wal/" in k]
    assert len(result.deleted) == GENERATIONS[kind] and result.objects_deleted == len(doomed)
    # the three above, and the fixture's own three (bench.data.forged.build keeps its merges' history)
    assert result.expired_versions is not None and result.expired_versions.old_versions == 6
    if kind == "s3":
        assert sum(used.values()) <= 0.02 * result.objects_deleted, used
    # What grows with the objects, against the floor of one listing and the batched deletes of
    # the same keys (S3: pages and DeleteObjects of 1,000; Azure: pages of 5,000, batches of 256).
    requests = counter._all()
    listings = sum(1 for m, p in requests[start:] if lists_mem_wal(m, p, "t"))
    deletes = sum(1 for m, p in requests[deleting[0]:deleting[1]] if request_kind(m, p) == "bulk-delete")
    page, batch = (1000, 1000) if kind == "s3" else (5000, 256)
    floor = math.ceil(len(keys) / page) + math.ceil(len(doomed) / batch)
    assert listings + deletes <= 1.5 * floor, (listings, deletes, floor)
    assert all(not s.generations and not s.wal for s in list_mem_wal(open_store(uri, opts)).shards.values())
    # status once GC has collected what is merged: at most 2 requests a shard
    table = open_table(uri, opts)
    counter.take()
    st = table_status(table)
    used = counter.take()
    assert [s.collected_generations for s in st.shards] == [s.flushed_generations for s in st.shards]
    assert sum(used.values()) <= 2 * SHARDS, used
    # `memwal status` as a whole command, opening included: the table manifest (one listing of
    # _versions/, one read), then 2 a shard; no request made twice
    options = tmp_path / "options.json"
    options.touch(mode=0o600)
    options.write_text(json.dumps(opts))
    run = run_cli("status", uri, "--storage-options-file", str(options), "--json")
    requests = counter.take_requests()
    assert run.rc == 0 and len(json.loads(run.stdout)["shards"]) == SHARDS, run.stderr
    assert len(requests) <= 2 * SHARDS + 2, requests
    assert max(Counter(requests).values()) == 1, Counter(requests).most_common(3)


#: The named steps around GC's own deletions.
DELETION = ("gc.before-delete", "gc.after-delete")


def _path(path: str) -> str:
    """A request's object key, unquoted, without the query."""
    return unquote(path.split("?", 1)[0])


def test_a_missing_key_never_fails_a_batch(remote):
    kind, server = remote
    uri, opts = server.new_table("missing")
    store = open_store(uri, opts)
    present = [f"_mem_wal/_jobs/x/{i:04d}" for i in range(300)]
    bucket = bucket_of(kind, server)
    if kind == "s3":
        server.seed_objects(bucket, [f"missing/{k}" for k in present])
    else:
        server.seed_blobs(bucket, [f"missing/{k}" for k in present])
    ghosts = [f"_mem_wal/_jobs/x/ghost-{i}" for i in range(40)]
    counter = RequestCounter(kind, server, bucket_of(kind, server))
    counter.take()
    store.delete_many(ghosts[:20] + present + ghosts[20:])
    used = counter.take()
    assert not list(store.list("_mem_wal/_jobs/x/"))
    assert used == {"bulk-delete": 1 if kind == "s3" else 2}, used  # one request per batch, none per key


def test_gate_e_reads_no_header_the_manifests_and_the_listing_tell(s3_server, make_table):
    """Half merged, every WAL entry is placed by a binary search of a few headers (fewer than one
    a shard's entries); all merged, no entry at or below the shard's ``replay_after`` is read:
    the manifest and the listing tell it all. An entry past it (pylance's writer flushes its WAL
    in the background: on a busy machine its ``replay_after`` lags an entry or two) is what a
    replay reads: it stays, and its header is read (once) to name its generation in the report."""
    uri, opts = s3_server.new_table("gate-e")
    table, model = make_table(uri=uri, storage_options=opts)
    t = memwal.open(uri, opts)
    assert t.merge(max_generations=2).ok and t.catchup().ok
    expire_all(table)
    entries = {s: len(list_mem_wal(table.store).shards[s].wal) for s in shard_ids_for(SMALL)}
    n = len(s3_server.requests)
    first = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions="never").to_dict()
    reads = _wal_reads(s3_server, n)
    assert first["wal_entries_deleted"] > 0 and first["blocked"]
    for s, count in entries.items():
        assert 0 < reads[s] <= math.ceil(math.log2(count)) + 1 < count, (reads, entries)
    assert t.merge().ok and t.catchup().ok
    expire_all(table)
    replay_after = {s: st.replay_after_wal_entry_position for s, st in all_shard_manifests(table.store).items()}
    past = {s: [e.position for e in sh.wal if e.position > replay_after[s]]
            for s, sh in list_mem_wal(table.store).shards.items()}
    n = len(s3_server.requests)
    second = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions="never").to_dict()
    assert second["wal_entries_deleted"] > 0 and not second["blocked"]
    reads = _wal_reads(s3_server, n)  # a header the first GC read is remembered (the WAL digest)
    assert all(0 < reads[s] <= len(past[s]) for s in reads), (reads, past)
    assert sorted((k["shard_id"], k["position"], k["reason"]) for k in second["kept_wal_entries"]) == sorted(
        (s, p, "wal-needed-for-replay") for s, ps in past.items() for p in ps)
    assert {s: [e.position for e in sh.wal] for s, sh in list_mem_wal(table.store).shards.items()} == past
    assert sorted(memwal.open(uri, opts).scan().to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()


def test_a_header_is_read_once_and_a_bad_digest_is_ignored(s3_server, make_table):
    """Fence sentinels (small entries, so read) kept within the expiry bound: the first run reads
    each once and remembers it; the next reads none; a malformed digest is ignored whole (the
    headers are read again, the plan is the same)."""
    uri, opts = s3_server.new_table("sentinels")
    table, model = make_table(uri=uri, storage_options=opts)
    write_generations(uri, SMALL, model, generations=1, seed_offset=99, storage_options=opts)
    t = memwal.open(uri, opts)
    assert t.merge().ok and t.catchup().ok
    expire_all(table)
    n = len(s3_server.requests)
    first = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=3600).to_dict()
    assert sum(_wal_reads(s3_server, n).values()) == len(first["kept_wal_entries"]) == SMALL.shards
    n = len(s3_server.requests)
    again = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=3600, dry_run=True).to_dict()
    assert _wal_reads(s3_server, n) == {} and again["kept_wal_entries"] == first["kept_wal_entries"]
    table.store.put(DIGEST_KEY, b'{"format": 1, "keys": ["x"], "etags": [], "generations": [], "epochs": []}')
    n = len(s3_server.requests)
    bad = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=3600, dry_run=True).to_dict()
    assert sum(_wal_reads(s3_server, n).values()) == SMALL.shards and bad["kept_wal_entries"] == first[
        "kept_wal_entries"]


def _wal_reads(server: Any, since: int) -> dict[str, int]:
    """GETs of WAL entries of this test's table (its bucket, the server's last) since request
    ``since``, per shard: another test's table on the same server is not this test's to count."""
    out: dict[str, int] = {}
    mine = f"/{server.last_bucket}/"
    for method, path in server.requests[since:]:
        if not path.startswith(mine):
            continue
        inside = path.split("/_mem_wal/", 1)[1] if "/_mem_wal/" in path else ""
        if method == "GET" and inside.count("/") == 2 and inside.split("/")[1] == "wal":
            out[inside.split("/")[0]] = out.get(inside.split("/")[0], 0) + 1
    return out

