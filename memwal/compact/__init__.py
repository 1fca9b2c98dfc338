"""Fragment compaction of the base table, keeping merge progress and index catch-up.

Every merge adds fragments and deletion files, and nothing else removes them, so reads
slow down. Lance's own compaction fixes that, but on a MemWAL table its commit drops
``index_catchup`` for every index (garbage collection then waits for a later commit that
re-earns it). This job runs Lance's compaction the distributed way (plan on the driver,
one task per rewrite group on an engine, one commit), then re-earns the catch-up record
through the catch-up job's own functions and reads it back.

``plan_compaction`` is pure (the dry run); ``execute_compaction`` takes exactly that plan.
``run_compact`` re-plans after a commit conflict with a concurrent writer (a merge that
touched the same fragments): the rewrite was made against an older version, so it must
be redone against the new one.

- :mod:`memwal.compact.plan`: the plan (pure: the dry run);
- :mod:`memwal.compact.engine`: where the rewrite tasks run (:class:`LocalCompactEngine` in-process);
- :mod:`memwal.compact.execute`: running exactly that plan.
"""

from memwal.compact.engine import CompactEngine, LocalCompactEngine
from memwal.compact.execute import (
    CATCHUP_ATTEMPTS,
    CompactResult,
    IndexCatchup,
    check_progress_kept,
    execute_compaction,
    finish,
    restore_catchup,
    run_compact,
)
from memwal.compact.plan import CompactPlan, TaskPlan, dropped_catchup, lance_options, plan_compaction

__all__ = [
    "CATCHUP_ATTEMPTS", "CompactEngine", "CompactPlan", "CompactResult", "IndexCatchup", "LocalCompactEngine",
    "TaskPlan", "check_progress_kept", "dropped_catchup", "execute_compaction", "finish", "lance_options",
    "plan_compaction", "restore_catchup", "run_compact",
]
