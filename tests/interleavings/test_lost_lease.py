"""Every job that learns it lost its lease exits 3, even when its last step needed no check.

Seen before: gc and compact stopped past their TTL while another job took the lease with
token 2, then exited 0. Each test holds the job right after its last side effect, freezes
its heartbeat (a process under SIGSTOP cannot renew), lets the lease expire and another
holder take it, then resumes the job: exit 3 with one line naming the lease. A compaction
that lost its lease after its commit still re-earns the index catch-up its own commit
dropped (hazard H4), so GC is not left blocked by ``index-not-caught-up``.
"""

from __future__ import annotations

import memwal
from memwal.lease import Lease
from memwal.table.manifest import maintained_indexes
from tests.conftest import lsm_rows
from tests.helpers import assert_one_line_error, run_cli
from tests.interleave import ManualClock, Stalled

TTL = 30.0


def lose_lease(clock: ManualClock, table, kind: str) -> Lease:
    """The held job's process is frozen past its TTL and another holder takes the lease."""
    with clock.frozen():
        clock.advance(2 * TTL)
        other = Lease(table.store, kind, holder="other-host:1:x", ttl_seconds=TTL).acquire()
    return other


def test_gc_that_lost_its_lease_after_deleting_exits_3(make_table, manual_clock):
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    held = Stalled(lambda: run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0",
                                   "--expire-versions", "0",
                                   "--lease-ttl", str(TTL)), "gc.after-delete")
    other = lose_lease(manual_clock, table, "gc")
    held.resume()
    assert_one_line_error(held.outcome, 3, "lost the gc lease", "taken over by other-host:1:x with token 2")
    other.check()  # the new holder's lease is untouched
    other.release()
    assert lsm_rows(table) == model.sorted_rows()


def test_compact_that_lost_its_lease_after_committing_repairs_catchup_and_exits_3(make_table, manual_clock):
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok and t.merge().ok and t.catchup().ok
    version = table.dataset().version
    held = Stalled(lambda: run_cli("compact", table.uri, "--target-rows-per-fragment", "100000",
                                   "--lease-ttl", str(TTL)), "compact.after-commit")
    other = lose_lease(manual_clock, table, "compact")
    held.resume()
    assert_one_line_error(held.outcome, 3, "lost the compact lease")
    other.release()
    latest = table.manifest()
    assert latest.version > version + 1  # the compaction, then the catch-up repair
    indexes = [i for i in maintained_indexes(latest) if not i.startswith("__")]
    assert indexes, "the workload must maintain an index for the test to mean anything"
    for name in indexes:
        assert latest.index_catchup.get(name) == latest.compacted, name
    gc = t.gc(grace_seconds=0, writer_idle_seconds=0, dry_run=True).to_dict()
    assert not [b for b in gc["blocked"] if b["reason"].startswith("index-not-caught-up")], gc["blocked"]
    assert lsm_rows(table) == model.sorted_rows()
