"""``MemWalPlugin``: registered through the ``airflow.plugins`` entry point.

Airflow 3 imports operators, sensors and hooks as ordinary modules (they are listed in
the provider metadata, ``memwal.airflow.provider``); the plugin adds Jinja macros so DAG
authors can name a table's merged-data Asset and redact storage options in templates:

    {{ macros.memwal.asset_uri("s3://bucket/events") }}

and the "MemWAL" view of the UI: the status page of every table the DAGs maintain, served by
the API server under ``/memwal`` (``fastapi_apps``) and shown in the navigation
(``external_views``; see :mod:`memwal.airflow.views`).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.plugins_manager import AirflowPlugin  # the Task SDK's (Airflow >= 3.3, the extra's floor)

from memwal.core.secrets import redact_storage_options  # the one redaction rule, as a macro too


def asset_uri(table: str) -> str:
    """URI of the Asset that receives an event each time a merge of ``table`` commits."""
    from memwal.airflow.assets import table_asset

    return table_asset(table).uri


def asset_name(table: str) -> str:
    """Name of that Asset."""
    from memwal.airflow.assets import table_asset

    return table_asset(table).name


def _views() -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    from memwal.airflow import views

    app = {"app": views.app, "url_prefix": views.URL_PREFIX, "name": "MemWAL status pages"}
    # href without a leading slash: relative to the UI's base URL, so it works behind a proxy path
    view = {"name": "MemWAL", "href": views.URL_PREFIX.lstrip("/") + "/", "url_route": "memwal",
            "destination": "nav", "icon": views.ICON}
    return [app], [view]


class MemWalPlugin(AirflowPlugin):
    name = "memwal"
    macros = [asset_uri, asset_name, redact_storage_options]
    fastapi_apps, external_views = _views()
