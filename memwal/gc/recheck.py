"""The re-check right before deleting: drop from the plan what the table no longer allows.

Merge progress and catch-up only grow in normal operation, but a table restored to an older
version, or a commit that drops catch-up records (Lance's own compaction does), lowers them
after the plan was made: generations above the new values are needed again. The live
checkpoints are the ones read after the GC marker (a checkpoint created since the plan keeps
what it pins), and the retained versions the ones left after the planned expiry (one the plan
expected gone, tagged meanwhile, still holds what it had not merged; the grace period runs
from the first version left that merged a generation). It never adds anything: the run
drains and deletes the plan, or less, and each item dropped is reported with
``changed-since-plan:<gate>``. A generation that may no longer leave its shard manifest keeps
its folder and its WAL entries too; a folder drained before the plan can be held only by a
checkpoint created since.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from memwal.checkpoint import Checkpoint
from memwal.core import clock as clocks
from memwal.gc.gates import GRACE_PERIOD, NOT_MERGED
from memwal.gc.model import Blocked, GenerationDeletion
from memwal.gc.plan import GcPlan
from memwal.gc.versions import ShardProgress, VersionProgress
from memwal.table import Table
from memwal.table.manifest import TableManifest, maintained_indexes
from memwal.table.naming import MEM_WAL_INDEX_NAME, parse_generation_dir
from memwal.table.retained import RetainedVersion


class Gates(NamedTuple):
    """Which gates a re-check asks, besides the merge progress."""

    catchup: bool = True
    pins: bool = True
    retained: bool = True
    grace: bool = True


#: Every gate: a folder drained and deleted in the same run.
ALL = Gates()
#: What holds a listing (memwal.gc.generations): the merge, and its grace period.
LISTING = Gates(catchup=False, pins=False, retained=False)
#: What holds a folder already unlisted: the storage gates, not the merge's grace period.
STORAGE = Gates(grace=False)
#: An orphan: every gate but the index catch-up.
ORPHAN = Gates(catchup=False)


class SincePlan:
    """Which gate no longer lets a generation go, against the table as it is now."""

    def __init__(self, latest: TableManifest, checkpoints: Iterable[Checkpoint],
                 versions: list[RetainedVersion] | None, now: float, grace_seconds: float,
                 writer_held: frozenset[int] = frozenset()) -> None:
        self.latest, self.now, self.grace_seconds = latest, now, grace_seconds
        #: Versions the expiry keeps only for live writers: they hold no folder (memwal.gc.generations).
        self.writer_held = writer_held
        self.indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
        self.pins = tuple(checkpoints)
        self.progress = VersionProgress(versions) if versions is not None else None
        self._shards: dict[str, ShardProgress] = {}
        self._seen: dict[tuple[str, int, Gates], str | None] = {}
        self._writer_mask: np.ndarray | None = None

    def _for_writers(self, progress: VersionProgress) -> np.ndarray:
        """The versions kept only for live writers, one mask for every question (each shard's
        holders are answered from one order of the versions: :meth:`ShardProgress.ranked`)."""
        if self._writer_mask is None:
            self._writer_mask = progress.kept_for_writers(self.writer_held)
        return self._writer_mask

    def lost(self, shard_id: str, g: int, *, gates: Gates = ALL) -> str | None:
        key = (shard_id, g, gates)
        if key not in self._seen:
            self._seen[key] = self._lost(shard_id, g, gates)
        return self._seen[key]

    def _lost(self, shard_id: str, g: int, gates: Gates) -> str | None:
        if g > self.latest.compacted_generation(shard_id):
            return NOT_MERGED
        for name in self.indexes if gates.catchup else []:
            if g > self.latest.index_catchup.get(name, {}).get(shard_id, 0):
                return f"index-not-caught-up:{name}"
        for c in self.pins if gates.pins else ():
            if c.pins(shard_id, g):
                return c.gate
        if self.progress is None:
            return None
        if shard_id not in self._shards:
            self._shards[shard_id] = self.progress.shard(shard_id)
        if gates.retained:
            holders = self._shards[shard_id].holders(g).without(self._for_writers(self.progress))
            if holders:
                return f"retained-version:{holders.first.describe()}"
        first = self._shards[shard_id].first_merged(g)
        if gates.grace and (first is None or self.now - first.timestamp < self.grace_seconds):
            return GRACE_PERIOD
        return None


def recheck(table: Table, plan: GcPlan, checkpoints: Iterable[Checkpoint],
            versions: list[RetainedVersion] | None) -> GcPlan:
    """``plan`` less what the latest table version, ``checkpoints`` and ``versions`` keep now."""
    held = frozenset(plan.version_expiry.held_for_writers) if plan.version_expiry is not None else frozenset()
    since = SincePlan(table.require_mem_wal(), checkpoints, versions, clocks.current()(), plan.grace_seconds, held)
    changed: list[Blocked] = []

    def keeps_pinned(shard_id: str, g: int) -> bool:
        pins = [c.gate for c in since.pins if c.pins(shard_id, g)]
        if pins:
            reason = f"changed-since-plan:{pins[0]}"
            changed.append(Blocked(shard_id, g, reason, (reason,)))
        return not pins

    def keeps(shard_id: str, g: int, *, gates: Gates = ALL, wal: int | None = None) -> bool:
        why = since.lost(shard_id, g, gates=gates)
        if why is not None:
            reason = f"changed-since-plan:{why}"
            changed.append(Blocked(shard_id, g, reason, (reason,), wal_position=wal))
        return why is None

    # A folder no longer listed at or below the recorded progress is held by the storage gates;
    # above it (a drain by someone else, proven by the plan) only a checkpoint holds it.
    def still_goes(d: GenerationDeletion) -> bool:
        if not d.drained:
            return keeps(d.shard_id, d.generation)
        if d.generation <= since.latest.compacted_generation(d.shard_id):
            return keeps(d.shard_id, d.generation, gates=STORAGE)
        return keeps_pinned(d.shard_id, d.generation)

    generations = tuple(d for d in plan.generations if still_goes(d))
    drains = []
    for d in plan.drains:
        kept = [g for g in d.generations if g in d.repairs or keeps(d.shard_id, g, gates=LISTING)]
        # a generation that may not leave the manifest keeps its folder too
        drains.append(replace(d, generations=tuple(kept)))
    dropped = {(d.shard_id, g) for d, new in zip(plan.drains, drains, strict=True)
               for g in d.generations if g not in new.generations}
    generations = tuple(d for d in generations if (d.shard_id, d.generation) not in dropped)
    # A WAL entry goes with its generations: those listed at the plan only if they still
    # leave the manifest now; those no longer listed then have nothing left to decide.
    leaving = {(d.shard_id, g) for d in drains for g in d.generations}
    # sorted once per shard, each entry's span found by binary search (not a sort an entry)
    listed = {sid: sorted({fg.generation for fg in st.flushed}) for sid, st in plan.generation_plan.states.items()}
    wal = []
    for w in plan.wal_deletions:
        span = w.generations
        if span is None:  # a fence sentinel: nothing in the table decides its fate
            wal.append(w)
            continue
        numbers = listed.get(w.shard_id, [])
        within = numbers[bisect_left(numbers, span[0]):bisect_right(numbers, span[1])]
        lost = next((g for g in within if (w.shard_id, g) not in leaving), None)
        if lost is None:
            wal.append(w)
        elif (w.shard_id, lost) not in dropped:
            keeps(w.shard_id, lost, wal=w.position)  # reports why (its generation is not in any drain)
    orphans = []
    for o in plan.orphans:
        g = parse_generation_dir(o.path) if o.kind == "generation" else None
        if g is None or o.shard_id is None or keeps(o.shard_id, g, gates=ORPHAN):
            orphans.append(o)
    return replace(plan, generation_plan=replace(plan.generation_plan, deletions=generations, drains=tuple(drains)),
                   wal_deletions=tuple(wal), orphans=tuple(orphans), other_blocked=plan.other_blocked + tuple(changed))
