"""Why a table's merged generations stay on storage, and when each gate that keeps them passes.

GC names every gate that kept each generation (its ``blocked`` items: ``24 x writer-live``).
:func:`gc_wait` reads them from GC's result document, with the options GC judged them with, and
says for each combination of gates when it passes: a time when one is known (the grace period,
a checkpoint's expiry, a version's expiry), else what frees it ("when the writer reopens or is
quiet for 1d 0h", "delete tag t1"). GC computes it itself, once, at the end of its plan or run
(the document's ``wait``: :meth:`memwal.gc.plan.GcPlan.preview`, :func:`memwal.gc.run.run_gc`);
every place that shows why generations wait shows that, in the words of :mod:`memwal.core.waits`
(``memwal gc --dry-run``, the run history and the status page's runs, the cycle's summary, the
fleet's reasons, ``fleet status`` and its page): one source, never an estimate of GC's gates made
elsewhere.

The gates depend on the options GC ran with (a fleet's policy may set a grace period, version
expiry or writer idle period of its own), so a wait names them, and the ``memwal gc --dry-run``
flags that show the same gates (issue 64: the fleet said ``3 x grace-period; frees by 13:23``
while ``gc --dry-run`` with the command line's defaults named ``retained-version`` and
``writer-live``). A time is when a gate passes, never a promise that nothing else holds: GC's
own ``time_will_free`` decides whether time alone frees anything, and when it says no, no time is
given.

The document is the run's own (it came from the job, or from storage through the fleet's run
log: the figures read here are type-checked and the texts clipped where they land).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Protocol

from memwal.core.json_doc import finite, mapping_of, mappings_of
from memwal.core.kept import BY_AGE, blocking_by_holder
from memwal.core.sizes import human_duration
from memwal.core.waits import MAX_GATES, when, writer_live_frees
from memwal.gc.gates import DRAIN_GRACE, GRACE_PERIOD, LISTED_ONLY, NOT_MERGED, WRITER_LIVE, is_gate


class GcTimes(Protocol):
    """The GC options its gates' times depend on (:class:`memwal.actions.options.GcOptions` has them)."""

    @property
    def grace_seconds(self) -> float: ...

    @property
    def expire_versions(self) -> float | None: ...

    @property
    def writer_idle_seconds(self) -> float: ...


def gc_wait(doc: Mapping[str, Any], *, at: float, options: GcTimes) -> dict[str, Any] | None:
    """What kept the merged generations of a GC result ``doc`` (judged at ``at`` with
    ``options``): ``{"at", "gates": {gates: n}, "passes": [{"gates", "count", "passes_at",
    "frees"}], "blocked", "frees_at", "frees", "options", "time_will_free"}``, or None when it
    kept none. A combination of gates is what keeps a generation now, then (``then``) what its
    folder will still face once it leaves the listing (``grace-period then retained-version:3``).
    ``passes``: per combination (the most frequent first), when all of them have passed for
    every generation it keeps (None: no time alone does) and what frees them; ``frees_at`` is the
    earliest of those times (None: GC says time alone frees none of them, or no time frees them);
    ``options`` are the GC options the gates were judged with."""
    blocked = mappings_of(doc.get("blocked"))
    if not blocked:
        return None
    will = doc.get("time_will_free")
    # what the retained versions free is the same for every generation they keep: judged once (a
    # whole GC beside a writer that never reopens keeps thousands, each held by hundreds of versions)
    retained: Callable[[], tuple[float | None, str]] = cache(lambda: _retained(doc, at, options))
    combos: Counter[str] = Counter()
    latest: dict[str, float | None] = {}
    said: dict[str, str] = {}
    # a time depends on the gates, what follows them and since when: asked once per such kind
    judged: dict[tuple[str, float | None], tuple[float | None, str]] = {}
    for b in blocked:
        reasons = [str(r) for r in (b.get("reasons") or [b.get("reason")]) if r is not None]
        gates = [r for r in reasons if is_gate(r)] or reasons[:1]
        then = [str(r) for r in b.get("then") or [] if is_gate(str(r))]
        combo = " + ".join(gates) + (f" then {' + '.join(then)}" if then else "")
        since = finite(b.get("then_versions_at")) if then else None
        if (combo, since) not in judged:
            judged[combo, since] = _passes(gates, then, since, doc, at, options, retained, will)
        t, what = judged[combo, since]
        combos[combo] += 1
        latest[combo] = t if combo not in latest else (
            None if t is None or latest[combo] is None else max(t, latest[combo] or t))
        said.setdefault(combo, what)
    passes = [{"gates": combo, "count": n, "passes_at": latest[combo], "frees": said[combo]}
              for combo, n in combos.most_common(MAX_GATES)]
    times = [t for combo in combos if (t := latest[combo]) is not None]
    frees = list(dict.fromkeys(said[combo] for combo, _ in combos.most_common()))
    return {"at": at, "gates": dict(combos.most_common(MAX_GATES)), "passes": passes, "blocked": len(blocked),
            "frees_at": min(times, default=None), "frees": "; ".join(frees),
            "time_will_free": will if isinstance(will, bool) else None,
            "options": {"grace_seconds": options.grace_seconds, "expire_versions": options.expire_versions,
                        "writer_idle_seconds": options.writer_idle_seconds}}


def _passes(gates: list[str], then: list[str], since: float | None, doc: Mapping[str, Any], at: float,
            options: GcTimes, retained: Callable[[], tuple[float | None, str]],
            will: object) -> tuple[float | None, str]:
    """When a generation these gates keep (then, out of the listing, ``then``) may go, and what frees it."""
    t, what = _frees(gates, doc, at, options, retained)
    if t is not None and not then and will is False and all(g in (GRACE_PERIOD, DRAIN_GRACE) for g in gates):
        t = None  # GC knows more than the gates' names
    if then:
        later, after = _frees(then, doc, at, options, retained, since=since)
        t = None if t is None or later is None else max(t, later)
        what = f"{what}; then, out of the listing, {after}"
    return t, what


def _frees(gates: list[str], doc: Mapping[str, Any], at: float, o: GcTimes,
           retained: Callable[[], tuple[float | None, str]], since: float | None = None) -> tuple[float | None, str]:
    """When the generations these gates hold may go (None: no time frees them), and what frees
    them. ``since``: when the newest retained version holding them by age alone was committed;
    ``retained()``: what the retained versions free (:func:`_retained`)."""
    out: list[tuple[float | None, str]] = [_gate(g, doc, at, o, retained, since) for g in gates]
    if any(t is None for t, _ in out):
        return None, " and ".join(what for _, what in out)
    latest = max(t for t, _ in out if t is not None)
    return latest, " and ".join(what for _, what in out)


def _gate(gate: str, doc: Mapping[str, Any], at: float, o: GcTimes, retained: Callable[[], tuple[float | None, str]],
          since: float | None = None) -> tuple[float | None, str]:
    if gate in (GRACE_PERIOD, DRAIN_GRACE):
        after = "the merge" if gate == GRACE_PERIOD else "the drain"
        return at + o.grace_seconds, (f"{gate}: passes by {when(at + o.grace_seconds)} (the reader grace period, "
                                      f"{human_duration(o.grace_seconds)} after {after}; GC judges every gate again "
                                      "then)")
    if gate == WRITER_LIVE:
        live = [w for w in mappings_of(doc.get("writers")) if w.get("live")]
        seen = max((t for w in live if (t := finite(w.get("last_activity"))) is not None), default=None)
        return None, writer_live_frees(seen, o.writer_idle_seconds, at)
    if gate.startswith("checkpoint:"):
        cid = gate.split(":", 1)[1]
        exp = next((finite(c.get("expires_at")) for c in mappings_of(doc.get("checkpoints"))
                    if str(c.get("id")) == cid), None)
        if exp is None:
            return None, f"{gate}: when the checkpoint is deleted or expires"
        return exp, f"{gate}: when it expires, {when(exp)} (unless its reader refreshes it)"
    if gate.startswith("retained-version:"):
        if since is not None and o.expire_versions is not None:  # GC named the version's commit time
            t = since + o.expire_versions
            return t, f"retained-version: when version expiry takes it, by {when(t)} " \
                      f"(--expire-versions {human_duration(o.expire_versions)})"
        return retained()
    if gate == NOT_MERGED:
        return None, f"{gate}: after the merge"
    if gate.startswith("index-not-caught-up:"):
        return None, f"{gate}: after the catch-up"
    if gate.startswith("changed-since-plan:"):
        return at, f"{gate}: the next GC"
    if gate == LISTED_ONLY:
        return at, f"{gate}: the next whole GC run (not a listing pass) drains it"
    return None, f"{gate}: needs an operator (memwal gc --dry-run shows it)"


def _retained(doc: Mapping[str, Any], at: float, o: GcTimes) -> tuple[float | None, str]:
    """A retained version that still needs the generations: its expiry frees them, when only its
    age keeps it and version expiry is on; a tag or a branch never goes by itself."""
    retention = mapping_of(doc.get("retention"))
    youngest = finite(retention.get("youngest_by_age_seconds"))
    only_age = set(blocking_by_holder(doc)) == {BY_AGE}
    if youngest is not None and only_age and o.expire_versions is not None:
        at_time = at + max(0.0, o.expire_versions - youngest)
        return at_time, f"retained-version: when version expiry takes it, by {when(at_time)} " \
                        f"(--expire-versions {human_duration(o.expire_versions)})"
    hint = str(retention.get("hint") or "")[:300]
    return None, f"retained-version: {hint or 'when the versions that need it expire or lose their tag or branch'}"


__all__ = ["GcTimes", "gc_wait"]
