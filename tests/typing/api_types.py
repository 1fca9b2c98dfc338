"""Checked by mypy (tests/unit/test_api_types.py), never run: the API's overloads type each
action's value, so a caller never tests whether it got a plan or a result."""

from __future__ import annotations

from datetime import timedelta

import memwal
from memwal.catchup import CatchupPlan, CatchupResult
from memwal.compact import CompactPlan, CompactResult
from memwal.gc import GcPlan, GcResult
from memwal.merge import MergePlan, MergeResult
from memwal.snapshot import SnapshotPlan, SnapshotResult


def typed(uri: str, flag: bool) -> None:
    t = memwal.open(uri)
    merge_plan: MergePlan = t.merge(dry_run=True, max_generations=2).value
    merged: MergeResult = t.merge(shards=["a"], lease_wait=timedelta(seconds=5)).value
    catchup_plan: CatchupPlan = t.catchup(dry_run=True).value
    caught_up: CatchupResult = t.catchup(dry_run=False, engine="local").value
    compact_plan: CompactPlan = t.compact(dry_run=True, max_fragments=4).value
    compacted: CompactResult = t.compact().value
    snapshot_plan: SnapshotPlan = t.snapshot(dry_run=True).value
    published: SnapshotResult = t.snapshot(lease_ttl=timedelta(minutes=5)).value
    would: GcResult = t.gc(dry_run=True, grace_seconds=timedelta(minutes=10), expire_versions="never").value
    collected: GcResult = t.gc(expire_versions=timedelta(days=7)).value
    either: MergePlan | MergeResult = t.merge(dry_run=flag).value

    plans: tuple[MergePlan, CatchupPlan, CompactPlan, SnapshotPlan, GcPlan] = (
        t.plan_merge(shards=["a"]), t.plan_catchup(indexes=["id_idx"]), t.plan_compact(),
        t.plan_snapshot(), t.plan_gc(grace_seconds=timedelta(hours=1), orphans=True))
    with t.checkpoint(lifetime=timedelta(minutes=10)) as held, t.checkpoint(lifetime=600.0) as seconds:
        print(held.id, seconds.id)  # a lifetime is seconds or a timedelta, as its docstring says
    print(merge_plan, merged, catchup_plan, caught_up, compact_plan, compacted, snapshot_plan, published, would,
          collected, either, plans)
