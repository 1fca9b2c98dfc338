"""A job frozen past its lease (SIGSTOP, then SIGCONT after a takeover) says so (issue 38, L1/L3).

- A snapshot refresh frozen right before its commit, while another refresh takes both its
  leases and publishes: its own commit then conflicts in Lance. Its cause is the lost lease:
  exit 3 naming the lease first, never Lance's raw "Retryable commit conflict" alone with exit 1.
- A catch-up frozen at its step, while another catch-up takes its lease and commits: on
  SIGCONT it commits nothing (the lease is checked after the step, right before Lance's
  ``optimize_indices``) and its history record claims no version, least of all the new
  holder's.
"""

from __future__ import annotations

import memwal
from memwal.history.log import read_runs
from tests.helpers import assert_one_line_error, run_cli
from tests.interleave import Stalled
from tests.interleavings.test_fencing import TTL, stop_past_ttl


def test_a_snapshot_frozen_past_its_lease_whose_commit_then_conflicts_exits_3(make_table, manual_clock):
    table, _ = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=1).ok
    held = Stalled(lambda: run_cli("snapshot", table.uri, "--lease-ttl", str(TTL)), "snapshot.before-commit")
    with stop_past_ttl(manual_clock):
        assert t.merge().ok  # new progress, so the new holder's refresh publishes something else
        other = t.snapshot(lease_ttl=TTL, lease_wait=0)
        assert other.ok and other.to_dict()["version"] is not None
    held.resume()
    assert held.error is None, held.error
    assert_one_line_error(held.outcome, 3, "lease", "taken over")
    line = held.outcome.error_lines[0]
    assert line.index("lease") < line.index("then it failed")  # the cause first, Lance's conflict after
    assert memwal.open(table.uri).verify().ok


def test_a_catchup_frozen_past_its_lease_commits_nothing_and_claims_no_version(make_table, manual_clock):
    table, _ = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok
    held = Stalled(lambda: run_cli("catchup", table.uri, "--lease-ttl", str(TTL)), "catchup.before-build")
    with stop_past_ttl(manual_clock):
        assert t.merge().ok
        theirs = t.catchup(lease_ttl=TTL)
        assert theirs.ok and theirs.to_dict()["version"] is not None
    after_takeover = table.manifest().version
    held.resume()
    assert held.error is None, held.error
    assert_one_line_error(held.outcome, 3, "lost the catchup lease")
    assert table.manifest().version == after_takeover  # the frozen run committed nothing
    frozen_run = [r for r in read_runs(table.store, job="catchup") if r.outcome == "fenced"]
    assert len(frozen_run) == 1 and frozen_run[0].versions == [], frozen_run
