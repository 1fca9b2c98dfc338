"""Rollups: a run of merged generations a reader still needs listed, replaced by one generation.

Every list-reading client (pylance 14's ``ShardWriter.lsm_scanner()``, lance-context) reads the
base table *as its process opened it* plus every generation the shard manifest lists. A writer
that never stops therefore needs every generation merged since it opened to stay listed: the
drain (:mod:`memwal.table.drain`) cannot take them out, and each one costs every reader an open.
A rollup keeps the rows and drops the count: the newest version of each key across the run
(tombstones kept), written by Lance's own ``ShardWriter`` (so it carries the primary-key index,
the bloom filter and the maintained indexes every client expects), listed under the run's
highest generation number in place of the run. For any base version a view may hold, base +
rollup + the rest reads exactly as base + the run + the rest (docs/decisions/0054-rollups.md).

:mod:`memwal.rollup.plan` says which runs (size-tiered); :mod:`memwal.rollup.write` writes one.
"""

from memwal.rollup.plan import RollupPlan, plan_rollups
from memwal.rollup.write import WrittenRollup, write_rollup

__all__ = ["RollupPlan", "WrittenRollup", "plan_rollups", "write_rollup"]
