"""The fleet in the "MemWAL" view of Airflow's UI: ``/memwal/fleet`` and each fleet table's page.

When the API server has ``MEMWAL_FLEET_CONFIG`` (the ``memwal_fleet`` DAG's config):

- ``/memwal/fleet``: the fleet page (:func:`memwal.fleet.page.fleet_page_chunks`): every table of
  the config's sources counted by state, the config's ``top`` tables ranked by debt with their
  lag and last run, each linking to its page. It is planned when asked for, with the probe
  cache of the config read (never written: that file is the plan task's), so an unchanged table
  costs its listings;
- ``/memwal/fleet/tables?uri=<table URI>``: that table's status page, for a table the fleet
  found only (the last page's tables, the cache's, or a discovery of the sources): a URI is
  never opened because a request named it.

Table URIs come from storage (folder names, a namespace's answers) and may hold markup: every
value is escaped where it lands (the fleet page's template autoescapes; links are
percent-encoded), and every response carries the view's sandboxing policy
(:func:`memwal.airflow.views.secured`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from memwal.airflow.fleet import CONFIG_ENV

#: The tables the last fleet page listed, by URI -> source (a click on one opens it directly).
_seen: dict[str, str] = {}
_seen_lock = threading.Lock()


def configured() -> bool:
    return bool(os.environ.get(CONFIG_ENV))


def table_href(uri: str) -> str:
    """The fleet table page's address, relative to the fleet page."""
    return f"fleet/tables?uri={quote(uri, safe='')}"


def fleet_page() -> Iterator[str]:
    """The fleet page, planned now (a failure to plan raises here, before anything is sent)."""
    from memwal.airflow.fleet import discover_fleet, load_fleet_config

    from memwal.fleet.page import fleet_page_chunks
    from memwal.fleet.plan import plan_fleet
    from memwal.fleet.probe import ProbeCache
    from memwal.fleet.status import status_of

    config = load_fleet_config()
    cache = ProbeCache.load(config.cache)
    plan = plan_fleet(discover_fleet(config, cache.known_tables()), config.policy, cache=cache,
                      workers=config.plan_workers)
    status = status_of(plan, top=config.top, workers=config.plan_workers)
    with _seen_lock:
        _seen.clear()
        _seen.update({t.table: t.source for t in plan.tables})
    links = [("./", "← all MemWAL tables", "_self"), ("../dags/memwal_fleet", "DAG memwal_fleet", "_top")]
    return fleet_page_chunks(status, link=table_href, links=links)


def fleet_table(uri: str) -> tuple[str, dict[str, str]]:
    """The URI and storage options of a table the fleet found (``LookupError``: none such)."""
    from memwal.airflow.fleet import discover_fleet, load_fleet_config, storage_options_of

    from memwal.fleet.probe import ProbeCache

    config = load_fleet_config()
    with _seen_lock:
        source = _seen.get(uri)
    if source is None:
        cache = ProbeCache.load(config.cache)
        found = {t.uri: t.source for t in discover_fleet(config, cache.known_tables()).tables}
        source = found.get(uri)
    if source is None:
        raise LookupError(f"no table {uri!r} in the fleet's sources")
    return uri, storage_options_of(config.source(source))


def add_routes(app: Any, secured: Any, page_css: str, error_page: Any) -> None:
    """``/fleet`` and ``/fleet/tables`` on the view's FastAPI application."""
    from fastapi import HTTPException, Query
    from fastapi.responses import HTMLResponse, StreamingResponse

    from memwal.errors import first_line
    from memwal.inspect.page import status_page, stylesheet
    from memwal.table import open_table

    @app.get("/fleet", response_class=HTMLResponse, response_model=None)
    def fleet() -> HTMLResponse | StreamingResponse:
        if not configured():
            raise HTTPException(status_code=404, detail=f"no fleet: set {CONFIG_ENV} on the API server")
        try:
            chunks = fleet_page()
        except Exception as exc:  # noqa: BLE001 - shown on the page: the UI must not break on one source
            return secured(HTMLResponse(error_page("the fleet", first_line(exc), "./"), status_code=502), page_css)
        return secured(StreamingResponse(chunks, media_type="text/html; charset=utf-8"), stylesheet())

    @app.get("/fleet/tables", response_class=HTMLResponse, response_model=None)
    def fleet_table_page(uri: str = Query(...)) -> HTMLResponse | StreamingResponse:
        if not configured():
            raise HTTPException(status_code=404, detail=f"no fleet: set {CONFIG_ENV} on the API server")
        try:
            table, options = fleet_table(uri)
        except LookupError:
            raise HTTPException(status_code=404, detail="no such table in the fleet") from None
        links = [("../fleet", "← the fleet", "_self"), ("../../dags/memwal_fleet", "DAG memwal_fleet", "_top")]
        try:
            chunks = status_page(open_table(table, options), links=links)
        except Exception as exc:  # noqa: BLE001 - shown on the page
            return secured(HTMLResponse(error_page(table, first_line(exc), "../fleet"), status_code=502), page_css)
        return secured(StreamingResponse(chunks, media_type="text/html; charset=utf-8"), stylesheet())
