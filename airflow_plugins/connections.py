"""Lance storage options from Airflow's own connection types: ``aws``, ``wasb``/``adls`` and
``google_cloud_platform``.

A team that already keeps its cloud credentials in Airflow connections points
``memwal_conn_id`` (or a DAG's ``conn_id``) at one of them; the table URI then comes from the
task (``table=``) or the connection's ``extra.table``. The fields read are the ones each
provider documents for its connection type, so the same connection serves the provider's own
operators and ours. Where the provider is installed its hook resolves the credentials
(the Amazon provider's ``AwsBaseHook``: role assumption, profiles, session tokens); where it is
not (none of them is a dependency of memwal-jobs), the connection's fields are read directly.
Azure and Google connections are always read directly: their hooks build SDK clients, not
credentials object_store can take.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from airflow.sdk import Connection

#: Connection types whose credentials become storage options (the ``memwal`` type is the hook's own).
CLOUD_CONN_TYPES = frozenset({"aws", "wasb", "adls", "google_cloud_platform"})


def storage_options_from_connection(conn: Connection) -> dict[str, str]:
    """Lance storage options for an ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform`` connection."""
    kind = conn.conn_type
    extra = _extra(conn)
    if kind == "aws":
        return _aws(conn, extra)
    if kind in ("wasb", "adls"):
        return _azure(conn, extra, adls=kind == "adls")
    if kind == "google_cloud_platform":
        return _google(extra)
    raise ValueError(f"connection {conn.conn_id!r}: type {kind!r} holds no object-store credentials "
                     f"(expected memwal, {', '.join(sorted(CLOUD_CONN_TYPES))})")


def _extra(conn: Connection) -> dict[str, Any]:
    """The connection's extras, also under the old ``extra__<type>__<field>`` names."""
    raw = dict(conn.extra_dejson or {})
    prefix = f"extra__{conn.conn_type}__"
    for key in list(raw):
        if key.startswith(prefix):
            raw.setdefault(key[len(prefix):], raw[key])
    return raw


def _aws(conn: Connection, extra: dict[str, Any]) -> dict[str, str]:
    options: dict[str, str] = {}
    try:  # the Amazon provider, when installed, resolves the credentials as its own operators do
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        aws_hook: type[AwsBaseHook] | None = None
    else:
        aws_hook = AwsBaseHook
    if aws_hook is not None:
        hook = aws_hook(aws_conn_id=conn.conn_id, client_type="s3")
        creds = hook.get_credentials()
        options.update(aws_access_key_id=creds.access_key, aws_secret_access_key=creds.secret_key)
        if creds.token:
            options["aws_session_token"] = creds.token
        if hook.conn_region_name:
            options["aws_region"] = hook.conn_region_name
    else:
        key_id = conn.login or extra.get("aws_access_key_id")
        secret = conn.password or extra.get("aws_secret_access_key")
        if key_id and secret:
            options.update(aws_access_key_id=key_id, aws_secret_access_key=secret)
        if extra.get("aws_session_token"):
            options["aws_session_token"] = extra["aws_session_token"]
        if extra.get("region_name"):
            options["aws_region"] = extra["region_name"]
        if extra.get("profile_name"):
            options["aws_profile"] = extra["profile_name"]
    endpoint = extra.get("endpoint_url") or (extra.get("service_config", {}).get("s3", {}) or {}).get("endpoint_url")
    if endpoint:
        options["aws_endpoint"] = endpoint
        if str(endpoint).startswith("http://"):
            options["allow_http"] = "true"
    return {k: str(v) for k, v in options.items() if v}


def _connection_string(text: str) -> dict[str, str]:
    """``AccountName=..;AccountKey=..;BlobEndpoint=..`` as a dict."""
    parts = (p.split("=", 1) for p in text.split(";") if "=" in p)
    return {k.strip(): v.strip() for k, v in parts}


def _azure(conn: Connection, extra: dict[str, Any], *, adls: bool) -> dict[str, str]:
    """wasb: ``login`` is the account name, ``password`` its key (with ``extra.tenant_id``: a
    service principal's client id and secret), ``host`` the account URL if any; adls: ``host`` is
    the account name, ``login``/``password`` a service principal or (no tenant) the key."""
    options: dict[str, str] = {}
    if extra.get("connection_string"):
        cs = _connection_string(str(extra["connection_string"]))
        options.update(azure_storage_account_name=cs.get("AccountName", ""),
                       azure_storage_account_key=cs.get("AccountKey", ""),
                       azure_storage_endpoint=cs.get("BlobEndpoint", ""),
                       azure_storage_sas_token=cs.get("SharedAccessSignature", ""))
    host = conn.host or ""
    endpoint = extra.get("account_url") or (host if "://" in host else "")
    tenant = extra.get("tenant_id")
    if tenant:
        options.update(azure_storage_client_id=conn.login or "", azure_storage_client_secret=conn.password or "",
                       azure_storage_tenant_id=str(tenant))
    elif conn.password:
        options["azure_storage_account_key"] = conn.password
    if extra.get("shared_access_key"):
        options["azure_storage_account_key"] = str(extra["shared_access_key"])
    if extra.get("sas_token"):
        options["azure_storage_sas_token"] = str(extra["sas_token"])
    account = extra.get("account_name") or (host if adls and "://" not in host else "")
    if not account and not adls and not tenant:
        account = conn.login or ""
    if not account and endpoint:  # https://<account>.blob.core.windows.net
        account = (urlparse(str(endpoint)).hostname or "").split(".")[0] if ".core.windows.net" in str(endpoint) else ""
    if account and not options.get("azure_storage_account_name"):
        options["azure_storage_account_name"] = str(account)
    if endpoint and not options.get("azure_storage_endpoint"):
        options["azure_storage_endpoint"] = str(endpoint)
    if str(options.get("azure_storage_endpoint", "")).startswith("http://"):
        options["allow_http"] = "true"
    return {k: str(v) for k, v in options.items() if v}


def _google(extra: dict[str, Any]) -> dict[str, str]:
    options: dict[str, str] = {}
    if extra.get("keyfile_dict"):
        doc = extra["keyfile_dict"]
        options["google_service_account_key"] = doc if isinstance(doc, str) else json.dumps(doc)
    elif extra.get("key_path"):
        options["google_service_account_path"] = str(extra["key_path"])
    # neither: Application Default Credentials, which object_store finds on its own
    return options
