"""The operator's controls over a fleet: pauses, quiet hours, and their log.

- **Pause** a table, a source, or every table a glob matches: its owed jobs are withheld
  (the plan shows it ``paused``, with who paused it, why and when) until resumed. Pauses are
  written in the policy (``paused:``, for the long run) or set by ``memwal fleet pause`` in the
  fleet's state (``controls.json``, :mod:`memwal.fleet.state`), with who and why required.
- **Quiet hours**: time windows (UTC, or a ``tz``) when no job, or no job of the kinds named,
  starts on the tables a window matches; the plan shows those tables ``waiting`` until the
  window ends. Written in the policy (``quiet_hours:``).

Every change made through the state is logged (``log``: pause, resume, cancel, with who,
why and when; the last :data:`MAX_LOG` kept), for the page. A running table's work is
cancelled through its leases (:mod:`memwal.lease.cancel`); the request is logged here too.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dtime
from typing import TYPE_CHECKING, Any

from memwal.errors import BadInputError, MemWalError

if TYPE_CHECKING:
    from memwal.fleet.state import FleetState

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Entries of the controls' log kept (the oldest go first).
MAX_LOG = 500
#: Longest ``by`` and ``reason`` kept.
MAX_TEXT = 500


def matches(pattern: str, uri: str, source: str) -> bool:
    """Whether a control's target names the table: its URI, its source, or a glob over URIs."""
    return pattern in (uri, source) or fnmatch.fnmatchcase(uri, pattern)


@dataclass(frozen=True)
class Pause:
    target: str
    by: str
    reason: str
    at: float | None = None
    origin: str = "state"  # "policy" (the policy file) or "state" (memwal fleet pause)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "by": self.by, "reason": self.reason, "at": self.at, "origin": self.origin}


@dataclass(frozen=True)
class QuietHours:
    """A window, ``start`` to ``end`` (across midnight when ``end`` is earlier), on ``days``."""

    start: dtime
    end: dtime
    days: frozenset[int] = frozenset(range(7))
    jobs: frozenset[str] = frozenset()  # empty: every job
    match: tuple[str, ...] = ()  # empty: every table
    tz: str = "UTC"

    def until(self, uri: str, source: str, job: str, now: float) -> float | None:
        """When the window that holds ``now`` ends, if it applies to this table and job."""
        if self.jobs and job not in self.jobs:
            return None
        if self.match and not any(matches(p, uri, source) for p in self.match):
            return None
        from zoneinfo import ZoneInfo

        local = datetime.fromtimestamp(now, ZoneInfo(self.tz))
        for back in (0, 1):  # a window that began yesterday may still run past midnight
            day = local.date() - timedelta(days=back)
            if day.weekday() not in self.days:
                continue
            begin = datetime.combine(day, self.start, local.tzinfo)
            end = datetime.combine(day + timedelta(days=1 if self.end <= self.start else 0), self.end, local.tzinfo)
            if begin <= local < end:
                return end.timestamp()
        return None

    def describe(self) -> str:
        days = "every day" if len(self.days) == 7 else ",".join(DAYS[d] for d in sorted(self.days))
        jobs = ", ".join(sorted(self.jobs)) or "every job"
        return f"{self.start:%H:%M}-{self.end:%H:%M} {self.tz} {days}: {jobs}"


@dataclass(frozen=True)
class Controls:
    """The controls in force: the policy's and the state's."""

    pauses: tuple[Pause, ...] = ()
    quiet: tuple[QuietHours, ...] = ()

    def paused(self, uri: str, source: str) -> Pause | None:
        """The pause that holds the table (a table's own before a source's or a glob's)."""
        hits = [p for p in self.pauses if matches(p.target, uri, source)]
        return min(hits, key=lambda p: (p.target != uri, p.target != source), default=None)

    def quiet_until(self, uri: str, source: str, job: str, now: float) -> float | None:
        ends = [t for q in self.quiet if (t := q.until(uri, source, job, now)) is not None]
        return max(ends, default=None)

    def with_state(self, doc: Mapping[str, Any]) -> Controls:
        """These controls plus the pauses the state's ``controls.json`` holds."""
        pauses = doc.get("pauses")
        stored = tuple(Pause(str(p.get("target")), _text(p.get("by")), _text(p.get("reason")), _time(p.get("at")))
                       for p in (pauses if isinstance(pauses, list) else []) if isinstance(p, Mapping)
                       and p.get("target"))
        return Controls(self.pauses + stored, self.quiet)


def _text(value: Any) -> str:
    return str(value or "")[:MAX_TEXT]


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- the policy's part


def pauses_from(doc: Any, where: str) -> tuple[Pause, ...]:
    """``paused: {target: {by, reason}}`` of a policy: who and why are required."""
    if doc is None:
        return ()
    if not isinstance(doc, Mapping):
        raise BadInputError(f"policy {where}: expected a mapping of table, source or glob: {{by, reason}}")
    out = []
    for target, entry in doc.items():
        if not isinstance(entry, Mapping) or set(entry) - {"by", "reason"} or not entry.get("by") \
                or not entry.get("reason"):
            raise BadInputError(f"policy {where}.{target}: expected {{by: who, reason: why}} (both required)")
        out.append(Pause(str(target), _text(entry["by"]), _text(entry["reason"]), origin="policy"))
    return tuple(out)


def quiet_from(doc: Any, where: str) -> tuple[QuietHours, ...]:
    """``quiet_hours: [{from: "08:00", to: "18:00", days, jobs, match, tz}]`` of a policy."""
    from memwal.cycle import JOB_ORDER as JOBS

    if doc is None:
        return ()
    if not isinstance(doc, Sequence) or isinstance(doc, str):
        raise BadInputError(f"policy {where}: expected a list of windows ({{from: HH:MM, to: HH:MM, ...}})")
    out = []
    for i, w in enumerate(doc):
        at = f"{where}[{i}]"
        if not isinstance(w, Mapping):
            raise BadInputError(f"policy {at}: expected a mapping")
        unknown = sorted(set(w) - {"from", "to", "days", "jobs", "match", "tz"})
        if unknown:
            raise BadInputError(f"policy {at}.{unknown[0]}: unknown key (expected from, to, days, jobs, match, tz)")
        start, end = _clock(w.get("from"), f"{at}.from"), _clock(w.get("to"), f"{at}.to")
        days = _names(w.get("days"), DAYS, f"{at}.days")
        jobs = _names(w.get("jobs"), JOBS, f"{at}.jobs")
        tz = str(w.get("tz") or "UTC")
        try:
            from zoneinfo import ZoneInfo

            ZoneInfo(tz)
        except (ValueError, KeyError, OSError):
            raise BadInputError(f"policy {at}.tz: unknown time zone {tz!r}") from None
        match = w.get("match") or []
        if isinstance(match, str):
            match = [match]
        out.append(QuietHours(start, end, frozenset(DAYS.index(d) for d in days) if days else frozenset(range(7)),
                              frozenset(jobs), tuple(str(m) for m in match), tz))
    return tuple(out)


def _clock(value: Any, where: str) -> dtime:
    try:
        hours, minutes = str(value).split(":")
        return dtime(int(hours), int(minutes))
    except (ValueError, TypeError):
        raise BadInputError(f"policy {where}: expected a time HH:MM, got {value!r}") from None


def _names(value: Any, allowed: Sequence[str], where: str) -> list[str]:
    items = [value] if isinstance(value, str) else list(value or [])
    bad = [v for v in items if str(v).lower() not in allowed]
    if bad:
        raise BadInputError(f"policy {where}: {bad[0]!r} is not one of {', '.join(allowed)}")
    return [str(v).lower() for v in items]


# -- the state's part (memwal fleet pause / resume / cancel)


def pause(state: FleetState, target: str, *, by: str, reason: str, now: float) -> dict[str, Any]:
    """Pause ``target`` (a table URI, a source, a glob) in the state; the new controls document."""
    _required(by, reason)

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        pauses = [p for p in doc.get("pauses") or [] if isinstance(p, Mapping) and p.get("target") != target]
        pauses.append({"target": target, "by": by[:MAX_TEXT], "reason": reason[:MAX_TEXT], "at": now})
        return {**doc, "pauses": pauses, "log": _logged(doc, "pause", target, by, reason, now)}

    return state.update("controls.json", change)


def resume(state: FleetState, target: str, *, by: str, reason: str, now: float) -> dict[str, Any]:
    """Lift the state's pause of ``target``; the new controls document. A target the state has
    not paused is bad input, and nothing is written (a pause in the policy file is lifted by
    editing the file)."""
    _required(by, reason)

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        before = [p for p in doc.get("pauses") or [] if isinstance(p, Mapping)]
        kept = [p for p in before if p.get("target") != target]
        if len(kept) == len(before):
            paused = ", ".join(str(p.get("target"))[:200] for p in before[:10]) or "nothing"
            raise BadInputError(f"{target}: not paused in the fleet's state {state.uri}, nothing to resume (paused "
                                f"there: {paused}; a pause in the policy file is lifted by editing the file)")
        return {**doc, "pauses": kept, "log": _logged(doc, "resume", target, by, reason, now)}

    return state.update("controls.json", change)


def check_target(state: FleetState, target: str, *, is_table: Callable[[str], bool]) -> None:
    """Refuse (bad input, nothing written) a pause whose ``target`` names no table: none the
    fleet's last plan or probe cache knows matches it (as the plan matches pauses: a table's URI,
    a source, or a glob), and it is no Lance table either (``is_table(uri)``: one not planned
    yet). A folder that only holds tables is neither: ``<folder>/*`` matches them."""
    from memwal.fleet.cache import ProbeCache
    from memwal.fleet.report import last_report

    report = last_report(state)[0] or {}
    tables = {uri: "" for uri in ProbeCache.of_state(state).known_tables()}
    tables.update({str(r.get("table")): str(r.get("source") or "") for r in report.get("top") or []
                   if isinstance(r, Mapping)})
    for uri, brief in (report.get("index") or {}).items():
        if isinstance(brief, list) and len(brief) > 2:
            tables[str(uri)] = str(brief[2] or "")
    sources = {str(x.get("source")) for x in report.get("sources") or [] if isinstance(x, Mapping)}
    if target in sources or any(matches(target, uri, source) for uri, source in tables.items()):
        return
    if "://" in target or target.startswith("/"):
        try:
            if is_table(target):
                return
        except MemWalError:
            pass
    under = target.rstrip("/") + "/"
    hint = f"; tables lie under it: {under}* matches them" if any(u.startswith(under) for u in tables) else ""
    raise BadInputError(f"{target}: matches no table of the fleet (none of the {len(tables)} tables its last plan "
                        f"knows, and no Lance table there){hint}: nothing paused")


def log_action(state: FleetState, action: str, target: str, *, by: str, reason: str, now: float) -> None:
    """Log an action taken elsewhere (a cancel: :mod:`memwal.lease.cancel`)."""
    state.update("controls.json", lambda doc: {**doc, "log": _logged(doc, action, target, by, reason, now)})


def _logged(doc: Mapping[str, Any], action: str, target: str, by: str, reason: str, now: float) -> list[Any]:
    log = [e for e in doc.get("log") or [] if isinstance(e, Mapping)]
    log.append({"action": action, "target": target, "by": by[:MAX_TEXT], "reason": reason[:MAX_TEXT], "at": now})
    return log[-MAX_LOG:]


def _required(by: str, reason: str) -> None:
    if not by.strip() or not reason.strip():
        raise BadInputError("say who you are (--by) and why (--reason): both are recorded with the change")


__all__ = ["DAYS", "Controls", "Pause", "QuietHours", "check_target", "log_action", "matches", "pause", "pauses_from",
           "quiet_from", "resume"]
