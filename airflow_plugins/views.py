"""The "MemWAL" view of the Airflow 3 UI: the status page of every table Airflow maintains.

The plugin (:mod:`memwal.airflow.plugin`) mounts :data:`app` at ``/memwal`` of the API server
(``fastapi_apps``) and adds an ``external_views`` entry "MemWAL", which the UI shows in an
iframe. The tables are those of the ``memwal_tables`` DAG config (``MEMWAL_CONFIG``) and every
connection of type ``memwal``:

- ``/memwal/``: the list of tables;
- ``/memwal/tables/config/<name>``, ``/memwal/tables/connection/<conn_id>``: one table's status
  page (:mod:`memwal.inspect.page`), read when asked for (manifests and history only);
- ``/memwal/fleet``, ``/memwal/fleet/tables?uri=...``: the ``memwal_fleet`` DAG's tables
  (``MEMWAL_FLEET_CONFIG``) by debt, and each one's page (:mod:`memwal.airflow.fleet_view`).

Every route requires an authenticated Airflow user allowed to see the website (Airflow's auth
manager decides). Storage options and credentials stay on the server.

The pages show values from the tables' storage, which whoever can write it controls, and
Airflow frames external views with ``sandbox="allow-scripts allow-same-origin allow-forms
allow-downloads"``. So every response carries a Content-Security-Policy with ``sandbox``
(:func:`memwal.inspect.policy.header_policy`): no script runs and no form is sent, whatever the
frame allows; a status page is streamed from size-capped, type-checked records. The page keeps
its origin, so its links, followed inside the frame, carry the viewer's session (the frame lets
no page navigate the window itself: a link to a DAG opens Airflow's page inside the view).
The FastAPI application is built on its first request (:class:`LazyApp`), so the scheduler and
workers, which import the plugin too, never import FastAPI's security machinery for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # FastAPI and Starlette load with the first request (create_app), not with the plugin
    from fastapi import FastAPI
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send

from memwal.airflow.tables_config import CONFIG_ENV

from memwal.core.text import html_text as escape
from memwal.inspect.policy import SECURITY_HEADERS, header_policy, meta_policy

URL_PREFIX = "/memwal"
#: The navigation icon: three bars of different heights (an inline SVG: nothing to fetch).
ICON = ("data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 24 24' fill='%233b7ddd'>"
        "<rect x='3' y='10' width='4' height='11' rx='1'/><rect x='10' y='4' width='4' height='17' rx='1'/>"
        "<rect x='17' y='14' width='4' height='7' rx='1'/></svg>")


@dataclass
class TableRef:
    """A table the UI lists: where it comes from, and how to open it (server side only)."""

    source: str  # "config" or "connection"
    key: str  # the config's table name, or the connection id
    uri: str | None
    conn_id: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    dag_id: str | None = None
    problem: str | None = None

    @property
    def href(self) -> str:
        return f"tables/{self.source}/{self.key}"


def config_tables() -> tuple[list[TableRef], str | None]:
    """The tables of the ``memwal_tables`` DAG config (and the config's error, if any)."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return [], None
    try:
        from memwal.airflow.tables_config import load_config, table_specs

        chosen = table_specs(load_config(path))
    except Exception as exc:  # noqa: BLE001 - a bad config is shown, as the DAG file shows it
        return [], f"{CONFIG_ENV}={path}: {exc}"
    good = [TableRef("config", s["name"], s["table"], s.get("conn_id"), dict(s.get("storage_options") or {}),
                     dag_id=f"memwal_{s['name']}") for s in chosen.specs]
    return good + [TableRef("config", name, None, problem=problem) for name, problem in chosen.broken.items()], None


def connection_tables() -> list[TableRef]:
    """Every connection of type ``memwal`` in Airflow's metadata database."""
    from airflow.models import Connection
    from airflow.utils.session import create_session
    from memwal.airflow.hooks import MemWalHook
    from memwal.airflow.provider import CONN_TYPE

    out = []
    with create_session() as session:
        for conn in session.query(Connection).filter(Connection.conn_type == CONN_TYPE).order_by(Connection.conn_id):
            try:
                uri, options = MemWalHook.from_connection(conn)
                out.append(TableRef("connection", conn.conn_id, uri, conn.conn_id, options))
            except ValueError as exc:
                out.append(TableRef("connection", conn.conn_id, None, conn.conn_id, problem=str(exc)))
    return out


def resolve(ref: TableRef) -> tuple[str, dict[str, str]]:
    """The table URI and storage options (a config table's connection, then its own options)."""
    uri = ref.uri
    options: dict[str, str] = {}
    if ref.conn_id:
        from airflow.models import Connection
        from memwal.airflow.hooks import MemWalHook

        conn_uri, options = MemWalHook.from_connection(Connection.get_connection_from_secrets(ref.conn_id))
        uri = uri or conn_uri
    options.update(ref.storage_options)
    if not uri:
        raise ValueError(f"{ref.source} {ref.key}: no table URI")
    return uri, options


# -- pages -------------------------------------------------------------------------------------------
_STYLE = """
body { margin: 0; background: #f6f7f9; color: #1d2330;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 20px 24px; }
h1 { font-size: 20px; margin: 0 0 12px; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid #e3e7ed; }
th, td { text-align: left; padding: 8px 12px; border-bottom: 1px solid #e3e7ed; }
th { color: #5f6b7a; font-size: 12px; }
td.uri { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; word-break: break-all; }
a { color: #3b7ddd; text-decoration: none; } a:hover { text-decoration: underline; }
.error { color: #d64545; } .empty { color: #5f6b7a; font-style: italic; }
@media (prefers-color-scheme: dark) { body { background: #14171c; color: #e6e9ee; }
  table { background: #1c2027; border-color: #2c323c; } th, td { border-color: #2c323c; } }
"""


def _doc(title: str, body: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{escape(meta_policy(_STYLE))}">'
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body><main>{body}</main></body></html>")


#: A response of any kind, given back as it came (with its headers set).
R = TypeVar("R", bound="Response")


def secured(response: R, css: str) -> R:
    """``response`` with the sandboxing policy of a page whose one stylesheet is ``css``."""
    response.headers["Content-Security-Policy"] = header_policy(css)
    response.headers.update(SECURITY_HEADERS)
    return response


def index_page(tables: list[TableRef], error: str | None, fleet: bool = False) -> str:
    rows = []
    for t in tables:
        name = f'<a class="table-link" href="{escape(t.href)}">{escape(t.key)}</a>'
        dag = f"DAG {escape(t.dag_id)}" if t.dag_id else "connection"
        detail = f'<span class="error">{escape(t.problem)}</span>' if t.problem else escape(t.uri or "")
        rows.append(f'<tr class="table" data-source="{escape(t.source)}" data-key="{escape(t.key)}"><td>{name}</td>'
                    f'<td>{dag}</td><td class="uri">{detail}</td></tr>')
    body = ["<h1>MemWAL tables</h1>"]
    if fleet:
        body.append('<p><a class="fleet-link" href="fleet">The fleet</a>: every table of the memwal_fleet DAG\'s '
                    "sources, ranked by debt</p>")
    if error:
        body.append(f'<p class="error">{escape(error)}</p>')
    if rows:
        body.append(f'<table id="tables"><thead><tr><th>table</th><th>maintained by</th><th>URI</th></tr></thead>'
                    f'<tbody>{"".join(rows)}</tbody></table>')
    elif not fleet:
        body.append(f'<p class="empty">No MemWAL table: set {CONFIG_ENV} to the memwal_tables DAG config, or add a '
                    "connection of type memwal.</p>")
    return _doc("MemWAL tables", "".join(body))


def table_page(ref: TableRef) -> Iterator[str]:
    """The status page of ``ref``, piece by piece (read before the first piece: a failure
    to read the table raises here, before anything is sent)."""
    from memwal.inspect.page import status_page
    from memwal.table import open_table

    uri, options = resolve(ref)
    from memwal.airflow.fleet_view import airflow_ref

    links: list[tuple[str | None, str, str]] = [("../../", "← all MemWAL tables", "_self")]
    if ref.dag_id:
        links.append(airflow_ref(ref.dag_id))
    return status_page(open_table(uri, options), links=links)


def error_page(title: str, message: str, back: str = "../../") -> str:
    return _doc(f"MemWAL · {title}", f'<p><a href="{escape(back)}">← back</a></p><h1>{escape(title)}</h1>'
                f'<p class="error" id="error">cannot read it: {escape(message)}</p>')


def create_app() -> FastAPI:
    """The FastAPI application (routes need an Airflow user allowed to see the website)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse, StreamingResponse
    from memwal.airflow import fleet_view

    from memwal.errors import first_line
    from memwal.inspect.page import stylesheet

    app = FastAPI(title="MemWAL", description="Status pages of the MemWAL tables Airflow maintains",
                  dependencies=[Depends(requires_access_view(AccessView.WEBSITE))], docs_url=None, redoc_url=None,
                  openapi_url=None)

    def known() -> tuple[list[TableRef], str | None]:
        tables, error = config_tables()
        return tables + connection_tables(), error

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return secured(HTMLResponse(index_page(*known(), fleet=fleet_view.configured())), _STYLE)

    @app.get("/tables/{source}/{key}", response_class=HTMLResponse, response_model=None)
    def table(source: str, key: str) -> HTMLResponse | StreamingResponse:
        ref = next((t for t in known()[0] if t.source == source and t.key == key), None)
        if ref is None:
            raise HTTPException(status_code=404, detail=f"no MemWAL table {source}/{key}")
        try:
            chunks = table_page(ref)
        except Exception as exc:  # noqa: BLE001 - shown on the page: the UI must not break on one table
            return secured(HTMLResponse(error_page(ref.key, first_line(exc)), status_code=502), _STYLE)
        return secured(StreamingResponse(chunks, media_type="text/html; charset=utf-8"), stylesheet())

    fleet_view.add_routes(app, secured, _STYLE, error_page)

    return app


class LazyApp:
    """An ASGI application that builds :func:`create_app` on its first request."""

    def __init__(self) -> None:
        self._app: FastAPI | None = None
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = create_app()
        await self._app(scope, receive, send)


app = LazyApp()
