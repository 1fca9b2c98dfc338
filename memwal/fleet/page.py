"""The fleet page: the fleet's view (:mod:`memwal.fleet.status`) as one self-contained HTML page.

Like the table page (:mod:`memwal.inspect.page`), whose stylesheet it shares: no script,
nothing fetched, every value escaped where it lands (Jinja's autoescape), and the same
Content-Security-Policy. ``link(uri)`` gives each table's page address (the Airflow view links
to its own table pages; a file written by the CLI links nowhere).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from memwal.core.text import clip
from memwal.fleet.status import STATES, FleetStatus
from memwal.inspect.page import fmt_age, stylesheet
from memwal.inspect.policy import meta_policy

_BADGE = {"idle": "ok", "behind": "running", "held": "fenced", "problem": "failed"}
_NOTES = {"idle": "nothing to do", "behind": "jobs planned", "held": "a job's lease is held", "problem": "unreadable"}


@cache
def _template() -> Any:
    import jinja2

    text = resources.files("memwal.fleet").joinpath("fleet_page.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.from_string(text)


def fleet_page_chunks(st: FleetStatus, *, link: Callable[[str], str] | None = None,
                      links: list[tuple[str, str, str]] | None = None, target: str = "_self") -> Iterator[str]:
    from markupsafe import Markup

    from memwal.core.version import __version__

    rows = []
    for t in st.top:
        r = t.last_run
        last = "-" if r is None else f"{r.job} {r.outcome}, {datetime.fromtimestamp(r.started_at, UTC):%Y-%m-%d %H:%M}"
        rows.append({"table": t.table, "state": t.state, "badge": _BADGE.get(t.state, ""), "debt": f"{t.debt:g}",
                     "jobs": ", ".join(t.jobs) or "-", "lag": t.lag_generations, "age": fmt_age(t.lag_seconds),
                     "last": last, "error": clip(t.error or (t.last_run.error if t.last_run else None) or "", 500),
                     "reasons": clip("; ".join(t.reasons), 1000), "href": link(t.table) if link else None,
                     "target": target})
    css = stylesheet()
    return _template().generate(
        version=__version__, st=st, now=datetime.fromtimestamp(st.now, UTC).strftime("%Y-%m-%d %H:%M:%S"),
        states=[(s, st.by_state.get(s, 0)) for s in STATES], notes=_NOTES, rows=rows, links=list(links or []),
        css=Markup(css), policy=meta_policy(css))


__all__ = ["fleet_page_chunks"]
