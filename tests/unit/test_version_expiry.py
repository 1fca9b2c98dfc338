"""Which versions GC's expiry keeps for a live writer (memwal.gc.expiry): the base it may have
opened, never every version since (issue 62: a writer that never stops held them all)."""

from __future__ import annotations

from memwal.gc.expiry import plan_version_expiry
from memwal.table.retained import RetainedVersion


def versions(n: int) -> list[RetainedVersion]:
    """Versions 1..n committed at times 1..n (main line, untagged)."""
    return [RetainedVersion(v, None, float(v), {}, f"_versions/{v}.manifest", "e") for v in range(1, n + 1)]


def test_a_live_writer_keeps_the_versions_it_may_have_opened_and_no_later_one():
    # claimed at time 5, the grace period 2 before it: it opened version 3, 4 or 5
    expiry, gone = plan_version_expiry(versions(10), 10, older_than_seconds=0, checkpoints=(), now=100.0,
                                       writer_pins=[(3.0, 5.0)])
    assert expiry.held_for_writers == (3, 4, 5)
    assert [v.version for v in gone] == [1, 2, 6, 7, 8, 9]


def test_a_writer_whose_claim_is_unknown_keeps_every_version():
    expiry, gone = plan_version_expiry(versions(6), 6, older_than_seconds=0, checkpoints=(), now=100.0,
                                       writer_pins=[None])
    assert gone == [] and expiry.held_for_writers == (1, 2, 3, 4, 5)


def test_the_latest_and_what_the_retention_keeps_stay_whatever_the_writers():
    expiry, gone = plan_version_expiry(versions(10), 10, older_than_seconds=94.5, checkpoints=(), now=100.0)
    assert [v.version for v in gone] == [1, 2, 3, 4, 5] and expiry.held_for_writers == ()
