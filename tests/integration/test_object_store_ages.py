"""On an object store, a follower's lag and listing pass, a ``status`` and a fleet's probe cost the
same requests whatever the merged folders a table keeps (issue 82).

The default 7-day retention keeps every merged generation folder a retained version may read: a
week beside a busy writer is some 350,000 folders, ten files each. On a disk the folders the
shard manifests list are walked by name (``tests/integration/test_status_work.py``); an object
store kept its one paged listing of ``_mem_wal/``, a request a thousand keys on S3, so the lag
after each of a follower's jobs, its listing pass after each merge and a status each paged
through every folder kept: thousands of requests a flush at a week. Past
:data:`memwal.table.listing.WHOLE_PAGES` pages they read the folders the manifests name instead.

Requests are counted at moto's server (Lance's too), never timed: the same table uploaded keeping
240 and then 480 merged folders outside its listing (copies of a real merged generation, as the
retention keeps them) costs each of the three the same requests at both ages, and says the same.
A fleet's probe lists such a table whole once an hour and, between, its manifests and the folders
above the mark: the same requests at both ages, and the figures of a whole listing.
"""

from __future__ import annotations

import time
import urllib.parse
from collections import Counter
from datetime import timedelta
from pathlib import Path

import lance

import memwal
from bench.harness.requests import RequestCounter, bucket_of, lists_mem_wal, request_kind, table_files, upload
from memwal.core import clock as clocks
from memwal.demo import write_generations
from memwal.fleet import probe as probe_module
from memwal.fleet.cache import ProbeCache
from memwal.fleet.facts import TableFacts
from memwal.fleet.probe import probe
from memwal.inspect.status import lag_now, table_status
from memwal.store import object_listing, open_store
from memwal.table import listing as listing_module
from memwal.table import open_table
from memwal.table.retained import retained_versions
from tests.clients.jobs import ZERO
from tests.conftest import SMALL
from tests.integration.test_status_work import _keep_merged_folders, _merged_and_drained, _shape
from tests.interleave import ManualClock

#: Merged folders kept at the two ages: both past the listing's pages (a folder is some ten keys).
AGES = (240, 480)


def _at_age(s3_server, source: Path, shard_id: str, kept: int, kind: str = "s3") -> tuple[str, dict[str, str]]:
    """The table at ``source`` keeping ``kept`` merged folders, in a fresh bucket or container."""
    _keep_merged_folders(str(source), shard_id, kept)
    uri, opts = s3_server.new_table("t")
    upload(kind, s3_server, bucket_of(kind, s3_server), "t", table_files(source))
    return uri, opts


def _listed(requests: list[tuple[str, str]]) -> Counter[str]:
    """The prefixes the listing requests among ``requests`` named, each with how many named it."""
    return Counter(dict(urllib.parse.parse_qsl(p.split("?", 1)[1])).get("prefix", "") for m, p in requests
                   if request_kind(m, p) == "list")


def _reads(uri: str, opts: dict[str, str], server, kind: str = "s3"
           ) -> tuple[dict[str, Counter[str]], dict[str, int], dict]:
    """The lag, a listing pass's dry run and a status: each one's requests by method, its listings
    of the whole ``_mem_wal/`` (pages), and what each said; the listing pass's listings by prefix
    among the costs."""
    counter = RequestCounter(kind, server, bucket_of(kind, server))
    followed = open_table(uri, opts)
    costs, pages, said = {}, {}, {}
    for what, run in (("lag", lambda: lag_now(followed)),
                      ("listing pass", lambda: memwal.open(uri, storage_options=opts).gc(
                          listed_only=True, dry_run=True).value.to_dict()),
                      ("status", lambda: _shape(table_status(open_table(uri, opts))))):
        counter.take()
        said[what] = run()
        requests = counter.take_requests()
        costs[what] = Counter(m for m, _ in requests)
        pages[what] = sum(1 for m, p in requests if lists_mem_wal(m, p, "t"))
        if what == "listing pass":
            costs["listing pass, by prefix"] = _listed(requests)
    return costs, pages, said


def _at_two_ages(make_table, server, monkeypatch, ages: tuple[int, int], kind: str
                 ) -> tuple[dict[int, dict], dict[int, dict], dict[int, dict]]:
    """:func:`_reads` by name (two pages) and whole, at each age: the costs and pages by name, the
    pages whole; each read by name says what the whole listing says."""
    table, shard_id = _merged_and_drained(make_table)
    source = Path(table.uri)
    costs, pages, whole_pages = {}, {}, {}
    for kept in ages:
        uri, opts = _at_age(server, source, shard_id, kept, kind)
        # the rule on tables a tenth the size: two pages, not eight (nothing remembered between reads)
        monkeypatch.setattr(listing_module, "WHOLE_PAGES", 2)
        monkeypatch.setattr(listing_module, "_long", {})
        now = time.time()
        with clocks.use(ManualClock(now)):  # the same time for both reads: the lag's ages
            costs[kept], pages[kept], by_name = _reads(uri, opts, server, kind)
        assert listing_module._long, "found long: read by name"
        monkeypatch.setattr(listing_module, "WHOLE_PAGES", 10_000)  # the whole listing, as before
        monkeypatch.setattr(listing_module, "_long", {})
        with clocks.use(ManualClock(now)):
            _, whole_pages[kept], whole = _reads(uri, opts, server, kind)
        for what in by_name:
            assert by_name[what] == whole[what], (what, by_name[what], whole[what])
    return costs, pages, whole_pages


def test_lag_listing_pass_and_status_cost_the_same_at_two_ages_on_s3(make_table, s3_server, monkeypatch) -> None:
    costs, pages, whole_pages = _at_two_ages(make_table, s3_server, monkeypatch, AGES, "s3")
    young, old = AGES
    assert costs[old] == costs[young], costs
    # the two pages tried by the first read only (then read by name for LONG_SECONDS), where the
    # whole listing paged through every folder kept, more at the older age
    assert pages[old] == pages[young] == {"lag": 2, "listing pass": 0, "status": 0}, pages
    # the listing pass reads the manifests from its own walk of their versions: nothing under
    # _mem_wal/ listed twice (each shard's manifest versions were, and the shards' names)
    listed = {p: n for p, n in costs[old]["listing pass, by prefix"].items() if p.startswith("t/_mem_wal/")}
    assert any(p.endswith("/manifest/") for p in listed) and max(listed.values()) == 1, listed
    assert all(whole_pages[old][what] > whole_pages[young][what] > 2 for what in whole_pages[old]), whole_pages


def test_lag_listing_pass_and_status_read_by_name_on_azure(make_table, monkeypatch) -> None:
    """The same on Azurite, its pages made 100 keys (a page there is 5,000: a long ``_mem_wal/``
    is a minute of uploads), on tables keeping 30 and 60 merged folders: the same answers as the
    whole listing, and the same requests at both ages."""
    from tests.azureserver import start_azure_server

    monkeypatch.setitem(object_listing.LIST_CHUNK, "az", 100)
    server = start_azure_server()
    try:
        costs, _, _ = _at_two_ages(make_table, server, monkeypatch, (30, 60), "azure")
    finally:
        server.stop()
    assert costs[60] == costs[30], costs


def _wal_written_later(s3_server, shard_id: str) -> None:
    """One of the shard's WAL entries written after every manifest (a writer at work between two
    flushes), by its time on the server: what only a whole listing sees."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    bucket = s3_server.last_bucket
    wal = next(k for k in backend.get_bucket(bucket).keys if k.startswith(f"t/_mem_wal/{shard_id}/wal/"))
    backend.get_object(bucket, wal).last_modified += timedelta(minutes=5)


def _figures(facts: TableFacts) -> list[tuple]:
    """What a plan weighs of each shard (not when it was last written: a probe by name lists no WAL)."""
    return [(s.shard_id, s.merged, s.unmerged, s.unmerged_rows, s.collectable, s.collectable_bytes,
             s.collectable_since, s.index_behind, s.last_flush, s.listed, s.listed_merged) for s in facts.shards]


def _whole(uri: str, opts: dict[str, str], monkeypatch, now: float) -> TableFacts:
    """A cold probe that lists ``_mem_wal/`` whole, whatever its length (as before)."""
    monkeypatch.setattr(probe_module, "WHOLE_PAGES", 10**6)
    try:
        return probe(uri, open_store(uri, opts), ProbeCache(), now=now)
    finally:
        monkeypatch.setattr(probe_module, "WHOLE_PAGES", 2)


def test_a_fleet_probe_of_a_long_table_on_s3_reads_its_manifests_and_carries_the_rest(make_table, s3_server,
                                                                                        monkeypatch) -> None:
    """Past two pages (eight in production), a table is listed whole once an hour; the probes between
    list each shard's manifest versions (an idle table: no more) and walk the folders above the mark
    the newest names, the same requests at both ages, and carry GC's folders forward: the figures a
    whole listing gives, after a flush and after it is merged and caught up."""
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok and t.catchup().ok  # the folders GC may take: two generations
    assert t.gc(**{**ZERO, "expire_versions": "never"}, writer_idle_seconds=0).ok
    shard_id = sorted(table.manifest().compacted)[0]
    monkeypatch.setattr(probe_module, "WHOLE_PAGES", 2)
    now = time.time()
    requests = {}
    for kept in AGES:
        uri, opts = _at_age(s3_server, Path(table.uri), shard_id, kept)
        _wal_written_later(s3_server, shard_id)
        store, cache = open_store(uri, opts), ProbeCache()
        first = probe(uri, store, cache, now=now)
        assert first.listed_at == now
        assert _figures(first) == _figures(_whole(uri, opts, monkeypatch, now))
        carried = probe(uri, store, cache, now=now + 60)
        assert _figures(carried) == _figures(first) and carried.listed_at == now
        # the WAL's time the whole listing saw is carried too
        assert [s.last_write for s in carried.shards] == [s.last_write for s in first.shards]
        assert max(s.last_write for s in first.shards) > max(s.last_flush for s in first.shards) + 200
        idle = probe(uri, store, cache, now=now + 120)
        assert idle.fingerprint == carried.fingerprint
        requests[kept] = (carried.requests, idle.requests)
    young, old = AGES
    assert requests[old] == requests[young], requests
    assert requests[old][1] == 1 + 1 + 3, requests  # _versions/, the shards' names, each shard's manifest/
    write_generations(uri, SMALL, model, storage_options=opts, generations=1, seed_offset=9)
    flushed = probe(uri, store, cache, now=now + 180)
    whole = _whole(uri, opts, monkeypatch, now + 180)
    assert [f[:4] + f[9:] for f in _figures(flushed)] == [f[:4] + f[9:] for f in _figures(whole)]  # the debt
    followed = memwal.open(uri, storage_options=opts)
    assert followed.merge().ok and followed.catchup().ok
    caught = probe(uri, store, cache, now=now + 240)
    assert caught.listed_at == now
    assert _figures(caught) == _figures(_whole(uri, opts, monkeypatch, now + 240))
    counter = RequestCounter("s3", s3_server, s3_server.last_bucket)
    counter.take()
    later = probe(uri, store, cache, now=now + 60 + probe_module.WHOLE_EVERY_SECONDS)
    pages = sum(1 for m, p in counter.take_requests() if lists_mem_wal(m, p, "t"))
    assert later.listed_at == now + 60 + probe_module.WHOLE_EVERY_SECONDS and pages > 2  # an hour on: whole


def _aged_by_versions(source: Path, versions: int) -> None:
    """``source`` grown to ``versions`` table versions by commits of its config alone (no row moves)."""
    committed = len(list((source / "_versions").glob("*.manifest")))
    for i in range(committed, versions):
        lance.dataset(str(source)).update_config({"aged": str(i)})


def test_a_listing_pass_and_a_snapshot_cost_the_same_at_two_ages_of_versions_on_s3(make_table, s3_server,
                                                                                     monkeypatch) -> None:
    """A followed table commits a version a merge and the retention keeps a week of them (50,000 a
    day beside a busy writer). On a disk a listing pass grows the versions its table object knew
    (``tests/integration/test_listing_pass_ages.py``); an object store listed them all, a request a
    thousand, twice a pass, and each snapshot refresh listed them once more. Past one page here
    (eight in production) the pass grows them and the refresh lists none: on a table object kept as a
    follower keeps it, a flush, its merge, a listing pass and a refresh cost the same requests at
    1,100 and 2,200 versions, and what the object grew is what a new one reads."""
    monkeypatch.setattr(listing_module, "WHOLE_PAGES", 1)
    table, model = make_table()
    assert memwal.open(table.uri).merge(max_generations=2).ok
    source = Path(table.uri)
    costs = {}
    for age in (1_100, 2_200):
        _aged_by_versions(source, age)
        uri, opts = s3_server.new_table("t")
        upload("s3", s3_server, bucket_of("s3", s3_server), "t", table_files(source))
        counter = RequestCounter("s3", s3_server, bucket_of("s3", s3_server))
        followed = memwal.open(uri, storage_options=opts)
        for n in range(2):  # the first pass of a table object lists the versions: it knew none
            write_generations(uri, SMALL, model, storage_options=opts, generations=1, seed_offset=40 + n)
            assert followed.merge().ok
            counter.take()
            assert followed.gc(listed_only=True).ok
            listing_pass = counter.take_requests()
            assert followed.snapshot().ok
            refresh = counter.take_requests()
        costs[age] = {what: Counter(request_kind(m, p) for m, p in reqs)
                      for what, reqs in (("listing pass", listing_pass), ("snapshot", refresh))}
        fresh = open_table(uri, opts)
        with fresh.reading():
            truth = [(v.version, v.timestamp, dict(v.compacted)) for v in retained_versions(fresh)]
        with followed.table.reading(grown=True):
            grown = [(v.version, v.timestamp, dict(v.compacted)) for v in retained_versions(followed.table)]
        assert grown == truth and len(truth) > age
    assert costs[2_200] == costs[1_100], costs
