"""The five maintenance actions (merge, catchup, compact, gc, snapshot) and how one runs.

- :mod:`memwal.actions.options`: each action's options, declared once;
- :mod:`memwal.actions.action`: what an action is, and the leases a run holds;
- :mod:`memwal.actions.registry`: the five actions;
- :mod:`memwal.actions.engines`: where the work runs (``local``, or a plugged-in engine);
- :mod:`memwal.actions.run`: plan, then execute exactly that plan, recorded in the history.
"""

from memwal.actions.action import Action, HeldLeases, lease_set
from memwal.actions.registry import ACTIONS
from memwal.actions.run import JobResult, action, new_run_id, run, run_action

__all__ = ["ACTIONS", "Action", "HeldLeases", "JobResult", "action", "lease_set", "new_run_id", "run", "run_action"]
