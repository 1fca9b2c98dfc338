"""What a follower did, in bounded figures: it may run for months, so nothing here grows with time.

Per job, how many runs ended in each status and the last run's outcome; the generations merged;
how often it looked and what that cost; the last few failures; why it stopped. The
``--json`` document of ``memwal cycle --follow`` and ``memwal fleet run --follow``.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

from memwal.core.document import Document
from memwal.core.words import counted
from memwal.cycle import CycleResult, JobOutcome, JobStatus

#: Failures kept for the report (the run history keeps every run).
KEPT_FAILURES = 20

#: Why a follower stopped, when it was not asked to: an operator cancelled its work, or its lease
#: was taken over (both exit 3, as for any job).
CANCELLED, LEASE_LOST = "cancelled", "lease-lost"
#: ... or its table was removed under it (exit 1: there is nothing left to follow).
GONE = "table-gone"


@dataclass
class FollowTally(Document):
    """A follower's figures so far (see the module docstring)."""

    target: str
    runs: dict[str, Counter[str]] = field(default_factory=dict)
    last: dict[str, JobOutcome] = field(default_factory=dict)
    cycles: int = 0
    looks: int = 0
    requests: int = 0
    generations_merged: int = 0
    failures: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=KEPT_FAILURES))
    seconds: float = 0.0
    #: Why it stopped (a signal's name, ``max-seconds``, :data:`CANCELLED`, :data:`LEASE_LOST`).
    stopped: str | None = None
    detail: str | None = None

    def add(self, result: CycleResult) -> None:
        self.cycles += 1
        for j in result.jobs:
            self.runs.setdefault(j.job, Counter())[str(j.status)] += 1
            if j.status is JobStatus.NOT_RUN:
                continue
            self.last[j.job] = replace(j, document=None)  # its summary; the document is in the run history
            if j.status is JobStatus.FAILED:
                self.failures.append({"table": j.table, "job": j.job, "error": j.error})
            if j.job == "merge" and j.document is not None and j.status is JobStatus.DONE:
                self.generations_merged += sum(s["to_generation"] - s["from_generation"] + 1
                                               for s in j.document.get("shards", []))

    @property
    def exit_code(self) -> int:
        """0 when it stopped because it was asked to (a signal, its time up); 3 when its work was
        cancelled by an operator or its lease lost; 1 when its table was removed."""
        return 3 if self.stopped in (CANCELLED, LEASE_LOST) else 1 if self.stopped == GONE else 0

    def to_dict(self) -> dict[str, Any]:
        return {"follow": self.target, "seconds": round(self.seconds, 3), "stopped": self.stopped,
                "detail": self.detail, "cycles": self.cycles, "looks": self.looks, "requests": self.requests,
                "generations_merged": self.generations_merged,
                "runs": {job: dict(sorted(c.items())) for job, c in sorted(self.runs.items())},
                "last": {job: o.to_dict() for job, o in sorted(self.last.items())},
                "failures": list(self.failures)}

    def line(self) -> str:
        """One line for the log: what it did so far."""
        runs = ", ".join(f"{sum(c.values())} {job}" for job, c in sorted(self.runs.items()))
        failed = sum(c.get(str(JobStatus.FAILED), 0) for c in self.runs.values())
        return (f"following {self.target}: {counted(self.cycles, 'cycle')} ({runs or 'nothing run'}), "
                f"{counted(self.generations_merged, 'generation')} merged, {failed} failed, "
                f"{counted(self.looks, 'look')}")


__all__ = ["CANCELLED", "GONE", "KEPT_FAILURES", "LEASE_LOST", "FollowTally"]
