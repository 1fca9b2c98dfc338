"""Running a backfill: the maintenance cycle (:mod:`memwal.cycle`) over many tables, resumable.

A backfill adds two things to the cycle runner: tables run concurrently, and every job that
is ``done`` is recorded in the state file as it finishes, so a rerun skips it (unless its
options changed, or ``restart``). Nothing else is recorded: a ``waiting`` GC, a ``held``
lease and a failure all run again next time. A dry run records nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memwal.actions import ACTIONS
from memwal.actions.options import JobOptions
from memwal.backfill.state import DEFAULT_STATE_FILE, BackfillState, options_fingerprint
from memwal.backfill.tables import unique_tables
from memwal.core.document import Document
from memwal.core.pool import parallel_map
from memwal.cycle import CycleResult, JobOutcome, JobStatus, Notify, parse_jobs, run_cycle_at
from memwal.errors import BadInputError


@dataclass(frozen=True)
class BackfillReport(Document):
    jobs: tuple[str, ...]
    tables: tuple[CycleResult, ...]
    state_file: str
    seconds: float = 0.0
    dry_run: bool = False

    @property
    def failed_tables(self) -> list[CycleResult]:
        return [t for t in self.tables if t.failed is not None]

    def counts(self) -> dict[JobStatus, int]:
        out = dict.fromkeys(JobStatus, 0)
        for t in self.tables:
            for j in t.jobs:
                out[j.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobs": list(self.jobs),
            "state_file": self.state_file,
            "dry_run": self.dry_run,
            "seconds": round(self.seconds, 3),
            "summary": {"tables": len(self.tables), "tables_failed": len(self.failed_tables),
                        **{str(k): v for k, v in self.counts().items()}},
            "failed_tables": [t.table for t in self.failed_tables],
            "tables": [t.to_dict() for t in self.tables],
        }


def validated_options(jobs: Sequence[str], given: Mapping[str, Mapping[str, Any]] | None, *, engine: str,
                dry_run: bool) -> dict[str, JobOptions]:
    """Each job's options, validated before anything runs (bad input: exit 2, nothing written)."""
    out: dict[str, JobOptions] = {}
    for job in jobs:
        try:
            out[job] = ACTIONS[job].options.from_kwargs(**{**(given or {}).get(job, {}), "engine": engine,
                                                          "dry_run": dry_run})
        except BadInputError as exc:
            raise BadInputError(f"{job}: {exc}") from None
    return out


def run_backfill(
    tables: Sequence[str],
    jobs: Sequence[str],
    *,
    storage_options: dict[str, str] | None = None,
    engine: str = "local",
    concurrency: int = 1,
    state: BackfillState | None = None,
    restart: bool = False,
    job_options: Mapping[str, Mapping[str, Any]] | None = None,
    dry_run: bool = False,
    progress: Notify | None = None,
) -> BackfillReport:
    """Run ``jobs`` over ``tables`` (see the module docstring). ``progress(event, outcome)`` is
    called with ``"start"`` and ``"end"`` from worker threads."""
    if concurrency < 1:
        raise BadInputError("--concurrency must be at least 1")
    uris = unique_tables(tables)
    if not uris:
        raise BadInputError("no table given")
    names = parse_jobs(list(jobs))
    options = validated_options(names, job_options, engine=engine, dry_run=dry_run)
    state = state or BackfillState(DEFAULT_STATE_FILE)
    if restart and not dry_run:
        state.forget(uris)
    prints = {job: options_fingerprint(engine, dict((job_options or {}).get(job, {}))) for job in names}
    started = time.monotonic()

    def skip(uri: str, job: str) -> str | None:
        record = state.is_done(uri, job)
        if record is None or record.get("options", prints[job]) != prints[job]:
            return None
        earlier = record.get("summary") or ""
        return f"finished earlier ({earlier})" if earlier else "finished earlier"

    def record(event: str, outcome: JobOutcome) -> None:
        if event == "end" and outcome.status is JobStatus.DONE and not dry_run:
            state.mark_done(outcome.table, outcome.job, {"finished_at": time.time(), "summary": outcome.summary,
                                                          "version": outcome.version, "options": prints[outcome.job]})
        if progress is not None:
            progress(event, outcome)

    def one_table(uri: str) -> CycleResult:
        return run_cycle_at(uri, storage_options, names, options, notify=record, skip=None if dry_run else skip)

    results = parallel_map(one_table, uris, concurrency, name="memwal-backfill")
    return BackfillReport(jobs=tuple(names), tables=tuple(results), state_file=state.path,
                          seconds=time.monotonic() - started, dry_run=dry_run)


__all__ = ["BackfillReport", "run_backfill", "validated_options"]
