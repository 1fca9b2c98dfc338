"""The operator's controls over a fleet: pauses, quiet hours, and their log.

- **Pause** a table, a source, or every table a glob matches: its owed jobs are withheld
  (the plan shows it ``paused``, with who paused it, why and when) until resumed. Pauses are
  written in the policy (``paused:``, for the long run) or set by ``memwal fleet pause`` in the
  fleet's state (``controls.json``, :mod:`memwal.fleet.state`), with who and why required.
- **Quiet hours**: time windows (UTC, or a ``tz``) when no job, or no job of the kinds named,
  starts on the tables a window matches; the plan shows those tables ``waiting`` until the
  window ends. Written in the policy (``quiet_hours:``).

Every change made through the state is logged (``log``: pause, resume, cancel, with who,
why and when; the last :data:`MAX_LOG` kept, and the entry of every pause in force), for the
page. A running table's work is cancelled through its leases (:mod:`memwal.lease.cancel`);
the request is logged here too.

``controls.json`` is storage, and whoever can write it can write a pause (issue 56, L1: a
forged ``*`` pause stopped the whole fleet and looked like a real one). So a pause in the
state is honoured only when it is recognised as one ``memwal fleet pause`` wrote
(:func:`unrecognised`): signed with the fleet's key when one is set (``MEMWAL_FLEET_KEY``, an
HMAC-SHA256 over what it says: the CLI and every Airflow component that plans or pauses
need it), else logged by the same write (its log entry: the same target, who and when). Any
other is shown as forged, with why, and withholds nothing. Only the first
:data:`MAX_GLOB_PAUSES` globs are matched (a table's own pause and a source's are looked up,
not matched), each compiled once, by :mod:`fnmatch`'s translation, whose stars are atomic
groups (time linear in the URI per star): 60,000 globs no longer cost 7 s a table (M2).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import hmac
import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dtime
from typing import TYPE_CHECKING, Any

from memwal.core.json_doc import finite, list_of
from memwal.errors import BadInputError

if TYPE_CHECKING:
    from memwal.fleet.state import FleetState

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Entries of the controls' log kept (the oldest go first).
MAX_LOG = 500
#: Longest ``by`` and ``reason`` kept.
MAX_TEXT = 500
#: Longest target of a pause (a table URI, a source, a glob).
MAX_TARGET = 1024
#: Glob pauses matched against each table (more are refused by :func:`pause`, and ignored when read).
MAX_GLOB_PAUSES = 256
#: The environment variable holding the fleet's key: pauses written with it are signed, and
#: with it set only signed pauses are honoured. Never shown, never on a command line.
KEY_ENV = "MEMWAL_FLEET_KEY"

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

    def with_state(self, doc: Mapping[str, Any]) -> Controls:
        """These controls plus the pauses the state's ``controls.json`` holds: those recognised
        (:func:`unrecognised`) are honoured, the others kept apart as forged, with a warning."""
        honoured: list[Pause] = []
        forged: list[Pause] = []
        for p in stored_pauses(doc):
            (honoured if p.forged is None else forged).append(p)
        globs = sum(1 for p in honoured if is_glob(p.target))
        if globs > MAX_GLOB_PAUSES:
            log.warning("fleet controls: %d glob pauses: the first %d are matched, the others ignored", globs,
                        MAX_GLOB_PAUSES)
        for p in forged[:10]:
            log.warning("fleet controls: the pause of %s is not honoured: %s", _shown(p.target), p.forged)
        if len(forged) > 10:
            log.warning("fleet controls: %d more pauses not honoured", len(forged) - 10)
        return Controls(self.pauses + tuple(honoured), self.quiet, tuple(forged))


def _shown(text: str) -> str:
    from memwal.core.text import clip, one_line

    return one_line(clip(text, 200))


# -- recognising what memwal wrote


def _key() -> bytes | None:
    value = os.environ.get(KEY_ENV, "")
    return value.encode() if value else None


def _signature(key: bytes, entry: Mapping[str, Any]) -> str:
    """HMAC-SHA256 of what an entry says (its action, target, who, why and when)."""
    said = [entry.get("action", "pause"), entry.get("target"), entry.get("by"), entry.get("reason"), entry.get("at")]
    return hmac.new(key, json.dumps(said, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def _signed(entry: dict[str, Any]) -> dict[str, Any]:
    key = _key()
    return {**entry, "sig": _signature(key, entry)} if key is not None else entry


def unrecognised(entry: Mapping[str, Any], logged: frozenset[tuple[Any, ...]], key: bytes | None) -> str | None:
    """Why a stored pause is not one ``memwal fleet pause`` wrote (None: it is). With the
    fleet's key: its signature must match; without: the same write logged it."""
    if key is not None:
        sig = entry.get("sig")
        if not isinstance(sig, str) or not hmac.compare_digest(sig, _signature(key, entry)):
            return f"not signed with the fleet's key ({KEY_ENV}): forged, or written without the key"
        return None
    if ("pause", entry.get("target"), entry.get("by"), entry.get("at")) not in logged:
        return "no entry in the control log: not written by memwal fleet pause (forged?)"
    return None


def _entries(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [e for e in list_of(doc.get(key)) if isinstance(e, Mapping)]


def stored_pauses(doc: Mapping[str, Any]) -> list[Pause]:
    """Every pause ``controls.json`` holds (well-formed ones: a target of at most
    :data:`MAX_TARGET` characters), each with why it is not recognised (``forged``), if so."""
    key = _key()
    logged = frozenset((e.get("action"), e.get("target"), e.get("by"), e.get("at")) for e in _entries(doc, "log"))
    return [Pause(target, _text(p.get("by")), _text(p.get("reason")), _time(p.get("at")),
                  forged=unrecognised(p, logged, key))
            for p in _entries(doc, "pauses")
            if isinstance(target := p.get("target"), str) and 0 < len(target) <= MAX_TARGET]


def checked_log(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The control log, each entry with ``forged``: why it is not one memwal wrote (with the
    fleet's key set: its signature does not match), or None."""
    key = _key()
    out = []
    for e in _entries(doc, "log"):
        forged = None
        if key is not None:
            sig = e.get("sig")
            if not isinstance(sig, str) or not hmac.compare_digest(sig, _signature(key, e)):
                forged = f"not signed with the fleet's key ({KEY_ENV})"
        out.append({"action": _text(e.get("action"))[:20], "target": _text(e.get("target")), "by": _text(e.get("by")),
                    "reason": _text(e.get("reason")), "at": _time(e.get("at")), "forged": forged})
    return out


def _text(value: Any) -> str:
    return str(value or "")[:MAX_TEXT]


def _time(value: Any) -> float | None:
    return finite(value)


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
    """Pause ``target`` (a table URI, a source, a glob) in the state; the new controls document.
    Signed with the fleet's key when one is set (``MEMWAL_FLEET_KEY``)."""
    _required(by, reason)
    if len(target) > MAX_TARGET:
        raise BadInputError(f"pause: the target is longer than {MAX_TARGET} characters")

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        pauses = [p for p in _entries(doc, "pauses") if p.get("target") != target]
        if is_glob(target) and len([p for p in pauses if is_glob(str(p.get("target")))]) >= MAX_GLOB_PAUSES:
            raise BadInputError(f"pause {_shown(target)}: {MAX_GLOB_PAUSES} glob pauses already: resume one first "
                                "(or pause the tables or sources by name)")
        pauses.append(_signed({"target": target, "by": by[:MAX_TEXT], "reason": reason[:MAX_TEXT], "at": now}))
        return {**doc, "pauses": pauses, "log": _logged(doc, "pause", target, by, reason, now, pauses)}

    return state.update("controls.json", change)


def resume(state: FleetState, target: str, *, by: str, reason: str, now: float) -> dict[str, Any]:
    """Lift the state's pause of ``target``; the new controls document. A target the state has
    not paused is bad input, and nothing is written (a pause in the policy file is lifted by
    editing the file)."""
    _required(by, reason)

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        before = _entries(doc, "pauses")
        kept = [p for p in before if p.get("target") != target]
        if len(kept) == len(before):
            paused = ", ".join(_shown(str(p.get("target"))) for p in before[:10]) or "nothing"
            raise BadInputError(f"{_shown(target)}: not paused in the fleet's state {state.uri}, nothing to resume "
                                f"(paused there: {paused}; a pause in the policy file is lifted by editing the file)")
        return {**doc, "pauses": kept, "log": _logged(doc, "resume", target, by, reason, now, kept)}

    return state.update("controls.json", change)


def log_action(state: FleetState, action: str, target: str, *, by: str, reason: str, now: float) -> None:
    """Log an action taken elsewhere (a cancel: :mod:`memwal.lease.cancel`)."""
    state.update("controls.json", lambda doc: {**doc, "log": _logged(doc, action, target, by, reason, now,
                                                                        _entries(doc, "pauses"))})


def _logged(doc: Mapping[str, Any], action: str, target: str, by: str, reason: str, now: float,
            pauses: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The log with this action added: its last :data:`MAX_LOG` entries, and before them the
    entry of every pause in force (a pause is recognised by it: :func:`unrecognised`)."""
    entries = [*_entries(doc, "log"), _signed({"action": action, "target": target, "by": by[:MAX_TEXT],
                                               "reason": reason[:MAX_TEXT], "at": now})]
    live = {("pause", p.get("target"), p.get("by"), p.get("at")) for p in pauses}
    recent = entries[-MAX_LOG:]
    older = [e for e in entries[:-MAX_LOG] if (e.get("action"), e.get("target"), e.get("by"), e.get("at")) in live]
    return older + recent


def _required(by: str, reason: str) -> None:
    if not by.strip() or not reason.strip():
        raise BadInputError("say who you are (--by) and why (--reason): both are recorded with the change")


__all__ = ["DAYS", "KEY_ENV", "MAX_GLOB_PAUSES", "Controls", "Pause", "QuietHours", "checked_log",
           "is_glob", "log_action", "matches", "pause", "pauses_from", "quiet_from", "resume", "stored_pauses",
           "unrecognised"]
