"""A fleet keeps each table's object from one round to the next, as a table follower keeps its own,
and never judges a table created again under the same URI by the old one's memory (issue 82).

A table object knows the versions it listed (grown by a stat each since), the main line's retained
versions and the last manifests. A fleet opened every table anew for each round, so each round's
listing pass built a week of retained versions again: at 72 flushes, 70 versions built where a
table follower builds one or two. :class:`memwal.table.kept.KeptTables` lends a round the object
the last round left, when the newest version it listed is still the same object on storage.

Work is counted, never timed: a fleet follower opens its table once over its rounds; a fleet
round's cycle (:func:`memwal.cycle.run_cycle_at`, the call each fleet worker makes) builds and reads
the same few versions at 12 and at 72 flushes, and builds every version at 72 without the kept
objects; a table removed and created again (its versions restart and reach the same number), or
whose newest manifest was put again, is opened afresh and read as what is there now.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import Counter
from pathlib import Path

import lance

from memwal.actions.options import LISTING_PASS, GcOptions
from memwal.cycle import JobStatus, run_cycle_at
from memwal.demo import Workload
from memwal.table import handle
from memwal.table.kept import KeptTables
from tests.clients.pylance_client import LiveWriter, client_view
from tests.conftest import SMALL, table_rows
from tests.integration.test_clients_pylance import Writes
from tests.integration.test_fleet_gc_spacing import fleet_rounds

#: A fleet round's jobs on a table that merged: the merge, then GC's listing pass.
ROUND = {"gc": GcOptions().but(**LISTING_PASS)}


def a_round(uri: str, tables: KeptTables | None) -> None:
    """A fleet round's cycle on ``uri`` (GC waits for its retention: nothing merged is free yet)."""
    merge, gc = run_cycle_at(uri, {}, ["merge", "gc"], ROUND, tables=tables).jobs
    assert merge.status is JobStatus.DONE and gc.status in (JobStatus.DONE, JobStatus.WAITING), (merge, gc)


def test_a_fleet_follower_opens_each_table_once_over_its_rounds(tmp_path: Path, monkeypatch) -> None:
    opened: Counter[str] = Counter()
    real = handle.open_table

    def counted(uri: str, storage_options: dict[str, str] | None = None) -> handle.Table:
        if threading.current_thread().name.startswith("memwal-fleet"):  # a round's worker, not the test's read
            opened[uri] += 1
        return real(uri, storage_options)

    monkeypatch.setattr(handle, "open_table", counted)
    uri, _ = fleet_rounds(tmp_path, [0.0] * 5, every={"catchup": 60.0, "gc": 60.0})  # checks the rows, too
    assert opened == {uri: 1}


def test_a_fleet_rounds_cycle_reads_what_was_committed_since_at_two_ages(live: LiveWriter, work) -> None:
    keys = Writes()
    kept = KeptTables()

    def cycle(tables: KeptTables | None) -> None:
        live.generation(keys.keys(live))
        a_round(live.uri, tables)

    per_cycle: dict[int, list[Counter[str]]] = {}
    for age in (12, 72):
        while live.n < age:
            cycle(kept)
        work()
        per_cycle[age] = []
        for _ in range(3):
            cycle(kept)
            per_cycle[age].append(work())
    young, old = per_cycle[12], per_cycle[72]
    assert old == young, (young, old)
    for c in old:
        assert c["names listed"] == 0
        assert 1 <= c["versions built"] <= 2
        assert c["manifests read"] <= 4
    cycle(None)  # each round opening the table anew, as before: every retained version built again
    assert work()["versions built"] > 72
    assert client_view(live.uri) == live.model.sorted_rows() == live.view()


def test_a_table_created_again_under_the_same_uri_is_opened_afresh(make_table, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    kept = KeptTables()
    _, first = make_table(uri=uri)
    a_round(uri, kept)
    table = kept.lend(uri, {})
    assert table.cursor.top is not None and table_rows(table) == first.sorted_rows()
    kept.give_back(uri, {}, table)
    assert kept.lend(uri, {}) is table  # the same table: the same object, as a follower keeps it
    kept.give_back(uri, {}, table)
    top = table.cursor.top

    # removed and created again with other rows: its versions restart and reach the same number
    shutil.rmtree(uri)
    _, again = make_table(Workload(base_rows=200, shards=2, generations=3, rows_per_generation=30, seed=9), uri=uri)
    a_round(uri, None)
    assert lance.dataset(uri).version >= top
    lent = kept.lend(uri, {})
    assert lent is not table
    assert table_rows(lent) == again.sorted_rows() != first.sorted_rows()
    assert lent.manifest() == handle.open_table(uri).manifest()
    kept.give_back(uri, {}, lent)
    a_round(uri, kept)  # its listing pass lists the versions: what the next lend checks
    listed = kept.lend(uri, {})
    assert listed.cursor.top is not None
    kept.give_back(uri, {}, listed)

    # the newest manifest put again (the same bytes, another object): not the one listed, afresh too
    newest = os.path.join(uri, listed.cursor.infos[listed.cursor.top].key)
    data = Path(newest).read_bytes()
    os.remove(newest)
    Path(newest).write_bytes(data)
    assert kept.lend(uri, {}) is not listed


def test_kept_tables_are_bounded_by_count_and_by_the_versions_they_know(make_table) -> None:
    uris = [make_table(SMALL, name=f"b{i}")[0].uri for i in range(3)]
    kept = KeptTables(tables=2)
    lent = [kept.lend(u, {}) for u in uris]
    for u, t in zip(uris, lent, strict=True):
        with t.reading():
            t.version_infos()  # listed: what the object knows
        kept.give_back(u, {}, t)
    assert kept.lend(uris[0], {}) is not lent[0]  # the least recently used went
    assert kept.lend(uris[2], {}) is lent[2]
    few = KeptTables(versions=len(lent[1].cursor.infos) - 1)
    few.give_back(uris[1], {}, lent[1])
    assert few.lend(uris[1], {}) is not lent[1]  # knows more versions than kept ones may
