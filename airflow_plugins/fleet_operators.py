"""The ``memwal_fleet`` DAG's tasks: plan the fleet, run its tables in mapped tasks, sum it up, alert.

- :class:`MemWalFleetPlanOperator` discovers the tables and plans them with the fleet's shared
  state (:func:`memwal.airflow.fleet.plan`: the cache, the pauses and the waits read from object
  storage; the cache and the last plan's report written back, so any worker's next plan and the
  API server's page read them), records the fleet's metrics (this planning pass is the fleet's
  lag check: no sensor per table), and returns the work in chunks, in the order it starts, as
  plain dicts without credentials: the mapped tasks' input (fewer chunks than
  ``[core] max_map_length``). A run that events triggered (:mod:`memwal.airflow.fleet_events`)
  plans only the tables they named. A failure is logged by the task itself, with its cause.
- :class:`MemWalFleetOperator` runs one chunk: each table's planned jobs through the one cycle
  runner (:meth:`memwal.airflow.hooks.MemWalHook.run_work`: threads of the task, or one
  spark-submit), none started after the budget's ``max_seconds`` from the DAG run's start. A
  table's failure stays in its result; a merge that committed emits the table's Asset event.
  Every job takes its lease, so a duplicate run of the same table (two DAG runs, a retried task)
  finds the lease held or nothing to do: it never commits twice.
- :class:`MemWalFleetSummaryOperator` counts the outcomes by status, leaves each table's in the
  state's run log (last runs, failures with their reasons, GCs waiting for time), and fails,
  naming them, when a table failed, could not be read, or a chunk's task never reported.
- :class:`MemWalFleetSloOperator` fails, naming the tables, when tables are past their service
  levels (:mod:`memwal.fleet.slo`): an Airflow alert (the task's failure callbacks and
  notifiers fire), beside the breaches counted as metrics.

Metrics (Airflow's ``Stats``): the table is a tag, never part of a name.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The XCom key of the plan's summary (the summary and SLO tasks read it).
PLAN_KEY = "fleet"
#: Most problems (unreadable tables, empty sources) and breaching tables a summary names.
MAX_NAMED = 50


class _FleetOperator(BaseOperator):
    template_fields: tuple[str, ...] = ("config_path",)
    ui_color = "#dfe8f6"

    def __init__(self, *, config_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path  # None: $MEMWAL_FLEET_CONFIG, read when the task runs


class MemWalFleetPlanOperator(_FleetOperator):
    """Plan the fleet; return the chunks of work (see the module docstring)."""

    def execute(self, context: Context) -> list[list[dict[str, Any]]]:
        try:
            return self._plan(context)
        except Exception:
            self.log.exception("memwal fleet: the plan failed")  # the cause, in this task's own log
            raise

    def _plan(self, context: Context) -> list[list[dict[str, Any]]]:
        from memwal.airflow.fleet import chunks, load_fleet_config, max_map_length, plan, planned_work
        from memwal.airflow.fleet_events import tables_of
        from memwal.airflow.reporting import fleet_gauges

        from memwal.fleet.status import publish

        config = load_fleet_config(self.config_path)
        only = tables_of(context) if config.events is not None else None
        if only is not None:
            self.log.info("memwal fleet: woken by events for %d tables: planning those only", len(only))
        planned = plan(config, only=only)
        fleet, report = planned.plan, planned.report
        publish(fleet, report)  # OpenTelemetry
        fleet_gauges(report)  # Airflow's Stats
        work = planned_work(config, fleet)
        out = chunks(work, config.budget.tables_per_task, max_map_length())
        problems = [{"table": p.table, "error": p.error} for p in fleet.problems]
        breaches = report["breaches"]
        summary = {"discovered": fleet.discovered, "by_state": fleet.by_status(), "debt": fleet.debt,
                   "skipped": len(fleet.skipped), "problems": problems[:MAX_NAMED], "problem_count": len(problems),
                   "tables_with_work": len(work), "chunks": len(out), "requests": fleet.requests,
                   "events": None if only is None else len(only),
                   "breaches": {"count": breaches["count"], "tables": sorted({b["table"] for b in breaches["named"]}),
                                "table_count": breaches["tables"]}}
        context["ti"].xcom_push(key=PLAN_KEY, value=summary)
        self.log.info("memwal fleet: %d tables (%s), debt %g; %d with work in %d chunks; %d skipped, %d problems, "
                      "%d requests", fleet.discovered, ", ".join(f"{n} {s}" for s, n in fleet.by_status().items()),
                      fleet.debt, len(work), len(out), len(fleet.skipped), len(problems), fleet.requests)
        for p in problems[:MAX_NAMED]:
            self.log.warning("memwal fleet: %s: %s", p["table"], p["error"])
        return out


class MemWalFleetOperator(_FleetOperator):
    """Run one chunk of the fleet's planned work (a mapped task: ``work`` is one chunk).

    :param work: the chunk: plain dicts of :class:`memwal.fleet.run.TableWork` (no credentials).
    :param asset_alias: the ``AssetAlias`` a table's merge commit emits its Asset event through;
        give it in ``outlets`` too (a mapped task's outlets are those of its ``partial``).
    """

    template_fields: tuple[str, ...] = ("config_path", "work")

    def __init__(self, *, work: list[dict[str, Any]], asset_alias: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.work = work
        self.asset_alias = asset_alias
        self._hook: Any = None

    def _seconds_left(self, context: Context, max_seconds: float | None) -> float | None:
        """What is left of the budget's ``max_seconds``, counted from the DAG run's start."""
        if max_seconds is None:
            return None
        from datetime import UTC, datetime

        run = context.get("dag_run") if hasattr(context, "get") else None
        started = getattr(run, "start_date", None) or datetime.now(UTC)
        return max_seconds - (datetime.now(UTC) - started).total_seconds()

    def execute(self, context: Context) -> dict[str, Any]:
        from memwal.airflow.assets import emit_merged_event
        from memwal.airflow.fleet import load_fleet_config, work_of
        from memwal.airflow.hooks import MemWalHook

        config = load_fleet_config(self.config_path)
        work = work_of(config, self.work)
        self._hook = MemWalHook(engine=config.engine, spark=config.spark)
        try:
            results = self._hook.run_work(work, workers=config.budget.threads,
                                          max_seconds=self._seconds_left(context, config.budget.max_seconds))
        finally:
            self._hook = None
        ended = {r.table for r in results}
        tables = []
        for r in results:
            merge = r.outcome("merge")
            if merge is not None and merge.document is not None:
                emit_merged_event(self, self.asset_alias, False, dict(merge.document), r.table, context)
            tables.append({"table": r.table, "status": "failed" if r.failed else "ok", "error": r.error,
                           "jobs": [{"job": j.job, "status": str(j.status), "summary": j.summary, "error": j.error,
                                     "exit_code": j.exit_code, "version": j.version} for j in r.jobs]})
            self.log.info("memwal fleet %s: %s", r.table, ", ".join(f"{j.job} {j.status}" for j in r.jobs))
        not_started = [w.table for w in work if w.table not in ended]
        if not_started:
            self.log.warning("memwal fleet: %d tables not started within max_seconds", len(not_started))
        return {"tables": tables, "not_started": not_started}

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


class MemWalFleetSummaryOperator(_FleetOperator):
    """Count the run's outcomes, log them in the state; fail naming what failed (see the module docstring).

    :param plan_task_id: the plan task; :param run_task_id: the mapped task of the chunks.
    """

    def __init__(self, *, plan_task_id: str = "plan", run_task_id: str = "run_tables", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id
        self.run_task_id = run_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from memwal.airflow.reporting import stats_client

        ti = context["ti"]
        planned = ti.xcom_pull(task_ids=self.plan_task_id, key=PLAN_KEY)
        if planned is None:
            raise AirflowException("memwal fleet: the plan task reported nothing (it failed: see its log)")
        # a list of task ids: every map index's value, as a list even when there is one chunk
        reported = [c for c in (ti.xcom_pull(task_ids=[self.run_task_id]) or []) if c is not None]
        jobs: Counter[str] = Counter()
        failed, not_started = [], []
        for chunk in reported:
            not_started += chunk["not_started"]
            for t in chunk["tables"]:
                jobs.update(j["status"] for j in t["jobs"])
                if t["status"] == "failed":
                    failed.append(f"{t['table']}: {t['error']}")
        self._record(reported)
        doc = {"discovered": planned["discovered"], "by_state": planned["by_state"], "debt": planned["debt"],
               "tables_run": sum(len(c["tables"]) for c in reported), "jobs": dict(jobs),
               "tables_failed": len(failed), "not_started": len(not_started), "problems": planned["problem_count"],
               "chunks": planned["chunks"], "chunks_reported": len(reported)}
        stats = stats_client()
        if stats is not None:
            tags = {"dag_id": str(getattr(ti, "dag_id", "") or "")}
            for status, n in jobs.items():
                stats.gauge("memwal.fleet.jobs", n, tags={**tags, "status": status})
            stats.gauge("memwal.fleet.tables_failed", len(failed), tags=tags)
        self.log.info("memwal fleet: %s", doc)
        lines = failed[:MAX_NAMED] + [f"{p['table']}: {p['error']}" for p in planned["problems"]]
        if planned["chunks"] > len(reported):
            lines.append(f"{planned['chunks'] - len(reported)} of {planned['chunks']} table tasks never reported "
                         "(failed or killed: see their logs)")
        if lines:
            more = len(failed) + planned["problem_count"] - min(len(failed), MAX_NAMED) - len(planned["problems"])
            raise AirflowException("memwal fleet: " + "; ".join(lines) + (f"; and {more} more" if more > 0 else ""))
        return doc

    def _record(self, reported: list[dict[str, Any]]) -> None:
        """Each table's outcome in the state's run log (never fails the task: logged instead)."""
        from memwal.airflow.fleet import load_fleet_config, state_of

        from memwal.core import clock as clocks
        from memwal.fleet.runs import record_results

        tables = [t for chunk in reported for t in chunk["tables"]]
        try:
            config = load_fleet_config(self.config_path)
            state = state_of(config)
            if state is None or not tables:
                return
            record_results(state, ({"table": t["table"], "jobs": t["jobs"]} for t in tables), now=clocks.current()(),
                           retry_after=lambda table: config.policy.for_table(table, "").thresholds.gc_retry_seconds)
        except Exception as exc:  # noqa: BLE001 - the run log is for the page and the next plan
            self.log.warning("memwal fleet: the run log was not written: %s", exc)


class MemWalFleetSloOperator(_FleetOperator):
    """Fail, naming the tables, when tables are past their service levels (see the module docstring)."""

    def __init__(self, *, plan_task_id: str = "plan", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        planned = context["ti"].xcom_pull(task_ids=self.plan_task_id, key=PLAN_KEY)
        if planned is None:
            raise AirflowException("memwal fleet: the plan task reported nothing (it failed: see its log)")
        breaches = planned["breaches"]
        if breaches["table_count"]:
            named = breaches["tables"][:MAX_NAMED]
            more = breaches["table_count"] - len(named)
            counts = ", ".join(f"{n} {slo}" for slo, n in breaches["count"].items() if n)
            raise AirflowException(f"memwal fleet: {breaches['table_count']} tables past their service level "
                                   f"({counts}): {', '.join(named)}" + (f"; and {more} more" if more > 0 else ""))
        found: dict[str, Any] = breaches
        return found
