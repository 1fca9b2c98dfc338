"""GC explains itself: kept WAL entries are not blocked generations, retained versions name
what holds them and the option that frees them, ``time_will_free`` tells a caller whether to
wait, and batched deletion still stops on a lost lease before its next batch."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import memwal
from memwal.core import clock as clocks
from memwal.cycle import waits_for_time
from memwal.demo import shard_ids_for, write_generations
from memwal.errors import LeaseLostError
from memwal.gc import render_gc, retention
from memwal.table.shards import generation_readable, list_generation_dirs, list_wal_entries, read_wal_entry_meta
from tests.conftest import SMALL, lsm_rows, table_rows
from tests.integration.test_gc import expire_all, gen_dirs, ready_table
from tests.interleave import ScriptedClock

GENERATIONS = SMALL.shards * SMALL.generations


def test_reopened_writer_fence_sentinels_are_kept_and_reported(make_table):
    """Each writer session after the first starts with a fence sentinel (no generation): GC
    collects every generation around it and keeps it, as ``fence-sentinel``."""
    table, model = make_table()
    write_generations(table.uri, SMALL, model, generations=1, seed_offset=99)  # a second session per shard
    sentinels = {(s, e.position) for s in shard_ids_for(SMALL) for e in list_wal_entries(table.store, s)
                 if read_wal_entry_meta(table.store, s, e.position).is_fence_sentinel}
    assert {s for s, _ in sentinels} == set(shard_ids_for(SMALL))
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    expire_all(table)

    result = t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()

    assert len(result["deleted"]) == SMALL.shards * (SMALL.generations + 1)
    assert result["blocked"] == []
    assert {(k["shard_id"], k["position"]) for k in result["kept_wal_entries"]} == sentinels
    assert all(k["reason"] == "fence-sentinel" and k["generation"] is None for k in result["kept_wal_entries"])
    left = {(s, e.position) for s in shard_ids_for(SMALL) for e in list_wal_entries(table.store, s)}
    assert left == sentinels  # every other WAL entry went with its generation
    assert "fence-sentinel" in render_gc(result)
    assert lsm_rows(table) == model.sorted_rows() == table_rows(table)


def test_untagged_versions_are_named_with_the_expiry_that_frees_them(make_table):
    table, _ = ready_table(make_table, expire=False)
    plan = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True).to_dict()
    retention = plan["retention"]
    assert retention is not None and plan["time_will_free"] is False
    rows = retention["blocking_versions"]
    assert rows and all(r["held_by"] is None and r["tag"] is None and r["branch"] is None for r in rows)
    assert max(r["generations_held"] for r in rows) == GENERATIONS  # the pre-merge versions hold all of them
    seconds = int(retention["hint"].split("Run gc with --expire-versions ")[1].split()[0])
    assert 0 <= seconds < min(r["age_seconds"] for r in rows) + 0.05  # it expires every one of them (ages rounded)
    # the value given is enough: expiring with exactly it frees every generation
    assert "still be held" not in retention["hint"]  # the expiry removes every holder
    assert f"frees {GENERATIONS} of the {GENERATIONS} generations" in retention["hint"]
    # two sentences: what holds the generations, then what would free them
    held, free = retention["hint"].split(". ", 1)
    assert held.startswith(f"Retained versions hold {GENERATIONS} merged generations, untagged version")
    assert free.startswith("Run gc with --expire-versions ") and free.endswith(".")
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=seconds).to_dict()
    assert len(result["deleted"]) == GENERATIONS and result["retention"] is None


def test_the_expiry_hint_counts_every_gate_and_proposes_no_value_that_frees_nothing(make_table):
    """Retained versions and an index not caught up both hold the drained folders: no expiry
    frees anything, so the hint must not propose a value (it used to say "frees 24 of the 24",
    then "frees 0 of the 24"), and names the gate that would still hold them, never one the
    expiry removes."""
    table, _ = ready_table(make_table, catchup=False, expire=False)
    t = memwal.open(table.uri)
    dry = t.gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True)
    hint = dry.to_dict()["retention"]["hint"]
    assert "--expire-versions 0" not in hint and "Run gc with --expire-versions" not in hint
    assert f"frees none of the {GENERATIONS} generations" in hint
    assert hint.startswith(f"Retained versions hold {GENERATIONS} merged generations") and ". Expiring those" in hint
    assert f"still be held by index-not-caught-up:id_idx ({GENERATIONS})" in hint and "retained-version (" not in hint
    text = render_gc(dry.to_dict())
    assert f"blocked: {GENERATIONS} x index-not-caught-up:" in text and " + retained-version:" in text
    before = gen_dirs(table)
    result = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()  # the most any expiry removes
    assert result["deleted"] == [] and gen_dirs(table) == before  # exactly what the hint said: nothing


def test_the_grace_period_holds_the_listing_and_no_retained_version_is_blamed(make_table):
    """Merged a moment ago, versions kept: the listing waits for the reader grace period (rolled
    up meanwhile), and nothing names retained versions, which hold only what has left it."""
    table, _ = ready_table(make_table, expire=False)
    t = memwal.open(table.uri)
    kept = t.gc(grace_seconds=600, dry_run=True).value.to_dict()  # the writers wrote a moment ago: live
    # both gates that hold the listing are named now, not the second only once the first has passed
    assert {tuple(r for r in b["reasons"] if r in ("grace-period", "writer-live")) for b in kept["blocked"]} == {
        ("grace-period", "writer-live")} and not kept["time_will_free"]
    assert f"{len(kept['blocked'])} merged generations kept for live writers' views" in render_gc(kept)
    result = t.gc(grace_seconds=600, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == [] and result["retention"] is None and result["time_will_free"]
    assert {b["reason"] for b in result["blocked"]} == {"grace-period"}
    assert len(result["rolled_up"]) == SMALL.shards


def _folder_bytes(table, shard_id: str, name: str) -> int:
    root = Path(table.uri) / "_mem_wal" / shard_id / name
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_the_hinted_expiry_frees_exactly_the_generations_it_names(make_table):
    """A tag on the first merge's version keeps it, old enough for the grace period: expiring
    the versions before it frees the generations that merge took, and only those (the tag
    still holds the later ones). The hint says how many; the dry run with its value lists
    them; the run with it removes exactly those folders from storage."""
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok
    first_merge = table.dataset().version
    table.dataset().tags.create("first-merge", first_merge)
    assert t.merge().ok and t.catchup().ok
    later = time.time() + 1000  # every version is older than the grace period
    shards = shard_ids_for(SMALL)
    with clocks.use(ScriptedClock(lambda: later)):
        dry = t.gc(grace_seconds=600, writer_idle_seconds=0, dry_run=True).to_dict()  # the writers are gone
        hint = dry["retention"]["hint"]
        seconds = int(hint.split("Run gc with --expire-versions ")[1].split()[0])
        assert seconds == 600  # a round value below the holders' age (some 1,000 s), not that age to the second
        freed = SMALL.shards * 2
        assert f"frees {freed} of the {GENERATIONS} generations" in hint
        assert f"still be held by retained-version ({GENERATIONS - freed})" in hint  # the tag, not the expiry
        assert "tagged first-merge: delete the tag" in hint
    with clocks.use(ScriptedClock(lambda: later + 700)):  # older still, not past the next step (1,800 s)
        assert t.gc(grace_seconds=600, writer_idle_seconds=0, dry_run=True).to_dict()["retention"]["hint"] == hint
    with clocks.use(ScriptedClock(lambda: later)):
        listed = t.gc(grace_seconds=600, writer_idle_seconds=0, expire_versions=seconds, dry_run=True).to_dict()
        # every merged generation leaves the shard manifests in this run (retained versions hold
        # folders, not the listing), their folders a grace period later, as the versions allow
        assert {(d["shard_id"], g) for d in listed["drained"] for g in d["generations"]} == {
            (s, g) for s in shards for g in range(1, SMALL.generations + 1)}
        names = {s: {g: n for n, g in list_generation_dirs(table.store, s).items()} for s in shards}
        size = sum(_folder_bytes(table, s, names[s][g]) for s in shards for g in (1, 2))
        assert size > 0
        drained = t.gc(grace_seconds=600, writer_idle_seconds=0, expire_versions=seconds).to_dict()
        assert drained["drained"] == listed["drained"] and drained["deleted"] == []
    later += 1000  # the drains are older than the grace period now
    with clocks.use(ScriptedClock(lambda: later)):
        result = t.gc(grace_seconds=600, writer_idle_seconds=0).to_dict()
    assert {(d["shard_id"], d["generation"]) for d in result["deleted"]} == {(s, g) for s in shards for g in (1, 2)}
    assert gen_dirs(table) == {s: {3, 4} for s in shards}
    assert all(not (Path(table.uri) / "_mem_wal" / s / names[s][g]).exists() for s in shards for g in (1, 2))
    assert sum(d["bytes"] for d in result["deleted"]) == size
    assert lsm_rows(table) == model.sorted_rows() == table_rows(table)


def test_collected_generations_are_never_reported_blocked(make_table):
    """A dry run after a GC run (with a longer grace period, as an operator's default would be)
    lists nothing blocked that is not on storage: the collected generations are gone, not held."""
    table, model = ready_table(make_table, merged=2)
    t = memwal.open(table.uri)
    assert len(t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()["deleted"]) == SMALL.shards * 2
    assert gen_dirs(table) == {s: {3, 4} for s in shard_ids_for(SMALL)}
    dry = t.gc(grace_seconds=600, dry_run=True).to_dict()
    on_storage = {(s, g) for s, gens in gen_dirs(table).items() for g in gens}
    assert {(b["shard_id"], b["generation"]) for b in dry["blocked"]} == on_storage
    assert {b["reason"] for b in dry["blocked"]} == {"not-merged"}
    assert dry["retention"] is None and dry["time_will_free"] is False
    assert t.merge().ok and t.catchup().ok
    expire_all(table)
    assert len(t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()["deleted"]) == SMALL.shards * 2
    again = t.gc(grace_seconds=600, dry_run=True).to_dict()
    assert again["blocked"] == [] and again["deleted"] == [] and "blocked" not in render_gc(again)
    assert lsm_rows(table) == model.sorted_rows()


def test_tag_and_branch_are_named_as_the_users_to_delete(make_table):
    table, _ = make_table()
    before_merge = table.dataset().version
    table.dataset().tags.create("audit-2026", before_merge)
    table.dataset().create_branch("experiment", before_merge)
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    expire_all(table)
    result = t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["deleted"] == []
    rows = {(r["version"], r["branch"]): r for r in result["retention"]["blocking_versions"]}
    tagged = rows[(before_merge, None)]
    assert tagged["tag"] == "audit-2026" and tagged["held_by"] == "tag" and tagged["starts_branch"] == "experiment"
    assert tagged["generations_held"] == GENERATIONS
    assert any(r["branch"] == "experiment" and r["held_by"] == "branch" for r in rows.values())
    hint = result["retention"]["hint"]
    assert "tagged audit-2026: delete the tag" in hint and "branch experiment" in hint
    assert "--expire-versions" not in hint  # expiry cannot remove a tag or a branch
    assert "retained versions:" in render_gc(result)


def test_a_report_names_a_bounded_few_of_the_blocking_versions_and_counts_every_one(make_table, monkeypatch):
    """A week of versions beside a busy writer is some 70,000 holders: the report names at most
    ``SHOWN_VERSIONS`` (the tagged first, then the youngest only their age keeps) and counts them
    all; the hint, the wait and what a cycle waits for are the same as when every one is named."""
    table, _ = make_table()
    ds = table.dataset()
    for i in range(12):  # versions before the merge: each holds every generation
        ds.update_config({"test.commit": str(i)})
    tagged = table.dataset().version - 6
    table.dataset().tags.create("audit", tagged)
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    later = time.time() + 1000

    def plan() -> dict:
        with clocks.use(ScriptedClock(lambda: later)):
            return t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=86400, dry_run=True).to_dict()

    whole = plan()
    monkeypatch.setattr(retention, "SHOWN_VERSIONS", 4)
    few = plan()
    every, named = whole["retention"], few["retention"]
    assert len(every["blocking_versions"]) == every["blocking_total"] == named["blocking_total"] > 12
    assert every["blocking_by_holder"] == named["blocking_by_holder"] == {"age": every["blocking_total"] - 1, "tag": 1}
    rows = {r["version"]: r for r in every["blocking_versions"]}
    # youngest first (a later version of the main line was committed later: ages are rounded)
    aged = sorted((r for r in rows.values() if r["held_by"] is None), key=lambda r: (r["age_seconds"], -r["version"]))
    assert [r["version"] for r in named["blocking_versions"]] == sorted([tagged] + [r["version"] for r in aged[:3]])
    assert all(r == rows[r["version"]] for r in named["blocking_versions"])  # each named row as it was
    assert named["youngest_by_age_seconds"] == every["youngest_by_age_seconds"] == aged[0]["age_seconds"]
    assert named["hint"] == every["hint"] and "tagged audit: delete the tag" in named["hint"]
    assert few["wait"] == whole["wait"] and few["blocked"] == whole["blocked"]
    assert waits_for_time("gc", {**few, "dry_run": False}) is waits_for_time("gc", {**whole, "dry_run": False})


def test_time_will_free_only_when_the_grace_period_alone_blocks(make_table):
    table, _ = ready_table(make_table)
    waiting = memwal.open(table.uri).gc(writer_idle_seconds=0).to_dict()  # default grace: merged a moment ago
    assert waiting["deleted"] == [] and waiting["time_will_free"] is True
    assert "wait only for the reader grace period" in render_gc(waiting)
    later = time.time() + 601
    with clocks.use(ScriptedClock(lambda: later)):
        # the rollups leave the manifests; the folders they replaced left them a grace period ago
        drained = memwal.open(table.uri).gc(writer_idle_seconds=0).to_dict()
        assert len(drained["deleted"]) == GENERATIONS and drained["time_will_free"] is True
    later += 601
    with clocks.use(ScriptedClock(lambda: later)):
        done = memwal.open(table.uri).gc(writer_idle_seconds=0).to_dict()
    assert len(done["deleted"]) == SMALL.shards and done["time_will_free"] is False

    unmerged, _ = make_table()  # not merged: waiting changes nothing
    assert memwal.open(unmerged.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()["time_will_free"] is False
    held, _ = ready_table(make_table, expire=False)  # grace passed but old versions hold: needs expiry
    result = memwal.open(held.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert result["time_will_free"] is False and result["retention"] is not None


def test_lost_lease_stops_before_the_next_batch_and_a_rerun_finishes(make_table, monkeypatch):
    import memwal.gc.delete

    table, model = ready_table(make_table)
    monkeypatch.setattr(memwal.gc.delete, "BATCH_OBJECTS", 20)  # a few generations per batch
    start = time.time()

    def stops_after_the_first_batch() -> float:
        """The run's clock: past every lease expiry as soon as a generation is gone."""
        collected = sum(len(d) for d in gen_dirs(table).values()) < GENERATIONS
        return start + 86_400 if collected else start

    with clocks.use(ScriptedClock(stops_after_the_first_batch)), pytest.raises(LeaseLostError):
        memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, lease_ttl=300)
    left = {s: list_generation_dirs(table.store, s) for s in shard_ids_for(SMALL)}
    remaining = sum(len(d) for d in left.values())
    assert 0 < remaining < GENERATIONS  # the first batch went, then the run stopped
    for s, dirs in left.items():  # nothing half-deleted: every remaining generation is whole
        assert all(generation_readable(table.store, f"_mem_wal/{s}/{name}") for name in dirs)
    assert sum(len(list_wal_entries(table.store, s)) for s in shard_ids_for(SMALL)) > 0  # WAL goes last
    assert lsm_rows(table) == model.sorted_rows()
    with clocks.use(ScriptedClock(lambda: start + 86_400)):  # the time the lost run's clock read
        result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert len(result["deleted"]) == remaining
    assert gen_dirs(table) == {s: set() for s in shard_ids_for(SMALL)}
    assert lsm_rows(table) == model.sorted_rows()


def test_a_travelling_gc_document_names_a_hundred_kept_and_counts_them_all(make_table):
    """Issue 82: a week's retention keeps thousands of generations, and every GC run's document
    named each of them into the cycle's outcome, a follower's memory, an XCom and the history's
    figures. What travels names at most SHOWN_BLOCKED (unsafe paths first) and counts them all;
    ``memwal gc --json`` still names every one."""
    from dataclasses import replace

    from memwal.cycle import JobStatus, run_cycle
    from memwal.cycle.outcome import waits_for_time
    from memwal.gc.gates import UNSAFE_PATH
    from memwal.gc.model import Blocked
    from memwal.gc.result import SHOWN_BLOCKED, problems_in
    from memwal.history.log import read_runs

    wl = replace(SMALL, shards=1, generations=SHOWN_BLOCKED + 12, rows_per_generation=2)
    table, _ = make_table(wl)
    t = memwal.open(table.uri)
    assert t.merge().ok
    full = t.gc(dry_run=True).to_dict()
    kept = len(full["blocked"])
    assert kept > SHOWN_BLOCKED  # the grace period keeps every generation just merged
    outcome = run_cycle(table, ["gc"], {}).jobs[0]
    doc = outcome.document
    assert outcome.status is JobStatus.WAITING and waits_for_time("gc", doc)
    assert len(doc["blocked"]) == SHOWN_BLOCKED and doc["blocked_total"] == kept
    assert sum(doc["blocked_by_reason"].values()) == kept and doc["blocked_gates"]["grace-period"] == kept
    assert outcome.summary.startswith(f"0 deleted, {kept} blocked")
    record = next(read_runs(table.store, job="gc"))
    assert record.figures["blocked"] == kept and sum(record.figures["blocked_by_reason"].values()) == kept
    # an unsafe path is named however many were kept before it: backfill's verdict reads it from the document
    result = t.gc(dry_run=True).value
    unsafe = Blocked(None, 0, UNSAFE_PATH, (UNSAFE_PATH, "_mem_wal/planted"))
    summary = replace(result, blocked=(*result.blocked, unsafe)).summary_dict()
    assert summary["blocked"][0]["reason"] == UNSAFE_PATH and len(summary["blocked"]) == SHOWN_BLOCKED
    assert problems_in(summary) == ["unsafe paths refused, nothing deleted through them: _mem_wal/planted"]
