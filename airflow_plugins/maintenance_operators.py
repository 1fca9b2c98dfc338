"""The whole maintenance cycle of one table as one task (``memwal cycle``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowFailException
from memwal.airflow.assets import DEFAULT_MERGED_ALIAS, emit_merged_event
from memwal.airflow.operators import MemWalTableOperator, push
from memwal.airflow.reporting import report_of

if TYPE_CHECKING:
    from airflow.sdk import Context


class MemWalMaintenanceOperator(MemWalTableOperator):
    """The maintenance cycle of one table through the one cycle runner (``memwal.cycle``):
    in the worker (``engine="local"``) or as ONE spark-submit of ``jobs/maintenance.py``
    (``engine="spark"``: one JVM and one Spark application instead of one per job). Each job's
    result is pushed to XCom under the job's name (``ti.xcom_pull(key="merge")``); the return
    value is ``{job: result}``. A job whose lease another holder has is ``held`` (logged, not a
    failure); the first job that fails fails the task (bad input without retries).

    Its ``job_options`` (the table operator's parameter) are ``{job: {option: value}}``
    (templated); ``lease_ttl`` applies to every job.

    :param jobs: the jobs, in cycle order (default: all five).
    :param asset_alias: as for the merge operator.
    """

    action = "maintenance"

    def __init__(self, *, jobs: list[str] | None = None, asset_alias: str | None = DEFAULT_MERGED_ALIAS,
                 **kwargs: Any) -> None:
        from memwal.cycle import JOB_ORDER

        if asset_alias:
            kwargs["outlets"] = [*(kwargs.get("outlets") or []), AssetAlias(asset_alias)]
        super().__init__(**kwargs)
        self.jobs = list(jobs or JOB_ORDER)
        self.asset_alias = asset_alias

    def cycle_options(self) -> dict[str, dict[str, Any]]:
        """Each job's options as given (``lease_ttl`` shared); the hook validates them."""
        from memwal.cycle import JOB_ORDER

        unknown = sorted(k for k in self.job_options if k not in JOB_ORDER and k != "lease_ttl")
        if unknown:
            raise AirflowFailException(f"memwal maintenance: job_options key {unknown[0]!r} is not a job")
        shared = {"lease_ttl": self.job_options["lease_ttl"]} if "lease_ttl" in self.job_options else {}
        return {job: {**dict(self.job_options.get(job) or {}), **shared} for job in self.jobs}

    def _execute(self, context: Context) -> dict[str, Any]:
        hook = self.hook(context)
        result = hook.run_cycle(self.jobs, self.cycle_options(), dry_run=self.plan_only)
        docs = {j.job: dict(j.document) for j in result.jobs if j.document is not None}
        report_of(self).docs.update(docs)
        for job, doc in docs.items():
            push(context, job, doc)
        for o in result.jobs:
            self.log.info("memwal maintenance %s: %s %s%s", result.table, o.job, o.status,
                          f" ({o.summary or o.error})" if o.summary or o.error else "")
        if "merge" in docs:
            emit_merged_event(self, self.asset_alias, self.plan_only, docs["merge"], result.table, context)
        hook.raise_for_cycle(result)
        return docs
