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
  they free (GC's own ``wait``: :mod:`memwal.gc.wait`): the plan's reasons and the page say it.

Bounded: the :data:`MAX_TABLES` tables most recently run are kept. Storage is untrusted input:
every entry is rebuilt from the fields it should have, of their types, each time the log is
rewritten (:func:`_entry`), so one malformed entry (``waiting: [1]``, a time of ``1e400``) is
read as what it holds of use and never stops a run from recording its tables' results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from memwal.core.json_doc import finite, list_of
from memwal.core.waits import stored_wait

if TYPE_CHECKING:
    from memwal.cycle import CycleResult
    from memwal.fleet.state import FleetState

MAX_FAILURES = 10
MAX_TABLES = 20_000
MAX_TEXT = 500
#: Waits kept per table (one a job: a stored entry with more is junk).
MAX_WAITS = 16


def record_results(state: FleetState, results: Iterable[CycleResult | Mapping[str, Any]], *, now: float,
                   retry_after: Callable[[str], float],
                   gc_waits: Mapping[str, Mapping[str, Any] | None] | None = None) -> dict[str, Any]:
    """Add the cycles' outcomes (results, or their ``to_dict()`` documents) to ``runs.json``
    (compare-and-swap); the new document. ``retry_after(table)``: seconds before a waiting GC
    of that table is planned again. ``gc_waits``: per table whose GC ran, what kept its merged
    generations (GC's ``wait``: :func:`memwal.gc.wait.gc_wait`; None: nothing), kept as its ``gc``."""
    docs = [r if isinstance(r, Mapping) else r.to_dict() for r in results]
    if not docs:
        return state.read("runs.json")[0]
    waits = dict(gc_waits or {})

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        tables = {str(k): _entry(v) for k, v in _tables(doc).items()}
        for r in docs:
            entry = tables.pop(str(r["table"]), None) or _entry({})
            entry["at"] = now
            entry["last"] = [_job(j, now) for j in r["jobs"] if j["status"] != "not-run"] or entry["last"]
            entry["failures"] = (entry["failures"] + [_job(j, now) for j in r["jobs"] if j["status"] == "failed"]
                                 )[-MAX_FAILURES:]
            waiting = {j: t for j, t in entry["waiting"].items() if t > now}
            for j in r["jobs"]:
                if j["status"] == "waiting":
                    waiting[j["job"]] = now + retry_after(str(r["table"]))
                elif j["status"] == "done":
                    waiting.pop(j["job"], None)
            entry["waiting"] = waiting
            table = str(r["table"])
            if table in waits:
                wait = waits[table]
                entry["gc"] = None if wait is None else stored_wait({**wait, "retry_at": waiting.get("gc")})
            tables[table] = entry  # last: the most recently run at the end
        return {**doc, "tables": dict(list(tables.items())[-MAX_TABLES:])}

    return state.update("runs.json", change)


def _job(j: Mapping[str, Any], now: float) -> dict[str, Any]:
    return {"at": now, "job": str(j["job"]), "status": str(j["status"]),
            "summary": str(j.get("summary") or "")[:MAX_TEXT], "error": str(j["error"])[:MAX_TEXT]
            if j.get("error") else None, "exit_code": j.get("exit_code")}


def _tables(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    tables = doc.get("tables")
    return tables if isinstance(tables, Mapping) else {}


def _stored_job(j: Mapping[str, Any]) -> dict[str, Any]:
    """A job's outcome as stored, rebuilt from its fields (anything else dropped)."""
    code = j.get("exit_code")
    return {"at": finite(j.get("at")), "job": str(j.get("job") or "")[:MAX_TEXT],
            "status": str(j.get("status") or "")[:MAX_TEXT], "summary": str(j.get("summary") or "")[:MAX_TEXT],
            "error": str(j["error"])[:MAX_TEXT] if j.get("error") else None,
            "exit_code": code if isinstance(code, int) and not isinstance(code, bool) and 0 <= code < 256 else None}



def _entry(value: Any) -> dict[str, Any]:
    """A table's entry rebuilt from what a stored one holds of use: the jobs' outcomes that are
    mappings, the waits that are bounded times, its last GC's wait (:func:`memwal.core.waits.stored_wait`)."""
    entry = value if isinstance(value, Mapping) else {}
    jobs = {key: [_stored_job(j) for j in list_of(entry.get(key)) if isinstance(j, Mapping)]
            for key in ("last", "failures")}
    waiting = entry.get("waiting")
    due = {str(k)[:MAX_TEXT]: t for k, v in list(waiting.items() if isinstance(waiting, Mapping) else ())[:MAX_WAITS]
           if (t := finite(v)) is not None}
    return {"at": finite(entry.get("at")), "last": jobs["last"][-MAX_FAILURES:],
            "failures": jobs["failures"][-MAX_FAILURES:], "waiting": due, "gc": stored_wait(entry.get("gc"))}


def backoff_of(doc: Mapping[str, Any], now: float) -> dict[str, dict[str, float]]:
    """Per table, job -> the time before which it is not planned again."""
    out: dict[str, dict[str, float]] = {}
    for table, entry in _tables(doc).items():
        waiting = entry.get("waiting") if isinstance(entry, Mapping) else None
        if isinstance(waiting, Mapping):
            due = {str(j): t for j, v in waiting.items() if (t := finite(v)) is not None and t > now}
            if due:
                out[str(table)] = due
    return out


def last_gcs(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Per table, what kept its merged generations at its last GC (see :func:`record_results`),
    rebuilt from its fields (:func:`memwal.core.waits.stored_wait`)."""
    out: dict[str, Mapping[str, Any]] = {}
    for table, entry in _tables(doc).items():
        gc = stored_wait(entry.get("gc")) if isinstance(entry, Mapping) else None
        if gc is not None:
            out[str(table)] = gc
    return out


def entry_of(doc: Mapping[str, Any], table: str) -> dict[str, Any]:
    """A table's entry, rebuilt from what the stored one holds of use (:func:`_entry`)."""
    return _entry(_tables(doc).get(table))


def failures_of(doc: Mapping[str, Any], table: str | None = None) -> list[dict[str, Any]]:
    """Failures, newest first: of one table, or of every table (each with its table)."""
    tables = [table] if table is not None else [str(t) for t in _tables(doc)]
    out = [{"table": t, **f} for t in tables for f in entry_of(doc, t)["failures"]]
    return sorted(out, key=lambda f: -(f["at"] or 0.0))


__all__ = ["MAX_FAILURES", "backoff_of", "entry_of", "failures_of", "last_gcs", "record_results"]
