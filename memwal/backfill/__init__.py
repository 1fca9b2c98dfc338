"""Backfills: the maintenance jobs over many tables, resumable.

``run_backfill(tables, jobs, ...)`` runs, for each table, the chosen jobs in the canonical
order (merge, catchup, compact, snapshot, gc) through ``memwal.actions``, as the CLI and
the Airflow operators do; whether a job failed is the action's own verdict. Tables run
concurrently (``concurrency`` threads);
a table's jobs run one after the other, and the first failure stops that table (its later
jobs are reported as not run) without stopping the others.

Resumability: every finished (table, job) pair is recorded in a JSON state file as soon
as it finishes; a rerun skips recorded pairs unless ``restart``. A failed job is never
recorded, so a rerun retries it (and the jobs after it).

No Airflow, no Spark import here: the CLI (``memwal backfill``) adds progress and output.

- :mod:`memwal.backfill.tables`: the tables and jobs given, checked whole before anything runs;
- :mod:`memwal.backfill.state`: the state file of finished (table, job) pairs;
- :mod:`memwal.backfill.run`: running the jobs.
"""

from memwal.backfill.run import (
    DONE,
    FAILED,
    NOT_RUN,
    SKIPPED,
    WAITING,
    BackfillReport,
    JobRun,
    TableRun,
    run_backfill,
    run_job,
    summarize,
)
from memwal.backfill.state import DEFAULT_STATE_FILE, BackfillState, options_fingerprint
from memwal.backfill.tables import JOB_ORDER, parse_jobs, read_tables_file, table_key, table_uri_problem, unique_tables

__all__ = [
    "DEFAULT_STATE_FILE", "DONE", "FAILED", "JOB_ORDER", "NOT_RUN", "SKIPPED", "WAITING", "BackfillReport",
    "BackfillState", "JobRun", "TableRun", "options_fingerprint", "parse_jobs", "read_tables_file", "run_backfill",
    "run_job", "summarize", "table_key", "table_uri_problem", "unique_tables",
]
