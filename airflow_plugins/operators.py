"""Operators for the four maintenance actions: merge, index catch-up, snapshot refresh, GC.

Each operator is a thin shell over the same plan/execute as the ``memwal`` CLI:

- ``engine="local"`` calls ``memwal.actions.run_action`` in the task process;
- ``engine="spark"`` runs ``spark-submit jobs/<action>.py TABLE [options]
  --storage-options-file O --result-file F`` (``O``: the storage options in a 0600 file in
  a private directory, removed when the job ends; in cluster deploy mode the driver cannot
  read it, so credentials must then come from the cluster)
  through the Spark provider's ``SparkSubmitHook`` (master, queue, deploy mode... from a
  ``spark`` connection; ``spark_conf``, ``spark_env`` and any other ``SparkSubmitHook``
  argument through ``spark_submit_kwargs``) and reads the JSON result from ``F``.

The JSON result document (the one ``memwal <action> --json`` prints) is the task's return
value, so it lands in XCom. Failures are one clear line: a lost or held lease and a merge
gap fail the task (retries apply); bad input (no table, no MemWAL index, corrupt manifest)
fails it without retries.

The merge operator names an ``AssetAlias`` in its outlets and, only when its merge
committed a new table version, attaches an event for the table's Asset
(``airflow_plugins.hooks.table_asset``) to it: downstream DAGs scheduled on that Asset
run on fresh data, and runs that merged nothing emit nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import tempfile
from typing import Any, ClassVar

from airflow.sdk import AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_plugins.hooks import MemWalHook, redacted, table_asset
from memwal.secret_options import storage_options_file

ENGINES = ("local", "spark")
DEFAULT_MERGED_ALIAS = "memwal-merged"

# Option name -> CLI flag, where the flag is not simply --option-name (lists repeat the flag).
_FLAG_NAMES = {"shards": "--shard", "indexes": "--index", "audit": "--audit-log"}


def job_file(action: str) -> str:
    """Path of ``jobs/<action>.py`` in the installed package (located without importing it)."""
    spec = importlib.util.find_spec("jobs")
    if spec is None or not spec.submodule_search_locations:
        raise AirflowFailException("memwal-jobs' `jobs` package is not installed on this worker")
    path = os.path.join(list(spec.submodule_search_locations)[0], f"{action}.py")
    if not os.path.isfile(path):
        raise AirflowFailException(f"no spark-submit entry point for {action}: {path} is missing")
    return path


def cli_args(options: dict[str, Any]) -> list[str]:
    """Action options as the CLI flags of ``memwal <action>`` (and so of ``jobs/<action>.py``)."""
    args: list[str] = []
    for name, value in options.items():
        if value is None or value is False or value == []:
            continue
        flag = _FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return args


def _jsonable(doc: Any) -> Any:
    return json.loads(json.dumps(doc, default=str))


def _spark_submit_hook_class():
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    class MemWalSparkSubmitHook(SparkSubmitHook):
        """The provider's hook, also remembering the job's ``memwal: error:`` lines (its one-line errors)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.memwal_errors: list[str] = []

        def _process_spark_submit_log(self, itr):  # type: ignore[override]
            def tee():
                for line in itr:
                    text = line.strip()
                    if text.startswith("memwal: error:"):
                        self.memwal_errors.append(text[len("memwal: error:") :].strip())
                    yield line

            return super()._process_spark_submit_log(tee())

    return MemWalSparkSubmitHook


class MemWalActionOperator(BaseOperator):
    """Run one maintenance action on one table (base class of the four operators).

    :param table: table URI (templated); overrides the connection's.
    :param memwal_conn_id: ``memwal`` connection holding the table URI and storage options (templated).
    :param storage_options: storage options; override the connection's. Never templated or logged.
    :param storage_options_param: name of a DAG param (run conf key) to read extra storage
        options from at run time (used by the ad-hoc ``memwal_maintenance`` DAG).
    :param engine: ``local`` or ``spark`` (templated).
    :param dry_run: plan only, change nothing.
    :param spark_conn_id: ``spark`` connection (master, deploy mode, queue) for ``engine="spark"``.
    :param spark_conf: ``--conf`` settings for spark-submit.
    :param spark_env: environment of the spark-submit process (``PYSPARK_DRIVER_PYTHON``
        defaults to this worker's interpreter, which has memwal-jobs installed).
    :param spark_submit_kwargs: any other ``SparkSubmitHook`` argument (``executor_memory``,
        ``num_executors``, ``archives``, ``py_files``, ``deploy_mode`` ...).
    """

    action: ClassVar[str] = ""
    template_fields = ("table", "memwal_conn_id", "engine", "spark_conn_id")
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
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        spark_env: dict[str, str] | None = None,
        spark_submit_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not table and not memwal_conn_id:
            raise ValueError(f"{type(self).__name__}: give `table` or `memwal_conn_id`")
        self.table = table
        self.memwal_conn_id = memwal_conn_id
        self.storage_options = dict(storage_options or {})
        self.storage_options_param = storage_options_param
        self.engine = engine
        self.dry_run = dry_run
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_env = dict(spark_env or {})
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self._spark_hook = None

    # -- subclasses ---------------------------------------------------------------
    def action_options(self) -> dict[str, Any]:
        """Keyword options of ``run_action`` (and, through ``cli_args``, of the spark-submit job)."""
        return {}

    def check_result(self, doc: dict[str, Any], uri: str, context: Any) -> None:
        """Raise when the result document reports a failure the CLI would exit 1 for."""

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
            return hook.resolve()
        except ValueError as exc:
            raise AirflowFailException(f"memwal {self.action}: {exc}") from None

    def execute(self, context: Any) -> dict[str, Any]:
        uri, storage_options = self.resolve(context)  # credentials are registered for masking here
        engine = (self.engine or "local").strip()
        if engine not in ENGINES:
            raise AirflowFailException(f"memwal {self.action}: unknown engine {engine!r}: expected local or spark")
        self.log.info(
            "memwal %s %s, engine %s%s, storage options %s",
            self.action,
            uri,
            engine,
            " (dry run)" if self.dry_run else "",
            redacted(storage_options),
        )
        if engine == "local":
            doc = self._run_local(uri, storage_options)
        else:
            doc = self._run_spark(uri, storage_options)
        doc = _jsonable(doc)
        self.check_result(doc, uri, context)
        self.on_result(doc, uri, context)
        return doc

    def _run_local(self, uri: str, storage_options: dict[str, str]) -> dict[str, Any]:
        from memwal.actions import run_action
        from memwal.errors import BadInputError, LeaseHeldError, LeaseLostError, MemWalError

        try:
            return run_action(
                self.action, uri, storage_options, engine="local", dry_run=self.dry_run, **self.action_options()
            )
        except BadInputError as exc:
            raise AirflowFailException(f"memwal {self.action} {uri}: bad input: {exc}") from None
        except LeaseLostError as exc:
            raise AirflowException(f"memwal {self.action} {uri}: lost its lease and stopped: {exc}") from None
        except LeaseHeldError as exc:
            raise AirflowException(f"memwal {self.action} {uri}: another job holds the lease: {exc}") from None
        except MemWalError as exc:
            raise AirflowException(f"memwal {self.action} {uri} failed: {exc}") from None

    def _run_spark(self, uri: str, storage_options: dict[str, str]) -> dict[str, Any]:
        application = job_file(self.action)
        env = dict(self.spark_env)
        if "PYSPARK_DRIVER_PYTHON" not in env and "PYSPARK_DRIVER_PYTHON" not in os.environ:
            env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # client mode: the driver runs on this worker
        with (
            tempfile.TemporaryDirectory(prefix=f"memwal-{self.action}-") as tmp,
            storage_options_file(storage_options, prefix=f"memwal-{self.action}-options-") as options_file,
        ):
            result_file = os.path.join(tmp, "result.json")
            args = self.application_args(uri, options_file if storage_options else None, result_file)
            hook = _spark_submit_hook_class()(
                conf=self.spark_conf,
                conn_id=self.spark_conn_id,
                name=f"memwal-{self.action}",
                application_args=args,
                env_vars=env or None,
                **self.spark_submit_kwargs,
            )
            self._spark_hook = hook
            failure: str | None = None
            try:
                hook.submit(application)
            except AirflowException as exc:
                match = re.search(r"Error code is: (\d+)", str(exc))
                code = int(match.group(1)) if match else None
                failure = self._spark_failure(uri, code, hook.memwal_errors)
                if code != 1 or not os.path.exists(result_file):
                    # 2: bad input, never retried; anything else: retried. Not chained: the
                    # provider's message carries the command line.
                    raise (AirflowFailException if code == 2 else AirflowException)(failure) from None
            finally:
                self._spark_hook = None
            if not os.path.exists(result_file):
                self.log.warning("spark-submit succeeded but wrote no result file (cluster deploy mode?)")
                return {"table": uri, "engine": "spark", "result": None}
            with open(result_file) as f:
                doc = json.load(f)
        if failure is not None and not self._reports_failure(doc):
            raise AirflowException(failure)
        return doc

    def application_args(self, uri: str, options_file: str | None, result_file: str) -> list[str]:
        """The arguments of ``jobs/<action>.py``: the storage options only as the path of their
        0600 file, because spark-submit, its JVM and the Python driver all show their command
        lines to every local user (``ps``, ``/proc/<pid>/cmdline``)."""
        args = [uri, *cli_args(self.action_options())]
        if self.dry_run:
            args.append("--dry-run")
        if options_file:
            args += ["--storage-options-file", options_file]
        return [*args, "--result-file", result_file]

    def _reports_failure(self, doc: dict[str, Any]) -> bool:
        """Whether the result document itself explains an exit code 1 (check_result raises then)."""
        return bool(doc.get("blocked")) and self.action == "merge"

    def _spark_failure(self, uri: str, code: int | None, errors: list[str]) -> str:
        detail = errors[-1] if errors else "see the spark-submit output above"
        what = {2: "bad input", 3: "lost or contended lease"}.get(code or 0, f"exit code {code}")
        return f"memwal {self.action} {uri} (spark-submit {os.path.basename(job_file(self.action))}): {what}: {detail}"

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()


class MemWalMergeOperator(MemWalActionOperator):
    """Merge flushed generations into the base table, in order, with atomic progress.

    :param shards: only these shards.
    :param max_generations: at most N generations per shard.
    :param max_rows: stop adding generations past N change rows.
    :param max_bytes: stop adding generations past N bytes.
    :param asset_alias: name of the ``AssetAlias`` put in ``outlets``; a run whose merge
        committed attaches an event for ``table_asset(table)`` to it. ``None``: no asset.
    """

    action = "merge"
    ui_color = "#b9d7f2"

    def __init__(
        self,
        *,
        shards: list[str] | None = None,
        max_generations: int | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
        asset_alias: str | None = DEFAULT_MERGED_ALIAS,
        **kwargs: Any,
    ) -> None:
        if asset_alias:
            kwargs["outlets"] = [*(kwargs.get("outlets") or []), AssetAlias(asset_alias)]
        super().__init__(**kwargs)
        self.shards = list(shards or [])
        self.max_generations = max_generations
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.asset_alias = asset_alias

    def action_options(self) -> dict[str, Any]:
        return {
            "shards": self.shards,
            "max_generations": self.max_generations,
            "max_rows": self.max_rows,
            "max_bytes": self.max_bytes,
        }

    def check_result(self, doc: dict[str, Any], uri: str, context: Any) -> None:
        blocked = doc.get("blocked") or []
        if not blocked:
            return
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None:
            ti.xcom_push(key="return_value", value=doc)  # what merged is still worth seeing
        stops = "; ".join(
            f"shard {b['shard_id']} stopped at generation {b['generation']}: {b['reason']}" for b in blocked
        )
        merged = f" (other shards merged into version {doc['version']})" if doc.get("version") is not None else ""
        raise AirflowException(f"memwal merge {uri}: gap: {stops}{merged}")

    def on_result(self, doc: dict[str, Any], uri: str, context: Any) -> None:
        if self.dry_run or doc.get("version") is None:
            self.log.info("nothing merged: no asset event")
            return
        if not self.asset_alias:
            return
        events = context.get("outlet_events") if hasattr(context, "get") else None
        if events is None:
            self.log.info("no outlet events in this context: asset event for version %s not emitted", doc["version"])
            return
        asset = table_asset(uri)
        extra = {
            "table": uri,
            "version": doc["version"],
            "engine": doc.get("engine"),
            "shards": {s["shard_id"]: s["to_generation"] for s in doc.get("shards", [])},
        }
        events[AssetAlias(self.asset_alias)].add(asset, extra=extra)
        self.log.info("merge committed version %s: asset event on %s", doc["version"], asset.uri)


class MemWalCatchupOperator(MemWalActionOperator):
    """Bring base-table indexes up to the merged generations.

    :param indexes: only these indexes (default: the MemWAL index's maintained indexes).
    :param max_deltas: retrain an index with this many deltas or more.
    :param max_unindexed_fraction: retrain when more than this fraction of rows is unindexed.
    """

    action = "catchup"

    def __init__(
        self,
        *,
        indexes: list[str] | None = None,
        max_deltas: int | None = None,
        max_unindexed_fraction: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.indexes = list(indexes or [])
        self.max_deltas = max_deltas
        self.max_unindexed_fraction = max_unindexed_fraction

    def action_options(self) -> dict[str, Any]:
        return {
            "indexes": self.indexes or None,
            "max_deltas": self.max_deltas,
            "max_unindexed_fraction": self.max_unindexed_fraction,
        }


class MemWalSnapshotOperator(MemWalActionOperator):
    """Publish a snapshot of all shard states in the MemWAL index."""

    action = "snapshot"


class MemWalGcOperator(MemWalActionOperator):
    """Delete merged, indexed, unretained generations past the reader grace period, and their WAL entries.

    :param grace_seconds: reader grace period after the merge commit (default 600).
    :param expire_versions: first expire base-table versions older than this (Lance cleanup; keeps tags).
    :param orphans: also remove unlisted generation directories and crashed-merge staging.
    :param orphan_age_seconds: orphans must be at least this old (default 3600).
    :param audit: also write an audit record under ``_mem_wal/_jobs/audit/``.
    """

    action = "gc"

    def __init__(
        self,
        *,
        grace_seconds: float | None = None,
        expire_versions: float | None = None,
        orphans: bool = False,
        orphan_age_seconds: float | None = None,
        audit: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.grace_seconds = grace_seconds
        self.expire_versions = expire_versions
        self.orphans = orphans
        self.orphan_age_seconds = orphan_age_seconds
        self.audit = audit

    def action_options(self) -> dict[str, Any]:
        return {
            "grace_seconds": self.grace_seconds,
            "expire_versions": self.expire_versions,
            "orphans": self.orphans,
            "orphan_age_seconds": self.orphan_age_seconds,
            "audit": self.audit,
        }


OPERATORS = {
    "merge": MemWalMergeOperator,
    "catchup": MemWalCatchupOperator,
    "snapshot": MemWalSnapshotOperator,
    "gc": MemWalGcOperator,
}
