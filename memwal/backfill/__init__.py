"""Backfills: the maintenance cycle over many tables, resumable.

``run_backfill(tables, jobs, ...)`` runs the cycle (:mod:`memwal.cycle`: merge, catchup,
compact, snapshot, gc, in that order) on each table, tables concurrently; a table's first
failure stops that table (its later jobs are not run) without stopping the others. Every
``done`` job is recorded in a JSON state file as it finishes; a rerun skips recorded pairs
unless ``restart`` or their options changed. A dry run runs every job's dry run and records
nothing.

- :mod:`memwal.backfill.tables`: the tables given, checked whole before anything runs;
- :mod:`memwal.backfill.state`: the state file of finished (table, job) pairs;
- :mod:`memwal.backfill.run`: the runs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports on first use
    from memwal.backfill.run import BackfillReport, run_backfill, validated_options
    from memwal.backfill.state import DEFAULT_STATE_FILE, BackfillState, options_fingerprint
    from memwal.backfill.tables import read_tables_file, table_key, table_uri_problem, unique_tables
    from memwal.cycle import JOB_ORDER, parse_jobs

__all__ = [
    "DEFAULT_STATE_FILE", "JOB_ORDER", "BackfillReport", "BackfillState", "options_fingerprint", "parse_jobs",
    "read_tables_file", "run_backfill", "table_key", "table_uri_problem", "unique_tables", "validated_options",
]

#: Where each name lives: the CLI reads the state file's default for ``memwal backfill --help``
#: without loading the runs (the cycle, the store, Lance).
_HOME = {
    "BackfillReport": "memwal.backfill.run", "run_backfill": "memwal.backfill.run",
    "validated_options": "memwal.backfill.run",
    "DEFAULT_STATE_FILE": "memwal.backfill.state", "BackfillState": "memwal.backfill.state",
    "options_fingerprint": "memwal.backfill.state",
    "read_tables_file": "memwal.backfill.tables", "table_key": "memwal.backfill.tables",
    "table_uri_problem": "memwal.backfill.tables", "unique_tables": "memwal.backfill.tables",
    "JOB_ORDER": "memwal.cycle", "parse_jobs": "memwal.cycle",
}


def __getattr__(name: str) -> object:
    if name in _HOME:
        return getattr(import_module(_HOME[name]), name)
    raise AttributeError(f"module 'memwal.backfill' has no attribute {name!r}")
