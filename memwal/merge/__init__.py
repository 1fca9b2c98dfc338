"""The merger: flushed generations into the base table, in order, with atomic progress.

``plan_merge`` is pure (the dry run); ``execute_merge`` takes the plan, an engine that
computes the net change set, and the merge lease. Each pass joins its change set to the
base through the key index or a scan, by the measured rule of :mod:`memwal.merge.join`.
"""

from memwal.merge.engine import LocalMergeEngine, MergeEngine
from memwal.merge.execute import MergeResult, ShardMergeResult, execute_merge, run_merge
from memwal.merge.model import GenerationRef, MergePlan, ShardMergePlan
from memwal.merge.plan import plan_merge

__all__ = [
    "GenerationRef",
    "LocalMergeEngine",
    "MergeEngine",
    "MergePlan",
    "MergeResult",
    "ShardMergePlan",
    "ShardMergeResult",
    "execute_merge",
    "plan_merge",
    "run_merge",
]
