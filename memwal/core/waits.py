"""GC's wait in words, and as stored: what every view of a GC's kept generations shows.

GC computes its wait once (:func:`memwal.gc.wait.gc_wait`: every combination of gates that kept
generations, how many, when it passes or what frees it, and the options it judged with) and
puts it in its result document (``wait``). The run history keeps it with each GC run's figures,
the fleet's run log with each table's last GC. What reads it back, from the job or from
storage, shows it with these functions: ``memwal gc``, ``memwal history`` and the status
page's runs, the cycle's summary, the fleet's reasons, ``fleet status`` and its page. They
live here, below every one of them, so that showing a wait loads nothing of GC (nor Lance).

Storage is untrusted input: :func:`stored_wait` rebuilds a wait from its fields, each of its
type, bounded in count and length, before anything shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memwal.core.json_doc import finite, mapping_of, mappings_of
from memwal.core.sizes import human_duration

#: Most gate combinations a wait names (the most frequent first).
MAX_GATES = 8
#: Longest name of a combination of gates kept.
MAX_GATE_TEXT = 500
#: Longest text kept of what frees a GC's generations (several gates' sentences).
MAX_FREES = 2000


def when(at: float) -> str:
    """A time as every wait shows it (UTC, to the minute)."""
    try:
        return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


def writer_live_frees(last_write: float | None, idle_seconds: float, at: float) -> str:
    """What frees what a live writer's view keeps (gate ``writer-live``): its reopening, or
    ``idle_seconds`` without a write after its last one (``at``: when judged, if none is known)."""
    since = "" if last_write is None else f", its last write {when(last_write)}"
    return (f"writer-live: when the writer reopens or is quiet for {human_duration(idle_seconds)} "
            f"(not before {when((last_write or at) + idle_seconds)}{since})")


def describe(wait: Mapping[str, Any] | None) -> str:
    """One line for a wait: ``the last GC (when) kept N: 24 x writer-live; frees ... (judged with ...)``."""
    if not isinstance(wait, Mapping):
        return ""
    gates = mapping_of(wait.get("gates"))
    named = ", ".join(f"{int(finite(n) or 0)} x {str(g)[:120]}" for g, n in list(gates.items())[:MAX_GATES])
    at = finite(wait.get("at"))
    seen = f" ({when(at)})" if at is not None else ""
    kept = int(finite(wait.get("blocked")) or 0)
    never = "; GC says time alone frees none of them" if wait.get("time_will_free") is False and \
        wait.get("frees_at") is None else ""
    return f"the last GC{seen} kept {kept}: {named}; frees {str(wait.get('frees'))[:600]}{never}{judged(wait)}"


def passes_lines(wait: Mapping[str, Any] | None) -> list[str]:
    """One line per combination of gates: how many it keeps, when it passes (or that no time
    alone does), and what frees it."""
    if not isinstance(wait, Mapping):
        return []
    out = []
    for p in mappings_of(wait.get("passes")):
        t = finite(p.get("passes_at"))
        head = f"passes at {when(t)}" if t is not None else untimed(str(p.get("gates")))
        out.append(f"{int(finite(p.get('count')) or 0)} x {str(p.get('gates'))[:240]}: {head}; "
                   f"{str(p.get('frees'))[:600]}")
    return out


def untimed(gates: str) -> str:
    """What frees gates that name no time: a live writer's reopening or quiet (a time that holds
    only if it writes nothing more, so none is given), else nothing time does alone."""
    return "when its writer reopens or goes quiet" if "writer-live" in gates else "no time passes it alone"


def brief(wait: Mapping[str, Any] | None) -> str:
    """A short account for a table's cell: each combination of gates with when it passes
    (``3 x grace-period until 13:23 UTC, 2 x writer-live (when its writer reopens or goes quiet)``)."""
    if not isinstance(wait, Mapping):
        return ""
    out = []
    for p in mappings_of(wait.get("passes"))[:3]:
        t = finite(p.get("passes_at"))
        until = f"until {when(t)}" if t is not None else f"({untimed(str(p.get('gates')))})"
        out.append(f"{int(finite(p.get('count')) or 0)} x {str(p.get('gates'))[:120]} {until}")
    return ", ".join(out)


def judged(wait: Mapping[str, Any]) -> str:
    """The options the gates were judged with, as ``memwal gc --dry-run`` flags that show the same."""
    o = mapping_of(wait.get("options"))
    if not o:
        return ""
    flags = []
    for key, flag in (("grace_seconds", "--grace-seconds"), ("expire_versions", "--expire-versions"),
                      ("writer_idle_seconds", "--writer-idle-seconds")):
        number = finite(o.get(key))
        shown = f"{number:g}" if number is not None else "never" if key == "expire_versions" else "?"
        flags.append(f"{flag} {shown}")
    return f" (judged with {' '.join(flags)}: memwal gc TABLE --dry-run {' '.join(flags)} shows the same gates)"


def stored_wait(value: Any) -> dict[str, Any] | None:
    """A wait rebuilt from its fields (None: not a mapping): the first :data:`MAX_GATES` gate
    combinations with their counts and times, bounded times and counts, the texts clipped."""
    if not isinstance(value, Mapping):
        return None
    gates = value.get("gates")
    named = {str(g)[:MAX_GATE_TEXT]: int(n) for g, v in list(gates.items() if isinstance(gates, Mapping) else ())
             [:MAX_GATES] if (n := finite(v)) is not None and n >= 0}
    passes = [{"gates": str(p.get("gates") or "")[:MAX_GATE_TEXT],
               "count": int(c) if (c := finite(p.get("count"))) is not None and c >= 0 else 0,
               "passes_at": finite(p.get("passes_at")), "frees": str(p.get("frees") or "")[:MAX_FREES]}
              for p in mappings_of(value.get("passes"))[:MAX_GATES]]
    blocked = finite(value.get("blocked"))
    options = value.get("options")
    judged_with = {k: finite(options.get(k)) for k in ("grace_seconds", "expire_versions", "writer_idle_seconds")} \
        if isinstance(options, Mapping) else None
    will = value.get("time_will_free")
    return {"at": finite(value.get("at")), "gates": named, "passes": passes,
            "blocked": int(blocked) if blocked and blocked > 0 else 0,
            "frees_at": finite(value.get("frees_at")), "frees": str(value.get("frees") or "")[:MAX_FREES],
            "retry_at": finite(value.get("retry_at")), "options": judged_with,
            "time_will_free": will if isinstance(will, bool) else None}


__all__ = ["MAX_FREES", "MAX_GATES", "brief", "describe", "judged", "passes_lines", "stored_wait", "untimed", "when",
           "writer_live_frees"]
