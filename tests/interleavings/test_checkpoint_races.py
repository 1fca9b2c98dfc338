"""Reader checkpoints against GC runs, one side held at a named step: the handshake never lets
a run delete what a checkpoint pins, and a checkpoint whose view was collected pins a newer one."""

from __future__ import annotations

import memwal
from memwal.checkpoint import create_checkpoint, list_checkpoints
from memwal.table.shards import list_generation_dirs
from tests.interleave import Stalled


def merge_all(uri: str) -> None:
    assert memwal.open(uri).merge().ok and memwal.open(uri).catchup().ok


def test_checkpoint_whose_view_a_gc_run_collected_is_taken_again(make_table):
    """The checkpoint reads its view (generations unmerged), a merge and a GC with no grace
    collect them before its record exists: it sees the loss and pins a newer view."""
    table, model = make_table()
    held = Stalled(lambda: create_checkpoint(table, lifetime_seconds=600), "checkpoint.after-view")
    merge_all(table.uri)
    gc = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert gc["deleted"]
    held.resume()
    assert held.error is None, held.error
    ckpt = held.outcome
    assert ckpt.version == table.dataset().version and all(not s.generations for s in ckpt.shards.values())
    assert_view_intact(table, ckpt, model)
    assert len(list_checkpoints(table)) == 1 and len(table.dataset().tags.list()) == 1  # the first try is gone


def test_checkpoint_created_while_gc_deletes_waits_for_it_then_checks(make_table):
    """The run wrote its marker and read the checkpoints before this one's record existed:
    the checkpoint sees the run deleting, waits for it, finds its view collected, and pins a
    newer one."""
    table, model = make_table()
    ck = Stalled(lambda: create_checkpoint(table, lifetime_seconds=600), "checkpoint.after-view")
    merge_all(table.uri)
    gc = Stalled(lambda: memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0),
                 "gc.before-delete")
    ck.advance_to("checkpoint.waiting-for-gc")  # its record is written; the run is deleting
    gc.resume()
    assert gc.error is None and gc.outcome.to_dict()["deleted"], gc.error
    ck.resume()
    assert ck.error is None, ck.error
    ckpt = ck.outcome
    assert ckpt.version == table.dataset().version
    assert_view_intact(table, ckpt, model)


def test_checkpoint_created_after_gc_planned_is_kept_by_the_run(make_table):
    """GC planned (with version expiry) before a checkpoint existed: its plan deletes the
    generations the checkpoint then pins. It writes its marker, expires versions and reads
    the checkpoints again before deleting: the checkpoint's version keeps its tag, and every
    generation it pins stays, dropped from the plan in its name."""
    table, model = make_table()
    ck = Stalled(lambda: create_checkpoint(table, lifetime_seconds=600), "checkpoint.after-view")
    merge_all(table.uri)
    gc = Stalled(lambda: memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0),
                 "gc.before-marker")
    ck.resume()  # no run is deleting: its view is all there, and it is created as it was read
    assert ck.error is None, ck.error
    ckpt = ck.outcome
    pinned = {(sid, g) for sid, s in ckpt.shards.items() for g in s.numbers}
    assert pinned
    gc.resume()
    assert gc.error is None, gc.error
    doc = gc.outcome.to_dict()
    reasons = {(b["shard_id"], b["generation"]): b["reason"] for b in doc["blocked"]}
    assert {k: reasons.get(k) for k in pinned} == {k: f"changed-since-plan:checkpoint:{ckpt.id}" for k in pinned}
    assert not pinned & {(d["shard_id"], d["generation"]) for d in doc["deleted"]}
    assert_view_intact(table, ckpt, model)


def assert_view_intact(table, ckpt, model) -> None:
    for sid, shard in ckpt.shards.items():
        assert set(shard.numbers) <= set(list_generation_dirs(table.store, sid).values())
    rows = memwal.open(table.uri).scan(checkpoint=ckpt.id).to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == model.sorted_rows()
