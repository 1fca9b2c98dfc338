"""``memwal cycle TABLE --follow``: one long-lived process that keeps up with a live ShardWriter.

The follower runs as users run it, a process of its own; the test writes with pylance's own
``ShardWriter`` meanwhile and waits (with a deadline, never a sleep to assert on) for the
follower's own poll to merge each generation. SIGTERM stops it at its next safe point: exit 0,
leases released, nothing half-written, the table equal to the model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.lease import RELEASED, list_leases
from memwal.table import open_table
from tests.helpers import memwal_program, run_cli, wait_flushed
from tests.interleave import Barrier

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                    pa.field("name", pa.string())])
SHARD = str(uuid.UUID(int=7))
#: How long the follower may take to merge what was flushed: a deadline for the wait, not a
#: figure asserted (the follower looks every second; a loaded CI machine is slow).
DEADLINE = 90.0


class Writer:
    """A live pylance ShardWriter and the model of what it wrote: each generation is 5 puts (new
    keys and updates of earlier ones) and 1 delete, flushed when its MemTable holds 6 rows."""

    ROWS = 6

    def __init__(self, uri: str) -> None:
        lance.write_dataset(pa.Table.from_pylist([], schema=SCHEMA), uri).initialize_mem_wal(unsharded=True)
        self.uri = uri
        self.writer = lance.dataset(uri).mem_wal_writer(SHARD, max_memtable_rows=self.ROWS, durable_write=False,
                                                         stats_log_interval_ms=0)
        self.model: dict[int, dict[str, object]] = {}
        self.flushes = 0

    def generation(self, g: int, *, delete: int = 0) -> None:
        rows = [{"id": k, "v": g * 100 + k, "name": f"g{g}"} for k in (g * 4, g * 4 + 1, g * 4 + 2, 1, 5)]
        self.writer.put(pa.Table.from_pylist(rows, schema=SCHEMA))
        self.model.update({int(r["id"]): r for r in rows})  # type: ignore[call-overload]
        self.writer.delete(pa.table({"id": pa.array([delete], pa.int64())}))  # key 0 was never written
        self.model.pop(delete, None)
        self.flushes += 1
        wait_flushed(self.writer, self.flushes, deadline_seconds=DEADLINE)

    def rows(self) -> list[dict[str, object]]:
        return [self.model[k] for k in sorted(self.model)]


def merged(uri: str) -> int:
    return open_table(uri).manifest().compacted_generation(SHARD)


def flushed(uri: str) -> list[int]:
    from memwal.table.shards import latest_shard_manifest

    state = latest_shard_manifest(open_table(uri).store, SHARD)
    return [] if state is None else [g.generation for g in state.flushed]


def runs_ended(*uris: str) -> bool:
    """Every run the follower began on ``uris`` is recorded as ended. A SIGTERM sent between a
    merge's commit and its end stops it at its last safe point: it stands, reported cancelled
    ("it committed version N"), and the follower's tally counts only the merges that ended done."""
    from memwal.history.log import read_runs
    from memwal.history.record import RUNNING

    return all(r.outcome != RUNNING for uri in uris for r in read_runs(open_table(uri).store))


def wait_for(what: str, done: object) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"the follower did not {what} within {DEADLINE:.0f}s"
        time.sleep(0.05)


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Followers started by a test, killed if the test left one running."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def start(procs: list[subprocess.Popen[str]], uri: str, *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.Popen[str]:
    p = subprocess.Popen([memwal_program(), "cycle", uri, "--follow", "--json", *extra], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    procs.append(p)
    return p


def stop(p: subprocess.Popen[str]) -> tuple[dict[str, object], str]:
    """SIGTERM; the follower must be gone within the 30 s a service manager grants."""
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    return json.loads(out), err


def test_a_follower_merges_a_live_writer_and_stops_cleanly_on_sigterm(tmp_path, follower):
    uri = str(tmp_path / "t.lance")
    w = Writer(uri)
    env = {**os.environ, "OTEL_METRICS_EXPORTER": "console"}
    p = start(follower, uri, "--poll-seconds", "0.2", env=env)
    for g in range(1, 5):
        w.generation(g, delete=1 if g == 3 else 0)
        target = max(flushed(uri))
        wait_for(f"merge generation {target}", lambda t=target: merged(uri) >= t)  # type: ignore[misc]
    wait_for("end its runs", lambda: runs_ended(uri))
    doc, err = stop(p)
    assert doc["stopped"] == "SIGTERM" and doc["generations_merged"] >= 4
    assert doc["runs"]["merge"].get("failed", 0) == 0
    assert all(i.state == RELEASED for i in list_leases(open_table(uri).store))  # every lease, the follower's too
    kinds = {i.kind for i in list_leases(open_table(uri).store)}
    assert {"follow", "merge"} <= kinds
    w.writer.close()
    assert sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: r["id"]) == w.rows()  # merged: the base
    import memwal

    assert sorted(memwal.open(uri).scan().to_pylist(), key=lambda r: r["id"]) == w.rows()
    assert "memwal.shard.listed_generations" in err and "memwal.shard.lag_seconds" in err  # exported at exit
    # on the defaults (versions kept 7 days) nothing to say: its whole GC is spaced by its cost
    assert "versions are kept" not in err


def test_sigterm_during_a_merge_stops_it_at_its_safe_point_with_nothing_committed(tmp_path, follower):
    uri = str(tmp_path / "t.lance")
    w = Writer(uri)
    w.generation(1)
    with Barrier(str(tmp_path / "barrier"), "merge.after-read") as barrier:
        p = start(follower, uri, env={**os.environ})
        barrier.wait_reached()  # the merge read its batch and is about to commit
        p.send_signal(signal.SIGTERM)
        barrier.release()
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    doc = json.loads(out)
    assert doc["stopped"] == "SIGTERM" and doc["runs"]["merge"] == {"cancelled": 1}
    assert merged(uri) == 0  # stopped before its commit: nothing half-written
    assert all(i.state == RELEASED for i in list_leases(open_table(uri).store))
    history = json.loads(run_cli("history", uri, "--job", "merge", "--json").stdout)["runs"]
    assert history[0]["outcome"] == "cancelled" and "SIGTERM" in history[0]["error"]
    assert run_cli("merge", uri).rc == 0  # the next merge takes it up
    assert sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: r["id"]) == w.rows()


def test_one_follower_per_table(tmp_path, follower):
    uri = str(tmp_path / "t.lance")
    Writer(uri)
    first = start(follower, uri, "--expire-versions", "600")
    wait_for("take its lease", lambda: any(i.kind == "follow" and i.state == "live"
                                            for i in list_leases(open_table(uri).store)))
    second = subprocess.run([memwal_program(), "cycle", uri, "--follow"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 3 and "follow lease" in second.stderr and "held by" in second.stderr
    assert "versions are kept" not in second.stderr  # refused: the one line of its error, no more
    assert "versions are kept" not in stop(first)[1]  # ten minutes: nothing to say


def test_follower_flags_need_follow_and_a_follower_has_no_dry_run(tmp_path):
    uri = str(tmp_path / "t.lance")
    Writer(uri)
    alone = run_cli("cycle", uri, "--gc-every", "5")
    assert alone.rc == 2 and "--gc-every only goes with --follow" in alone.stderr
    dry = run_cli("cycle", uri, "--follow", "--dry-run")
    assert dry.rc == 2 and "dry run" in dry.stderr
    zero = run_cli("cycle", uri, "--follow", "--poll-seconds", "0")
    assert zero.rc == 2 and "--poll-seconds" in zero.stderr


def test_a_fleet_follower_merges_every_table_honours_a_pause_and_stops_on_sigterm(tmp_path, follower):
    root, state = tmp_path / "lake", str(tmp_path / "state")
    a, b = Writer(str(root / "a.lance")), Writer(str(root / "b.lance"))
    policy = tmp_path / "policy.json"  # b's versions kept ten minutes; a's on GC's defaults (7 days)
    policy.write_text(json.dumps({"tables": {b.uri: {"options": {"gc": {"expire_versions": 600}}}}}))
    p = subprocess.Popen([memwal_program(), "fleet", "run", str(root), "--state", state, "--follow", "--json",
                          "--policy", str(policy), "--poll-seconds", "0.2", "--max-poll-seconds", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    follower.append(p)
    for w in (a, b):
        w.generation(1)
    wait_for("merge both tables", lambda: merged(a.uri) >= 1 and merged(b.uri) >= 1)
    assert run_cli("fleet", "pause", b.uri, "--state", state, "--by", "test", "--reason", "test").rc == 0
    b.generation(2)
    a.generation(2)
    wait_for("merge the table that is not paused", lambda: merged(a.uri) >= 2)
    assert merged(b.uri) == 1  # planned after the pause (a's second generation was flushed after it): left alone
    assert run_cli("fleet", "resume", b.uri, "--state", state, "--by", "test", "--reason", "test").rc == 0
    wait_for("merge the resumed table", lambda: merged(b.uri) >= 2)
    wait_for("end its runs", lambda: runs_ended(a.uri, b.uri))
    doc, err = stop(p)
    assert doc["stopped"] == "SIGTERM" and doc["generations_merged"] >= 4
    # a's versions kept a week (GC's defaults): nothing to say, its whole GC is spaced by its cost
    assert "versions are kept" not in err
    for w in (a, b):
        assert all(i.state == RELEASED for i in list_leases(open_table(w.uri).store))
        w.writer.close()
        assert sorted(lance.dataset(w.uri).to_table().to_pylist(), key=lambda r: r["id"]) == w.rows()


def _whole_gc_said_it_took(uri: str, seconds: float) -> None:
    """Rewrite the newest GC record (a whole run's) to say its plan took ``seconds``: what a week's
    folders cost, or what anyone who writes the table's storage may claim."""
    from memwal.history.log import HISTORY_PREFIX
    from memwal.history.record import RunRecord

    store = open_table(uri).store
    key = next(k for k in sorted(o.key for o in store.list(HISTORY_PREFIX)) if "-gc-" in k)
    record = RunRecord.loads(store.get(key))
    assert record.figures["listed_only"] is False and record.figures["plan_seconds"] >= 0
    record.figures["plan_seconds"] = seconds
    store.put(key, record.dumps())


def _follower_gcs(uri: str, since: float) -> list[bool]:
    """Whether each GC run the follower made since ``since`` was a listing pass (oldest first)."""
    from memwal.history.log import read_runs

    runs = read_runs(open_table(uri).store, job="gc", since=since)
    return [bool(r.figures.get("listed_only")) for r in reversed(list(runs))]


@pytest.mark.parametrize(("said", "options", "whole"), [
    (10.0, (), False),  # 10 s: the next no sooner than 500 s after it; the listing pass meanwhile
    (1e9, ("--gc-every", "0.5", "--gc-max-every", "1"), True),  # forged: it waits --gc-max-every at most
])
def test_a_restarted_follower_spaces_its_first_whole_gc_from_the_last_in_the_history(tmp_path, said, options, whole):
    """Issue 82: a follower's start-up ran a whole GC, which names every folder a week's retention
    keeps (most of 15 s of CPU at 30,000 flushes), even when one had ended a minute before. It is
    spaced from the newest whole run in the history now, by what that one took, as the follower
    spaces its own; the listing pass rolls up what merged meanwhile. The record is storage's word:
    it delays the whole GC by at most --gc-max-every."""
    uri = str(tmp_path / "t.lance")
    w = Writer(uri)
    for g in (1, 2):
        w.generation(g)
    assert run_cli("merge", uri).rc == 0 and run_cli("gc", uri).rc == 0
    _whole_gc_said_it_took(uri, said)
    w.generation(3)
    w.generation(4)
    began = time.time()
    # 10 s: the start-up cycle ends well within it, loaded or not, and the forged record's whole GC comes after it
    out = subprocess.run([memwal_program(), "cycle", uri, "--follow", "--json", "--follow-seconds", "10",
                          "--poll-seconds", "0.2", "--rollup-every", "0", *options],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert merged(uri) == 4  # the start-up merged what was pending
    gcs = _follower_gcs(uri, began)
    assert gcs[0] is True  # the start-up's GC: the listing pass, not the whole run
    assert (False in gcs) is whole
    assert len(flushed(uri)) <= 1  # rolled up or drained: a reader lists one at most
    w.writer.close()
    assert sorted(memwal.open(uri).scan().to_pylist(), key=lambda r: r["id"]) == w.rows()
