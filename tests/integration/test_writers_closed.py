"""A writer said closed (``memwal writers --closed``): GC stops waiting the writer idle period for
it, and only for it as it was (issue 84). pylance's ``close()`` leaves nothing a quiet writer
does not, so without the record GC keeps what the writer's view needs for a day."""

from __future__ import annotations

import json
from pathlib import Path

import memwal
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from memwal.table.writers_closed import CLOSED_KEY
from tests.clients.jobs import ZERO
from tests.clients.pylance_client import LiveWriter, client_view
from tests.helpers import run_cli


def listed(uri: str) -> list[int]:
    (state,) = all_shard_manifests(open_table(uri).store).values()
    return [g.generation for g in state.flushed]


def merged_and_kept(live: LiveWriter) -> tuple[memwal.MemWalTable, int]:
    """Two flushes merged; GC (default writer idle period) keeps them listed for the writer."""
    t = memwal.open(live.uri)
    for n in range(2):
        live.generation([1_000 + 100 * n + i for i in range(30)])
    assert t.merge().ok
    kept = t.gc(**ZERO).value
    assert {b.reason for b in kept.blocked} >= {"writer-live"} and listed(live.uri)
    return t, open_table(live.uri).manifest().compacted_generation(live.shard_id)


def test_a_closed_writer_said_closed_lets_gc_drain_at_once(live: LiveWriter, tmp_path: Path) -> None:
    t, merged = merged_and_kept(live)
    live.close()
    again = t.gc(**ZERO).value  # closed, but storage cannot tell: a day's wait
    assert {b.reason for b in again.blocked} >= {"writer-live"} and listed(live.uri)

    shown = run_cli("writers", live.uri, "--json")
    (w,) = json.loads(shown.stdout)["writers"]
    assert shown.rc == 0 and w["shard_id"] == live.shard_id and w["live"] and w["closed"] is None
    refused = run_cli("writers", live.uri, "--closed", live.shard_id)  # without --yes: says what, writes nothing
    assert refused.rc == 2 and f"would record shard {live.shard_id}'s writer (epoch {w['epoch']}" in refused.stderr
    assert not (Path(live.uri) / CLOSED_KEY).exists()
    unknown = run_cli("writers", live.uri, "--closed", "no-such-shard", "--yes")
    assert unknown.rc == 2 and "no shard 'no-such-shard'" in unknown.stderr
    assert not (Path(live.uri) / CLOSED_KEY).exists()

    said = run_cli("writers", live.uri, "--closed", live.shard_id, "--yes", "--json")
    assert said.rc == 0, said.stderr
    (record,) = json.loads(said.stdout)["closed"]
    assert record["epoch"] == w["epoch"] and record["last_write"] == w["last_activity"]
    (view,) = t.writers()
    assert not view.live and view.closed is not None and view.closed.epoch == w["epoch"]
    assert "its writer said closed by" in run_cli("status", live.uri).stdout

    freed = t.gc(**ZERO).value
    assert [d.generations for d in freed.drained] == [(merged,)] and listed(live.uri) == []
    assert client_view(live.uri) == live.model.sorted_rows()
    with LiveWriter(live.uri, live.shard_id, live.model, seed=5) as after:  # a new epoch: its own view, live
        after.generation([5_000 + i for i in range(30)])
        assert after.view() == live.model.sorted_rows()
        (view,) = t.writers()
        assert view.live and view.closed is None  # the record named the old epoch: void for this one
    assert run_cli("verify", live.uri).rc == 0


def test_a_writer_that_writes_after_it_was_said_closed_is_live_again(live: LiveWriter) -> None:
    """Said closed by mistake while still open: its next flush makes the record void, and GC
    keeps what its view needs again; the writer reads every row throughout."""
    t, _ = merged_and_kept(live)
    (record,) = t.say_writers_closed([live.shard_id])
    (view,) = t.writers()
    assert view.closed == record and not view.live
    live.generation([3_000 + i for i in range(30)])  # it was open after all: a flush after the record
    (view,) = t.writers()
    assert view.live and view.closed is None and view.last_activity > record.last_write
    assert t.merge().ok
    kept = t.gc(**ZERO).value
    assert {b.reason for b in kept.blocked} >= {"writer-live"} and listed(live.uri)
    assert live.view() == live.model.sorted_rows() == client_view(live.uri)


def test_a_forged_or_broken_record_counts_as_none(live: LiveWriter) -> None:
    """Storage is untrusted: a record naming another epoch, or one that is not a record, leaves
    the writer live (GC's safe side), and a new record replaces a broken one."""
    t, _ = merged_and_kept(live)
    path = Path(live.uri) / CLOSED_KEY
    (view,) = t.writers()
    for body in (b"{not json", json.dumps({"format": 1, "writers": {live.shard_id: {
            "shard_id": live.shard_id, "epoch": view.epoch + 1, "last_write": 1e12, "recorded_at": 0,
            "by": "\x1b[31mx"}}}).encode()):
        path.write_bytes(body)
        (seen,) = t.writers()
        assert seen.live and seen.closed is None
        assert {b.reason for b in t.gc(**ZERO).value.blocked} >= {"writer-live"}
    (record,) = t.say_writers_closed([live.shard_id])
    assert record.epoch == view.epoch and json.loads(path.read_bytes())["writers"][live.shard_id]["epoch"] == view.epoch
