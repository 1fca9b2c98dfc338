"""What the fleet's runs left behind, per table: the last runs, the failures and the waits.

Kept in the state's ``runs.json`` (:mod:`memwal.fleet.state`) by whoever ran the tables (the
fleet runner after each round, the Airflow DAG's summary task after the mapped tasks), so
that any machine's next plan and the page know:

- ``last``: the table's last cycle, each job's status and one line of what it did;
- ``failures``: its last :data:`MAX_FAILURES` failed jobs, each with its reason and exit code
  (a failure history per table; every run also has its record in the table's own history);
- ``waiting``: jobs that ran and said only time will free more (a GC in its grace period):
  not planned again before the policy's ``gc_retry_seconds`` (the plan's ``backoff``);
- ``gc``: what kept its merged generations at its last GC, each gate as GC names it, and when
  they free (:mod:`memwal.fleet.gc_wait`): the plan's reasons and the page say it.

Bounded: the :data:`MAX_TABLES` tables most recently run are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memwal.cycle import CycleResult
    from memwal.fleet.state import FleetState

MAX_FAILURES = 10
MAX_TABLES = 20_000
MAX_TEXT = 500


def record_results(state: FleetState, results: Iterable[CycleResult | Mapping[str, Any]], *, now: float,
                   retry_after: Callable[[str], float],
                   gc_waits: Mapping[str, Mapping[str, Any] | None] | None = None) -> dict[str, Any]:
    """Add the cycles' outcomes (results, or their ``to_dict()`` documents) to ``runs.json``
    (compare-and-swap); the new document. ``retry_after(table)``: seconds before a waiting GC
    of that table is planned again. ``gc_waits``: per table whose GC ran, what kept its merged
    generations (:func:`memwal.fleet.gc_wait.gc_wait`; None: nothing), kept as its ``gc``."""
    docs = [r if isinstance(r, Mapping) else r.to_dict() for r in results]
    if not docs:
        return state.read("runs.json")[0]
    waits = dict(gc_waits or {})

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        tables = {k: dict(v) for k, v in (doc.get("tables") or {}).items() if isinstance(v, Mapping)}
        for r in docs:
            entry = tables.pop(str(r["table"]), {})
            entry["at"] = now
            entry["last"] = [_job(j, now) for j in r["jobs"] if j["status"] != "not-run"] or entry.get("last", [])
            failures = [f for f in entry.get("failures") or [] if isinstance(f, Mapping)]
            failures += [_job(j, now) for j in r["jobs"] if j["status"] == "failed"]
            entry["failures"] = failures[-MAX_FAILURES:]
            waiting = {k: v for k, v in (entry.get("waiting") or {}).items() if isinstance(v, int | float) and v > now}
            for j in r["jobs"]:
                if j["status"] == "waiting":
                    waiting[j["job"]] = now + retry_after(str(r["table"]))
                elif j["status"] == "done":
                    waiting.pop(j["job"], None)
            entry["waiting"] = waiting
            table = str(r["table"])
            if table in waits:
                wait = waits[table]
                if wait is None:
                    entry.pop("gc", None)
                else:
                    entry["gc"] = {**wait, "retry_at": waiting.get("gc")}
            tables[table] = entry  # last: the most recently run at the end
        return {**doc, "tables": dict(list(tables.items())[-MAX_TABLES:])}

    return state.update("runs.json", change)


def _job(j: Mapping[str, Any], now: float) -> dict[str, Any]:
    return {"at": now, "job": str(j["job"]), "status": str(j["status"]),
            "summary": str(j.get("summary") or "")[:MAX_TEXT], "error": str(j["error"])[:MAX_TEXT]
            if j.get("error") else None, "exit_code": j.get("exit_code")}


def backoff_of(doc: Mapping[str, Any], now: float) -> dict[str, dict[str, float]]:
    """Per table, job -> the time before which it is not planned again."""
    out: dict[str, dict[str, float]] = {}
    for table, entry in (doc.get("tables") or {}).items():
        waiting = entry.get("waiting") if isinstance(entry, Mapping) else None
        if isinstance(waiting, Mapping):
            due = {str(j): float(t) for j, t in waiting.items() if isinstance(t, int | float) and t > now}
            if due:
                out[str(table)] = due
    return out


def last_gcs(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Per table, what kept its merged generations at its last GC (see :func:`record_results`)."""
    out: dict[str, Mapping[str, Any]] = {}
    for table, entry in (doc.get("tables") or {}).items():
        gc = entry.get("gc") if isinstance(entry, Mapping) else None
        if isinstance(gc, Mapping):
            out[str(table)] = gc
    return out


def entry_of(doc: Mapping[str, Any], table: str) -> Mapping[str, Any]:
    entry = (doc.get("tables") or {}).get(table)
    return entry if isinstance(entry, Mapping) else {}


def failures_of(doc: Mapping[str, Any], table: str | None = None) -> list[dict[str, Any]]:
    """Failures, newest first: of one table, or of every table (each with its table)."""
    tables = [table] if table is not None else list(doc.get("tables") or {})
    out = [{"table": t, **f} for t in tables for f in entry_of(doc, t).get("failures") or [] if isinstance(f, Mapping)]
    return sorted(out, key=lambda f: -float(f.get("at") or 0.0))


__all__ = ["MAX_FAILURES", "backoff_of", "entry_of", "failures_of", "last_gcs", "record_results"]
