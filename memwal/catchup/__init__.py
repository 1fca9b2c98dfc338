"""Index catch-up: bring base-table indexes up to the merged generations.

Lance records catch-up itself: when an index commit covers every fragment live at its
read version, Lance writes ``index_catchup[index] = compacted_sstables`` of that version
(docs/architecture.md, pylance facts). So the job's work is to decide, per maintained index, whether to
optimise incrementally (add the unindexed fragments as a delta) or to retrain (too many
deltas, or too large an unindexed fraction, like Zeppelin's retrain threshold), run it,
and read back that Lance recorded the catch-up. GC waits for that record (gate b).

- :mod:`memwal.catchup.plan`: the plan (pure: the dry run);
- :mod:`memwal.catchup.engine`: where the index work runs (:class:`LocalCatchupEngine` in-process);
- :mod:`memwal.catchup.execute`: running exactly that plan.
"""

from memwal.catchup.engine import ALL_DELTAS, CatchupEngine, LocalCatchupEngine
from memwal.catchup.execute import CatchupResult, IndexResult, execute_catchup, run_catchup
from memwal.catchup.plan import NONE, OPTIMIZE, RETRAIN, WAIT, CatchupPlan, CatchupThresholds, IndexPlan, plan_catchup

__all__ = [
    "ALL_DELTAS", "CatchupEngine", "CatchupPlan", "CatchupResult", "CatchupThresholds", "IndexPlan", "IndexResult",
    "LocalCatchupEngine", "NONE", "OPTIMIZE", "RETRAIN", "WAIT", "execute_catchup", "plan_catchup", "run_catchup",
]
