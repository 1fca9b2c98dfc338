"""The maintenance cycle of one table: merge, catchup, compact, gc, snapshot, in that order.

The one runner every multi-job caller uses (``memwal cycle``, ``spark-submit
jobs/maintenance.py``, ``memwal backfill``, the Airflow maintenance operator, the fleet):

- :mod:`memwal.cycle.outcome`: a job's status (done, waiting, held, skipped, failed, not-run)
  and a cycle's result;
- :mod:`memwal.cycle.run`: running them.
"""

from memwal.cycle.outcome import CycleResult, JobOutcome, JobStatus, summarize, waits_for_time
from memwal.cycle.run import JOB_ORDER, Notify, Skip, parse_jobs, run_cycle, run_cycle_at, run_job

__all__ = ["JOB_ORDER", "CycleResult", "JobOutcome", "JobStatus", "Notify", "Skip", "parse_jobs", "run_cycle",
           "run_cycle_at", "run_job", "summarize", "waits_for_time"]
