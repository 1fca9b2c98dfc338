"""Operators for the maintenance actions (merge, catch-up, compact, snapshot, GC) and the whole cycle.

Each operator is a thin shell over the same plan/execute as the ``memwal`` CLI; its job
options are the keyword arguments of the action's options class (``memwal.actions.options``:
``max_generations=``, ``grace_seconds=``, ...), validated by that class, and passed to
spark-submit as the same flags the CLI takes:

- ``engine="local"`` calls ``memwal.actions.run_action`` in the task process;
- ``engine="spark"`` runs ``spark-submit jobs/<action>.py TABLE [options]
  --storage-options-file O --result-file F`` (``O``: the storage options in a 0600 file in
  a private directory, removed when the job ends; in cluster deploy mode the driver cannot
  read it, so credentials must then come from the cluster)
  through the Spark provider's ``SparkSubmitHook`` as it is (master, queue, deploy mode...
  from a ``spark`` connection; ``spark_conf``, ``spark_env`` and any other
  ``SparkSubmitHook`` argument through ``spark_submit_kwargs``) and reads the outcome from
  ``F``: the JSON result, or ``{"failure": {"error", "exit_code"}}`` (what the job's
  one-line error said, and its exit code). Nothing is read from the log text.

The JSON result document (the one ``memwal <action> --json`` prints) is the task's return
value, so it lands in XCom. Failures are one clear line: a lost or held lease and a merge
gap fail the task (retries apply); bad input (no table, no MemWAL index, corrupt manifest)
fails it without retries.

The merge operator names an ``AssetAlias`` in its outlets and, only when its merge
committed a new table version, attaches an event for the table's Asset
(``memwal.airflow.hooks.table_asset``) to it: downstream DAGs scheduled on that Asset
run on fresh data, and runs that merged nothing emit nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

from airflow.sdk import AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from memwal.airflow.assets import DEFAULT_MERGED_ALIAS, emit_merged_event
from memwal.airflow.hooks import MemWalHook, redacted
from memwal.airflow.reporting import note_table, observed, report_of
from memwal.airflow.spark_jobs import MemWalSparkSubmitHook

ENGINES = ("local", "spark")

def jsonable(doc: Any) -> Any:
    return json.loads(json.dumps(doc, default=str))


class MemWalActionOperator(BaseOperator):
    """Run one maintenance action on one table (base class of the action operators).

    :param table: table URI (templated); overrides the connection's.
    :param memwal_conn_id: ``memwal`` connection holding the table URI and storage options (templated).
    :param storage_options: storage options; override the connection's. Never templated or logged.
    :param storage_options_param: name of a DAG param (run conf key) to read extra storage
        options from at run time (used by the ad-hoc ``memwal_maintenance`` DAG).
    :param engine: ``local`` or ``spark`` (templated).
    :param dry_run: plan only, change nothing.
    :param lease_ttl: lease time-to-live in seconds.
    :param job_options: the action's options by name (templated: a DAG config or run conf
        can set them); each subclass also takes them as keyword arguments.
    :param spark_conn_id: ``spark`` connection (master, deploy mode, queue) for ``engine="spark"``.
    :param spark_conf: ``--conf`` settings for spark-submit (the UI is off and Spark's logs are
        quiet unless these say otherwise).
    :param spark_env: environment of the spark-submit process (``PYSPARK_DRIVER_PYTHON``
        defaults to this worker's interpreter, which has memwal-jobs installed).
    :param spark_submit_kwargs: any other ``SparkSubmitHook`` argument (``executor_memory``,
        ``num_executors``, ``archives``, ``py_files``, ``deploy_mode`` ...).
    """

    action: ClassVar[str] = ""
    # Never storage options or Spark settings (either may hold credentials): those are read
    # at run time from a DAG param (storage_options_param, spark_conf_param), never rendered.
    template_fields = ("table", "memwal_conn_id", "engine", "spark_conn_id", "job_options")
    template_fields_renderers = {"job_options": "json"}
    ui_color = "#cfe3f7"

    def __init__(
        self,
        *,
        table: str | None = None,
        memwal_conn_id: str | None = None,
        storage_options: dict[str, str] | None = None,
        storage_options_param: str | None = None,
        engine: str = "local",
        dry_run: bool = False,
        lease_ttl: float | None = None,
        job_options: dict[str, Any] | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        spark_conf_param: str | None = None,
        spark_env: dict[str, str] | None = None,
        spark_submit_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        names = self.option_names()
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        super().__init__(**kwargs)
        if not table and not memwal_conn_id:
            raise ValueError(f"{type(self).__name__}: give `table` or `memwal_conn_id`")
        self.table = table
        self.memwal_conn_id = memwal_conn_id
        self.storage_options = dict(storage_options or {})
        self.storage_options_param = storage_options_param
        self.engine = engine
        self.dry_run = dry_run
        self.job_options = {**(job_options or {}), **options}
        if lease_ttl is not None:
            self.job_options["lease_ttl"] = lease_ttl
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_conf_param = spark_conf_param
        self.spark_env = dict(spark_env or {})
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self._spark_hook = None

    @classmethod
    def option_names(cls) -> list[str]:
        """The action's own option names (its options class), accepted as keyword arguments."""
        from memwal.actions import ACTIONS
        from memwal.actions.options import option_names

        return option_names(ACTIONS[cls.action].options, common=False) if cls.action in ACTIONS else []

    @classmethod
    def option_problem(cls, values: dict[str, Any]) -> str | None:
        """What is wrong with these option values (None: nothing), for checks at DAG parse time."""
        from memwal.actions import ACTIONS
        from memwal.errors import BadInputError

        try:
            ACTIONS[cls.action].options.from_kwargs(**values)
        except BadInputError as exc:
            return str(exc)
        return None

    def options(self, engine: str) -> Any:
        """The validated options object (bad values fail the task without retries)."""
        from memwal.actions import ACTIONS
        from memwal.errors import BadInputError

        try:
            return ACTIONS[self.action].options.from_kwargs(engine=engine, dry_run=self.dry_run, **self.job_options)
        except BadInputError as exc:
            raise AirflowFailException(f"memwal {self.action}: bad option: {exc}") from None

    def on_result(self, doc: dict[str, Any], uri: str, context: Any) -> None:
        """Hook for a successful result (the merge operator emits its Asset event here)."""

    # -- execution ----------------------------------------------------------------
    def _storage_options(self, context: Any) -> dict[str, str]:
        options = dict(self.storage_options)
        if self.storage_options_param:
            extra = (context.get("params") or {}).get(self.storage_options_param) or {}
            if not isinstance(extra, dict):
                raise AirflowFailException(f"param {self.storage_options_param!r} must be an object of KEY: VALUE")
            options.update({str(k): str(v) for k, v in extra.items()})
        return options

    def resolve(self, context: Any) -> tuple[str, dict[str, str]]:
        hook = MemWalHook(
            self.memwal_conn_id or None, table=self.table or None, storage_options=self._storage_options(context)
        )
        try:
            uri, options = hook.resolve()
        except ValueError as exc:
            raise AirflowFailException(f"memwal {self.action}: {exc}") from None
        note_table(self, uri, options)
        return uri, options

    def _engine(self) -> str:
        engine = (self.engine or "local").strip()
        if engine not in ENGINES:
            raise AirflowFailException(f"memwal {self.action}: unknown engine {engine!r}: expected local or spark")
        return engine

    def execute(self, context: Any) -> dict[str, Any]:
        """The job (:meth:`_execute`), timed and reported: Airflow's metrics, and the facts
        OpenLineage asks for (:mod:`memwal.airflow.reporting`)."""
        return observed(self, context, self._execute, storage_options=lambda: self.resolve(context))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The table as input and output, and the ``memwal`` run facet (:mod:`memwal.airflow.lineage`)."""
        from memwal.airflow.lineage import operator_lineage

        return operator_lineage(self.__dict__.get("_memwal_report"))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_complete(task_instance)

    def _execute(self, context: Any) -> dict[str, Any]:
        uri, storage_options = self.resolve(context)  # credentials are registered for masking here
        engine = self._engine()
        options = self.options(engine)
        self.log.info("memwal %s %s, engine %s%s, storage options %s", self.action, uri, engine,
                      " (dry run)" if self.dry_run else "", redacted(storage_options))
        if engine == "local":
            doc = self._run_local(uri, storage_options, options)
        else:
            doc = self._run_spark(uri, storage_options, self.action, options.to_argv(), context)
            self.raise_failure(doc.pop("failure", None), uri)
        doc = jsonable(doc)
        report_of(self).docs[self.action] = doc
        self.check_result(self.action, doc, uri, context)
        self.on_result(doc, uri, context)
        return doc

    def check_result(self, action: str, doc: dict[str, Any], uri: str, context: Any) -> None:
        """Fail the task exactly when the CLI would exit 1 (the action's ``problems``); what
        the action did do is still pushed to XCom."""
        from memwal.actions import ACTIONS

        problems = ACTIONS[action].problems(doc)
        if not problems:
            return
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None:
            ti.xcom_push(key="return_value", value=doc)
        done = f" (version {doc['version']} committed)" if doc.get("version") is not None else ""
        raise AirflowException(f"memwal {action} {uri}: {'; '.join(problems)}{done}")

    def _run_local(self, uri: str, storage_options: dict[str, str], options: Any) -> dict[str, Any]:
        from memwal import actions
        from memwal.errors import BadInputError, LeaseHeldError, LeaseLostError, MemWalError
        from memwal.table import open_table

        try:
            return actions.run(self.action, open_table(uri, storage_options), options).to_dict()
        except BadInputError as exc:
            raise AirflowFailException(f"memwal {self.action} {uri}: bad input: {exc}") from None
        except LeaseLostError as exc:
            raise AirflowException(f"memwal {self.action} {uri}: lost its lease and stopped: {exc}") from None
        except LeaseHeldError as exc:
            raise AirflowException(f"memwal {self.action} {uri}: another job holds the lease: {exc}") from None
        except MemWalError as exc:
            raise AirflowException(f"memwal {self.action} {uri} failed: {exc}") from None

    def spark_conf_for(self, context: Any) -> dict[str, str]:
        """``spark_conf``, and the run conf's (``spark_conf_param``) over it."""
        extra = (context.get("params") or {}).get(self.spark_conf_param) or {} if self.spark_conf_param else {}
        if not isinstance(extra, dict):
            raise AirflowFailException(f"param {self.spark_conf_param!r} must be an object of spark conf settings")
        return {**self.spark_conf, **{str(k): str(v) for k, v in extra.items()}}

    def _run_spark(self, uri: str, storage_options: dict[str, str], job: str, job_args: list[str],
                   context: Any) -> dict[str, Any]:
        """The job through :class:`MemWalSparkSubmitHook`: its result document (with a
        ``failure`` entry when the job failed)."""
        hook = MemWalSparkSubmitHook(job, spark_conn_id=self.spark_conn_id, conf=self.spark_conf_for(context),
                                     env=self.spark_env, submit_kwargs=self.spark_submit_kwargs)
        self._spark_hook = hook
        try:
            outcome = hook.submit_job(uri, storage_options, job_args)
        finally:
            self._spark_hook = None
        where = f"memwal {job} {uri} (spark-submit {os.path.basename(hook.application)})"
        if outcome.doc is None:
            if outcome.exited_ok:
                self.log.warning("spark-submit succeeded but wrote no result file (cluster deploy mode?)")
                return {"table": uri, "engine": "spark", "result": None}
            raise AirflowException(f"{where}: failed before the job wrote its result: see the spark-submit output")
        if not outcome.exited_ok and "failure" not in outcome.doc and not self._reports_failure(outcome.doc):
            raise AirflowException(f"{where}: spark-submit failed after the job wrote its result")
        return outcome.doc

    def raise_failure(self, failure: dict[str, Any] | None, uri: str) -> None:
        """A failed job's task failure, from its result file: exit 2 (bad input) fails the
        task for good, 3 (a lease lost or held) and 1 let Airflow retry."""
        if failure is None:
            return
        code = failure.get("exit_code")
        what = {2: "bad input", 3: "lost or contended lease"}.get(code, f"exit code {code}")
        job = f" {failure['job']}" if failure.get("job") else ""
        message = f"memwal {self.action}{job} {uri}: {what}: {failure.get('error')}"
        raise (AirflowFailException if code == 2 else AirflowException)(message)

    def _reports_failure(self, doc: dict[str, Any]) -> bool:
        """Whether the result document itself explains an exit code 1 (check_result raises then)."""
        from memwal.actions import ACTIONS

        return bool(ACTIONS[self.action].problems(doc))

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()


class MemWalMergeOperator(MemWalActionOperator):
    """Merge flushed generations into the base table, in order, with atomic progress.

    Takes ``memwal.actions.options.MergeOptions`` as keyword arguments (``shards``,
    ``max_generations``, ``max_rows``, ``max_bytes``).

    :param asset_alias: name of the ``AssetAlias`` put in ``outlets``; a run whose merge
        committed attaches an event for ``table_asset(table)`` to it. ``None``: no asset.
    """

    action = "merge"
    ui_color = "#b9d7f2"

    def __init__(self, *, asset_alias: str | None = DEFAULT_MERGED_ALIAS, **kwargs: Any) -> None:
        if asset_alias:
            kwargs["outlets"] = [*(kwargs.get("outlets") or []), AssetAlias(asset_alias)]
        super().__init__(**kwargs)
        self.asset_alias = asset_alias

    def on_result(self, doc: dict[str, Any], uri: str, context: Any) -> None:
        emit_merged_event(self, self.asset_alias, self.dry_run, doc, uri, context)


class MemWalCatchupOperator(MemWalActionOperator):
    """Bring base-table indexes up to the merged generations (``memwal.actions.options.CatchupOptions``)."""

    action = "catchup"


class MemWalCompactOperator(MemWalActionOperator):
    """Compact the base table's fragments, keeping progress and index catch-up
    (``memwal.actions.options.CompactOptions``)."""

    action = "compact"


class MemWalSnapshotOperator(MemWalActionOperator):
    """Publish a snapshot of all shard states in the MemWAL index."""

    action = "snapshot"


class MemWalGcOperator(MemWalActionOperator):
    """Delete merged, indexed, unretained generations past the reader grace period, and their
    WAL entries (``memwal.actions.options.GcOptions``: ``grace_seconds``, ``expire_versions``, ...)."""

    action = "gc"


OPERATORS = {
    "merge": MemWalMergeOperator,
    "catchup": MemWalCatchupOperator,
    "compact": MemWalCompactOperator,
    "snapshot": MemWalSnapshotOperator,
    "gc": MemWalGcOperator,
}
