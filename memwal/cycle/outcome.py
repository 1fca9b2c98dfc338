"""What one job of a cycle came to, and what a cycle of one table came to.

A status says what a scheduler should do next, not only what happened:

- ``done``: it ran and did all it could; nothing to repeat until new data arrives;
- ``planned``: a dry run: it planned, and did nothing (its summary says what it would do);
- ``waiting``: it ran, and time alone will let a rerun do more (GC held by the reader grace
  period, or by retained versions that expire later): never recorded as finished;
- ``held``: not run, another holder has its lease: a later round runs it (not a failure);
- ``skipped``: not run, by choice (finished earlier in a resumed backfill, not planned);
- ``failed``: it ran and failed (the action's own verdict, or an error): the table's later
  jobs are ``not-run``; other tables go on;
- ``cancelled``: an operator cancelled the table's work (``memwal fleet cancel``): the job
  stopped where nothing was half-done, its leases released, and the table's later jobs are
  ``not-run``. Not a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from memwal.core.document import Document
from memwal.core.json_doc import finite
from memwal.core.kept import BY_AGE, blocked_total, blocking_by_holder, gc_freed_any, kept_by_gate
from memwal.core.words import counted


class JobStatus(StrEnum):
    DONE = "done"
    PLANNED = "planned"
    WAITING = "waiting"
    HELD = "held"
    SKIPPED = "skipped"
    FAILED = "failed"
    NOT_RUN = "not-run"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class JobOutcome(Document):
    """One job on one table: its status, how long it took, one line of what it did or why
    not, and the job's result document (``memwal <job> --json``; None when it did not run).
    Plain data throughout, so an outcome travels (from a Spark executor, into XCom) whole."""

    table: str
    job: str
    status: JobStatus
    seconds: float = 0.0
    summary: str = ""
    error: str | None = None
    exit_code: int | None = None
    document: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def version(self) -> int | None:
        """The table version the job committed (None: it committed nothing)."""
        v = (self.document or {}).get("version")
        return v if isinstance(v, int) else None

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "job": self.job, "status": str(self.status), "seconds": round(self.seconds, 3),
                "summary": self.summary, "error": self.error, "exit_code": self.exit_code,
                "result": dict(self.document) if self.document is not None else None}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> JobOutcome:
        """An outcome from its :meth:`to_dict` (as it comes back from an executor)."""
        return cls(str(doc["table"]), str(doc["job"]), JobStatus(doc["status"]), float(doc["seconds"]),
                   str(doc.get("summary") or ""), doc.get("error"), doc.get("exit_code"), doc.get("result"))


@dataclass(frozen=True)
class CycleResult(Document):
    """The jobs of one cycle on one table, in cycle order."""

    table: str
    jobs: tuple[JobOutcome, ...]

    @property
    def failed(self) -> JobOutcome | None:
        """The job that failed (a cycle stops at its first failure), or None."""
        return next((j for j in self.jobs if j.status is JobStatus.FAILED), None)

    @property
    def cancelled(self) -> JobOutcome | None:
        """The job an operator's cancel stopped (or the first not started because of it), or None."""
        return next((j for j in self.jobs if j.status is JobStatus.CANCELLED), None)

    @property
    def error(self) -> str | None:
        failed = self.failed
        return f"{failed.job}: {failed.error}" if failed is not None else None

    def outcome(self, job: str) -> JobOutcome | None:
        return next((j for j in self.jobs if j.job == job), None)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "status": "failed" if self.failed else "ok", "error": self.error,
                "jobs": [j.to_dict() for j in self.jobs]}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CycleResult:
        return cls(str(doc["table"]), tuple(JobOutcome.from_dict(j) for j in doc["jobs"]))


def summarize(job: str, doc: dict[str, Any]) -> str:
    """One short phrase for a job's result document (a summary table's cell, a log line)."""
    if doc.get("dry_run"):
        return _planned(job, doc)
    if job == "merge":
        if doc.get("version") is None:
            return "nothing to merge"
        gens = sum(s["to_generation"] - s["from_generation"] + 1 for s in doc.get("shards", []))
        return f"v{doc['version']}: {counted(gens, 'generation')}"
    if job == "catchup":
        if not doc.get("indexes"):
            return "no index to catch up"
        state = "recorded" if doc.get("all_recorded") else "not all recorded"
        return f"v{doc['version']}: {len(doc['indexes'])} indexes {state}" if doc.get("version") else state
    if job == "compact":
        if doc.get("version") is None:
            return "nothing to compact"
        return f"v{doc['version']}: {doc.get('fragments_before')} -> {doc.get('fragments_after')} fragments"
    if job == "snapshot":
        return f"v{doc['version']}" if doc.get("version") is not None else "unchanged"
    if job == "gc":
        return f"{len(doc.get('deleted', []))} deleted, {blocked_total(doc)} blocked" + _kept(doc)
    return "done"


def _planned(job: str, doc: dict[str, Any]) -> str:
    """What a dry run would do."""
    if job == "merge":
        gens = sum(len(s.get("generations", [])) for s in doc.get("shards", []))
        return f"would merge {counted(gens, 'generation')} of {counted(len(doc.get('shards', [])), 'shard')}" \
            if gens else "nothing to merge"
    if job == "gc":
        deleted = counted(len(doc.get("deleted", [])), "generation folder")
        return f"would delete {deleted}, {blocked_total(doc)} blocked" \
            + _kept(doc)
    if job == "catchup":
        work = [i for i in doc.get("indexes", []) if i.get("action") not in (None, "none")]
        return f"would catch up {len(work)} indexes" if work else "nothing to catch up"
    if job == "compact":
        n = doc.get("fragments_to_rewrite") or 0
        return f"would rewrite {n} of {doc.get('fragments_before')} fragments" if n else "nothing to compact"
    if job == "snapshot":
        return f"unchanged: {doc.get('reason')}" if doc.get("noop") else f"would publish {doc.get('num_shards')} shards"
    return "planned"


def _kept(doc: Mapping[str, Any]) -> str:
    """GC's own gates for what it kept, each with when it passes (its ``wait``), or nothing."""
    from memwal.core.waits import brief

    said = brief(doc.get("wait"))
    return f": {said}" if said else ""


def waits_for_time(job: str, doc: dict[str, Any]) -> bool:
    """Whether a later run of ``job``, with nothing else changed, would do more: a GC held by
    the reader grace period, by a checkpoint (it expires), by untagged retained versions
    while version expiry is on (they age out of ``--expire-versions``), or by a live writer (its
    shard drains once it is quiet for ``--writer-idle-seconds``: retried later, not in every
    round). Tags and branches are the user's to delete: they free nothing with time. The codes
    are read from the document (``memwal.gc.gates``' names): importing GC here would load Lance."""
    if job != "gc" or doc.get("dry_run"):
        return False
    if doc.get("time_will_free") or kept_by_gate(doc, "writer-live"):
        return True
    holders = blocking_by_holder(doc)
    expiring = doc.get("expired_versions") is not None
    return "checkpoint" in holders or (expiring and BY_AGE in holders)


def gc_freed(doc: Mapping[str, Any]) -> bool:
    """Whether a whole GC run freed something or drained toward it: a drain written, or anything
    deleted that the retention kept (generations, WAL entries, their objects, orphans, run history,
    expired checkpoints, expired base versions). A follower backs its whole GC off while this is
    false: a run that freed nothing walked every retained folder for nothing.

    Left out: a rollup and old shard-manifest versions pruned, which came at every run beside a
    writer that never stops and so kept the whole GC at every minute, however many folders it walks
    (issue 82: the listing pass rolls up every few seconds, and the whole run finds the merge that
    landed since; such a writer writes some 40 manifest versions a minute, so once the grace period
    has passed every run prunes some); and receipts pruned, bookkeeping alike. All of them wait
    harmlessly: at most ``--gc-max-every`` longer."""
    return gc_freed_any(doc)


def gc_frees_at(doc: Mapping[str, Any]) -> float | None:
    """The wall-clock time a whole GC's document says its gates pass (its ``wait``'s ``frees_at``;
    None: none named, or not a bounded number), which a follower's backoff waits no longer than."""
    wait = doc.get("wait")
    return finite(wait.get("frees_at")) if isinstance(wait, Mapping) else None


def gc_wait(every: float, max_every: float, idle: int, frees_in: float | None) -> float:
    """Seconds from a whole GC to the next, for a follower (a table's and a fleet's alike): ``every``,
    doubled for each of the ``idle`` runs in a row that freed nothing (:func:`gc_freed`) up to
    ``max_every``, or sooner when the last run named the time its gates pass (``frees_in`` seconds
    after it), never sooner than ``every``."""
    if not idle:
        return every
    backed_off = float(min(max_every, every * 2 ** min(idle, 32)))
    return backed_off if frees_in is None else max(every, min(backed_off, frees_in))


__all__ = ["CycleResult", "JobOutcome", "JobStatus", "gc_freed", "gc_frees_at", "gc_wait", "summarize",
           "waits_for_time"]
