"""On an object store, a follower's lag and listing pass and a ``status`` cost the same requests
whatever the merged folders a table keeps (issue 82).

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
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import memwal
from bench.harness.requests import RequestCounter, lists_mem_wal, table_files, upload
from memwal.core import clock as clocks
from memwal.inspect.status import lag_now, table_status
from memwal.table import listing as listing_module
from memwal.table import open_table
from tests.integration.test_status_work import _keep_merged_folders, _merged_and_drained, _shape
from tests.interleave import ManualClock

#: Merged folders kept at the two ages: both past the listing's pages (a folder is some ten keys).
AGES = (240, 480)


def _at_age(s3_server, source: Path, shard_id: str, kept: int) -> tuple[str, dict[str, str]]:
    """The table at ``source`` keeping ``kept`` merged folders, in a fresh bucket."""
    _keep_merged_folders(str(source), shard_id, kept)
    uri, opts = s3_server.new_table("t")
    upload("s3", s3_server, s3_server.last_bucket, "t", table_files(source))
    return uri, opts


def _reads(uri: str, opts: dict[str, str], s3_server) -> tuple[dict[str, Counter[str]], dict[str, int], dict]:
    """The lag, a listing pass's dry run and a status: each one's requests by method, its listings
    of the whole ``_mem_wal/`` (pages), and what each said."""
    counter = RequestCounter("s3", s3_server, s3_server.last_bucket)
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
    return costs, pages, said


def test_lag_listing_pass_and_status_cost_the_same_at_two_ages_on_s3(make_table, s3_server, monkeypatch) -> None:
    table, shard_id = _merged_and_drained(make_table)
    source = Path(table.uri)
    costs, pages, whole_pages = {}, {}, {}
    for kept in AGES:
        uri, opts = _at_age(s3_server, source, shard_id, kept)
        # the rule on tables a tenth the size: two pages, not eight (nothing remembered between reads)
        monkeypatch.setattr(listing_module, "WHOLE_PAGES", 2)
        monkeypatch.setattr(listing_module, "_long", {})
        now = time.time()
        with clocks.use(ManualClock(now)):  # the same time for both reads: the lag's ages
            costs[kept], pages[kept], by_name = _reads(uri, opts, s3_server)
        monkeypatch.setattr(listing_module, "WHOLE_PAGES", 10_000)  # the whole listing, as before
        monkeypatch.setattr(listing_module, "_long", {})
        with clocks.use(ManualClock(now)):
            _, whole_pages[kept], whole = _reads(uri, opts, s3_server)
        for what in by_name:
            assert by_name[what] == whole[what], (what, by_name[what], whole[what])
    young, old = AGES
    assert costs[old] == costs[young], costs
    # the two pages tried by the first read only (then read by name for LONG_SECONDS), where the
    # whole listing paged through every folder kept, more at the older age
    assert pages[old] == pages[young] == {"lag": 2, "listing pass": 0, "status": 0}, pages
    assert all(whole_pages[old][what] > whole_pages[young][what] > 2 for what in whole_pages[old]), whole_pages
