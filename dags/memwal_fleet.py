"""``memwal_fleet``: one DAG for a fleet of MemWAL tables, configured by the file ``MEMWAL_FLEET_CONFIG`` names.

The config names sources, not tables (``memwal_fleet.example.yaml``; checked against
``memwal_fleet.schema.json``, see :mod:`memwal.airflow.fleet`). Each run:

1. ``plan`` discovers every table of the sources *when it runs* (a new table is picked up with
   no edit and no restart), ranks them by debt (:mod:`memwal.fleet.debt`), records the fleet's
   gauges and each table's lag (the fleet's lag check: one planning pass, no sensor per table),
   and returns the tables with work in chunks, highest debt first;
2. ``run_tables``, mapped over the chunks (fewer than ``[core] max_map_length``): each task runs
   its tables' planned jobs through the one cycle runner, in the budget's pool, at most
   ``budget.workers`` tasks at once, ``budget.threads`` tables at once inside a task, none
   started after ``budget.max_seconds``; a merge that commits emits the table's Asset event;
3. ``summary`` counts the outcomes and fails, naming them, when a table failed.

This file reads only its config: its parse time does not depend on how many tables the sources
hold (it lists no source). Without ``MEMWAL_FLEET_CONFIG`` it defines no DAG; a bad config is
one import error naming the file and every bad key.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG, AssetAlias
from memwal.airflow.fleet import CONFIG_ENV, FleetConfig, load_fleet_config
from memwal.airflow.fleet_operators import MemWalFleetOperator, MemWalFleetPlanOperator, MemWalFleetSummaryOperator

DAG_ID = "memwal_fleet"
START_DATE = datetime(2025, 1, 1, tzinfo=UTC)


def build_fleet_dag(config: FleetConfig) -> DAG:
    budget = config.budget
    placement = {"priority_weight": budget.priority_weight, **({"queue": budget.queue} if budget.queue else {})}
    with DAG(
        dag_id=DAG_ID,
        description=f"MemWAL maintenance of every table of {len(config.sources)} sources, by debt, under a budget",
        schedule=config.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={"owner": "memwal", "retries": 0, **placement},
        tags=["memwal", "memwal-fleet", *config.tags],
        doc_md=__doc__,
    ) as dag:
        plan = MemWalFleetPlanOperator(task_id="plan", config_path=config.path)
        alias = [AssetAlias(config.asset_alias)] if config.asset_alias else []
        run = MemWalFleetOperator.partial(
            task_id="run_tables", config_path=config.path, asset_alias=config.asset_alias, outlets=alias,
            pool=budget.pool, pool_slots=budget.pool_slots, max_active_tis_per_dagrun=budget.workers,
            retries=config.retries, retry_delay=timedelta(seconds=60),
        ).expand(work=plan.output)
        summary = MemWalFleetSummaryOperator(task_id="summary", config_path=config.path, trigger_rule="all_done")
        plan >> run >> summary
    return dag


if os.environ.get(CONFIG_ENV):
    dag = build_fleet_dag(load_fleet_config(os.environ[CONFIG_ENV]))
