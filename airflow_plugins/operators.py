"""Operators for the maintenance actions (merge, catch-up, compact, snapshot, GC).

Thin, as the Amazon provider's are: options in, one :class:`memwal.airflow.hooks.MemWalHook`
call, XCom and lineage out. The hook runs the job through the public API (``memwal.open``) in
the task's process (``engine="local"``) or through spark-submit (``engine="spark"``), and turns
a failure into one line: a lost or held lease and a merge gap fail the task (retries apply);
bad input (no table, no MemWAL index, corrupt manifest) fails it without retries.

An operator's job options are the keyword arguments of the action's options class
(:mod:`memwal.actions.options`: ``max_generations=``, ``grace_seconds=``, ...) or
``job_options={...}`` (templated); the hook validates them with that class. The JSON result
document (the one ``memwal <action> --json`` prints) is the task's return value, so it lands
in XCom; a run that the action itself judges failed (the CLI would exit 1) pushes it too, then
fails the task. Every ``execute`` is timed and reported (:mod:`memwal.airflow.reporting`:
Airflow's metrics, and the facts OpenLineage asks for).

The merge operator names an ``AssetAlias`` in its outlets and, only when its merge committed a
new table version, attaches an event for the table's Asset (:mod:`memwal.airflow.assets`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from memwal.airflow.assets import DEFAULT_MERGED_ALIAS, emit_merged_event
from memwal.airflow.hooks import MemWalHook
from memwal.airflow.reporting import note_table, observed, report_of
from memwal.airflow.spark_jobs import SparkSettings

from memwal.core.secrets import redact_storage_options

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import RunFacet

    from memwal.actions.options import JobOptions


def params_object(context: Context, name: str | None, what: str) -> dict[str, str]:
    """The object a DAG param (a run conf key) holds, read at run time, never rendered."""
    if not name:
        return {}
    value = (context.get("params") or {}).get(name) or {}
    if not isinstance(value, dict):
        raise AirflowFailException(f"param {name!r} must be an object of {what}")
    return {str(k): str(v) for k, v in value.items()}


def push(context: Context, key: str, value: Any) -> None:
    ti = context.get("ti") if hasattr(context, "get") else None
    if ti is not None:
        ti.xcom_push(key=key, value=value)


class MemWalTableOperator(BaseOperator):
    """What the operators on one table share: the table, the engine, how Spark runs, the hook.

    :param table: table URI (templated); overrides the connection's.
    :param memwal_conn_id: ``memwal`` connection holding the table URI and storage options (templated).
    :param storage_options: storage options; override the connection's. Never templated or logged.
    :param storage_options_param: name of a DAG param (run conf key) to read extra storage
        options from at run time (used by the ad-hoc ``memwal_maintenance`` DAG).
    :param engine: ``local``, ``spark`` or ``ray`` (templated).
    :param dry_run: plan only, change nothing.
    :param lease_ttl: lease time-to-live in seconds.
    :param job_options: the options by name (templated: a DAG config or run conf can set them).
    :param spark_conn_id: ``spark`` connection (master, deploy mode, queue) for ``engine="spark"``.
    :param spark_conf: ``--conf`` settings for spark-submit (the UI is off and Spark's logs are
        quiet unless these say otherwise).
    :param spark_conf_param: name of a DAG param (run conf key) adding ``--conf`` settings at run
        time (never rendered: they may hold credentials).
    :param spark_env: environment of the spark-submit process.
    :param spark_submit_kwargs: any other ``SparkSubmitHook`` argument (``executor_memory``, ...).
    :param ray_conn_id: connection naming the Ray cluster for ``engine="ray"`` (its address; its
        password is the cluster's token: :mod:`memwal.airflow.ray_jobs`); none: a local Ray (templated).
    """

    action: ClassVar[str] = ""
    # Never storage options or Spark settings (either may hold credentials): those are read
    # at run time from a DAG param (storage_options_param, spark_conf_param), never rendered.
    template_fields: tuple[str, ...] = ("table", "memwal_conn_id", "engine", "spark_conn_id", "ray_conn_id",
                                        "job_options")
    template_fields_renderers = {"job_options": "json"}
    ui_color = "#cfe3f7"

    def __init__(self, *, table: str | None = None, memwal_conn_id: str | None = None,
                 storage_options: dict[str, str] | None = None, storage_options_param: str | None = None,
                 engine: str = "local", dry_run: bool = False, lease_ttl: float | None = None,
                 job_options: dict[str, Any] | None = None, spark_conn_id: str = "spark_default",
                 spark_conf: dict[str, Any] | None = None, spark_conf_param: str | None = None,
                 spark_env: dict[str, str] | None = None, spark_submit_kwargs: dict[str, Any] | None = None,
                 ray_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not table and not memwal_conn_id:
            raise ValueError(f"{type(self).__name__}: give `table` or `memwal_conn_id`")
        self.table = table
        self.memwal_conn_id = memwal_conn_id
        self.storage_options = dict(storage_options or {})
        self.storage_options_param = storage_options_param
        self.engine = engine
        #: Plan only (the ``dry_run`` argument; BaseOperator.dry_run is Airflow's own method).
        self.plan_only = dry_run
        self.job_options = dict(job_options or {})
        if lease_ttl is not None:
            self.job_options["lease_ttl"] = lease_ttl
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_conf_param = spark_conf_param
        self.spark_env = dict(spark_env or {})
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.ray_conn_id = ray_conn_id
        self._hook: MemWalHook | None = None

    def hook(self, context: Context) -> MemWalHook:
        """The hook of this try: the table resolved (credentials registered for masking)."""
        storage = {**self.storage_options, **params_object(context, self.storage_options_param, "KEY: VALUE")}
        conf = {**self.spark_conf, **params_object(context, self.spark_conf_param, "spark conf settings")}
        hook = MemWalHook(self.memwal_conn_id or None, table=self.table or None, storage_options=storage,
                          engine=self.engine, spark=SparkSettings(self.spark_conn_id or "spark_default", conf,
                                                                  self.spark_env, self.spark_submit_kwargs),
                          ray_conn_id=self.ray_conn_id or None)
        try:
            uri, options = hook.resolve()
        except ValueError as exc:
            raise AirflowFailException(f"memwal {self.action}: {exc}") from None
        note_table(self, uri, options)
        self.log.info("memwal %s %s, engine %s%s, storage options %s", self.action, uri, self.engine,
                      " (dry run)" if self.plan_only else "", redact_storage_options(options))
        self._hook = hook
        return hook

    def execute(self, context: Context) -> Any:
        """The job (:meth:`_execute`), timed and reported (:mod:`memwal.airflow.reporting`)."""
        return observed(self, context, self._execute,
                        storage_options=lambda: self._hook.resolve() if self._hook else self.hook(context).resolve())

    def _execute(self, context: Context) -> Any:
        raise NotImplementedError

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage[Dataset, RunFacet]:
        """The table as input and output, and the ``memwal`` run facet (:mod:`memwal.airflow.lineage`)."""
        from memwal.airflow.lineage import operator_lineage

        return operator_lineage(self.__dict__.get("_memwal_report"))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage[Dataset, RunFacet]:
        return self.get_openlineage_facets_on_complete(task_instance)

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


class MemWalActionOperator(MemWalTableOperator):
    """Run one maintenance action on one table (base class of the action operators); each
    subclass also takes its action's options as keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        names = self.option_names()
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        super().__init__(**kwargs)
        self.job_options = {**self.job_options, **options}

    @classmethod
    def option_names(cls) -> list[str]:
        """The action's own option names (its options class), accepted as keyword arguments."""
        from memwal.actions import ACTIONS
        from memwal.actions.options import option_names

        return option_names(ACTIONS[cls.action].options, common=False) if cls.action in ACTIONS else []

    def options(self, engine: str) -> JobOptions:
        """The validated options object, as the hook will run the job with it."""
        from memwal.actions import ACTIONS
        from memwal.errors import BadInputError

        try:
            options: JobOptions = ACTIONS[self.action].options.from_kwargs(engine=engine, dry_run=self.plan_only,
                                                                           **self.job_options)
        except BadInputError as exc:
            raise AirflowFailException(f"memwal {self.action}: bad option: {exc}") from None
        return options

    def on_result(self, doc: dict[str, Any], uri: str, context: Context) -> None:
        """Hook for a successful result (the merge operator emits its Asset event here)."""

    def _execute(self, context: Context) -> dict[str, Any]:
        run = self.hook(context).run_action(self.action, self.job_options, dry_run=self.plan_only)
        report_of(self).docs[self.action] = run.document
        if run.problems:  # what the action did do is still in XCom
            push(context, "return_value", run.document)
            version = run.document.get("version")
            done = f" (version {version} committed)" if version is not None else ""
            raise AirflowException(f"memwal {self.action} {run.table}: {'; '.join(run.problems)}{done}")
        self.on_result(run.document, run.table, context)
        return run.document


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

    def on_result(self, doc: dict[str, Any], uri: str, context: Context) -> None:
        emit_merged_event(self, self.asset_alias, self.plan_only, doc, uri, context)


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


OPERATORS = {  # in the cycle's order (memwal.cycle.JOB_ORDER)
    "merge": MemWalMergeOperator,
    "catchup": MemWalCatchupOperator,
    "compact": MemWalCompactOperator,
    "gc": MemWalGcOperator,
    "snapshot": MemWalSnapshotOperator,
}
