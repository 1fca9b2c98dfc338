"""``memwal_fleet``: one DAG for a fleet of MemWAL tables, configured by the file ``MEMWAL_FLEET_CONFIG`` names.

The config names sources, not tables (``memwal_fleet.example.yaml``; checked against
``memwal_fleet.schema.json``, see :mod:`memwal.airflow.fleet`). Each run:

1. ``plan`` discovers every table of the sources *when it runs* (a new table is picked up with
   no edit and no restart), ranks them by debt (:mod:`memwal.fleet.debt`) with the fleet's shared
   state (the probe cache, the operator's pauses, the waits: in object storage, read by every
   worker), records the fleet's metrics, leaves the plan's report for the page, and returns the
   tables with work in chunks, in the order they start; a run woken by events (``events:``)
   plans only the tables written to;
2. ``run_tables``, mapped over the chunks (fewer than ``[core] max_map_length``): each task runs
   its tables' planned jobs through the one cycle runner, in the budget's pool, at most
   ``budget.workers`` tasks at once, ``budget.threads`` tables at once inside a task, none
   started after ``budget.max_seconds``; a merge that commits emits the table's Asset event;
3. ``summary`` counts the outcomes, logs each table's in the state, plans the tables that ran once
   more (the page shows what the run left), and fails, naming them, when a table failed;
4. ``slo`` judges the service levels on that state after the run and alerts through the config's
   notifiers (``alerts.notifiers``): a breach never turns a run that did its work red.

``memwal_fleet_control``, triggered from the UI with its form (action, target, reason), pauses,
resumes or cancels; who triggered it is recorded with why.

This file imports Airflow's SDK and the config's reader only (nothing that loads Lance, pandas or
Arrow's datasets), and reads only its config: its parse time does not depend on how many tables
the sources hold. Without ``MEMWAL_FLEET_CONFIG``, a worker parsing it to run a task of these DAGs
(Airflow's parsing context names the DAG) gets an import error naming the variable, instead of
"DAG not found"; a whole-folder parse (the DAG processor) defines no fleet DAG and logs why. A bad
config is one import error naming the file and every bad key.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, AssetAlias, Param, get_parsing_context
from memwal.airflow.fleet import CONFIG_ENV, FleetConfig, load_fleet_config
from memwal.airflow.fleet_control import ACTIONS, MemWalFleetControlOperator
from memwal.airflow.fleet_operators import (
    MemWalFleetOperator,
    MemWalFleetPlanOperator,
    MemWalFleetSloOperator,
    MemWalFleetSummaryOperator,
)

DAG_ID = "memwal_fleet"
CONTROL_DAG_ID = "memwal_fleet_control"
START_DATE = datetime(2025, 1, 1, tzinfo=UTC)


def schedule_of(config: FleetConfig) -> Any:
    """The cron (the default, and the safety net), or the events *or* the cron."""
    if config.events is None:
        return config.schedule
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
    from memwal.airflow.fleet_events import writes_asset

    asset = writes_asset(config.events)
    if config.schedule is None:
        return [asset]
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(config.schedule, timezone="UTC"), assets=asset)


def build_fleet_dag(config: FleetConfig) -> DAG:
    budget = config.budget
    placement = {"priority_weight": budget.priority_weight, **({"queue": budget.queue} if budget.queue else {})}
    with DAG(
        dag_id=DAG_ID,
        description=f"MemWAL maintenance of every table of {len(config.sources)} sources, by debt, under a budget",
        schedule=schedule_of(config),
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
        slo = MemWalFleetSloOperator(task_id="slo", config_path=config.path, trigger_rule="all_done")
        plan >> run >> summary >> slo
    return dag


def build_control_dag(config: FleetConfig) -> DAG:
    with DAG(
        dag_id=CONTROL_DAG_ID,
        description="Pause, resume or cancel tables of the MemWAL fleet (who and why are recorded)",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        default_args={"owner": "memwal", "retries": 0},
        tags=["memwal", "memwal-fleet", *config.tags],
        params={
            "action": Param("pause", enum=list(ACTIONS), description="pause or resume a table, a source or a glob; "
                                                                     "cancel a table's running jobs"),
            "target": Param("", type="string", minLength=1, description="a table URI, a source, or a glob of URIs"),
            "reason": Param("", type="string", minLength=1, description="why (recorded with who you are)"),
            "confirm_fleet_wide": Param(False, type="boolean",
                                        description="confirm a pause of every table while pauses are unauthenticated "
                                                    "(no MEMWAL_FLEET_KEY)"),
        },
        doc_md=build_control_dag.__doc__,
    ) as dag:
        MemWalFleetControlOperator(task_id="control", config_path=config.path)
    return dag


MISSING = (f"{CONFIG_ENV} is not set: set it to the memwal_fleet DAG config's file on the DAG processor, the "
           "scheduler, every worker, the triggerer and the API server")
if os.environ.get(CONFIG_ENV):
    _config = load_fleet_config(os.environ[CONFIG_ENV])
    dag = build_fleet_dag(_config)
    control_dag = build_control_dag(_config)
elif get_parsing_context().dag_id in (DAG_ID, CONTROL_DAG_ID):
    raise ImportError(MISSING)  # a worker about to run one of its tasks: say why it cannot
else:
    logging.getLogger(__name__).warning("no memwal_fleet DAG: %s", MISSING)
