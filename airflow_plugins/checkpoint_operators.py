"""Operators that hold a reader checkpoint around reader tasks (setup and teardown).

A reader task that reads a MemWAL table for longer than GC's reader grace period takes a
checkpoint first and releases it after, whatever happened in between; Airflow's setup and
teardown tasks are made for exactly that::

    pin = MemWalCreateCheckpointOperator(task_id="pin", table="s3://lake/events", lifetime=6 * 3600)
    export = PythonOperator(task_id="export", python_callable=export,
                            op_kwargs={"checkpoint": "{{ ti.xcom_pull(task_ids='pin')['id'] }}"})
    release = MemWalDeleteCheckpointOperator(task_id="release", table="s3://lake/events",
                                             checkpoint_id="{{ ti.xcom_pull(task_ids='pin')['id'] }}")
    pin >> export >> release.as_teardown(setups=pin)

The reader reads the pinned view with ``memwal.open(uri).scan(checkpoint=...)``. The
checkpoint's lifetime bounds what a crashed DAG run leaves pinned: GC removes it once
expired. The create task returns the checkpoint's document (``memwal checkpoint create
--json``), which lands in XCom.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from memwal.airflow.hooks import MemWalHook
from memwal.airflow.reporting import note_table, observed, report_of

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import RunFacet

    from memwal.table import Table

P = ParamSpec("P")
T = TypeVar("T")


class _CheckpointOperator(BaseOperator):
    """What the checkpoint operators share: the table they act on.

    :param table: table URI (templated); overrides the connection's.
    :param memwal_conn_id: ``memwal`` connection holding the table URI and storage options (templated).
    :param storage_options: storage options; override the connection's. Never templated or logged.
    """

    template_fields: tuple[str, ...] = ("table", "memwal_conn_id")
    ui_color = "#e3f1cf"

    def __init__(self, *, table: str | None = None, memwal_conn_id: str | None = None,
                 storage_options: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not table and not memwal_conn_id:
            raise ValueError(f"{type(self).__name__}: give `table` or `memwal_conn_id`")
        self.table = table
        self.memwal_conn_id = memwal_conn_id
        self.storage_options = dict(storage_options or {})

    #: The job name its metrics and lineage use (``memwal.checkpoint-create.duration``, ...).
    job = "checkpoint"

    def _open(self) -> Table:
        hook = MemWalHook(self.memwal_conn_id or None, table=self.table or None, storage_options=self.storage_options)
        table = self._guard(hook.get_conn).table  # opened through memwal.open
        note_table(self, table.uri, table.storage_options)
        return table

    def execute(self, context: Context) -> dict[str, Any]:
        """The checkpoint work (:meth:`_execute`), timed and reported through Airflow's metrics."""
        return observed(self, context, self._execute, action=self.job)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage[Dataset, RunFacet]:
        """The table as the input it pins (at the checkpoint's version), and the ``memwal`` run facet."""
        from memwal.airflow.lineage import operator_lineage

        report = self.__dict__.get("_memwal_report")
        doc = (report.docs.get(self.job) or {}) if report is not None else {}
        return operator_lineage(report, writes=False, read_version=doc.get("version"))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage[Dataset, RunFacet]:
        return self.get_openlineage_facets_on_complete(task_instance)

    def _execute(self, context: Context) -> dict[str, Any]:
        raise NotImplementedError

    def _guard(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        from memwal.errors import BadInputError, MemWalError

        try:
            return fn(*args, **kwargs)
        except (BadInputError, ValueError) as exc:
            raise AirflowFailException(f"memwal checkpoint: bad input: {exc}") from None
        except MemWalError as exc:
            raise AirflowException(f"memwal checkpoint failed: {exc}") from None


class MemWalCreateCheckpointOperator(_CheckpointOperator):
    """Pin the table's LSM view of now for ``lifetime`` seconds; returns the checkpoint document.

    :param lifetime: seconds the checkpoint pins its view (templated); make it outlast the
        readers, or refresh it from them.
    :param checkpoint_name: a name for people (``memwal checkpoint list``; templated).
    """

    template_fields = ("table", "memwal_conn_id", "lifetime", "checkpoint_name")

    def __init__(self, *, lifetime: float | str = 3600, checkpoint_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lifetime = lifetime
        self.checkpoint_name = checkpoint_name

    job = "checkpoint-create"

    def _execute(self, context: Context) -> dict[str, Any]:
        from memwal.checkpoint import create_checkpoint
        from memwal.checkpoint.record import lifetime

        table = self._open()
        seconds = self._guard(lifetime, self.lifetime)  # a templated lifetime renders as text
        ckpt = self._guard(create_checkpoint, table, lifetime_seconds=seconds,
                           name=self.checkpoint_name or f"{self.dag_id}.{self.task_id}")
        self.log.info("checkpoint %s of %s: version %d, pinned until %s", ckpt.id, table.uri, ckpt.version,
                      ckpt.expires_at)
        report_of(self).docs[self.job] = ckpt.to_dict()
        return ckpt.to_dict()


class MemWalDeleteCheckpointOperator(_CheckpointOperator):
    """Release a checkpoint (a teardown: it runs whether the readers succeeded or not). A
    checkpoint that is already gone (deleted, or expired and removed by GC) is not an error.

    :param checkpoint_id: the id (templated), usually pulled from the create task's XCom.
    """

    template_fields = ("table", "memwal_conn_id", "checkpoint_id")

    def __init__(self, *, checkpoint_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpoint_id = checkpoint_id

    job = "checkpoint-delete"

    def _execute(self, context: Context) -> dict[str, Any]:
        from memwal.checkpoint import delete_checkpoint
        from memwal.checkpoint.record import checkpoint_id, record_key

        cid = self._guard(checkpoint_id, str(self.checkpoint_id))
        table = self._open()
        if not table.store.exists(record_key(cid)):
            self.log.info("checkpoint %s of %s is already gone", cid, table.uri)
            report_of(self).docs[self.job] = {"id": cid, "deleted": False}
            return {"id": cid, "deleted": False}
        ckpt = self._guard(delete_checkpoint, table, cid)  # an unreadable record is removed too
        doc = {**ckpt.to_dict(), "deleted": True} if ckpt else {"id": cid, "deleted": True, "unreadable": True}
        report_of(self).docs[self.job] = doc
        return doc
