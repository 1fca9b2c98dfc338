"""The ray engine from Airflow: the client of :class:`memwal.airflow.hooks.MemWalHook` for
``engine="ray"`` (operators never use it directly).

A job runs in the task's process, as ``engine="local"`` does, as a Ray client: its tasks run on
the cluster an Airflow connection names (``ray_conn_id``), else on a local Ray of the worker's
cores. The connection may be of any type (``generic`` will do): the address is its ``host``
(``ray://head`` or ``head``) with its ``port``, or ``extra.address`` whole; its ``password``
(Airflow's encrypted, masked field) is the cluster's token. They reach Ray through its own
environment variables in the task's process (``RAY_ADDRESS``, ``RAY_AUTH_TOKEN``), never a
command line, a template or a log: as the Spark Connect token travels in ``SPARK_REMOTE``.
"""

from __future__ import annotations

import os

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException


def use_ray_connection(conn_id: str | None) -> None:
    """Point this process's Ray client at the cluster of connection ``conn_id`` (none: a local Ray)."""
    if not conn_id:
        return
    from airflow.sdk.log import mask_secret

    conn = BaseHook.get_connection(conn_id)
    extra = conn.extra_dejson if isinstance(conn.extra_dejson, dict) else {}
    address = str(extra.get("address") or "").strip() or _address(conn.host, conn.port)
    if not address:
        raise AirflowFailException(f"ray connection {conn_id!r}: no address (host and port, or extra.address)")
    os.environ["RAY_ADDRESS"] = address
    if conn.password:
        mask_secret(conn.password)
        os.environ["RAY_AUTH_TOKEN"] = conn.password
        os.environ["RAY_AUTH_MODE"] = "token"


def _address(host: str | None, port: int | None) -> str:
    host = (host or "").strip()
    if not host or port is None or host.rsplit("/", 1)[-1].count(":"):
        return host
    return f"{host}:{port}"
