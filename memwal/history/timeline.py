"""``memwal history``: the table's runs newest first, with the versions others committed.

A run record names the versions its job committed. Versions of the table that no shown run
committed (a writer's appends, another tool, a hand-run ``compact_files()``) are listed
between the runs as ``external`` entries, grouped by stretch, so the timeline has no holes:
an operator sees that 40 appends landed between last night's merge and this morning's.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memwal.core import clock as clocks
from memwal.core.document import Document
from memwal.core.sizes import human_bytes
from memwal.core.text import clip, one_line, span
from memwal.core.waits import brief
from memwal.core.words import counted
from memwal.errors import BadInputError
from memwal.history.log import read_runs
from memwal.history.record import ABANDONED, RUNNING, RunEntry, RunRecord
from memwal.history.run import RUN_ID_PROPERTY
from memwal.history.schema import MAX_TIMESTAMP
from memwal.table.manifest import list_version_infos

if TYPE_CHECKING:
    from memwal.table import Table

JOBS = ("merge", "catchup", "compact", "snapshot", "gc")
#: External stretches longer than this are listed without reading each version's operation.
_OPERATIONS_READ_MAX = 100
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_LAST_YEAR = datetime.fromtimestamp(MAX_TIMESTAMP, UTC).year


def parse_since(value: str | float | None, now: float | None = None) -> float | None:
    """``--since``: an ISO date or time (UTC unless it says otherwise), seconds since the
    epoch, or a duration back from now (``90m``, ``24h``, ``7d``)."""
    if value is None:
        return None
    now = clocks.current()() if now is None else now
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _in_range(value, float(value))
    text = str(value).strip()
    if m := _RELATIVE.match(text):
        return _in_range(value, now - float(m.group(1)) * _UNIT[m.group(2)])
    try:
        return _in_range(value, float(text))
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise BadInputError(f"--since {value!r}: expected an ISO date/time, epoch seconds or a duration "
                            "like 90m, 24h, 7d") from None
    return _in_range(value, (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp())


def _in_range(value: object, at: float) -> float:
    """``at`` if a record could have started then (not nan, not infinite, not before 1970 or
    past the history keys' year 5138): bad input otherwise, naming what was typed."""
    if not math.isfinite(at) or not 0 <= at <= MAX_TIMESTAMP:
        raise BadInputError(f"--since {value!r}: not a time a run can have started at (1970 to {_LAST_YEAR})")
    return at


@dataclass
class History(Document):
    table: str
    runs: list[RunEntry] = field(default_factory=list)
    #: Records skipped as unreadable (too large, not matching the model, dated in the future),
    #: each as ``"<uri>: <why>"``.
    skipped: list[str] = field(default_factory=list)
    #: More runs are recorded than the limit let through (older ones: ``--limit`` shows them).
    more: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "runs": self.runs, "skipped": self.skipped, "more": self.more}


def history(table: Table, *, limit: int = 20, job: str | None = None, since: float | None = None,
            detail: bool = True) -> History:
    """Runs newest first (at most ``limit``), of one ``job`` or all, started at or after
    ``since``; without a job filter, external versions between and after them. With
    ``detail=False``, runs of many shards come as summaries (:func:`read_runs`)."""
    if job is not None and job not in JOBS:
        raise BadInputError(f"--job {job!r}: expected one of {', '.join(JOBS)}")
    skipped: list[str] = []
    # one more than asked for: whether older runs are recorded (a count of them all would read the
    # names of a year of records)
    records = list(read_runs(table.store, job=job, since=since, limit=limit + 1, detail=detail, skipped=skipped))
    more, records = len(records) > limit, records[:limit]
    live = _live_runs(table)
    out = History(table.uri, skipped=skipped, more=limit if more else None)
    for r in records:
        doc = r.entry()
        if r.outcome == RUNNING and r.run_id not in live:
            doc["outcome"] = ABANDONED  # its process ended without recording how
        out.runs.append(doc)
    if job is None:
        # External versions older than the oldest run shown belong to runs not shown, unless
        # every run was shown (no limit reached): then the timeline goes back to version 1.
        complete = since is None and len(records) < limit
        out.runs = _with_external(table, records, out.runs, since, complete=complete)
    return out


def _live_runs(table: Table) -> set[str]:
    from memwal.lease import LIVE, list_leases

    return {i.run_id for i in list_leases(table.store) if i.state == LIVE and i.run_id}


def _with_external(table: Table, records: list[RunRecord], runs: list[RunEntry], since: float | None, *,
                   complete: bool = False) -> list[RunEntry]:
    """Insert the stretches of versions no shown run committed, newest first: from ``since``,
    or from the oldest run shown, or (``complete``: every run is shown) from the first version."""
    ours = {v for r in records for v in r.versions}
    start = since if since is not None or complete else (min((r.started_at for r in records), default=None))
    versions = [(v, obj.mtime) for v, obj in list_version_infos(table.store).items()
                if v not in ours and (start is None or obj.mtime >= start)]
    if not versions:
        return runs
    versions.sort()
    stretches: list[list[tuple[int, float]]] = []
    for v, t in versions:
        if stretches and stretches[-1][-1][0] == v - 1:
            stretches[-1].append((v, t))
        else:
            stretches.append([(v, t)])
    entries = [e for e in (_external(table, s) for s in stretches) if e is not None]
    return sorted(runs + entries, key=lambda d: d["started_at"], reverse=True)


def _external(table: Table, stretch: list[tuple[int, float]]) -> RunEntry | None:
    """One external stretch; None when every version in it carries one of our run ids (a run
    whose record was pruned or not shown)."""
    versions = [v for v, _ in stretch]
    operations: Counter[str] | None = None
    if len(versions) <= _OPERATIONS_READ_MAX:
        operations = Counter()
        ds = table.dataset()
        for v in list(versions):
            try:
                txn = ds.read_transaction(v)
            except (OSError, ValueError, RuntimeError, TypeError):  # pylance 14 cannot read a Rewrite's
                operations["unknown"] += 1
                continue
            if txn is not None and (txn.transaction_properties or {}).get(RUN_ID_PROPERTY):
                versions.remove(v)  # ours, from a run not shown
                continue
            operations[type(txn.operation).__name__ if txn is not None else "unknown"] += 1
        if not versions:
            return None
    left = set(versions)
    times = [t for v, t in stretch if v in left]
    return {"job": "external", "run_id": None, "engine": None, "holder": None, "outcome": "committed",
            "started_at": min(times), "finished_at": max(times), "versions": versions, "error": None,
            "figures": {"operations": dict(sorted(operations.items())) if operations is not None else None},
            "lag": {}}


def render(h: History) -> str:
    skipped = f"; {len(h.skipped)} unreadable record{'s' * (len(h.skipped) != 1)} skipped" if h.skipped else ""
    if not h.runs:
        return f"{h.table}: no runs recorded{skipped}"
    shown = counted(len(h.runs), "entry", "entries")
    if h.more is not None:
        shown += f" (the newest {h.more:,} runs and what happened between them; older runs are recorded: raise --limit)"
    lines = [f"{h.table}: {shown}, newest first{skipped}"]
    for r in h.runs:
        when = datetime.fromtimestamp(r["started_at"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        finished, failure = r["finished_at"], r["error"]
        took = "" if not finished else f" {finished - r['started_at']:.1f}s"
        versions = span(r["versions"])
        what = _summary(r)
        error = f" error: {clip(one_line(failure))}" if failure else ""
        lines.append(f"  {when}{took:>8}  {r['job']:<8} {r['outcome']:<13} versions {versions}{what}{error}")
    return "\n".join(lines)


def _summary(r: RunEntry) -> str:
    f = r.get("figures") or {}
    if r["job"] == "merge" and f:
        return f"  {counted(f.get('generations', 0), 'generation')}, {f.get('rows_upserted', 0):,} upserted, " \
               f"{f.get('rows_deleted', 0):,} deleted"
    if r["job"] == "gc" and f:
        return gc_summary(f)
    if r["job"] == "compact" and f:
        return f"  fragments {f.get('fragments_before')} -> {f.get('fragments_after')}"
    if r["job"] == "external" and f.get("operations"):
        return "  " + ", ".join(f"{n} x {op}" for op, n in f["operations"].items())
    return ""


def gc_summary(f: Mapping[str, Any]) -> str:
    """A GC run's line: what it deleted and freed, what it drained and rolled up, and what it
    kept and why (a run that deleted nothing but kept 5 says so, not "0 generations, 0B freed"):
    GC's own gates with when each passes (its ``wait``), for records that hold one."""
    done = [f"{counted(f.get('generations', 0), 'generation')} deleted, {human_bytes(f.get('bytes', 0))} freed"]
    done += [f"{counted(f[k], noun, plural)}{what}" for k, noun, plural, what in (
        ("wal_entries", "WAL entry", "WAL entries", " deleted"), ("drained", "shard drain", None, ""),
        ("rolled_up", "rollup", None, ""), ("expired_versions", "version", None, " expired"),
        ("history_pruned", "record", None, " pruned")) if f.get(k)]
    reasons = f.get("blocked_by_reason") or {}
    kept = f.get("blocked", sum(reasons.values()))
    wait = brief(f.get("wait"))  # GC's own gates, each with when it passes
    if kept:
        why = wait or ", ".join(f"{n} x {r}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])[:4])
        done.append(f"{kept} kept" + (f" ({why})" if why else "")
                    + ("; waiting: time frees more" if f.get("time_will_free") and not wait else ""))
    return "  " + "; ".join(done)


__all__ = ["History", "gc_summary", "history", "parse_since", "render"]
