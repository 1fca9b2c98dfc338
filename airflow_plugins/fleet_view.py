"""The fleet in the "MemWAL" view of Airflow's UI: ``/memwal/fleet`` and each fleet table's page.

When the API server has ``MEMWAL_FLEET_CONFIG`` (the ``memwal_fleet`` DAG's config):

- ``/memwal/fleet``: the fleet page (:func:`memwal.fleet.page.fleet_page_chunks`) of the last plan
  any worker made, read from the fleet's shared state (``plan.json`` and ``controls.json``:
  :mod:`memwal.fleet.state`, two reads): it never plans, and it needs nothing on the API
  server's disk. A fleet without a ``state`` in its config has no page to show (it says so);
- ``/memwal/fleet/tables?uri=<table URI>``: that table's status page, for a table the last
  plan's report names only (its listed tables, breaches, failures, problems), and only under
  the roots of a configured source, checked every time (:func:`memwal.fleet.sources.source_of`):
  a URI is never opened because a request, or a forged report row, named it.

Table URIs come from storage (folder names, a namespace's answers) and may hold markup: every
value is escaped where it lands (the fleet page's template autoescapes; links are
percent-encoded), and every response carries the view's sandboxing policy
(:func:`memwal.airflow.views.secured`). Pausing, resuming and cancelling go through the
``memwal_fleet_control`` DAG (its trigger form records who asked, and why): the page links to it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import quote

from memwal.airflow.fleet import CONFIG_ENV

if TYPE_CHECKING:
    from fastapi import FastAPI
    from memwal.airflow.fleet import FleetConfig
    from starlette.responses import Response

    from memwal.fleet.state import FleetState

R = TypeVar("R", bound="Response")


class Secure(Protocol):
    """:func:`memwal.airflow.views.secured`: a response with the sandboxing policy of its page."""

    def __call__(self, response: R, css: str) -> R: ...


class ErrorPage(Protocol):
    """:func:`memwal.airflow.views.error_page`: the page that says a table could not be read."""

    def __call__(self, title: str, message: str, back: str = ...) -> str: ...


def airflow_ref(dag_id: str, what: str | None = None) -> tuple[None, str, str]:
    """A DAG named, not linked: Airflow frames this view without top navigation or pop-ups, so a
    link to Airflow's own page opened the whole UI inside the frame, a second navigation rail
    (issue 64). The name says where to find it."""
    return None, f"{what + ': ' if what else ''}DAG {dag_id} (in Airflow's DAG list)", ""


def configured() -> bool:
    return bool(os.environ.get(CONFIG_ENV))


def table_href(uri: str) -> str:
    """The fleet table page's address, relative to the fleet page."""
    return f"fleet/tables?uri={quote(uri, safe='')}"


class NoState(LookupError):
    """The fleet's config names no state: the page has nothing to read."""


def _last(config: FleetConfig) -> tuple[FleetState, dict[str, Any], list[dict[str, Any]]]:
    from memwal.airflow.fleet import state_of

    from memwal.fleet.report import last_report

    state = state_of(config)
    if state is None:
        raise NoState(f"the fleet's config {config.path} names no state: add `state: s3://...` so that the plan task "
                      "leaves its report where the API server reads it")
    report, history = last_report(state)
    if report is None:
        raise NoState(f"no plan in {state.uri} yet: the memwal_fleet DAG's plan task writes it")
    return state, report, history


def fleet_page() -> Iterator[str]:
    """The fleet page of the last plan, with each table's last run and the pauses read live (a
    failure to read it raises here, before anything is sent)."""
    from memwal.airflow.fleet import load_fleet_config

    from memwal.fleet.page import fleet_page_chunks
    from memwal.fleet.state import CONTROLS, RUNS
    from memwal.fleet.status import FleetStatus, live

    config = load_fleet_config()
    state, report, history = _last(config)
    runs, controls = state.read(RUNS)[0], state.read(CONTROLS)[0]
    links = [("./", "← all MemWAL tables", "_self"), airflow_ref("memwal_fleet"),
             airflow_ref("memwal_fleet_control", "pause, resume, cancel")]
    return fleet_page_chunks(FleetStatus(live(report, runs, controls, state.uri), tuple(history)), controls=controls,
                             link=table_href, links=links, control="memwal_fleet_control",
                             state_uri=state.uri)


def named_tables(report: Mapping[str, Any]) -> dict[str, str]:
    """The tables a report names (URI -> source, when it says)."""
    out: dict[str, str] = {}
    for row in report.get("top") or []:
        if isinstance(row, Mapping) and isinstance(row.get("table"), str):
            out[row["table"]] = str(row.get("source") or "")
    for part in ((report.get("breaches") or {}).get("named") or [], report.get("failures") or [],
                 report.get("problems") or []):
        for item in part:
            if isinstance(item, Mapping) and isinstance(item.get("table"), str):
                out.setdefault(item["table"], "")
    return out


def fleet_table(uri: str) -> tuple[str, dict[str, str]]:
    """The URI and storage options of a table the last plan named (``LookupError``: none such)."""
    from memwal.airflow.fleet import load_fleet_config, storage_options_of

    config = load_fleet_config()
    _, report, _ = _last(config)
    named = named_tables(report)
    if uri not in named:
        raise LookupError(f"no table {uri!r} in the fleet's last plan")
    # the report is storage: the source a row names is a hint, the URI is checked against its roots every time
    source = config.source_of(uri, prefer=named[uri] or None)
    if source is None:
        raise LookupError(f"no source of the fleet holds {uri!r}")
    return uri, storage_options_of(source)


def add_routes(app: FastAPI, secured: Secure, page_css: str, error_page: ErrorPage) -> None:
    """``/fleet`` and ``/fleet/tables`` on the view's FastAPI application."""
    from fastapi import HTTPException, Query
    from fastapi.responses import HTMLResponse, StreamingResponse

    from memwal.errors import first_line
    from memwal.fleet.page import fleet_stylesheet
    from memwal.inspect.page import status_page, stylesheet
    from memwal.table import open_table

    @app.get("/fleet", response_class=HTMLResponse, response_model=None)
    def fleet() -> HTMLResponse | StreamingResponse:
        if not configured():
            raise HTTPException(status_code=404, detail=f"no fleet: set {CONFIG_ENV} on the API server")
        try:
            chunks = fleet_page()
        except NoState as exc:
            return secured(HTMLResponse(error_page("the fleet", str(exc), "./"), status_code=404), page_css)
        except Exception as exc:  # noqa: BLE001 - shown on the page: the UI must not break on the state
            return secured(HTMLResponse(error_page("the fleet", first_line(exc), "./"), status_code=502), page_css)
        return secured(StreamingResponse(chunks, media_type="text/html; charset=utf-8"), fleet_stylesheet())

    @app.get("/fleet/tables", response_class=HTMLResponse, response_model=None)
    def fleet_table_page(uri: str = Query(...)) -> HTMLResponse | StreamingResponse:
        if not configured():
            raise HTTPException(status_code=404, detail=f"no fleet: set {CONFIG_ENV} on the API server")
        try:
            table, options = fleet_table(uri)
        except LookupError:
            raise HTTPException(status_code=404, detail="no such table in the fleet's last plan") from None
        links = [("../fleet", "← the fleet", "_self"), airflow_ref("memwal_fleet")]
        try:
            chunks = status_page(open_table(table, options), links=links)
        except Exception as exc:  # noqa: BLE001 - shown on the page
            return secured(HTMLResponse(error_page(table, first_line(exc), "../fleet"), status_code=502), page_css)
        return secured(StreamingResponse(chunks, media_type="text/html; charset=utf-8"), stylesheet())
