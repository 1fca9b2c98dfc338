"""A fleet's whole GC is spaced by its cost (issue 82), as a table follower's is; a fleet follower's
whole GC and catch-up by its cadences too, its whole GC backed off while it frees nothing.

A fleet's GC follows every merge (it rolls up what readers list). Run whole, it names every folder
the version retention keeps, a week of them on the defaults, after every merge: its cost grew with
the table's age. Within a run (a follower's rounds), a table's next whole GC starts no sooner than
``GC_SHARE`` of the time since the last; GC's listing pass stands in for it meanwhile. A follower
(``fleet run --follow``) also spaces a table's whole GC by its ``gc_every`` and its catch-up by its
``catchup_every``, as a table follower does: planned by the thresholds alone, both ran after every
merge. Nothing is timed: the test reads which job ran in which round from the run history.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import lance
import pyarrow as pa

import memwal
from memwal.core import clock as clocks
from memwal.fleet.policy import policy_from
from memwal.fleet.run import run_fleet
from memwal.history.log import read_runs
from memwal.history.record import RunRecord
from memwal.table import open_table
from tests.helpers import wait_flushed
from tests.interleave import ScriptedClock

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
SHARD = str(uuid.UUID(int=5))
#: The defaults' retention (a week) with GC after every merge, as a fleet follower runs it.
POLICY = {"defaults": {"thresholds": {"merge_generations": 1}}}


def fleet_rounds(tmp_path: Path, offsets: list[float], *, index: bool = False,
                 every: Mapping[str, float] | None = None) -> tuple[str, dict[int, int]]:
    """A table with a pylance writer, and a fleet run over it that flushes once more each time it
    would end (a follower's wait), the clock moved on by ``offsets[i]`` at the i-th wait, until the
    offsets run out; the table and the rows written (key -> value)."""
    uri = str(tmp_path / "lake" / "t.lance")
    ds = lance.write_dataset(pa.Table.from_pylist([{"id": 0, "v": 0}], schema=SCHEMA), uri)
    if index:
        ds.create_scalar_index("id", "BTREE")
    lance.dataset(uri).initialize_mem_wal(unsharded=True)
    writer = lance.dataset(uri).mem_wal_writer(SHARD, max_memtable_rows=3, durable_write=False)
    model: dict[int, int] = {0: 0}
    flushes = [0]

    def flush() -> None:
        g = flushes[0] = flushes[0] + 1
        rows = {"id": [g * 2, g * 2 + 1, 1], "v": [g, g, g]}
        writer.put(pa.table(rows, schema=SCHEMA))
        model.update(zip(rows["id"], rows["v"], strict=True))
        wait_flushed(writer, g, deadline_seconds=60)

    offset = [0.0]
    waits = [0]

    def between(progressed: bool) -> bool:
        waits[0] += 1
        if waits[0] > len(offsets):
            return False
        offset[0] = offsets[waits[0] - 1]
        flush()
        return True

    flush()
    with clocks.use(ScriptedClock(lambda: time.time() + offset[0])):
        run_fleet([str(tmp_path / "lake")], policy=policy_from(POLICY), workers=1, between=between, every=every)
    writer.close()
    assert sorted(memwal.open(uri).scan().to_pylist(), key=lambda r: r["id"]) == \
        [{"id": k, "v": v} for k, v in sorted(model.items())]
    return uri, model


def runs(uri: str, job: str) -> list[RunRecord]:
    """The table's runs of ``job`` that ended well, oldest first."""
    return [r for r in reversed(list(read_runs(open_table(uri).store, job=job))) if r.outcome != "failed"]


def test_a_fleets_whole_gc_is_spaced_by_what_the_last_took_and_the_listing_pass_stands_in(tmp_path: Path) -> None:
    uri, _ = fleet_rounds(tmp_path, [0.0, 10_000.0])  # the second wait past any spacing a whole GC earns
    gcs = runs(uri, "gc")
    assert len([r for r in runs(uri, "merge") if r.outcome == "ok"]) >= 3  # a merge after each flush: GC followed each
    whole = [bool(r.figures.get("listed_only")) is False for r in gcs]
    # the first round's GC whole; the next round's, within its spacing, the listing pass; past it whole again
    assert whole[:3] == [True, False, True], whole
    assert gcs[1].figures["rolled_up"] == 1  # the listing pass rolled up what merged since the whole run


def test_a_fleet_follower_spaces_a_tables_whole_gc_and_catchup_by_its_cadences(tmp_path: Path) -> None:
    # 40 s on: past what the first whole GC's cost spaces (50 times its seconds) but not its minute
    uri, _ = fleet_rounds(tmp_path, [40.0, 10_000.0], index=True, every={"catchup": 60.0, "gc": 60.0})
    merges = [r for r in runs(uri, "merge") if r.outcome == "ok"]
    assert len(merges) == 3  # one after each flush
    started = [m.started_at for m in merges]
    gcs, catchups = runs(uri, "gc"), runs(uri, "catchup")
    # after each merge: whole GC and catch-up; within the minute the listing pass, no catch-up; past it both again
    assert [(bool(r.figures.get("listed_only")), sum(r.started_at >= s for s in started)) for r in gcs] == \
        [(False, 1), (True, 2), (False, 3)]
    assert [sum(r.started_at >= s for s in started) for r in catchups] == [1, 3]


def test_a_fleet_followers_whole_gc_backs_off_while_it_frees_nothing(tmp_path: Path) -> None:
    """Beside a writer that never stops a whole GC frees nothing (what merged stays listed, rolled
    up, for the writer's view); a table follower doubles its cadence after each such run, up to
    ``gc_max_every``, and so does a fleet follower: 70 s after the first whole GC (past its minute, not
    its doubled two) the listing pass stands in, at 140 s the whole GC runs again; without the bound
    (a run's rounds) the whole GC runs at 70 s."""
    every = {"catchup": 60.0, "gc": 60.0, "gc_max": 600.0}
    backed = fleet_rounds(tmp_path / "backed", [70.0, 140.0], every=every)[0]
    plain = fleet_rounds(tmp_path / "plain", [70.0, 140.0], every={"catchup": 60.0, "gc": 60.0})[0]
    for uri in (backed, plain):
        assert len([r for r in runs(uri, "merge") if r.outcome == "ok"]) == 3  # one after each flush
    whole = {uri: [not r.figures.get("listed_only") for r in runs(uri, "gc")] for uri in (backed, plain)}
    assert whole[backed] == [True, False, True], whole
    assert whole[plain] == [True, True, True], whole
    first = runs(backed, "gc")[0]
    assert first.figures["generations"] == first.figures["drained"] == 0  # it freed nothing: the writer is live
