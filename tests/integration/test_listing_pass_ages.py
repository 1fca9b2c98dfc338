"""A follower's listing pass follows what was committed since its last pass, not the table's age (issue 82).

A followed table commits a version per merge, and the default 7-day retention keeps them all: a
pass that listed ``_versions/`` and built every retained version again grew with the table's age
(35 ms of a 150 ms pass at 3,000 versions, 1 s at 50,000). A table object now knows the versions it
listed, grows them by a stat of each next name (:mod:`memwal.table.versions_cursor`), and grows the
main line's retained versions by those (:class:`memwal.table.retained.MainLine`).

Work is counted, never timed: on one table object beside a live pylance writer, a flush, its merge
and a listing pass list no version name and build and read the same few versions at 12 and at 72
flushes; what it knows equals what a new table object reads; a version removed or forged below the
newest is seen by the next full listing, which builds the main line again. A compaction (a
follower's tail pass, every few merges) reads back the versions since the one it planned on by the
same stats, listing no version name at either age.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta

import lance

import memwal
from memwal.table import open_table
from memwal.table import retained as retained_module
from memwal.table.naming import table_manifest_key
from memwal.table.retained import retained_versions
from tests.clients.pylance_client import LiveWriter, client_view
from tests.integration.test_clients_pylance import Writes


def facts(versions: list[retained_module.RetainedVersion]) -> list[tuple[int, float, dict[str, int]]]:
    return [(v.version, v.timestamp, dict(v.compacted)) for v in versions]


def test_a_listing_pass_reads_what_was_committed_since_at_two_ages(live: LiveWriter, work) -> None:
    keys = Writes()
    t = memwal.open(live.uri)

    def cycle() -> None:
        live.generation(keys.keys(live))
        assert t.merge().ok
        assert t.gc(listed_only=True).ok

    per_cycle: dict[int, list[Counter[str]]] = {}
    for age in (12, 72):
        while live.n < age:
            cycle()
        work()
        per_cycle[age] = []
        for _ in range(3):
            cycle()
            per_cycle[age].append(work())
    versions = len(lance.dataset(live.uri).versions())
    assert versions > 72
    young, old = per_cycle[12], per_cycle[72]
    assert old == young, (young, old)
    for c in old:
        assert c["names listed"] == 0  # no listing of _versions/: the next names stat-ed
        assert 1 <= c["versions built"] <= 2  # the merge's commit (and a rollup's none): not 70 more
        assert c["manifests read"] <= 4
        assert c["progress versions read"] <= 4  # GC's gates grow their arrays by the new versions only
    # what the table object grew is what a new one reads from the manifests
    fresh = open_table(live.uri)
    with fresh.reading():
        truth = facts(retained_versions(fresh))
    with t.table.reading(grown=True):
        assert facts(retained_versions(t.table)) == truth
    assert client_view(live.uri) == live.model.sorted_rows() == live.view()


def test_a_version_removed_or_forged_below_the_newest_is_seen_by_the_next_full_listing(live: LiveWriter) -> None:
    keys = Writes()
    t = memwal.open(live.uri)
    for _ in range(4):
        live.generation(keys.keys(live))
        assert t.merge().ok
    table = t.table
    with table.reading():
        before = facts(retained_versions(table))
    epoch = table.cursor.epoch
    ds = lance.dataset(live.uri)
    ds.cleanup_old_versions(older_than=timedelta(seconds=0))
    left = {v["version"] for v in lance.dataset(live.uri).versions()}
    assert len(left) < len(before)
    # a grown stretch does not see the removal: it keeps more, never less
    with table.reading(grown=True):
        assert facts(retained_versions(table)) == before
    # a full listing does: the main line is built again from what is there
    with table.reading():
        assert [v[0] for v in facts(retained_versions(table))] == sorted(left)
    assert table.cursor.epoch == epoch + 1
    # a name put below the newest (a forged or stray copy) is not grown over: the full listing
    # counts it as a change, and the main line is built again with it
    newest = max(left)
    src = os.path.join(live.uri, table.cursor.infos[newest].key)
    below = min(set(range(1, newest)) - left)
    with open(src, "rb") as f, open(os.path.join(live.uri, table_manifest_key(below, v2_naming=True)), "wb") as g:
        g.write(f.read())
    with table.reading(grown=True):
        assert below not in {v.version for v in retained_versions(table)}
    with table.reading():
        assert below in {v.version for v in retained_versions(table)}
    assert table.cursor.epoch == epoch + 2


def test_a_compaction_checks_the_versions_since_without_listing_them(live: LiveWriter, work) -> None:
    """Compaction reads back merge progress in every version from the one it planned on (never
    down): those few are stat-ed on top of it, not found in a listing of every version, which grew
    with the retention at each of a follower's tail passes."""
    keys = Writes()
    t = memwal.open(live.uri)
    listed = {}
    for age in (12, 72):
        while live.n < age:
            live.generation(keys.keys(live))
            assert t.merge().ok
        before = lance.dataset(live.uri).version
        work()
        assert t.compact().ok
        assert lance.dataset(live.uri).version > before  # it compacted: the check ran
        listed[age] = work()["names listed"]
    assert listed == {12: 0, 72: 0}
    assert client_view(live.uri) == live.model.sorted_rows() == live.view()
