"""Garbage collection of merged generations and WAL entries, behind every safety gate.

A generation g of shard s is deleted only when every gate passes (invariant 4, docs/architecture.md):
(a) ``not-merged``: g <= merge progress of s at the latest version;
(b) ``index-not-caught-up:<index>``: g <= every maintained index's recorded catch-up for s
    (no record: not caught up; readers use the generation's own index meanwhile);
(c) ``retained-version:<v>``: every retained version (main, branches, tags) had merged g, so
    time travel never needs it (each version counts: a restore makes progress non-monotone);
(d) ``grace-period``: the first retained version that merged g is older than the reader grace
    period (pylance's LsmScanner fails, not skips, when a generation it listed is missing);
(e) a WAL entry goes only when every generation it may belong to goes and it is not past
    ``replay_after_wal_entry_position`` (``wal-needed-for-replay``); a fence sentinel stays
    (``fence-sentinel``) unless :func:`memwal.gc.wal.sentinel_may_go` lets it go;
(f) ``checkpoint:<id>``: no live reader checkpoint lists g (its record pins its base version
    by itself, so gate (c) holds what merged after it);
and ``unsafe-path``: the path resolves inside ``_mem_wal/<shard>/`` (invariant 5). Orphan folders
pass the same gates (``orphan-<gate>``); a shard whose latest manifest cannot be established
keeps everything (``shard-manifest-*``).

Six collectors (version expiry, generations, WAL entries, orphans, checkpoints, run history),
each with its plan and typed result, are composed by one run (:mod:`memwal.gc.run`). The plan
(:mod:`memwal.gc.plan`) reads everything before the first write and is the dry run; the run
executes exactly it after a re-check that only drops items (:mod:`memwal.gc.recheck`).
``memwal.actions.run`` is GC's only entry.
"""

from memwal.core.defaults import DEFAULT_GRACE_SECONDS, DEFAULT_ORPHAN_AGE_SECONDS
from memwal.gc.delete import (
    BATCH_OBJECTS,
    PrefixOutcome,
    Target,
    delete_keys,
    delete_objects,
    delete_prefixes,
)
from memwal.gc.engine import GcEngine, LocalGcEngine
from memwal.gc.gates import FENCE_SENTINEL, GRACE_PERIOD, UNSAFE_PATH, WAL_NEEDED_FOR_REPLAY
from memwal.gc.plan import GcPlan, plan_gc, plan_gc_settled, prepare_gc
from memwal.gc.report import render_gc
from memwal.gc.result import GcResult, problems_in
from memwal.gc.run import run_gc

__all__ = [
    "BATCH_OBJECTS", "DEFAULT_GRACE_SECONDS", "DEFAULT_ORPHAN_AGE_SECONDS", "FENCE_SENTINEL", "GRACE_PERIOD",
    "UNSAFE_PATH", "WAL_NEEDED_FOR_REPLAY", "GcEngine", "GcPlan", "GcResult", "LocalGcEngine", "PrefixOutcome",
    "Target", "delete_keys", "delete_objects", "delete_prefixes", "plan_gc", "plan_gc_settled", "prepare_gc",
    "problems_in", "render_gc", "run_gc",
]
