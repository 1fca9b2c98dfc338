"""``memwal repair``: what GC leaves to an operator, a merged generation whose rows are unproven.

:mod:`memwal.repair.plan` shows it key by key (the dry run, with an id to confirm);
:mod:`memwal.repair.execute` writes the generations' rows or accepts the base, as confirmed.
"""

from memwal.repair.execute import ACCEPTED, APPLY, RepairResult, run_repair
from memwal.repair.plan import RepairPlan, plan_repair

__all__ = ["ACCEPTED", "APPLY", "RepairPlan", "RepairResult", "plan_repair", "run_repair"]
