"""The operator's controls over a fleet: pauses, quiet hours, and their log.

- **Pause** a table, a source, or every table a glob matches: its owed jobs are withheld
  (the plan shows it ``paused``, with who paused it, why and when) until resumed. Pauses are
  written in the policy (``paused:``, for the long run) or set by ``memwal fleet pause`` in the
  fleet's state (``controls.json``, :mod:`memwal.fleet.state`), with who and why required.
- **Quiet hours**: time windows (UTC, or a ``tz``) when no job, or no job of the kinds named,
  starts on the tables a window matches; the plan shows those tables ``waiting`` until the
  window ends. Written in the policy (``quiet_hours:``).

Pauses written through the state, their log, and how a pause read from storage is recognised
as one memwal wrote: :mod:`memwal.fleet.control_log`. Only the first :data:`MAX_GLOB_PAUSES`
globs are matched (a table's own pause and a source's are looked up, not matched), each
compiled once, by :mod:`fnmatch`'s translation, whose stars are atomic groups (time linear in
the URI per star): 60,000 globs no longer cost 7 s a table (M2).
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dtime
from typing import Any

from memwal.errors import BadInputError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Longest ``by`` and ``reason`` kept.
MAX_TEXT = 500
#: Longest target of a pause (a table URI, a source, a glob).
MAX_TARGET = 1024
#: Glob pauses matched against each table (more are refused by :func:`pause`, and ignored when read).
MAX_GLOB_PAUSES = 256

log = logging.getLogger(__name__)


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


@functools.lru_cache(maxsize=4 * MAX_GLOB_PAUSES)
def _glob(pattern: str) -> Callable[[str], Any]:
    return re.compile(fnmatch.translate(pattern)).match


def matches(pattern: str, uri: str, source: str) -> bool:
    """Whether a control's target names the table: its URI, its source, or a glob over URIs."""
    return pattern in (uri, source) or (is_glob(pattern) and _glob(pattern)(uri) is not None)


@dataclass(frozen=True)
class Pause:
    target: str
    by: str
    reason: str
    at: float | None = None
    origin: str = "state"  # "policy" (the policy file) or "state" (memwal fleet pause)
    #: Why a pause read from the state is not recognised as one memwal wrote (None: it is).
    forged: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "by": self.by, "reason": self.reason, "at": self.at, "origin": self.origin,
                "forged": self.forged}


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
    """The controls in force: the policy's and the state's (recognised pauses only: ``forged``
    holds the others, shown and never honoured)."""

    pauses: tuple[Pause, ...] = ()
    quiet: tuple[QuietHours, ...] = ()
    forged: tuple[Pause, ...] = ()

    @functools.cached_property
    def _by_target(self) -> tuple[dict[str, Pause], tuple[Pause, ...]]:
        """The pauses by their exact target (a glob's too: a URI may hold ``[``; the last one
        written wins), and the globs (the first :data:`MAX_GLOB_PAUSES`): a table costs two
        lookups and the globs, however many pauses there are."""
        exact: dict[str, Pause] = {}
        globs: list[Pause] = []
        for p in self.pauses:
            exact[p.target] = p
            if is_glob(p.target) and len(globs) < MAX_GLOB_PAUSES:
                globs.append(p)
        return exact, tuple(globs)

    def paused(self, uri: str, source: str) -> Pause | None:
        """The pause that holds the table (a table's own before a source's or a glob's)."""
        exact, globs = self._by_target
        own = exact.get(uri) or exact.get(source)
        if own is not None:
            return own
        return next((p for p in globs if _glob(p.target)(uri) is not None), None)

    def quiet_until(self, uri: str, source: str, job: str, now: float) -> float | None:
        ends = [t for q in self.quiet if (t := q.until(uri, source, job, now)) is not None]
        return max(ends, default=None)

    def with_state(self, stored: Sequence[Pause]) -> Controls:
        """These controls plus the pauses read from the state's ``controls.json``
        (:func:`memwal.fleet.control_log.stored_pauses`): those recognised are honoured, the
        others kept apart as forged, with a warning."""
        honoured: list[Pause] = []
        forged: list[Pause] = []
        for p in stored:
            (honoured if p.forged is None else forged).append(p)
        globs = sum(1 for p in honoured if is_glob(p.target))
        if globs > MAX_GLOB_PAUSES:
            log.warning("fleet controls: %d glob pauses: the first %d are matched, the others ignored", globs,
                        MAX_GLOB_PAUSES)
        for p in forged[:10]:
            log.warning("fleet controls: the pause of %s is not honoured: %s", shown(p.target), p.forged)
        if len(forged) > 10:
            log.warning("fleet controls: %d more pauses not honoured", len(forged) - 10)
        return Controls(self.pauses + tuple(honoured), self.quiet, tuple(forged))


def shown(text: str) -> str:
    """A stored text as one bounded line (a log line, an error)."""
    from memwal.core.text import clip, one_line

    return one_line(clip(text, 200))


def _text(value: Any) -> str:
    return str(value or "")[:MAX_TEXT]


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


__all__ = ["DAYS", "MAX_GLOB_PAUSES", "MAX_TARGET", "MAX_TEXT", "Controls", "Pause", "QuietHours", "is_glob",
           "matches", "pauses_from", "quiet_from", "shown"]
