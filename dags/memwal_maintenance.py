"""``memwal_maintenance``: the whole maintenance cycle on one table, for ad-hoc runs.

Trigger it with a run conf (or the trigger form)::

    airflow dags trigger memwal_maintenance -c '{"table": "s3://lake/events", "conn_id": "memwal_events"}'
    airflow dags test memwal_maintenance -c '{"table": "/data/t", "storage_options": {}, "engine": "local"}'

``table`` (required), ``storage_options`` (an object; read at run time, registered for
masking, never rendered), ``conn_id`` (a ``memwal`` connection: the better home for
credentials, since a run conf is visible in the UI), ``engine`` (``local`` or ``spark``),
``spark_conn_id``. Tasks: merge, then index catch-up, then snapshot refresh, then GC with
the default reader grace period. A merge that commits emits an event on the table's
Asset through the ``memwal-merged`` alias.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from airflow_plugins.operators import (
    DEFAULT_MERGED_ALIAS,
    MemWalCatchupOperator,
    MemWalGcOperator,
    MemWalMergeOperator,
    MemWalSnapshotOperator,
)

COMMON = dict(
    table="{{ params.table }}",
    memwal_conn_id="{{ params.conn_id or '' }}",
    storage_options_param="storage_options",
    engine="{{ params.engine }}",
    spark_conn_id="{{ params.spark_conn_id }}",
)

with DAG(
    dag_id="memwal_maintenance",
    description="merge, index catch-up, snapshot refresh and GC of one MemWAL table (ad-hoc)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["memwal"],
    doc_md=__doc__,
    params={
        "table": Param(type="string", minLength=1, description="table URI: s3://bucket/prefix or a local path"),
        "storage_options": Param({}, type="object", description="Lance storage options (prefer conn_id)"),
        "conn_id": Param(None, type=["null", "string"], description="memwal connection (URI and credentials)"),
        "engine": Param("local", enum=["local", "spark"]),
        "spark_conn_id": Param("spark_default", type="string"),
    },
    default_args={"retries": 0},
) as dag:
    merge = MemWalMergeOperator(task_id="merge", asset_alias=DEFAULT_MERGED_ALIAS, **COMMON)
    catchup = MemWalCatchupOperator(task_id="catchup", **COMMON)
    snapshot = MemWalSnapshotOperator(task_id="snapshot", **COMMON)
    gc = MemWalGcOperator(task_id="gc", **COMMON)
    merge >> catchup >> snapshot >> gc
