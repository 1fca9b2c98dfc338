"""``memwal_maintenance``: the whole maintenance cycle on one table, for ad-hoc runs.

Trigger it with a run conf (or the trigger form)::

    airflow dags trigger memwal_maintenance -c '{"table": "s3://lake/events", "conn_id": "memwal_events"}'
    airflow dags test memwal_maintenance -c '{"table": "/data/t", "storage_options": {}, "engine": "local"}'

``table`` (required), ``storage_options`` (an object; read at run time, registered for
masking, never rendered), ``conn_id`` (a ``memwal`` connection: the better home for
credentials, since a run conf is visible in the UI), ``engine`` (``local``, ``spark`` or ``ray``),
``spark_conn_id``, ``spark_conf`` (an object of ``--conf`` settings), ``one_application``
(with the Spark engine, run the whole cycle as one spark-submit: default true), ``ray_conn_id``
(with the Ray engine, the connection naming the cluster; none: a local Ray),
``grace_seconds``, ``expire_versions`` (GC: base-table versions older than this are
expired first, tags and branches kept; default 7 days; null keeps every version) and
``writer_idle_seconds`` (GC: a shard writer quiet this long is presumed gone; default a day).
Tasks: merge, index catch-up, compaction, GC, snapshot refresh; or, with the Spark engine
and ``one_application``, the one task ``maintenance`` doing all five, each job's result in
XCom under the job's name. A merge that commits emits an event on the table's Asset
through the ``memwal-merged`` alias.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.python import BranchPythonOperator
from airflow.sdk import DAG, Param
from memwal.airflow.assets import DEFAULT_MERGED_ALIAS
from memwal.airflow.maintenance_operators import MemWalMaintenanceOperator
from memwal.airflow.operators import OPERATORS

COMMON: dict[str, Any] = dict(
    table="{{ params.table }}",
    memwal_conn_id="{{ params.conn_id or '' }}",
    storage_options_param="storage_options",
    engine="{{ params.engine }}",
    spark_conn_id="{{ params.spark_conn_id }}",
    spark_conf_param="spark_conf",
    ray_conn_id="{{ params.ray_conn_id or '' }}",
)
GC_OPTIONS = {"grace_seconds": "{{ params.grace_seconds }}",
              "expire_versions": "{{ 'never' if params.expire_versions is none else params.expire_versions }}",
              "writer_idle_seconds": "{{ params.writer_idle_seconds }}"}


def _route(**context: Any) -> str:
    params = context["params"]
    return "maintenance" if params["engine"] == "spark" and params["one_application"] else "merge"


with DAG(
    dag_id="memwal_maintenance",
    description="merge, index catch-up, compaction, GC and snapshot refresh of one MemWAL table (ad-hoc)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["memwal"],
    doc_md=__doc__,
    render_template_as_native_obj=True,  # spark_conf and the GC numbers render as values, not text
    params={
        "table": Param(type="string", minLength=1, description="table URI: s3://bucket/prefix or a local path"),
        "storage_options": Param({}, type="object", description="Lance storage options (prefer conn_id)"),
        "conn_id": Param(None, type=["null", "string"], description="memwal connection (URI and credentials)"),
        "engine": Param("local", enum=["local", "spark", "ray"]),
        "spark_conn_id": Param("spark_default", type="string"),
        "spark_conf": Param({}, type="object", description="spark-submit --conf settings"),
        "one_application": Param(True, type="boolean", description="Spark engine: the cycle as one spark-submit"),
        "ray_conn_id": Param(None, type=["null", "string"], description="Ray engine: the connection naming the "
                             "cluster (its password: the token); null: a local Ray"),
        "grace_seconds": Param(600, type="number", minimum=0, description="GC reader grace period"),
        "expire_versions": Param(604800, type=["null", "number"], minimum=0,
                                 description="GC expires base-table versions older than this (null: keep all)"),
        "writer_idle_seconds": Param(86400, type="number", minimum=0,
                                     description="GC presumes a shard writer quiet this long gone (0: none is live)"),
    },
    default_args={"retries": 0},
) as dag:
    route = BranchPythonOperator(task_id="route", python_callable=_route)
    cycle = MemWalMaintenanceOperator(task_id="maintenance", asset_alias=DEFAULT_MERGED_ALIAS,
                                      job_options={"gc": GC_OPTIONS}, **COMMON)
    tasks = [
        OPERATORS[job](task_id=job, **({"asset_alias": DEFAULT_MERGED_ALIAS} if job == "merge" else {}),
                       **({"job_options": GC_OPTIONS} if job == "gc" else {}), **COMMON)
        for job in OPERATORS
    ]
    route >> [cycle, tasks[0]]
    for before, after in zip(tasks, tasks[1:], strict=False):
        before >> after
