"""Readers: what a reader sees of a MemWAL table, over shard snapshots that list only
unmerged generations (so a reader never opens one GC may collect).

- :mod:`memwal.read.plan`: :func:`plan_read` and :class:`ReadPlan` (shard snapshots from the
  published snapshot or the manifests, pruned by a filter);
- :mod:`memwal.read.scan`: :func:`lsm_scan`, :func:`fresh_scan`, :func:`open_plan`;
- :mod:`memwal.read.points`: :func:`lookup` by primary key;
- :mod:`memwal.read.vector`: :func:`nearest` (vector search);
- :mod:`memwal.read.fold`: reads of a table with merge operators;
- :mod:`memwal.read.checks`, :mod:`memwal.read.pruning`: bad input refused before reading,
  and shard pruning on Lance's own routing.

Every reader takes an optional ``plan`` (a checkpoint's, :mod:`memwal.checkpoint`) and opens
the base table at that plan's version.
"""

from memwal.read.plan import ReadPlan, plan_read, shard_snapshots
from memwal.read.points import lookup
from memwal.read.scan import fresh_scan, lsm_scan, open_plan
from memwal.read.vector import nearest

__all__ = ["ReadPlan", "fresh_scan", "lookup", "lsm_scan", "nearest", "open_plan", "plan_read", "shard_snapshots"]
