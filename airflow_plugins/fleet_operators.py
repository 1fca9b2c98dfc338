"""The ``memwal_fleet`` DAG's tasks: plan the fleet, run its tables in mapped tasks, sum it up.

- :class:`MemWalFleetPlanOperator` discovers the tables and plans them (:mod:`memwal.fleet.plan`:
  listings and a manifest per table, cached) at run time, records the fleet's gauges and every
  table's lag (this planning pass is the fleet's lag check: no sensor per table), and returns the
  work in chunks, highest debt first, as plain dicts without credentials: the mapped tasks'
  input (fewer chunks than ``[core] max_map_length``).
- :class:`MemWalFleetOperator` runs one chunk: each table's planned jobs through the one cycle
  runner (:meth:`memwal.airflow.hooks.MemWalHook.run_work`: threads of the task, or one
  spark-submit), none started after the budget's ``max_seconds`` from the DAG run's start. A
  table's failure stays in its result; a merge that committed emits the table's Asset event.
  Every job takes its lease, so a duplicate run of the same table (two DAG runs, a retried task)
  finds the lease held or nothing to do: it never commits twice.
- :class:`MemWalFleetSummaryOperator` counts the outcomes by status and fails, naming them, when
  a table failed, could not be read, or a chunk's task never reported.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException
from memwal.airflow.assets import emit_merged_event
from memwal.airflow.fleet import chunks, load_fleet_config, max_map_length, plan, planned_work, work_of
from memwal.airflow.hooks import MemWalHook
from memwal.airflow.reporting import stats_client, table_gauges

#: The XCom key of the plan's summary (the summary task reads it).
PLAN_KEY = "fleet"
#: Most problems (unreadable tables, empty sources) a plan's summary names.
MAX_NAMED = 50


class _FleetOperator(BaseOperator):
    template_fields: tuple[str, ...] = ("config_path",)
    ui_color = "#dfe8f6"

    def __init__(self, *, config_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path  # None: $MEMWAL_FLEET_CONFIG, read when the task runs


class MemWalFleetPlanOperator(_FleetOperator):
    """Plan the fleet; return the chunks of work (see the module docstring)."""

    def execute(self, context: Any) -> list[list[dict[str, Any]]]:
        from memwal.fleet.status import status_of

        config = load_fleet_config(self.config_path)
        fleet = plan(config)
        status = status_of(fleet, top=config.top, workers=config.plan_workers)  # also the OTel gauges
        stats = stats_client()
        if stats is not None:
            for t in fleet.tables:
                st = t.state
                table_gauges(stats, t.table, generations=st.unmerged_generations, rows=st.unmerged_rows,
                             seconds=st.oldest_unmerged_age_seconds or 0.0, debt=t.debt)
            for state, n in status.by_state.items():
                stats.gauge(f"memwal.fleet.tables.{state}", n, tags={"state": state})
            stats.gauge("memwal.fleet.debt", fleet.debt)
            stats.gauge("memwal.fleet.discovered", fleet.discovered)
        work = planned_work(config, fleet)
        out = chunks(work, config.budget.tables_per_task, max_map_length())
        problems = [{"table": p.table, "error": p.error} for p in fleet.problems]
        summary = {"discovered": fleet.discovered, "by_state": dict(status.by_state), "debt": fleet.debt,
                   "skipped": len(fleet.skipped), "problems": problems[:MAX_NAMED], "problem_count": len(problems),
                   "tables_with_work": len(work), "chunks": len(out), "requests": fleet.requests}
        context["ti"].xcom_push(key=PLAN_KEY, value=summary)
        self.log.info("memwal fleet: %d tables (%s), debt %g; %d with work in %d chunks; %d skipped, %d problems, "
                      "%d requests", fleet.discovered, ", ".join(f"{n} {s}" for s, n in status.by_state.items()),
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
        self._hook: MemWalHook | None = None

    def _seconds_left(self, context: Any, max_seconds: float | None) -> float | None:
        """What is left of the budget's ``max_seconds``, counted from the DAG run's start."""
        if max_seconds is None:
            return None
        from datetime import UTC, datetime

        run = context.get("dag_run") if hasattr(context, "get") else None
        started = getattr(run, "start_date", None) or datetime.now(UTC)
        return max_seconds - (datetime.now(UTC) - started).total_seconds()

    def execute(self, context: Any) -> dict[str, Any]:
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
    """Count the run's outcomes; fail naming what failed (see the module docstring).

    :param plan_task_id: the plan task; :param run_task_id: the mapped task of the chunks.
    """

    def __init__(self, *, plan_task_id: str = "plan", run_task_id: str = "run_tables", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_id = plan_task_id
        self.run_task_id = run_task_id

    def execute(self, context: Any) -> dict[str, Any]:
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
        doc = {"discovered": planned["discovered"], "by_state": planned["by_state"], "debt": planned["debt"],
               "tables_run": sum(len(c["tables"]) for c in reported), "jobs": dict(jobs),
               "tables_failed": len(failed), "not_started": len(not_started), "problems": planned["problem_count"],
               "chunks": planned["chunks"], "chunks_reported": len(reported)}
        stats = stats_client()
        if stats is not None:
            tags = {"dag_id": str(getattr(ti, "dag_id", "") or "")}
            for status, n in jobs.items():
                stats.gauge(f"memwal.fleet.jobs.{status.replace('-', '_')}", n, tags=tags)
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
