"""A fleet's whole GC is spaced by its cost (issue 82), as a table follower's is.

A fleet's GC follows every merge (it rolls up what readers list). Run whole, it names every folder
the version retention keeps, a week of them on the defaults, after every merge: its cost grew with
the table's age. Within a run (a follower's rounds), a table's next whole GC starts no sooner than
``GC_SHARE`` of the time since the last; GC's listing pass stands in for it meanwhile. Nothing is
timed: the test reads which GC ran in which round from the run history.
"""

from __future__ import annotations

import time
import uuid

import lance
import pyarrow as pa

import memwal
from memwal.core import clock as clocks
from memwal.fleet.policy import policy_from
from memwal.fleet.run import run_fleet
from memwal.history.log import read_runs
from memwal.table import open_table
from tests.helpers import wait_flushed
from tests.interleave import ScriptedClock

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
SHARD = str(uuid.UUID(int=5))
#: The defaults' retention (a week) with GC after every merge, as a fleet follower runs it.
POLICY = {"defaults": {"thresholds": {"merge_generations": 1}}}


def test_a_fleets_whole_gc_is_spaced_by_what_the_last_took_and_the_listing_pass_stands_in(tmp_path):
    uri = str(tmp_path / "lake" / "t.lance")
    lance.write_dataset(pa.Table.from_pylist([], schema=SCHEMA), uri).initialize_mem_wal(unsharded=True)
    writer = lance.dataset(uri).mem_wal_writer(SHARD, max_memtable_rows=3, durable_write=False)
    model: dict[int, int] = {}
    flushes = [0]

    def flush() -> None:
        g = flushes[0] = flushes[0] + 1
        rows = {"id": [g * 2, g * 2 + 1, 1], "v": [g, g, g]}
        writer.put(pa.table(rows, schema=SCHEMA))
        model.update(zip(rows["id"], rows["v"], strict=True))
        wait_flushed(writer, g, deadline_seconds=60)

    offset = [0.0]
    rounds = [0]

    def between(progressed: bool) -> bool:
        rounds[0] += 1
        if rounds[0] == 2:
            offset[0] = 10_000.0  # past any spacing a whole GC of this table earns
        flush()
        return rounds[0] < 3

    flush()
    with clocks.use(ScriptedClock(lambda: time.time() + offset[0])):
        run_fleet([str(tmp_path / "lake")], policy=policy_from(POLICY), workers=1, between=between)
    gcs = list(reversed(list(read_runs(open_table(uri).store, job="gc"))))
    merges = [r for r in read_runs(open_table(uri).store, job="merge") if r.outcome == "ok"]
    assert len(merges) >= 3  # a merge in each round: GC followed each
    whole = [bool(r.figures.get("listed_only")) is False for r in gcs]
    # the first round's GC whole; the next round's, within its spacing, the listing pass; past it whole again
    assert whole[:3] == [True, False, True], whole
    assert gcs[1].figures["rolled_up"] == 1  # the listing pass rolled up what merged since the whole run
    writer.close()
    assert sorted(memwal.open(uri).scan().to_pylist(), key=lambda r: r["id"]) == \
        [{"id": k, "v": v} for k, v in sorted(model.items())]
