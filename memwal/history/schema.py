"""What a stored run record may hold, checked field by field when it is read.

Whoever can write the table's storage can write a run record (DESIGN 3.9), so a record is
data, not trust: :func:`checked` takes the parsed JSON and returns the fields of a
:class:`~memwal.history.record.RunRecord` only if every one has the type and range the
views rely on (a number where a figure is drawn, a time a calendar can hold, a job name that
is a plain word); anything else raises :class:`BadRecord` naming the field, and the reader
skips that record with a warning. Unknown figures are kept when they are plain JSON values
(newer writers add figures; the views show only those they know).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypedDict

from memwal.core.waits import stored_wait

#: Latest start time a record can state (the history key's limit, the year 5138).
MAX_TIMESTAMP = (10**14 - 1) / 1000
JOB_RE = re.compile(r"^[a-z][a-z_.-]{0,31}$")
#: Longest run id, engine name, holder, job-specific reason kept from a record.
MAX_NAME_CHARS = 512
#: Most versions, shards, indexes a record may list (a run commits a few versions).
MAX_ITEMS = 100_000


class BadRecord(ValueError):
    """A stored run record that does not match the model (the message names the field)."""


class LagTotal(TypedDict):
    """A run's lag summed over shards (``memwal.history.record.lag_total``)."""

    shards: int
    generations: int
    rows: int
    oldest_seconds: float


def _int(name: str, v: object, *, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise BadRecord(f"{name}: expected a count, got {_show(v)}")
    return v


def _number(name: str, v: object, *, optional: bool = False, low: float = 0.0, high: float = math.inf) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low <= v <= high:
        raise BadRecord(f"{name}: expected a number from {low:g} to {high:g}, got {_show(v)}")
    return float(v)


def _text(name: str, v: object, *, optional: bool = True, limit: int | None = MAX_NAME_CHARS) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str) or (limit is not None and len(v) > limit):
        raise BadRecord(f"{name}: expected text{f' of at most {limit} characters' if limit else ''}, got {_show(v)}")
    return v


def _flag(name: str, v: object) -> bool:
    if not isinstance(v, bool):
        raise BadRecord(f"{name}: expected true or false, got {_show(v)}")
    return v


def _list(name: str, v: object) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_ITEMS:
        raise BadRecord(f"{name}: expected a list of at most {MAX_ITEMS:,} items, got {_show(v)}")
    return v


def _dict(name: str, v: object) -> dict[str, Any]:
    if not isinstance(v, dict) or len(v) > MAX_ITEMS:
        raise BadRecord(f"{name}: expected an object of at most {MAX_ITEMS:,} keys, got {_show(v)}")
    return v


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:40] + "…"


def _counts(name: str, v: object) -> dict[str, int]:
    return {str(_text(f"{name} key", k, optional=False)): int(_int(f"{name}[{k!r}]", n) or 0)
            for k, n in _dict(name, v).items()}


def _shard_figure(name: str, v: object) -> dict[str, Any]:
    d = _dict(name, v)
    out: dict[str, Any] = {"shard_id": _text(f"{name}.shard_id", d.get("shard_id"), optional=False)}
    for k in ("from_generation", "to_generation", "rows_upserted", "rows_deleted"):
        out[k] = _int(f"{name}.{k}", d.get(k))
    return out


def _index_figure(name: str, v: object) -> dict[str, Any]:
    d = _dict(name, v)
    return {"index_name": _text(f"{name}.index_name", d.get("index_name"), optional=False),
            "action": _text(f"{name}.action", d.get("action"), optional=False),
            "recorded": _flag(f"{name}.recorded", d.get("recorded"))}


def _plain(name: str, v: object, depth: int = 0) -> object:
    """An unknown figure: a JSON value of bounded depth (it is only printed as JSON)."""
    if v is None or isinstance(v, bool | int | str) or (isinstance(v, float) and math.isfinite(v)):
        return v
    if depth < 4 and isinstance(v, list):
        return [_plain(name, x, depth + 1) for x in _list(name, v)]
    if depth < 4 and isinstance(v, dict):
        return {str(k): _plain(name, x, depth + 1) for k, x in _dict(name, v).items()}
    raise BadRecord(f"figures.{name}: not a plain JSON value")


#: The figures the jobs write (memwal.history.record.figures) and what each may hold.
_FIGURES: dict[str, Callable[[str, object], object]] = {
    **{k: lambda n, v: _int(n, v, optional=True) for k in (
        "generations", "rows_upserted", "rows_deleted", "blocked", "shard_count", "wal_entries", "objects", "bytes",
        "checkpoints_removed", "expired_versions", "num_shards", "repairs", "fragments_before", "fragments_after",
        "deletions_materialized", "drained", "rolled_up", "history_pruned")},
    "committed": _flag,
    "catchup_repaired": lambda n, v: None if v is None else _flag(n, v),
    "reason": _text,
    "commit_path": _text,
    "blocked_by_reason": _counts,
    "time_will_free": lambda n, v: None if v is None else _flag(n, v),
    "listed_only": lambda n, v: None if v is None else _flag(n, v),
    "plan_seconds": lambda n, v: _number(n, v, optional=True),
    "operations": lambda n, v: None if v is None else _counts(n, v),
    "shards": lambda n, v: [_shard_figure(f"{n}[{i}]", s) for i, s in enumerate(_list(n, v))],
    "indexes": lambda n, v: [_index_figure(f"{n}[{i}]", s) for i, s in enumerate(_list(n, v))],
    "wait": lambda n, v: stored_wait(_dict(n, v)) if v is not None else None,  # GC's own, fields rebuilt
}


def checked_figures(v: object) -> dict[str, Any]:
    return {str(k): _FIGURES.get(str(k), _plain)(f"figures.{k}", x) for k, x in _dict("figures", v).items()}


def checked_lag(v: object) -> dict[str, list[float | int | None]]:
    out: dict[str, list[float | int | None]] = {}
    for shard, row in _dict("lag", v).items():
        if not isinstance(row, list) or len(row) != 3:
            raise BadRecord(f"lag[{_show(shard)}]: expected [generations, rows, age seconds], got {_show(row)}")
        out[str(shard)] = [_int(f"lag[{shard!r}] generations", row[0], optional=True),
                           _int(f"lag[{shard!r}] rows", row[1], optional=True),
                           _number(f"lag[{shard!r}] age", row[2], optional=True)]
    return out


def checked_lag_total(v: object) -> LagTotal | None:
    if v is None:
        return None
    d = _dict("lag_total", v)
    return {"shards": int(_int("lag_total.shards", d.get("shards")) or 0),
            "generations": int(_int("lag_total.generations", d.get("generations")) or 0),
            "rows": int(_int("lag_total.rows", d.get("rows")) or 0),
            "oldest_seconds": float(_number("lag_total.oldest_seconds", d.get("oldest_seconds", 0.0)) or 0.0)}


def checked(obj: object, outcomes: tuple[str, ...]) -> dict[str, Any]:
    """The fields of a run record from its parsed JSON, each checked (BadRecord otherwise)."""
    d = _dict("record", obj)
    job = _text("job", d.get("job"), optional=False)
    if job is None or not JOB_RE.match(job):
        raise BadRecord(f"job: expected a job name, got {_show(job)}")
    outcome = d.get("outcome")
    if outcome not in outcomes:
        raise BadRecord(f"outcome: expected one of {', '.join(outcomes)}, got {_show(outcome)}")
    started = _number("started_at", d.get("started_at"), high=MAX_TIMESTAMP)
    finished = _number("finished_at", d.get("finished_at"), optional=True, low=started or 0.0, high=MAX_TIMESTAMP)
    return {
        "job": job,
        "run_id": _text("run_id", d.get("run_id"), optional=False),
        "engine": _text("engine", d.get("engine")),
        "holder": _text("holder", d.get("holder")),
        "outcome": outcome,
        "started_at": started,
        "finished_at": finished,
        "versions": [_int(f"versions[{i}]", v) for i, v in enumerate(_list("versions", d.get("versions", [])))],
        "error": _text("error", d.get("error"), limit=None),
        "figures": checked_figures(d.get("figures") or {}),
        "lag": checked_lag(d.get("lag") or {}),
        "lag_total": checked_lag_total(d.get("lag_total")),
        "detail": _flag("detail", d.get("detail", False)),
    }


def checked_detail(obj: object) -> tuple[dict[str, Any], dict[str, list[float | int | None]]]:
    """The figures and lag of a record's detail object, checked as a record's are."""
    d = _dict("detail", obj)
    return checked_figures(d.get("figures") or {}), checked_lag(d.get("lag") or {})


__all__ = ["MAX_TIMESTAMP", "BadRecord", "LagTotal", "checked", "checked_detail"]
