"""Garbage collection of merged generations and WAL entries, behind every safety gate.

A generation g of shard s is deleted only when all of these hold (invariant 4, docs/architecture.md):

(a) ``not-merged``: g <= merge progress of s at the latest version;
(b) ``index-not-caught-up:<index>``: g <= every maintained index's recorded catch-up for
    s (no record means not caught up: readers use the generation's own index meanwhile);
(c) ``retained-version:<v>``: every retained version (main, branches, tags) had merged g,
    so time travel to it never needs the generation (every version counts, in order: a
    restore makes progress non-monotone; :mod:`memwal.gc.versions` keeps that cheap);
(d) ``grace-period``: the first retained version that merged g is older than the reader
    grace period: a reader that listed g before that merge may still be reading it, and
    pylance's LsmScanner fails rather than skips when a listed generation is missing;
(e) a WAL entry goes only when every generation it may belong to is deletable and it is not
    past the shard manifest's ``replay_after_wal_entry_position``; one past it is *kept*, not
    blocking (``wal-needed-for-replay``). A fence sentinel belongs to no generation: it stops
    the writer its epoch superseded, which nothing on storage shows gone, so it stays
    (``fence-sentinel``) unless it is of an older epoch than the shard's writer, at or below
    that position, and older than the version-expiry bound (:func:`memwal.gc.wal.sentinel_may_go`);
(f) ``checkpoint:<id>``: no live reader checkpoint lists g (memwal.checkpoint); its record
    pins its base version by itself (the run expires exactly the plan's versions, never one a
    live record names, never by a clock difference; the Lance tag is a convenience), so gate
    (c) holds what merged after it. A checkpoint whose version is gone anyway is named in a
    warning and GC goes on;
and ``unsafe-path``: the manifest path resolves inside ``_mem_wal/<shard>/`` (invariant 5).
An unlisted generation folder (an orphan) passes the same gates (``orphan-<gate>``); a shard
whose latest manifest cannot be established keeps everything (``shard-manifest-*``).

GC is six collectors, each with its own plan and typed result, composed by one run
(:mod:`memwal.gc.run`): version expiry (:mod:`memwal.gc.expiry`), generations
(:mod:`memwal.gc.generations`), WAL entries (:mod:`memwal.gc.wal`), orphans
(:mod:`memwal.gc.orphans`), checkpoints (:mod:`memwal.checkpoint.expiry`) and run history
(:mod:`memwal.history.prune`). The plan (:mod:`memwal.gc.plan`) reads everything before the
first write and is the dry run (:meth:`GcPlan.preview`); the run executes exactly it, after a
re-check that only drops items (:mod:`memwal.gc.recheck`). Requests are money on an object
store: GC reads one listing of ``_mem_wal/``, the shard manifests and what it remembered
(the retained-progress and WAL-header digests), and deletes in the store's batches
(:mod:`memwal.gc.delete`). ``memwal.actions.run`` is GC's only entry.
"""

from memwal.gc.delete import (
    BATCH_OBJECTS,
    PrefixOutcome,
    Target,
    delete_keys,
    delete_objects,
    delete_prefixes,
)
from memwal.gc.engine import GcEngine, LocalGcEngine
from memwal.gc.gates import DEFAULT_GRACE_SECONDS, FENCE_SENTINEL, GRACE_PERIOD, UNSAFE_PATH, WAL_NEEDED_FOR_REPLAY
from memwal.gc.plan import DEFAULT_ORPHAN_AGE_SECONDS, GcPlan, plan_gc, plan_gc_settled, prepare_gc
from memwal.gc.report import render_gc
from memwal.gc.result import GcResult, problems_in
from memwal.gc.run import run_gc

__all__ = [
    "BATCH_OBJECTS", "DEFAULT_GRACE_SECONDS", "DEFAULT_ORPHAN_AGE_SECONDS", "FENCE_SENTINEL", "GRACE_PERIOD",
    "UNSAFE_PATH", "WAL_NEEDED_FOR_REPLAY", "GcEngine", "GcPlan", "GcResult", "LocalGcEngine", "PrefixOutcome",
    "Target", "delete_keys", "delete_objects", "delete_prefixes", "plan_gc", "plan_gc_settled", "prepare_gc",
    "problems_in", "render_gc", "run_gc",
]
