"""``MemWalHook``: a MemWAL table from an Airflow connection of type ``memwal``.

The connection holds the table URI and its storage options (Lance's key names, the same
ones ``memwal --storage-option`` takes):

- ``host``: the table URI (``s3://``, ``az://``, ``abfss://``, ``gs://`` or a local path); ``extra.table``
  works too (URIs do not always survive the connection-URI syntax).
- ``extra.storage_options``: a JSON object of storage options.
- ``login`` / ``password`` (optional): the object store's access key id and secret, kept
  in Airflow's encrypted password field and shown masked by the UI; they become
  ``aws_access_key_id`` / ``aws_secret_access_key`` unless the extras set those.

Instead of a ``memwal`` connection, ``memwal_conn_id`` may name one of Airflow's own cloud
connections (``aws``, ``wasb``, ``adls``, ``google_cloud_platform``): its credentials become
the storage options (``memwal.airflow.connections``) and the table URI comes from ``table=``.

Credentials never reach logs or rendered templates: every credential-like storage option
is registered with Airflow's secrets masker as soon as it is read, storage options are
never template fields, and operators hand them to spark-submit only in a 0600 file in a
private directory (``--storage-options-file``), never as command-line arguments.
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseHook
from memwal.airflow.provider import CONN_TYPE

from memwal.core.secrets import is_secret_key, redact_options


def mask_storage_options(storage_options: dict[str, Any] | None) -> None:
    """Register every credential-like storage option value with Airflow's secrets masker.

    Which keys are credentials is ``memwal.core.secrets.is_secret_key``: one rule for the
    CLI, the Spark jobs and Airflow."""
    if not storage_options:
        return
    from airflow.sdk.log import mask_secret

    for key, value in storage_options.items():
        text = str(value)
        # flags such as bucket_key_enabled=true are not secrets (and masking "true" would garble every log)
        if text and is_secret_key(str(key)) and text.lower() not in ("true", "false") and not text.isdigit():
            mask_secret(text)


def redacted(storage_options: dict[str, Any] | None) -> dict[str, str]:
    """Storage options safe to print: credential values replaced by ``***``."""
    return redact_options(storage_options)


def _coerce_storage_options(value: Any, where: str) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: storage_options is not a JSON object") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{where}: storage_options must be an object of KEY: VALUE")
    return {str(k): str(v) for k, v in value.items()}


class MemWalHook(BaseHook):
    """A MemWAL table resolved from a ``memwal`` connection, explicit arguments, or both.

    :param memwal_conn_id: connection of type ``memwal`` (optional when ``table`` is given).
    :param table: table URI; overrides the connection's.
    :param storage_options: storage options; override the connection's key by key.
    """

    conn_name_attr = "memwal_conn_id"
    default_conn_name = "memwal_default"
    conn_type = CONN_TYPE
    hook_name = "MemWAL table"

    def __init__(
        self,
        memwal_conn_id: str | None = None,
        *,
        table: str | None = None,
        storage_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.memwal_conn_id = memwal_conn_id
        self._table = table
        self._storage_options = dict(storage_options or {})
        self._resolved: tuple[str, dict[str, str]] | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form (:data:`memwal.airflow.provider.UI_FIELD_BEHAVIOUR`), in the hook's spelling."""
        from memwal.airflow.provider import UI_FIELD_BEHAVIOUR

        return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}

    # -- resolution ---------------------------------------------------------------
    @staticmethod
    def from_connection(conn: Any) -> tuple[str | None, dict[str, str]]:
        """Table URI and storage options held by a connection object: a ``memwal`` one, or one of
        Airflow's ``aws``, ``wasb``/``adls``, ``google_cloud_platform`` connections (the table URI
        then comes from ``extra.table`` or the task; see ``memwal.airflow.connections``)."""
        from memwal.airflow.connections import CLOUD_CONN_TYPES, storage_options_from_connection

        extra = conn.extra_dejson or {}
        if conn.conn_type in CLOUD_CONN_TYPES:
            options = storage_options_from_connection(conn)
            options.update(_coerce_storage_options(extra.get("storage_options"), f"connection {conn.conn_id!r}"))
            return extra.get("table") or None, options
        uri = extra.get("table") or conn.host or None
        options = _coerce_storage_options(extra.get("storage_options"), f"connection {conn.conn_id!r}")
        if conn.login and "aws_access_key_id" not in options:
            options["aws_access_key_id"] = conn.login
        if conn.password and "aws_secret_access_key" not in options:
            options["aws_secret_access_key"] = conn.password
        return uri, options

    def resolve(self) -> tuple[str, dict[str, str]]:
        """``(table_uri, storage_options)``, with every credential registered for masking."""
        if self._resolved is None:
            uri, options = None, {}
            if self.memwal_conn_id:
                uri, options = self.from_connection(self.get_connection(self.memwal_conn_id))
            options.update({str(k): str(v) for k, v in self._storage_options.items()})
            uri = self._table or uri
            if not uri:
                raise ValueError(
                    "no MemWAL table: give `table` or a memwal connection whose host (or extra.table) is the table URI"
                )
            mask_storage_options(options)
            self._resolved = (uri, options)
        return self._resolved

    @property
    def table_uri(self) -> str:
        return self.resolve()[0]

    @property
    def storage_options(self) -> dict[str, str]:
        return dict(self.resolve()[1])

    def get_conn(self):
        """The opened ``memwal.table.Table`` (validated: a Lance table with a MemWAL index)."""
        from memwal.table import open_table

        uri, options = self.resolve()
        return open_table(uri, options)

    def status(self):
        """``memwal.inspect.status.table_status`` of the table (manifests only, never generation data)."""
        from memwal.inspect.status import table_status

        return table_status(self.get_conn())

    def test_connection(self) -> tuple[bool, str]:
        try:
            st = self.status()
        except Exception as exc:  # noqa: BLE001 - reported to the UI, not raised
            return False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return True, f"{st.table}: version {st.version}, {len(st.shards)} shards, {st.unmerged_generations} unmerged"
