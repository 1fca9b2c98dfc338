"""memwal.core's small helpers: the thread pool's order and bounds, durations as timedelta."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from memwal.core import validate
from memwal.core.pool import ordered_map, parallel_map
from memwal.errors import BadInputError


def test_ordered_map_keeps_input_order_and_at_most_two_calls_per_thread_in_flight():
    lock = threading.Lock()
    running, most = 0, 0
    release = threading.Event()

    def work(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(0.001 * (i % 3))
        with lock:
            running -= 1
        return i * i

    assert list(ordered_map(work, range(50), threads=3)) == [i * i for i in range(50)]
    assert 1 <= most <= 3  # three workers; the window of 2 * threads queued calls never runs more
    assert parallel_map(work, range(50), threads=3, chunks_per_thread=2) == [i * i for i in range(50)]


def test_ordered_map_starts_nothing_past_its_window_after_a_failure():
    started: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            started.append(i)
        if i == 5:
            raise ValueError("boom")
        return i

    seen = []
    with pytest.raises(ValueError, match="boom"):
        for value in ordered_map(work, range(100), threads=2):
            seen.append(value)
    assert seen == [0, 1, 2, 3, 4]
    assert max(started) < 5 + 2 * 2 + 1  # the failed item, then at most the window behind it


@pytest.mark.parametrize("given, seconds", [(timedelta(minutes=10), 600.0), (600, 600.0), ("600", 600.0),
                                            (timedelta(milliseconds=1500), 1.5)])
def test_a_duration_is_seconds_or_a_timedelta(given, seconds):
    assert validate.duration("grace_seconds", given) == seconds
    assert validate.expiry("expire_versions", given) == seconds


@pytest.mark.parametrize("given", [timedelta(seconds=-1), timedelta(days=365 * 101), object(), None, [1]])
def test_a_bad_duration_is_bad_input(given):
    with pytest.raises(BadInputError, match="grace_seconds"):
        validate.duration("grace_seconds", given)


def test_a_zero_timedelta_is_no_lease_ttl():
    with pytest.raises(BadInputError, match=r"lease_ttl: datetime.timedelta\(0\) must be positive"):
        validate.lease_ttl("lease_ttl", timedelta(0))


def test_a_checkpoint_lifetime_is_seconds_or_a_timedelta():
    from memwal.checkpoint import lifetime

    assert lifetime(timedelta(hours=1)) == lifetime(3600) == lifetime("3600") == 3600.0
    for bad in (timedelta(0), timedelta(days=400), object(), [60]):
        with pytest.raises(BadInputError, match="lifetime"):
            lifetime(bad)


def test_sizes_read_the_same_in_status_history_and_gc():
    """One formatter for every text output's byte counts (status, history, gc)."""
    from memwal.core.sizes import human_bytes
    from memwal.gc.report import render_gc
    from memwal.history.timeline import _summary

    assert [human_bytes(n) for n in (0, 512, 1536, 2411963, 5 << 30)] == ["0B", "512B", "1.5KiB", "2.3MiB", "5.0GiB"]
    gc_line = _summary({"job": "gc", "figures": {"generations": 24, "bytes": 2411963}})
    assert gc_line == "  24 generations deleted, 2.3MiB freed"
    doc = {"table": "t", "dry_run": False, "deleted": [], "wal_entries_deleted": 0, "bytes_freed": 2411963,
           "blocked": [], "kept_wal_entries": [], "retention": None, "orphans": [], "broken_shards": []}
    assert "2.3MiB freed" in render_gc(doc)


def test_counts_read_as_words_in_history_gc_and_the_retention_hint():
    """"1 generation", never "1 generations" or "generation(s)"; round expiry values (issue 84)."""
    from memwal.gc.report import render_gc
    from memwal.gc.retention import round_seconds
    from memwal.history.timeline import _summary

    assert _summary({"job": "merge", "figures": {"generations": 1, "rows_upserted": 1200, "rows_deleted": 0}}) == (
        "  1 generation, 1,200 upserted, 0 deleted")
    assert _summary({"job": "gc", "figures": {"generations": 1, "bytes": 0, "wal_entries": 1, "expired_versions": 2}}) \
        == "  1 generation deleted, 0B freed; 1 WAL entry deleted; 2 versions expired"
    doc = {"table": "t", "dry_run": True, "deleted": [{"shard_id": "s", "generation": 3}], "wal_entries_deleted": 2,
           "bytes_freed": 0, "blocked": [], "kept_wal_entries": [], "retention": None, "orphans": []}
    assert render_gc(doc).splitlines()[0] == "t: would delete 1 generation and 2 WAL entries"
    # a rollup named for generation 4 beside the folder of 4 it replaced: the count is what the ranges list
    doc["deleted"] = [{"shard_id": s, "generation": g} for s, g in (("a", 3), ("a", 4), ("a", 4), ("b", 1))]
    assert render_gc(doc).splitlines()[:3] == ["t: would delete 3 generations (4 folders) and 2 WAL entries",
                                               "  would delete shard a generations 3-4 (3 folders)",
                                               "  would delete shard b generations 1"]
    assert [round_seconds(s) for s in (0, 59, 60, 167, 734, 1799, 7000, 10 * 86400, 400 * 86400)] == [
        0, 59, 60, 60, 600, 600, 3600, 7 * 86400, 30 * 86400]


def test_the_options_a_run_was_given_survive_a_followers_scopes():
    """What the run was given (even a value equal to memwal's default) is what a table's own
    policy leaves alone; a follower's scope for one pass keeps it (issue 84)."""
    from memwal.actions.options import GcOptions

    given = GcOptions.from_kwargs(grace_seconds=600, expire_versions="never")
    assert given.given == {"grace_seconds", "expire_versions"}
    scoped = given.but(listed_only=True, orphans=False)
    assert scoped.given == {"grace_seconds", "expire_versions", "listed_only", "orphans"} and scoped.listed_only
    assert GcOptions().given == frozenset() and GcOptions(grace_seconds=5).given == {"grace_seconds"}
