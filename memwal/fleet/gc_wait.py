"""Why a table's merged generations stay on storage, and when they go: from its last GC's result.

The fleet's plan can only estimate GC's gates (the reader grace period after the merge, version
expiry after the flush, from listings); the GC run itself names every gate that kept each
generation (its ``blocked`` items, as ``memwal gc --dry-run`` prints them: ``24 x writer-live``).
:func:`gc_wait` reads them from the run's result document, with the options it ran with, and
says when each frees: a time when one is known (the grace period, a checkpoint's expiry, a
version's expiry), else what frees it ("when the writer reopens or is quiet for 1 d", "delete
tag t1"). The fleet keeps it per table in its run log (:mod:`memwal.fleet.runs`); the plan's
reasons, ``memwal fleet status`` and the page show it.

The gates depend on the options GC ran with (the fleet's policy may set a grace period, version
expiry or writer idle period of its own), so a wait names them, and the ``memwal gc --dry-run``
flags that show the same gates (issue 64: the fleet said ``3 x grace-period; frees by 13:23``
while ``gc --dry-run`` with the command line's defaults named ``retained-version`` and
``writer-live``). A time is when a gate passes, never a promise that nothing else holds: GC's
own ``time_will_free`` decides whether time alone frees anything, and when it says no, no time is
given.

The document is the run's own (it came from the job, or from storage through the run log: the
figures read here are type-checked and the texts clipped where they land).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memwal.core.json_doc import finite, mapping_of
from memwal.inspect.page import fmt_age as human_duration

#: Most gate combinations a wait names (the most frequent first).
MAX_GATES = 8


def _when(at: float) -> str:
    try:
        return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "?"


def gc_wait(doc: Mapping[str, Any], *, at: float, options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """What kept the merged generations of a GC run's result ``doc`` (run at ``at``, with job
    ``options`` as the fleet gave them: ``grace_seconds``, ``expire_versions``,
    ``writer_idle_seconds``): ``{"at", "gates": {gates: n}, "blocked", "frees_at", "frees",
    "options", "time_will_free"}``, or None when it kept none. ``frees_at`` is when the gates of
    the first of them pass (None: GC says time alone frees none of them, or no time frees them;
    ``frees`` says what does); ``options`` are the GC options the gates were judged with."""
    from memwal.actions.options import GcOptions
    from memwal.gc.gates import DRAIN_GRACE, GRACE_PERIOD, is_gate

    o = GcOptions.from_kwargs(**dict(options or {}))
    blocked = [b for b in doc.get("blocked") or [] if isinstance(b, Mapping)]
    if not blocked:
        return None
    combos: Counter[str] = Counter()
    times: list[float] = []
    frees: list[str] = []
    for b in blocked:
        reasons = [str(r) for r in (b.get("reasons") or [b.get("reason")]) if r is not None]
        gates = [r for r in reasons if is_gate(r)] or reasons[:1]
        combos[" + ".join(gates)] += 1
    will = doc.get("time_will_free")
    for combo in sorted(combos, key=lambda c: -combos[c]):
        gates = combo.split(" + ")
        when, what = _frees(gates, doc, at, o)
        grace_only = all(g in (GRACE_PERIOD, DRAIN_GRACE) for g in gates)
        if when is not None and not (grace_only and will is False):  # GC knows more than the gates' names
            times.append(when)
        if what not in frees:
            frees.append(what)
    top = dict(combos.most_common(MAX_GATES))
    return {"at": at, "gates": top, "blocked": len(blocked), "frees_at": min(times, default=None),
            "frees": "; ".join(frees),
            "time_will_free": will if isinstance(will, bool) else None,
            "options": {"grace_seconds": o.grace_seconds, "expire_versions": o.expire_versions,
                        "writer_idle_seconds": o.writer_idle_seconds}}


def _frees(gates: list[str], doc: Mapping[str, Any], at: float, o: Any) -> tuple[float | None, str]:
    """When the generations these gates hold may go (None: no time frees them), and what frees them."""
    out: list[tuple[float | None, str]] = [_gate(g, doc, at, o) for g in gates]
    if any(when is None for when, _ in out):
        return None, " and ".join(what for _, what in out)
    latest = max(when for when, _ in out if when is not None)
    return latest, " and ".join(what for _, what in out)


def _gate(gate: str, doc: Mapping[str, Any], at: float, o: Any) -> tuple[float | None, str]:
    from memwal.gc.gates import DRAIN_GRACE, GRACE_PERIOD, NOT_MERGED, WRITER_LIVE

    if gate in (GRACE_PERIOD, DRAIN_GRACE):
        since = "the merge" if gate == GRACE_PERIOD else "the drain"
        return at + o.grace_seconds, (f"{gate}: passes by {_when(at + o.grace_seconds)} (the reader grace period, "
                                      f"{human_duration(o.grace_seconds)} after {since}; GC judges every gate again "
                                      "then)")
    if gate == WRITER_LIVE:
        live = [w for w in doc.get("writers") or [] if isinstance(w, Mapping) and w.get("live")]
        seen = max((t for w in live if (t := finite(w.get("last_activity"))) is not None), default=None)
        since = "" if seen is None else f", its last write {_when(seen)}"
        return None, (f"{gate}: when the writer reopens or is quiet for {human_duration(o.writer_idle_seconds)} "
                      f"(not before {_when((seen or at) + o.writer_idle_seconds)}{since})")
    if gate.startswith("checkpoint:"):
        cid = gate.split(":", 1)[1]
        exp = next((finite(c.get("expires_at")) for c in doc.get("checkpoints") or []
                    if isinstance(c, Mapping) and str(c.get("id")) == cid), None)
        if exp is None:
            return None, f"{gate}: when the checkpoint is deleted or expires"
        return exp, f"{gate}: when it expires, {_when(exp)} (unless its reader refreshes it)"
    if gate.startswith("retained-version:"):
        return _retained(gate, doc, at, o)
    if gate == NOT_MERGED:
        return None, f"{gate}: after the merge"
    if gate.startswith("index-not-caught-up:"):
        return None, f"{gate}: after the catch-up"
    if gate.startswith("changed-since-plan:"):
        return at, f"{gate}: the next GC"
    return None, f"{gate}: needs an operator (memwal gc --dry-run shows it)"


def _retained(gate: str, doc: Mapping[str, Any], at: float, o: Any) -> tuple[float | None, str]:
    """A retained version that still needs the generations: its expiry frees them, when only its
    age keeps it and version expiry is on; a tag or a branch never goes by itself."""
    retention = mapping_of(doc.get("retention"))
    rows = [v for v in retention.get("blocking_versions") or [] if isinstance(v, Mapping)]
    aged = [a for v in rows if v.get("held_by") is None and (a := finite(v.get("age_seconds"))) is not None]
    if rows and len(aged) == len(rows) and o.expire_versions is not None:
        when = at + max(0.0, o.expire_versions - min(aged))
        return when, f"retained-version: when version expiry takes it, by {_when(when)} " \
                     f"(--expire-versions {human_duration(o.expire_versions)})"
    hint = str(retention.get("hint") or "")[:300]
    return None, f"retained-version: {hint or 'when the versions that need it expire or lose their tag or branch'}"


def describe(wait: Mapping[str, Any] | None) -> str:
    """One line for a stored wait: ``the last GC (when) kept N: 24 x writer-live; frees ...``."""
    if not isinstance(wait, Mapping):
        return ""
    gates = mapping_of(wait.get("gates"))
    named = ", ".join(f"{int(finite(n) or 0)} x {str(g)[:120]}" for g, n in list(gates.items())[:MAX_GATES])
    at = finite(wait.get("at"))
    when = f" ({_when(at)})" if at is not None else ""
    kept = int(finite(wait.get("blocked")) or 0)
    never = "; GC says time alone frees none of them" if wait.get("time_will_free") is False and \
        wait.get("frees_at") is None else ""
    return f"the last GC{when} kept {kept}: {named}; frees {str(wait.get('frees'))[:600]}{never}{_judged(wait)}"


def _judged(wait: Mapping[str, Any]) -> str:
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


__all__ = ["describe", "gc_wait"]
