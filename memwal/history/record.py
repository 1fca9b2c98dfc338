"""One job run as the history keeps it: who, when, what it committed, what it did.

Delta's DESCRIBE HISTORY with its operationMetrics, Iceberg's snapshot summaries: every
maintenance run of a table is one record, whatever started it (CLI, spark-submit, Airflow,
the Python API). The job's own figures come from its result document (:func:`figures`), so
the history says what the job said.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NotRequired, TypedDict

from memwal.core.document import Document
from memwal.core.kept import blocked_by_reason, blocked_total, gc_freed_any
from memwal.core.waits import stored_wait
from memwal.history.schema import LagTotal, checked, checked_detail

#: Outcomes of a run. ``running`` is what a record says until its run ends (a run whose
#: process died stays ``running``; ``memwal history`` shows it as ``abandoned`` once no live
#: lease of its run is left); ``cancelled``: an operator's cancel stopped it at a safe point
#: (``memwal fleet cancel``; its error says who and why, its versions what it committed first).
RUNNING, OK, NOTHING, FAILED, FENCED, ABANDONED = "running", "ok", "nothing-to-do", "failed", "fenced", "abandoned"
CANCELLED = "cancelled"
OUTCOMES = (RUNNING, OK, NOTHING, FAILED, FENCED, ABANDONED, CANCELLED)


class RunEntry(TypedDict):
    """One entry of ``memwal history --json``: a run record's fields, or a stretch of versions
    others committed (``job`` ``external``: no run id, engine or holder; no summary fields)."""

    job: str
    run_id: str | None
    engine: str | None
    holder: str | None
    outcome: str
    started_at: float
    finished_at: float | None
    versions: list[int]
    error: str | None
    figures: dict[str, Any]
    lag: dict[str, list[float | int | None]]
    lag_total: NotRequired[LagTotal | None]
    detail: NotRequired[bool]


def _parsed(data: bytes) -> Any:
    """A stored record's JSON; ValueError (the reader skips it with a warning) for one that is
    not JSON or nests deeper than Python's JSON reader can follow (200 KB of ``[``)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("not a record: nested too deeply") from None


@dataclass
class RunRecord(Document):
    job: str
    run_id: str
    engine: str
    holder: str | None
    outcome: str
    started_at: float
    finished_at: float | None = None
    versions: list[int] = field(default_factory=list)
    error: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    #: Per shard ``[unmerged generations, unmerged rows, oldest unmerged age in seconds]`` when
    #: the run ended: the lag over time the status page draws.
    lag: dict[str, list[float | int | None]] = field(default_factory=dict)
    #: The lag summed over shards (:func:`lag_total`), kept in the record itself when its
    #: per-shard parts are stored apart (``detail``, see :mod:`memwal.history.log`).
    lag_total: LagTotal | None = None
    #: Whether the per-shard figures and lag are in the run's detail object.
    detail: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The record's fields as they are, not deep-copied (a deep copy of every record's
        per-shard lag and figures dominated the status page: docs/decisions/0016). Callers
        replace values, never edit them in place."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def entry(self) -> RunEntry:
        """The same fields, typed as ``memwal history`` lists them (no copy either)."""
        return {"job": self.job, "run_id": self.run_id, "engine": self.engine, "holder": self.holder,
                "outcome": self.outcome, "started_at": self.started_at, "finished_at": self.finished_at,
                "versions": self.versions, "error": self.error, "figures": self.figures, "lag": self.lag,
                "lag_total": self.lag_total, "detail": self.detail}

    def dumps(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, default=str).encode()

    @classmethod
    def loads(cls, data: bytes) -> RunRecord:
        """A stored record, every field checked against the model (:mod:`memwal.history.schema`):
        ValueError naming the field for one that does not match (the reader skips it)."""
        return cls(**checked(_parsed(data), OUTCOMES))

    def summary(self) -> RunRecord:
        """This record without its per-shard parts: the merge's shard list and the lag by
        shard give way to their counts and :func:`lag_total` (``detail`` set)."""
        small = RunRecord(**self.to_dict())
        small.figures = {k: v for k, v in self.figures.items() if k != "shards"}
        if "shards" in self.figures:
            small.figures["shard_count"] = len(self.figures["shards"])
        small.lag, small.lag_total, small.detail = {}, lag_total(self.to_dict()), True
        return small

    def detail_dumps(self) -> bytes:
        """The per-shard parts :meth:`summary` leaves out, as the run's detail object holds them."""
        return json.dumps({"figures": self.figures, "lag": self.lag}, sort_keys=True, default=str).encode()

    def with_detail(self, data: bytes) -> RunRecord:
        """A summary record made whole again from its detail object (:meth:`detail_dumps`)."""
        whole = RunRecord(**self.to_dict())
        whole.figures, whole.lag = checked_detail(_parsed(data))
        return whole


def lag_total(run: Mapping[str, Any]) -> LagTotal | None:
    """A run's lag summed over shards: ``shards``, ``generations``, ``rows``, ``oldest_seconds``
    (None when the run recorded none): from its summary, or summed from its lag by shard."""
    summary: LagTotal | None = run.get("lag_total")
    if summary:
        return summary
    lag = run.get("lag") or {}
    if not lag:
        return None
    return {"shards": len(lag), "generations": sum(int(v[0] or 0) for v in lag.values()),
            "rows": sum(int(v[1] or 0) for v in lag.values()),
            "oldest_seconds": max((float(v[2] or 0) for v in lag.values()), default=0.0)}


def outcome_of(job: str, doc: Mapping[str, Any], problems: list[str]) -> str:
    """ok, nothing-to-do or failed, from a finished run's result document."""
    if problems:
        return FAILED
    did = doc.get("version") is not None or gc_freed_any(doc, "rolled_up")  # a rollup is work, frees nothing
    return OK if did else NOTHING


def figures(job: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The job's own figures, from its result document (the ``--json`` of the command)."""
    if job == "merge":
        return {"shards": [{k: s[k] for k in ("shard_id", "from_generation", "to_generation", "rows_upserted",
                                              "rows_deleted")} for s in doc.get("shards", [])],
                "rows_upserted": sum(s["rows_upserted"] for s in doc.get("shards", [])),
                "rows_deleted": sum(s["rows_deleted"] for s in doc.get("shards", [])),
                "generations": sum(s["to_generation"] - s["from_generation"] + 1 for s in doc.get("shards", [])),
                "blocked": len(doc.get("blocked", [])), "commit_path": doc.get("commit_path")}
    if job == "catchup":
        return {"indexes": [{"index_name": i["index_name"], "action": i["action"], "recorded": i["recorded"]}
                            for i in doc.get("indexes", [])]}
    if job == "compact":
        return {k: doc.get(k) for k in ("fragments_before", "fragments_after", "deletions_materialized",
                                        "catchup_repaired")}
    if job == "snapshot":
        return {"committed": doc.get("version") is not None, "reason": doc.get("reason"),
                "num_shards": doc.get("num_shards"), "repairs": doc.get("repairs")}
    if job == "gc":
        reasons = blocked_by_reason(doc)
        return {"generations": len(doc.get("deleted", [])), "wal_entries": doc.get("wal_entries_deleted", 0),
                "drained": len(doc.get("drained") or []), "rolled_up": len(doc.get("rolled_up") or []),
                "blocked": blocked_total(doc), "time_will_free": bool(doc.get("time_will_free")),
                "history_pruned": doc.get("history_pruned") or 0,
                "objects": doc.get("objects_deleted", 0), "bytes": doc.get("bytes_freed", 0),
                "blocked_by_reason": dict(sorted(reasons.items())),
                "checkpoints_removed": len(doc.get("checkpoints_removed", [])),
                "listed_only": bool(doc.get("listed_only")),  # a listing pass (a follower's), or a whole run
                "expired_versions": (doc.get("expired_versions") or {}).get("old_versions"),
                # what kept the rest and when each gate passes: GC's own account (memwal.gc.wait)
                "wait": stored_wait(doc.get("wait"))}
    return {}
