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
  state's run log (last runs, failures with their reasons, what kept each GC's generations),
  plans the tables that ran once more (the last report then shows what the run left, not what
  the plan found before it), and fails, naming them, when a table failed, could not be read, or
  a chunk's task never reported.
- :class:`MemWalFleetSloOperator` judges the service levels (:mod:`memwal.fleet.slo`) on that
  state after the run and alerts through the config's Airflow notifiers (``alerts.notifiers``),
  beside the breaches counted as metrics; it never fails a run that did its work.

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
    """What the fleet DAG's operators share: the fleet's config.

    :param config_path: the fleet's config file (templated); None: ``$MEMWAL_FLEET_CONFIG``, read
        when the task runs.
    """

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
        from memwal.airflow.fleet import load_fleet_config, plan
        from memwal.airflow.fleet_events import tables_of
        from memwal.airflow.fleet_work import chunks, max_map_length, planned_work
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
        for line in planned.unmatched:
            self.log.warning("memwal fleet: %s", line)
        return out


class MemWalFleetOperator(_FleetOperator):
    """Run one chunk of the fleet's planned work (a mapped task: ``work`` is one chunk).

    :param work: the chunk: plain dicts of ``memwal.fleet.run.TableWork`` (no credentials).
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
        from memwal.airflow.fleet import load_fleet_config
        from memwal.airflow.fleet_work import work_of
        from memwal.airflow.hooks import MemWalHook

        from memwal.fleet.run import gc_waits

        config = load_fleet_config(self.config_path)
        work = work_of(config, self.work)
        self._hook = MemWalHook(engine=config.engine, spark=config.spark, ray_conn_id=config.ray_conn_id)
        try:
            results = self._hook.run_work(work, workers=config.budget.threads,
                                          max_seconds=self._seconds_left(context, config.budget.max_seconds))
        finally:
            self._hook = None
        ended = {r.table for r in results}
        waits = gc_waits(results)
        tables = []
        for r in results:
            merge = r.outcome("merge")
            if merge is not None and merge.document is not None:
                emit_merged_event(self, self.asset_alias, False, dict(merge.document), r.table, context)
            tables.append({"table": r.table, "status": "failed" if r.failed else "ok", "error": r.error,
                           "jobs": [{"job": j.job, "status": str(j.status), "summary": j.summary, "error": j.error,
                                     "exit_code": j.exit_code, "version": j.version} for j in r.jobs],
                           **({"gc_wait": waits[r.table]} if r.table in waits else {})})
            self.log.info("memwal fleet %s: %s", r.table, ", ".join(f"{j.job} {j.status}" for j in r.jobs))
        not_started = [w.table for w in work if w.table not in ended]
        if not_started:
            self.log.warning("memwal fleet: %d tables not started within max_seconds", len(not_started))
        return {"tables": tables, "not_started": not_started}

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


class MemWalFleetSummaryOperator(_FleetOperator):
    """Count the run's outcomes, log them in the state, plan again the tables that ran; fail
    naming what failed (see the module docstring).

    :param plan_task_id: the plan task.
    :param run_task_id: the mapped task of the chunks.
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
        after = self._after(reported)
        ti.xcom_push(key=AFTER_KEY, value=after)
        doc = {"discovered": planned["discovered"], "by_state": planned["by_state"], "debt": planned["debt"],
               "tables_run": sum(len(c["tables"]) for c in reported), "jobs": dict(jobs),
               "tables_failed": len(failed), "not_started": len(not_started), "problems": planned["problem_count"],
               "chunks": planned["chunks"], "chunks_reported": len(reported),
               "breaches_after": None if after is None else after["table_count"]}
        stats = stats_client()
        if stats is not None:
            tags = {"dag_id": str(getattr(ti, "dag_id", "") or "")}
            for status, n in jobs.items():
                stats.gauge("memwal.fleet.jobs", n, tags={**tags, "status": status})
            stats.gauge("memwal.fleet.tables_failed", len(failed), tags=tags)
        self.log.info("memwal fleet: %s", summary_line(doc))
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
                           retry_after=lambda table: config.policy.for_table(table, "").thresholds.gc_retry_seconds,
                           gc_waits={t["table"]: t["gc_wait"] for t in tables if "gc_wait" in t})
        except Exception as exc:  # noqa: BLE001 - the run log is for the page and the next plan
            self.log.warning("memwal fleet: the run log was not written: %s", exc)

    def _after(self, reported: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The tables that ran, planned again: the last report (the page, ``fleet status``) shows
        what the run left, and the service levels are judged on it (None: nothing ran, or the
        plan failed: logged)."""
        from memwal.airflow.fleet import load_fleet_config, plan
        from memwal.airflow.reporting import fleet_gauges

        from memwal.fleet.status import publish

        ran = frozenset(t["table"] for chunk in reported for t in chunk["tables"])
        if not ran:
            return None
        try:
            planned = plan(load_fleet_config(self.config_path), only=ran)
        except Exception as exc:  # noqa: BLE001 - the run's own outcome is what this task reports
            self.log.warning("memwal fleet: the tables that ran were not planned again: %s", exc)
            return None
        publish(planned.plan, planned.report)
        fleet_gauges(planned.report)
        return breaches_of(planned.report)


#: The XCom key of the breaches after the run (the summary task's plan of the tables that ran).
AFTER_KEY = "after"


def breaches_of(report: dict[str, Any]) -> dict[str, Any]:
    """A report's service-level breaches, as the tasks pass them on."""
    breaches = report["breaches"]
    return {"count": breaches["count"], "tables": sorted({b["table"] for b in breaches["named"]}),
            "table_count": breaches["tables"],
            "named": [{k: b[k] for k in ("table", "slo", "value", "target")} for b in breaches["named"][:MAX_NAMED]]}


def summary_line(doc: dict[str, Any]) -> str:
    """The summary task's document as one line a person reads."""
    jobs = ", ".join(f"{n} {s}" for s, n in sorted(doc["jobs"].items())) or "no job"
    states = ", ".join(f"{n} {s}" for s, n in doc["by_state"].items() if n) or "no table"
    after = "" if doc.get("breaches_after") is None else f"; {doc['breaches_after']} past a service level after it"
    return (f"{doc['tables_run']} tables run ({jobs}); {doc['tables_failed']} failed, {doc['not_started']} not "
            f"started, {doc['problems']} unreadable; the plan found {doc['discovered']} tables ({states}), debt "
            f"{doc['debt']:g}; {doc['chunks_reported']} of {doc['chunks']} table tasks reported{after}")


class MemWalFleetSloOperator(_FleetOperator):
    """Judge the service levels on the state after the run, and alert through the config's
    notifiers (``alerts.notifiers``: Airflow's ``BaseNotifier`` s, e.g. Slack's or SMTP's); it
    never fails the DAG run for a breach: a run that did its work stays green.

    Runs after the summary task, whatever became of it; skipped when nothing ran (the plan's
    breaches were not acted on: there is no state after a run to judge).

    :param summary_task_id: the summary task whose XCom says what the run did.
    """

    def __init__(self, *, summary_task_id: str = "summary", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.summary_task_id = summary_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException
        from memwal.airflow.fleet import load_fleet_config, notifiers_of

        after = context["ti"].xcom_pull(task_ids=self.summary_task_id, key=AFTER_KEY)
        if after is None:
            raise AirflowSkipException("memwal fleet: no table ran, or their state after the run is unknown: "
                                       "nothing to judge")
        if not after["table_count"]:
            self.log.info("memwal fleet: every table that ran is within its service levels")
            return {**after, "notified": 0}
        named = after["tables"][:MAX_NAMED]
        more = after["table_count"] - len(named)
        counts = ", ".join(f"{n} {slo}" for slo, n in after["count"].items() if n)
        message = (f"memwal fleet: {after['table_count']} tables past their service level after the run ({counts}): "
                   f"{', '.join(named)}" + (f"; and {more} more" if more > 0 else ""))
        self.log.warning("%s", message)
        notifiers = notifiers_of(load_fleet_config(self.config_path))
        alert = {**after, "message": message, "count": after["table_count"]}
        for notifier in notifiers:
            notifier({**context, "memwal_slo": alert})
        return {**after, "notified": len(notifiers)}
