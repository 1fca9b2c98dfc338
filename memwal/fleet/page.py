"""The fleet page: the last plan's report (:mod:`memwal.fleet.report`) as one self-contained page.

What an operator keeps open: the tables by status (``waiting``, which time alone frees, apart
from ``behind``), the trends of the fleet's debt and lag over the plan history, a breakdown per
source and per quota group, the service-level breaches, the spread of pending generations per
shard, the top tables each with what it holds and why (reasons inline), their last runs and
failures, and the operator's pauses and their log. It is drawn from the stored report alone:
opening it plans nothing.

Like the table page (:mod:`memwal.inspect.page`), whose stylesheet it extends: no script,
nothing fetched, every value escaped where it lands (Jinja's autoescape; charts escape their
own), the same Content-Security-Policy. The report comes from storage: every figure is
type-checked here (:func:`_num`), a malformed row is skipped, never fatal. ``link(uri)`` gives
each table's page address; ``links`` the page's own links (an entry without an address is shown
as text: an Airflow page, which opened inside the view's frame would show Airflow's whole UI
there, a second navigation rail); ``control`` the DAG where an operator acts (named, in the
Airflow view; a file written by the CLI shows the commands).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from memwal.core.json_doc import finite
from memwal.core.json_doc import list_of as _list
from memwal.core.json_doc import mapping_of as _map
from memwal.core.text import clip, page_value
from memwal.fleet.control_log import checked_log
from memwal.fleet.policy import JOBS
from memwal.fleet.status import ORDER, UNAUTHENTICATED, FleetStatus, history_points, last_run, reasons_of
from memwal.inspect.page import fmt_age, fmt_bytes, stylesheet, write_chunks
from memwal.inspect.policy import meta_policy

#: The trend charts' and the histogram's drawing widths (viewBox units): about the widths they
#: are shown at (three trends to a row, the histogram in half of one), so that their axis text
#: stays readable.
TREND_WIDTH, HISTOGRAM_WIDTH = 480, 760

_BADGE = {"idle": "ok", "behind": "running", "waiting": "waiting", "held": "fenced", "paused": "paused",
          "problem": "failed"}
_NOTES = {"idle": "nothing owed", "behind": "jobs to run now", "waiting": "time alone frees them",
          "held": "a job's lease is held", "paused": "an operator paused them", "problem": "unreadable"}


def _maps(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a stored list (anything else in it, or a list that is not one, skipped)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _text(doc: Mapping[str, Any], key: str, limit: int) -> str:
    value = doc.get(key)
    return clip("" if value is None else str(value), limit)


def _int(value: Any) -> int:
    return int(finite(value) or 0)


def _when(at: Any) -> str:
    t = finite(at)
    try:
        return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return "-"


@cache
def _template() -> Any:
    import jinja2

    text = resources.files("memwal.fleet").joinpath("fleet_page.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                             finalize=page_value)  # no raw control or bidi character (issue 61)
    return env.from_string(text)


def fleet_stylesheet() -> str:
    """The table page's stylesheet and the fleet page's own rules (one stylesheet: its hash is
    the only style the policy allows)."""
    return stylesheet() + resources.files("memwal.fleet").joinpath("fleet_page.css").read_text(encoding="utf-8")


def _row(r: Mapping[str, Any], link: Callable[[str], str] | None) -> dict[str, Any]:
    holds = _map(r.get("holds"))
    status = str(r.get("status") or "idle")
    last = last_run(r)
    failure = _map(r.get("last_failure")) or None
    waiting = _map(r.get("waiting"))
    paused = _map(r.get("paused")) or None
    table = str(r.get("table") or "")
    idle = finite(holds.get("writer_idle_seconds"))
    return {
        "table": table, "status": status, "badge": _BADGE.get(status, ""), "debt": f"{finite(r.get('debt')) or 0:g}",
        "source": str(r.get("source") or ""), "group": str(r.get("group") or ""),
        "jobs": ", ".join(clip(str(j), 20) for j in _list(r.get("jobs"))[:12]) or "-",
        "waiting": ", ".join(f"{clip(str(j), 20)}: next {_when(w.get('until') if isinstance(w, Mapping) else None)}"
                             for j, w in list(waiting.items())[:len(JOBS)]),  # a job each, at most
        "paused": None if paused is None else f"paused by {clip(str(paused.get('by')), 100)} "
                                              f"{_when(paused.get('at'))}: {clip(str(paused.get('reason')), 300)}",
        "reasons": [clip(x, 600) for x in reasons_of(r)[:12]],
        "breaches": [clip(str(b), 40) for b in _list(r.get("breaches"))[:4]],
        "shards": _int(holds.get("shards")), "gens": _int(holds.get("unmerged_generations")),
        "max_gens": _int(holds.get("max_shard_generations")), "max_listed": _int(holds.get("max_shard_listed")),
        "rows": f"{_int(holds.get('unmerged_rows')):,}",
        "bytes": fmt_bytes(finite(holds.get("unmerged_bytes"))),
        "age": fmt_age(finite(holds.get("oldest_unmerged_age_seconds"))),
        "fragments": _int(holds.get("fragments")), "collectable": _int(holds.get("collectable_generations")),
        "writer": "-" if idle is None else fmt_age(idle), "orphaned": _int(holds.get("orphaned_shards")),
        "last": None if last is None else {
            "at": _when(last["at"]), "outcome": clip(str(last["outcome"]), 20),
            "jobs": [(clip(str(j["job"]), 20), clip(str(j["status"]), 20),
                      clip(str(j["error"] or j["summary"] or ""), 300)) for j in last["jobs"][:5]]},
        "failures": _int(r.get("failures")),
        "failure": None if failure is None else f"{clip(str(failure.get('job')), 20)} {_when(failure.get('at'))}: "
                                                f"{clip(str(failure.get('error') or ''), 400)}",
        "href": link(table) if link else None,
    }


def _trends(history: Sequence[Mapping[str, Any]]) -> list[Any]:
    from memwal.inspect.charts import Point, line_chart

    points = history_points(history)
    if len(points) < 2:
        return []
    out = []
    for key, label, cid, title, caption in (
            ("debt", "debt", "trend-debt", "Debt", "the fleet's debt at each plan"),
            ("oldest_unmerged_age_seconds", "seconds", "trend-lag", "Lag",
             "the fleet's oldest unmerged generation (lag), in seconds"),
            ("behind", "tables", "trend-behind", "Tables behind", "tables behind at each plan")):
        series = [Point(finite(p["at"]) or 0.0, finite(p.get(key)) or 0.0,
                        f"{_when(p['at'])}: {finite(p.get(key)) or 0:g} {label}") for p in points]
        out.append((title, caption, line_chart(series, y_label=label, chart_id=cid, caption=caption,
                                               width=TREND_WIDTH)))
    return out


def _histogram(report: Mapping[str, Any]) -> Any:
    from memwal.inspect.charts import Bar, bar_chart

    h = _map(report.get("histogram"))
    bounds = [b for b in _list(h.get("bounds")) if finite(b) is not None]
    counts = [_int(c) for c in _list(h.get("counts"))]
    if not bounds or len(counts) != len(bounds) + 1:
        return None
    labels = [f"{int(b)}" if i == 0 else f"{int(bounds[i - 1]) + 1}-{int(b)}" if b - bounds[i - 1] > 1 else f"{int(b)}"
              for i, b in enumerate(bounds)] + [f">{int(bounds[-1])}"]
    bars = [Bar(label, n, f"{n:,} shards with {label} pending generations", "bad" if i > 4 else "")
            for i, (label, n) in enumerate(zip(labels, counts, strict=True))]
    return bar_chart(bars, y_label="shards", chart_id="pending-histogram",
                     caption="shards by pending (unmerged) generations", height=180, width=HISTOGRAM_WIDTH)


def fleet_page_chunks(st: FleetStatus, *, controls: Mapping[str, Any] | None = None,
                      link: Callable[[str], str] | None = None, links: list[tuple[str | None, str, str]] | None = None,
                      control: str | None = None, state_uri: str | None = None) -> Iterator[str]:
    from markupsafe import Markup

    from memwal.core.version import __version__

    r = st.report
    by = _map(r.get("by_status"))
    breaches = _map(r.get("breaches"))
    sources = [{"source": str(s.get("source")), "tables": _int(s.get("tables")),
                "debt": f"{finite(s.get('debt')) or 0:g}",
                "by": {k: _int(_map(s.get("by_status")).get(k)) for k in ORDER if k != "problem"},
                "problems": _int(s.get("problems")), "breaches": _int(s.get("breaches")),
                "gens": _int(s.get("unmerged_generations")),
                "age": fmt_age(finite(s.get("oldest_unmerged_age_seconds")))} for s in _maps(r.get("sources"))]
    groups = [{"group": str(g.get("group")), "share": f"{(finite(g.get('share')) or 0):.0%}",
               "tables": _int(g.get("tables")), "with_work": _int(g.get("with_work")),
               "debt": f"{finite(g.get('debt')) or 0:g}"} for g in _maps(r.get("groups"))]
    named = [{"table": str(b.get("table")), "slo": str(b.get("slo")), "value": f"{finite(b.get('value')) or 0:,.0f}",
              "target": f"{finite(b.get('target')) or 0:,.0f}"} for b in _maps(breaches.get("named"))]
    log = [{"at": _when(e.get("at")), "action": _text(e, "action", 20), "target": _text(e, "target", 300),
            "by": _text(e, "by", 100), "reason": _text(e, "reason", 300), "forged": e["forged"]}
           for e in reversed(checked_log(_map(controls), state_uri or "")[-30:])]
    pauses = [{"target": _text(p, "target", 300), "by": _text(p, "by", 100), "at": _when(p.get("at")),
               "reason": _text(p, "reason", 300), "origin": str(p.get("origin") or "state"),
               "forged": _text(p, "forged", 200) if p.get("forged") else None}
              for p in _maps(r.get("pauses"))]
    failures = [{"table": _text(f, "table", 300), "at": _when(f.get("at")), "job": _text(f, "job", 20),
                 "error": _text(f, "error", 400)} for f in _maps(r.get("failures"))]
    problems = [{"table": _text(p, "table", 300), "error": _text(p, "error", 400)} for p in _maps(r.get("problems"))]
    css = fleet_stylesheet()
    hist = _histogram(r)
    chunks: Iterator[str] = _template().generate(
        version=__version__, at=_when(r.get("at")), discovered=_int(r.get("discovered")),
        debt=f"{finite(r.get('debt')) or 0:g}", skipped=_int(r.get("skipped")), requests=_int(r.get("requests")),
        plan_seconds=f"{finite(r.get('seconds')) or 0:.1f}", lag=fmt_age(finite(r.get("oldest_unmerged_age_seconds"))),
        orphaned=_int(r.get("orphaned_tables")), states=[(s, _int(by.get(s)), _NOTES[s]) for s in ORDER],
        breach_tables=_int(breaches.get("tables")), breach_named=named,
        breach_counts={str(k): _int(v) for k, v in _map(breaches.get("count")).items()},
        rows=[_row(x, link) for x in _maps(r.get("top"))], sources=sources, groups=groups,
        trends=_trends(st.history), history=len(st.history), histogram=hist, pauses=pauses, log=log,
        failures=failures, problems=problems, problem_count=_int(r.get("problem_count")), links=list(links or []),
        unmatched=[clip(str(x), 400) for x in _list(r.get("unmatched"))[:50]],
        control=control, state_uri=state_uri, css=Markup(css), policy=meta_policy(css),
        unauthenticated=None if r.get("pauses_authenticated") is not False else UNAUTHENTICATED)
    return chunks


def write_fleet_page(path: str, status: FleetStatus, *, controls: Mapping[str, Any] | None = None,
                     state_uri: str | None = None) -> None:
    """The fleet page written atomically to ``path`` (as the table page is)."""
    write_chunks(path, fleet_page_chunks(status, controls=controls, state_uri=state_uri))


__all__ = ["fleet_page_chunks", "fleet_stylesheet", "write_fleet_page"]
