"""The whole maintenance cycle as one spark-submit (``jobs/maintenance.py``)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from memwal.airflow.assets import DEFAULT_MERGED_ALIAS, emit_merged_event
from memwal.airflow.hooks import redacted
from memwal.airflow.operators import MemWalActionOperator, jsonable
from memwal.airflow.reporting import report_of


class MemWalMaintenanceOperator(MemWalActionOperator):
    """The whole maintenance cycle as ONE spark-submit (``jobs/maintenance.py``): one JVM and
    one Spark application instead of one per job. Each job's result is pushed to XCom under
    the job's name (``ti.xcom_pull(key="merge")``); the return value is ``{job: result}``.

    :param jobs: the jobs, in cycle order (default: all five).
    :param job_options: ``{job: {option: value}}`` (templated).
    :param asset_alias: as for the merge operator.
    """

    action = "maintenance"

    def __init__(self, *, jobs: list[str] | None = None, asset_alias: str | None = DEFAULT_MERGED_ALIAS,
                 **kwargs: Any) -> None:
        from memwal.actions import ACTIONS

        if asset_alias:
            kwargs["outlets"] = [*(kwargs.get("outlets") or []), AssetAlias(asset_alias)]
        kwargs.setdefault("engine", "spark")
        super().__init__(**kwargs)
        self.jobs = list(jobs or ACTIONS)
        self.asset_alias = asset_alias

    def options(self, engine: str) -> Any:
        """Validated per-job options (one bad value fails the task without retries)."""
        from memwal.actions import ACTIONS
        from memwal.errors import BadInputError

        out = {}
        unknown = sorted(k for k in self.job_options if k not in ACTIONS and k != "lease_ttl")
        if unknown:
            raise AirflowFailException(f"memwal maintenance: job_options key {unknown[0]!r} is not a job")
        for job in self.jobs:
            if job not in ACTIONS:
                raise AirflowFailException(f"memwal maintenance: unknown job {job!r}")
            given = dict(self.job_options.get(job) or {})
            if "lease_ttl" in self.job_options:
                given["lease_ttl"] = self.job_options["lease_ttl"]
            try:
                out[job] = ACTIONS[job].options.from_kwargs(**given)
            except BadInputError as exc:
                raise AirflowFailException(f"memwal maintenance: {job}: bad option: {exc}") from None
        return out

    def _execute(self, context: Any) -> dict[str, Any]:
        uri, storage_options = self.resolve(context)
        if self._engine() != "spark":
            raise AirflowFailException("memwal maintenance runs as one Spark application: engine must be spark")
        options = self.options("spark")
        # Each job's flags; a shared --lease-ttl repeats with one value, which argparse accepts.
        argv = ["--jobs", ",".join(self.jobs), *(a for o in options.values() for a in o.to_argv())]
        self.log.info("memwal maintenance %s: %s as one spark-submit, storage options %s", uri, ",".join(self.jobs),
                      redacted(storage_options))
        cycle = jsonable(self._run_spark(uri, storage_options, "maintenance", argv, context))  # memwal cycle's document
        failure = cycle.get("failure")
        outcomes = {j["job"]: j for j in cycle.get("jobs", [])}
        docs = {job: o["result"] for job, o in outcomes.items() if o.get("result") is not None}
        failed = next((o for o in outcomes.values() if o["status"] == "failed"), None)
        if failure is None and failed is not None:
            failure = {"job": failed["job"], "error": failed["error"], "exit_code": failed["exit_code"]}
        for o in outcomes.values():
            if o["status"] == "held":
                self.log.info("memwal maintenance %s: %s %s", uri, o["job"], o["summary"])
        report_of(self).docs.update(docs)
        ti = context.get("ti") if hasattr(context, "get") else None
        for job, doc in docs.items():
            if ti is not None:
                ti.xcom_push(key=job, value=doc)
            self.check_result(job, doc, uri, context)
        if "merge" in docs:
            emit_merged_event(self, self.asset_alias, False, docs["merge"], uri, context)
        self.raise_failure(failure, uri)
        missing = [j for j in self.jobs if j not in outcomes]
        if missing:
            raise AirflowException(f"memwal maintenance {uri}: stopped before {', '.join(missing)}")
        return docs

    def _reports_failure(self, doc: dict[str, Any]) -> bool:
        return any(j.get("status") == "failed" for j in doc.get("jobs", []))
