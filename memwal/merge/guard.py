"""The checks right before every merge commit, whichever path commits: the lease, then progress.

Progress is read in both places it is recorded: the MemWAL index (ours, and any merger that
marks) and each shard manifest (another compactor, lance-context's ``cleanup_wal()``, records
only by draining what it merged, issue 54). A planned generation that left its shard manifest,
or a drain that reaches into the plan, means someone else merged it: the plan is stale (its
rows may be older than what that merge wrote), and the batch is planned again.

Neither is a fence (a merger can stall right after them, hazard H5): the fences are Lance's
(a marker must grow, a bound commit conflicts with what changed its fragments since its read
version, the fence fragment of memwal.merge.driverless). These checks only stop early what
would fail or need a re-plan anyway, and add the one case no fence catches: a takeover merger
with a smaller budget that merged only a *prefix* of our generations (recorded progress below
our marker, so Lance would accept it) and re-inserted a key our batch deletes, which our
delete, bound to the plan's read version, cannot see. Refusing once a shard's recorded
progress moved since planning catches it; what remains is a stall between this read and
Lance's commit with such a prefix merger in that instant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lance.mem_wal import CompactedSsTable

from memwal.errors import ConflictError, MemWalError
from memwal.history.receipts import COMMIT, read_receipt, receipt_key
from memwal.merge.model import MergePlan
from memwal.table import Table
from memwal.table.drain import drained_through
from memwal.table.shards import reader_shard_manifest

if TYPE_CHECKING:
    from memwal.lease import Lease

Step = Callable[[str], None]


class StaleProgressError(ConflictError):
    """Another merger recorded progress for a shard of this batch first (a lost race)."""


def markers(plan: MergePlan) -> list[CompactedSsTable]:
    """The progress marker of the whole plan: one entry per shard, its last generation."""
    return [CompactedSsTable(s.shard_id, s.to_generation) for s in plan.shards]


def applied_ranges(plan: MergePlan, table: Table) -> dict[str, tuple[int, int]]:
    """What the marked commit's receipt says the batch applied: per shard, exactly the
    generations the plan read, and those an unfinished driverless merge's data commit holds only
    when that commit is memwal's own (its receipt, bound to its transaction file: a data claim
    alone is anyone's, issue 56 H4); never the range below them that a drain by someone else
    says is merged (a claim: issue 61)."""
    claimed: dict[str, int] = {}
    for c in plan.applied:
        if not _ours(table, c.version):
            for sid, (_low, high) in c.data.items():
                claimed[sid] = max(claimed.get(sid, 0), high)
    out = {}
    for s in plan.shards:
        low = max(s.from_generation, claimed.get(s.shard_id, 0) + 1)
        if low <= s.to_generation:
            out[s.shard_id] = (low, s.to_generation)
    return out


def _ours(table: Table, version: int) -> bool:
    """Whether memwal's receipt of the commit at ``version`` names its transaction file."""
    r = read_receipt(table.store, receipt_key(version, COMMIT))
    try:
        txn = table.manifest(version).transaction_file
    except (MemWalError, OSError):
        return False
    return r is not None and bool(txn) and r.transaction_file == txn


def earlier(plan: MergePlan, ours: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The batch's commits before its marked one: ``ours`` (a delete pass, a data commit) and
    the data commits of an unfinished driverless merge the plan found (memwal.merge.applied)."""
    return tuple(sorted({*ours, *(c.version for c in plan.applied)}))


def before_commit(table: Table, plan: MergePlan, lease: Lease | None, step: Step, name: str) -> None:
    """The lease, then progress; then the test hook ``name``.

    The hook runs after both checks, so a test that stalls there proves what the commit
    itself does when its author lost the lease (the fence), not what the checks catch.
    """
    if lease:
        lease.check()
    guard_progress(table, plan)
    step(name)


def guard_progress(table: Table, plan: MergePlan) -> None:
    """Refuse to commit when another merger moved a shard of this batch since planning: in the
    MemWAL index, or by draining (or replacing) a planned generation from its shard manifest."""
    latest = table.manifest()
    for s in plan.shards:
        now = latest.compacted_generation(s.shard_id)
        if now != s.compacted_generation:
            raise StaleProgressError(
                f"Stale SSTable compaction: shard {s.shard_id} progress moved from "
                f"{s.compacted_generation} to {now} while merging"
            )
    for s in plan.shards:
        # found as a reader finds it (the hint, then the versions after it), not by listing the
        # thousands of versions a writer that never reopens keeps: 2.8% of a follower's busy time
        # at minute 27 beside pylance. The same latest but where versions have a gap, which Lance
        # never leaves (lance#8640) and the plan's listing names; this check is no fence (above)
        state = reader_shard_manifest(table.store, s.shard_id)
        listed = set() if state is None else {(g.generation, g.path) for g in state.flushed}
        gone = [g.generation for g in s.generations if (g.generation, g.path) not in listed]
        if gone or (state is not None and drained_through(state) >= s.from_generation):
            raise StaleProgressError(
                f"Stale SSTable compaction: shard {s.shard_id} generation {gone[0] if gone else s.from_generation} "
                "left its shard manifest while merging (another compactor merged it)"
            )
