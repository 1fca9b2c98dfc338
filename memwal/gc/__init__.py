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
(e) a WAL entry goes only when its generation is deletable and it is not past the shard
    manifest's ``replay_after_wal_entry_position``; one past it is *kept*, not blocking:
    it is reported in ``kept_wal_entries`` (``wal-needed-for-replay``) while its generation
    goes, and so is a fence sentinel (``fence-sentinel``: deleting it would free a position
    a fenced-out writer could claim);
(f) ``checkpoint:<id>``: no live reader checkpoint lists g (memwal.checkpoint); its record
    pins its base version by itself (the run expires exactly the plan's versions, never one a
    live record names, never by a clock difference; the Lance tag is a convenience), so gate
    (c) holds what merged after it. A checkpoint whose version is gone anyway is named in a
    warning and GC goes on.
    Expired checkpoints are removed by the run (tag, then record). Before it deletes, a run
    writes the GC marker and reads the checkpoints again (memwal.checkpoint.handshake), so a
    checkpoint created meanwhile is either seen and kept, or sees the run and checks its view;
and ``unsafe-path``: the manifest path resolves inside ``_mem_wal/<shard>/`` (invariant 5).
An unlisted generation directory (an orphan) passes the same gates (``orphan-<gate>``), so
one above the merged generation is never deleted; a shard whose latest manifest cannot be
established keeps everything (``shard-manifest-gap`` / ``-unreadable`` / ``-missing``).
A run reads and validates everything before its first write, and re-checks progress and
catch-up against the latest table version right before it deletes.

A retained version that blocks is explained in ``retention`` (which versions, what holds
them, how many generations each holds back, and the ``--expire-versions`` value that would
expire the untagged ones); ``time_will_free`` says whether a later run with nothing else
changed would free something (a generation held only by the grace period).

Deletion order makes a crash harmless: per batch of generations, their Lance manifests go
first (the datasets stop being openable as a whole), then their other files, then the WAL
entries that only deleted generations needed; a rerun finds the remains and finishes.
Deletions are batched (one listing per shard, one lease check and two store calls per
batch of objects) so collecting thousands of generations costs seconds, not minutes.

- :mod:`memwal.gc.gates`: the gates, and what would free what retained versions hold;
- :mod:`memwal.gc.model`, :mod:`memwal.gc.plan`, :mod:`memwal.gc.orphans`: the plan (pure: the dry
  run), and what no manifest lists or a link could redirect;
- :mod:`memwal.gc.execute`: version expiry, the checkpoint handshake, the deletions;
- :mod:`memwal.gc.delete`: the one link-safe, batched way GC deletes;
- :mod:`memwal.gc.report`: the human summary.
"""

from memwal.gc.delete import (
    BATCH_OBJECTS,
    LocalGcEngine,
    PrefixOutcome,
    delete_keys,
    delete_objects,
    delete_prefix,
    delete_prefixes,
)
from memwal.gc.execute import GcResult, dry_run_result, execute_gc, expire_versions, recheck_gc_plan, run_gc
from memwal.gc.gates import DEFAULT_GRACE_SECONDS, FENCE_SENTINEL, GRACE_PERIOD, UNSAFE_PATH, WAL_NEEDED_FOR_REPLAY
from memwal.gc.model import GcPlan
from memwal.gc.plan import DEFAULT_ORPHAN_AGE_SECONDS, plan_gc, plan_gc_settled, prepare_gc
from memwal.gc.report import render_gc

__all__ = [
    "BATCH_OBJECTS", "DEFAULT_GRACE_SECONDS", "DEFAULT_ORPHAN_AGE_SECONDS", "FENCE_SENTINEL", "GRACE_PERIOD",
    "UNSAFE_PATH", "WAL_NEEDED_FOR_REPLAY", "GcPlan", "GcResult", "LocalGcEngine", "PrefixOutcome", "delete_keys",
    "delete_objects", "delete_prefix", "delete_prefixes", "dry_run_result", "execute_gc", "expire_versions",
    "plan_gc", "plan_gc_settled", "prepare_gc", "recheck_gc_plan", "render_gc", "run_gc",
]
