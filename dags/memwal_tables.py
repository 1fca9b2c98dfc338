"""One maintenance DAG per MemWAL table, generated from the config file named by ``MEMWAL_CONFIG``.

For each table ``<name>`` of the config (YAML or JSON; see ``memwal_tables.example.yaml``):

- ``memwal_<name>``: on the table's schedule, merge, index catch-up, compaction, snapshot
  refresh, then GC (the table's GC policy: by default it expires base-table versions older
  than 7 days, keeping tags and branches). With ``engine: spark`` the cycle is one
  spark-submit (``one_application: false`` for one per job). ``max_active_runs=1``, retries with
  exponential backoff (a held lease is retried, bad input is not). Each merge that commits
  emits an event on the table's Asset (``memwal.airflow.assets.table_asset``) through the
  alias ``memwal-merged:<name>``, so downstream DAGs with ``schedule=[table_asset(uri)]``
  run on fresh data.
- ``memwal_<name>_lag`` (unless ``lag: false``): every few minutes a ``MergeLagSensor``
  waits (deferrable by default) for the merge lag to reach a threshold and then triggers
  an early run of ``memwal_<name>`` and waits for it, so early runs never pile up.

Without ``MEMWAL_CONFIG`` this file defines no DAG. The config is checked against the JSON
schema shipped with the package (``memwal/airflow/memwal_tables.schema.json``), then each
job's option values by its options class; an error is raised at import, naming the file,
the place in it and the schema, so Airflow shows it as an import error of this file.
"""

from __future__ import annotations

import copy
import json
import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from memwal.airflow.config_schema import SCHEMA_NAME, config_problems
from memwal.airflow.maintenance_operators import MemWalMaintenanceOperator
from memwal.airflow.operators import OPERATORS
from memwal.airflow.sensors import MergeLagSensor

CONFIG_ENV = "MEMWAL_CONFIG"
JOBS = tuple(OPERATORS)  # the cycle's order: merge, catchup, compact, snapshot, gc
START_DATE = datetime(2025, 1, 1, tzinfo=UTC)

DEFAULTS: dict[str, Any] = {
    "schedule": "@hourly",
    "engine": "local",
    "jobs": list(JOBS),
    "retries": 3,
    "retry_delay_seconds": 60,
    "retry_backoff": 2.0,
    "max_retry_delay_seconds": 1800,
    "execution_timeout_seconds": None,
    "spark": {"conn_id": "spark_default", "conf": {}, "env": {}, "submit": {}},
    "one_application": True,  # engine spark: the whole cycle as one spark-submit (one JVM)
    "merge": {},
    "catchup": {},
    "compact": {},
    "snapshot": {},
    # GC expires base-table versions older than 7 days (memwal's one default, as the CLI's);
    # `expire_versions: null` (or never) in a table's gc keeps every version.
    "gc": {},
    "lag": {
        "schedule": "*/5 * * * *",
        "max_unmerged_generations": 64,
        "max_unmerged_bytes": None,
        "max_oldest_age_seconds": None,
        "poke_interval": 30,
        "timeout_seconds": 240,
        "deferrable": True,
    },
    "tags": [],
}


class ConfigError(ValueError):
    pass


def _job_options(spec: dict[str, Any], job: str) -> dict[str, Any]:
    """A job's options from the table's config (``expire_versions: null`` keeps every version)."""
    options = dict(spec.get(job) or {})
    if job == "gc" and "expire_versions" in options and options["expire_versions"] is None:
        options["expire_versions"] = "never"
    return options


def load_config(path: str) -> dict[str, Any]:
    """Read the YAML or JSON config file (JSON is read by the YAML parser too)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"{CONFIG_ENV}={path}: cannot read the config: {exc}") from exc
    try:
        if path.endswith(".json"):
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - a parse error of any kind is a config error
        raise ConfigError(f"{path}: not valid YAML/JSON: {exc}") from exc
    problems = config_problems(doc)
    if problems:
        raise ConfigError(f"{path}: {'; '.join(problems)} (schema {SCHEMA_NAME})")
    return doc


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def table_name(uri: str) -> str:
    base = uri.rstrip("/").rsplit("/", 1)[-1] or "table"
    return re.sub(r"\.lance$", "", base)


def table_specs(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Each table's settings: built-in defaults, then the config's ``defaults``, then the table's own."""
    defaults = _merge(DEFAULTS, config.get("defaults") or {})
    specs, seen = [], set()
    for i, entry in enumerate(config["tables"]):
        where = f"tables[{i}]"  # the shape was checked by the schema (load_config)
        spec = _merge(defaults, {"table": entry} if isinstance(entry, str) else entry)
        spec["name"] = str(spec.get("name") or table_name(spec["table"]))
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", spec["name"]):
            raise ConfigError(f"{where}: name {spec['name']!r} (from the table URI) may only have letters, digits, "
                              "_ . -: set `name`")
        if spec["name"] in seen:
            raise ConfigError(f"{where}: two tables named {spec['name']!r} (set `name`)")
        seen.add(spec["name"])
        for job in JOBS:  # the values, by the options classes (a NaN grace period, a zero count...)
            problem = OPERATORS[job].option_problem(spec.get(job) or {})
            if problem:
                raise ConfigError(f"{where}: {job}: {problem}")
        specs.append(spec)
    return specs


def _default_args(spec: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "owner": "memwal",
        "retries": int(spec["retries"]),
        "retry_delay": timedelta(seconds=float(spec["retry_delay_seconds"])),
        "retry_exponential_backoff": float(spec["retry_backoff"] or 0),
        "max_retry_delay": timedelta(seconds=float(spec["max_retry_delay_seconds"])),
    }
    if spec.get("execution_timeout_seconds"):
        args["execution_timeout"] = timedelta(seconds=float(spec["execution_timeout_seconds"]))
    return args


def _table_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "table": spec["table"],
        "memwal_conn_id": spec.get("conn_id"),
        "storage_options": dict(spec.get("storage_options") or {}),
    }


def build_table_dags(spec: dict[str, Any]) -> list[DAG]:
    name = spec["name"]
    main_id = f"memwal_{name}"
    spark = spec["spark"] or {}
    common = {
        **_table_kwargs(spec),
        "engine": spec["engine"],
        "spark_conn_id": spark.get("conn_id") or "spark_default",
        "spark_conf": spark.get("conf") or {},
        "spark_env": spark.get("env") or {},
        "spark_submit_kwargs": spark.get("submit") or {},
    }
    tags = ["memwal", *spec.get("tags", [])]
    dags = []
    with DAG(
        dag_id=main_id,
        description=f"MemWAL maintenance of {spec['table']}",
        schedule=spec["schedule"],
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(spec),
        tags=tags,
        doc_md=f"Maintenance of `{spec['table']}`: {' → '.join(spec['jobs'])}. Generated by `memwal_tables.py`.",
    ) as main:
        jobs = [job for job in JOBS if job in spec["jobs"]]
        if spec["engine"] == "spark" and spec.get("one_application", True):
            MemWalMaintenanceOperator(task_id="maintenance", jobs=jobs, asset_alias=f"memwal-merged:{name}",
                                      job_options={job: _job_options(spec, job) for job in jobs}, **common)
        else:
            previous = None
            for job in jobs:
                extra = {"asset_alias": f"memwal-merged:{name}"} if job == "merge" else {}
                task = OPERATORS[job](task_id=job, job_options=_job_options(spec, job), **extra, **common)
                if previous is not None:
                    previous >> task
                previous = task
    dags.append(main)

    lag = spec.get("lag")
    if lag:
        from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

        thresholds = {
            k: lag.get(k) for k in ("max_unmerged_generations", "max_unmerged_bytes", "max_oldest_age_seconds")
        }
        if all(v is None for v in thresholds.values()):
            raise ConfigError(f"table {name}: lag needs at least one threshold (or `lag: false`)")
        deferrable = bool(lag.get("deferrable", True))
        with DAG(
            dag_id=f"{main_id}_lag",
            description=f"early merges of {spec['table']} when its merge lag passes a threshold",
            schedule=lag["schedule"],
            start_date=START_DATE,
            catchup=False,
            max_active_runs=1,
            default_args={"owner": "memwal", "retries": 0},
            tags=[*tags, "memwal-lag"],
        ) as lag_dag:
            sensor = MergeLagSensor(
                task_id="wait_for_lag",
                **_table_kwargs(spec),
                **thresholds,
                poke_interval=float(lag["poke_interval"]),
                timeout=float(lag["timeout_seconds"]),
                mode="poke" if deferrable else "reschedule",
                deferrable=deferrable,
                soft_fail=True,  # no lag within this window: skipped, not failed
            )
            trigger = TriggerDagRunOperator(
                task_id="trigger_early_merge",
                trigger_dag_id=main_id,
                conf={"reason": "merge lag"},
                wait_for_completion=True,  # one early run at a time: nothing piles up behind max_active_runs
                poke_interval=int(lag["poke_interval"]),
                allowed_states=["success"],
                failed_states=["failed"],
                deferrable=deferrable,
            )
            sensor >> trigger
        dags.append(lag_dag)
    return dags


def build_dags(config: dict[str, Any]) -> dict[str, DAG]:
    out: dict[str, DAG] = {}
    for spec in table_specs(config):
        for d in build_table_dags(spec):
            out[d.dag_id] = d
    return out


if os.environ.get(CONFIG_ENV):
    globals().update(build_dags(load_config(os.environ[CONFIG_ENV])))
