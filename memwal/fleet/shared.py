"""One plan of a fleet with its shared state: read the state, discover, plan, write it back.

What ``memwal fleet plan|run|status --state URI`` and the Airflow DAG's plan task do alike, on
any machine: the probe cache, the operator's pauses (``controls.json``) and the jobs waiting
for time (``runs.json``) are read from the state folder (:mod:`memwal.fleet.state`); the
sources are discovered (the state folder itself left out) and planned; then the cache is
written back when it changed and the plan's report (:mod:`memwal.fleet.report`) becomes the
last plan, its totals added to the history. Without a state folder it plans alone (a
``--cache`` file or URI still shared if given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memwal.core import clock as clocks
from memwal.core.json_doc import list_of
from memwal.fleet.cache import ProbeCache
from memwal.fleet.control_log import stored_pauses
from memwal.fleet.controls import MAX_GLOB_PAUSES, Controls, is_glob, matches
from memwal.fleet.plan import FleetPlan, plan_fleet
from memwal.fleet.policy import Policy
from memwal.fleet.report import patch_report, report_in, report_of, save_report
from memwal.fleet.runs import backoff_of, last_gcs
from memwal.fleet.sources import Discovery
from memwal.fleet.state import CONTROLS, PLAN, RUNS, FleetState

#: ``discover(known, exclude)``: the fleet's tables (``known``: found by earlier plans;
#: ``exclude``: folders to leave out, the state's own).
Discover = Callable[[frozenset[str], frozenset[str]], Discovery]
DEFAULT_TOP = 50
#: Pauses that match no table named one by one (the others counted).
MAX_UNMATCHED_PAUSES = 10


@dataclass
class Planned:
    plan: FleetPlan
    report: dict[str, Any]
    runs: dict[str, Any] = field(default_factory=dict)
    controls: dict[str, Any] = field(default_factory=dict)
    cache_written: bool = False
    #: Whether this plan covered part of the fleet only (the last report was updated, not replaced).
    partial: bool = False
    #: Keys of the policy and pauses of the state that match no table (a full plan, every source
    #: searched, only).
    unmatched: list[str] = field(default_factory=list)


def plan_shared(discover: Discover, policy: Policy, *, state: FleetState | None = None,
                cache: ProbeCache | None = None, cache_location: str | None = None,
                storage_options: Mapping[str, str] | None = None, top: int = DEFAULT_TOP, workers: int = 8,
                now: float | None = None, save: bool = True,
                backoff: Mapping[str, Mapping[str, float]] | None = None, partial: bool | None = False) -> Planned:
    """Plan with the shared state (see the module docstring). ``cache``: one already loaded
    (a run's rounds share it); else ``cache_location`` (a file or an object URI), else the
    state's. ``save``: write the cache and the report back. ``backoff``: waits known to the
    caller, besides the state's. ``partial``: ``discover`` names some of the fleet's tables
    only (those an event named, or one table of a fleet run by hand): the cache keeps the
    others, and the last report is updated for these (:func:`memwal.fleet.report.patch_report`)
    rather than replaced. None: partial when the sources planned leave out a source of the
    state's last report (``memwal fleet run TABLE --state S`` updates that table's row only)."""
    at = clocks.current()() if now is None else now
    if cache is None:
        cache = ProbeCache.load(cache_location, storage_options) if cache_location else (
            ProbeCache.of_state(state) if state is not None else ProbeCache())
    runs = state.read(RUNS)[0] if state is not None else {}
    controls_doc = state.read(CONTROLS)[0] if state is not None else {}
    location = state.uri if state is not None else ""
    controls = policy.controls().with_state(stored_pauses(controls_doc, location) if state is not None else ())
    exclude = frozenset([state.uri]) if state is not None else frozenset()
    found = discover(cache.known_tables(), exclude)
    waits = backoff_of(runs, at)
    for table, jobs in (backoff or {}).items():
        waits[table] = {**waits.get(table, {}), **jobs}
    plan = plan_fleet(found, policy, cache=cache, now=at, workers=workers, backoff=waits, controls=controls,
                      last_gc=last_gcs(runs))
    # plan.json is read once: for the last report a partial plan patches, and as the document
    # the report is then saved over (its history kept), by compare-and-swap on this read's ETag
    stored = state.read(PLAN) if state is not None and (save or partial is not False) else None
    last = report_in(stored[0])[0] if stored is not None and partial is not False else None
    if partial is None:
        partial = last is not None and not covers(found, last)
    if not found.problems and not partial:
        cache.keep_only(frozenset(t.uri for t in found.tables))
    unmatched = [] if partial or found.problems else _unmatched(policy, controls, found)  # every table known
    report = report_of(plan, top=top, runs=runs, controls=controls_doc, location=location, unmatched=unmatched)
    if partial and state is not None:
        report = patch_report(last, report, top=top)
    written = False
    if save:
        if cache_location:
            written = cache.save(cache_location, storage_options)
        elif state is not None:
            written = cache.save_to_state(state)
        if state is not None:
            save_report(state, report, read=stored)
    return Planned(plan, report, runs, controls_doc, written, partial, unmatched)


def covers(found: Discovery, report: Mapping[str, Any]) -> bool:
    """Whether a discovery covers every source of a report (each one, or a root above it): then
    its plan is the whole fleet's, and replaces the report."""
    planned = {t.source for t in found.tables} | {p.source for p in found.problems}
    before = {str(s.get("source")) for s in list_of(report.get("sources")) if isinstance(s, Mapping)}
    return all(any(old == new or old.startswith(new.rstrip("/") + "/") for new in planned) for old in before)


def _unmatched(policy: Policy, controls: Controls, found: Discovery) -> list[str]:
    """The policy's keys and the state's pauses in force that name no table found (see
    :meth:`memwal.fleet.policy.Policy.unmatched`). ``controls.json`` is storage: a pause's
    exact target is looked up, only the globs the plan matches are matched (the first
    :data:`~memwal.fleet.controls.MAX_GLOB_PAUSES`; the others are ignored, and said so when
    read), and the first :data:`MAX_UNMATCHED_PAUSES` are named, the others counted."""
    refs = [(t.uri, t.source) for t in found.tables]
    out = policy.unmatched(refs)
    names = {uri for uri, _ in refs} | {source for _, source in refs}
    globs, unmatched = 0, []
    for p in controls.pauses:  # the policy's first, as the plan counts its globs
        glob = is_glob(p.target)
        globs += glob
        if p.origin != "state" or p.target in names or glob and (
                globs > MAX_GLOB_PAUSES or any(matches(p.target, uri, source) for uri, source in refs)):
            continue
        unmatched.append(p)
    out += [f"pause of {p.target} (memwal fleet pause, by {p.by}): matches no table of the fleet"
            for p in unmatched[:MAX_UNMATCHED_PAUSES]]
    if len(unmatched) > MAX_UNMATCHED_PAUSES:
        out.append(f"{len(unmatched) - MAX_UNMATCHED_PAUSES} more pauses match no table of the fleet")
    return out


__all__ = ["DEFAULT_TOP", "Discover", "Planned", "plan_shared"]
