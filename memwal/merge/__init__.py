"""The merger: flushed generations into the base table, in order, with atomic progress.

``plan_merge`` is pure (the dry run); ``execute_merge`` takes the plan, an engine that
computes the net change set, and the merge lease. Each pass joins its change set to the
base through the key index or a scan, by the measured rule of :mod:`memwal.merge.join`.

Each module loads when one of its names is first asked for: a read borrows the merge's readers
(:mod:`memwal.merge.read`, :mod:`memwal.merge.changes`), not its execution.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports a module on first use
    from memwal.merge.engine import LocalMergeEngine, MergeEngine
    from memwal.merge.execute import MergeResult, ShardMergeResult, execute_merge, run_merge
    from memwal.merge.model import GenerationRef, MergePlan, ShardMergePlan
    from memwal.merge.plan import plan_merge

#: Each module's names: a module is imported when one of its names is first asked for.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "memwal.merge.engine": ("LocalMergeEngine", "MergeEngine"),
    "memwal.merge.execute": ("MergeResult", "ShardMergeResult", "execute_merge", "run_merge"),
    "memwal.merge.model": ("GenerationRef", "MergePlan", "ShardMergePlan"),
    "memwal.merge.plan": ("plan_merge",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

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


def __getattr__(name: str) -> object:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'memwal.merge' has no attribute {name!r}")
