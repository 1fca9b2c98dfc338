"""OpenLineage for the MemWAL operators (called by the ``apache-airflow-providers-openlineage`` listener).

Every operator implements ``get_openlineage_facets_on_complete`` and ``..._on_failure`` through
:func:`operator_lineage`: the Lance table is the input and the output of every maintenance job
(a merge reads the table and its generations and writes the table; GC and compaction rewrite
what the table is made of), named by OpenLineage's dataset naming conventions
(https://openlineage.io/docs/spec/naming):

| table URI | namespace | name |
|---|---|---|
| ``/data/events``, ``file:///data/events`` | ``file`` | ``/data/events`` |
| ``s3://lake/events`` (``s3a``, ``s3n``) | ``s3://lake`` | ``events`` |
| ``gs://lake/events`` | ``gs://lake`` | ``events`` |
| ``abfss://c@acct.dfs.core.windows.net/events`` | ``abfss://c@acct.dfs.core.windows.net`` | ``events`` |
| ``az://c/events`` (account ``acct`` in the storage options) | ``wasbs://c@acct.dfs.core.windows.net`` | ``events`` |

A run that committed a version gives its output a ``version`` dataset facet. The run facet
``memwal`` (:class:`MemWalRunFacet`) carries the run's figures: the history run id, outcome,
the versions committed, generations merged, rows upserted and deleted, and each job's figures
as ``memwal history`` records them.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.openlineage.extractors import OperatorLineage
from attrs import define, field
from memwal.airflow.reporting import RunReport
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import DatasetFacet, RunFacet, dataset_version_dataset

#: The facet's schema id (its JSON Schema: ``docs/openlineage/MemWalRunFacet.json`` in the repository).
SCHEMA_URL = "urn:memwal-jobs:openlineage:MemWalRunFacet:1-0-0"
FACET = "memwal"


def dataset_id(uri: str, account: str | None = None) -> tuple[str, str]:
    """``(namespace, name)`` of a table URI under OpenLineage's naming conventions."""
    text = uri.rstrip("/") or uri
    if "://" not in text:
        return "file", os.path.abspath(text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    path = parts.path.lstrip("/")
    if scheme == "file":
        return "file", parts.path or "/"
    if scheme in ("s3", "s3a", "s3n"):
        return f"s3://{parts.netloc}", path
    if scheme in ("gs", "gcs"):
        return f"gs://{parts.netloc}", path
    if scheme in ("abfs", "abfss"):
        return f"abfss://{parts.netloc}", path
    if scheme in ("az", "azure", "wasb", "wasbs"):
        container = parts.netloc.split("@", 1)[0]
        if "@" in parts.netloc:
            return f"wasbs://{parts.netloc}", path
        if account:
            return f"wasbs://{container}@{account}.dfs.core.windows.net", path
        return f"{scheme}://{container}", path
    return f"{scheme}://{parts.netloc}", path


@define
class MemWalRunFacet(RunFacet):
    """What a MemWAL task's runs did (one entry per job in ``runs``; totals alongside)."""

    job: str
    outcome: str
    runId: str | None = field(default=None)  # noqa: N815 - OpenLineage facets are camelCase
    engine: str | None = field(default=None)
    versionsCommitted: list[int] = field(factory=list)  # noqa: N815
    generationsMerged: int = field(default=0)  # noqa: N815
    rowsUpserted: int = field(default=0)  # noqa: N815
    rowsDeleted: int = field(default=0)  # noqa: N815
    runs: list[dict[str, Any]] = field(factory=list)
    error: str | None = field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL


def run_facet(report: RunReport) -> MemWalRunFacet:
    from memwal.history.record import figures
    from memwal.history.timeline import JOBS

    runs: list[dict[str, Any]] = []
    versions: list[int] = []
    generations = upserted = deleted = 0
    for job, doc in report.docs.items():
        record = report.records.get(job) or {}
        if job in JOBS:
            committed = list(record.get("versions") or ([doc["version"]] if doc.get("version") is not None else []))
            figs = record.get("figures") or figures(job, doc)
        else:  # a checkpoint: it pins a version, it commits none
            keys = ("id", "name", "version", "expires_at", "deleted")
            committed, figs = [], {k: doc[k] for k in keys if k in doc}
        versions += committed
        if job == "merge":
            generations += int(figs.get("generations") or 0)
            upserted += int(figs.get("rows_upserted") or 0)
            deleted += int(figs.get("rows_deleted") or 0)
        runs.append({"job": job, "runId": doc.get("run_id"), "outcome": record.get("outcome"),
                     "engine": doc.get("engine"), "versionsCommitted": committed, "figures": figs})
    run_ids = [str(r["runId"]) for r in runs if r["runId"]]
    engines = {str(r["engine"]) for r in runs if r["engine"]}
    return MemWalRunFacet(job=report.action, outcome=report.outcome, runId=run_ids[0] if len(run_ids) == 1 else None,
                          engine=engines.pop() if len(engines) == 1 else None, versionsCommitted=sorted(set(versions)),
                          generationsMerged=generations, rowsUpserted=upserted, rowsDeleted=deleted, runs=runs,
                          error=report.error)


def operator_lineage(report: RunReport | None, *, writes: bool = True,
                     read_version: int | None = None) -> OperatorLineage[Dataset, RunFacet]:
    """The task's lineage from its report (empty when the task never reached its table).
    ``writes=False`` for tasks that only read the table (checkpoints), which may name the
    version they read."""
    if report is None or not report.uri:
        return OperatorLineage()
    namespace, name = dataset_id(report.uri, report.account)
    facet = run_facet(report)
    read: dict[str, DatasetFacet] = {} if read_version is None else {
        "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(read_version))}
    inputs = [Dataset(namespace=namespace, name=name, facets=read)]
    outputs = []
    if writes:
        facets: dict[str, DatasetFacet] = {}
        if facet.versionsCommitted:
            facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                datasetVersion=str(max(facet.versionsCommitted)))
        outputs.append(Dataset(namespace=namespace, name=name, facets=facets))
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={FACET: facet})
