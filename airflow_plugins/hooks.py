"""``MemWalHook``: a MemWAL table from an Airflow connection, and the jobs run on it.

The hook owns the work, as the Amazon provider's hooks do (``EmrServerlessHook``): the
connection, the client, the submission, the result protocol and the waiting. Operators pass
options in and push what the hook returns (:mod:`memwal.airflow.operators`).

**The table.** A ``memwal`` connection holds the table URI (``host``, or ``extra.table``: URIs do
not always survive the connection-URI syntax) and its storage options (``extra.storage_options``,
a JSON object with Lance's key names, as ``memwal --storage-option`` takes them); an optional
``login`` / ``password`` (Airflow's encrypted, masked field) become ``aws_access_key_id`` /
``aws_secret_access_key`` unless the extras set those. ``memwal_conn_id`` may instead name one of
Airflow's cloud connections (``aws``, ``wasb``, ``adls``, ``google_cloud_platform``): its
credentials become the storage options (``memwal.airflow.connections``), the URI comes from ``table=``.

**The jobs**, through the public API: ``engine="local"`` runs ``memwal.open(uri).<job>(**options)``
or a cycle (:func:`memwal.cycle.run_cycle`) in the task's process; ``engine="ray"`` does the same
as a Ray client of the cluster ``ray_conn_id`` names (:mod:`memwal.airflow.ray_jobs`); ``engine="spark"`` submits
``jobs/<job>.py`` (``maintenance.py`` for a cycle, ``fleet_chunk.py`` for a fleet's tables)
through the Spark provider's ``SparkSubmitHook`` (:mod:`memwal.airflow.spark_jobs`) and reads the
job's result file. A failure is one line from the job's exit code: bad input (2) raises
``AirflowFailException`` (never retried), a lost or held lease (3) and others ``AirflowException``
(retried); a job an operator cancelled skips its task (``AirflowSkipException``, never retried).

Credentials never reach logs or rendered templates: every credential-like storage option is
registered with Airflow's secrets masker as soon as it is read, storage options are never
template fields, and spark-submit gets them only in a 0600 file in a private directory.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from memwal.airflow.provider import CONN_TYPE
from memwal.airflow.spark_jobs import ConnectRun, SparkJobOutcome, SparkSettings, SparkSubmission, submission

from memwal.actions.options import ENGINES
from memwal.core.secrets import is_secret_key

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from memwal.api import MemWalTable
    from memwal.cycle import CycleResult
    from memwal.fleet.run import TableWork
    from memwal.inspect.status import TableStatus

log = logging.getLogger(__name__)

T = TypeVar("T")


def mask_storage_options(storage_options: Mapping[str, Any] | None) -> None:
    """Register every credential-like storage option value with Airflow's secrets masker.

    Which keys are credentials is ``memwal.core.secrets.is_secret_key``: one rule for the
    CLI, the Spark jobs and Airflow."""
    if not storage_options:
        return
    from airflow.sdk.log import mask_secret

    for key, value in storage_options.items():
        text = str(value)
        # flags such as bucket_key_enabled=true are not secrets (and masking "true" would garble every log)
        if text and is_secret_key(str(key)) and text.lower() not in ("true", "false") and not text.isdigit():
            mask_secret(text)


def _coerce_storage_options(value: Any, where: str) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: storage_options is not a JSON object") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{where}: storage_options must be an object of KEY: VALUE")
    return {str(k): str(v) for k, v in value.items()}


def job_failed(where: str, error: str | None, exit_code: int | None, *, cancelled: bool = False) -> AirflowException:
    """The task's end for a job that failed with ``exit_code``: bad input (2) is never retried;
    a lost or held lease (3) and any other failure are. A job an operator cancelled (``memwal
    fleet cancel``) skips the task, never retried, and so the tasks after it: it was asked to
    stop, which is no failure."""
    if cancelled:
        return AirflowSkipException(f"{where}: {error}")
    what = {2: "bad input", 3: "lost or contended lease"}.get(exit_code or 1, "failed")
    return (AirflowFailException if exit_code == 2 else AirflowException)(f"{where}: {what}: {error}")


def check_engine(engine: str | None, where: str) -> str:
    name = (engine or "local").strip()
    if name not in ENGINES:
        raise AirflowFailException(f"{where}: unknown engine {name!r}: expected {' or '.join(ENGINES)}")
    return name


@dataclass(frozen=True)
class ActionRun:
    """One action's run: its result document (``memwal <job> --json``) and, when the run is a
    failure by the action's own verdict (the CLI would exit 1), why."""

    job: str
    table: str
    document: dict[str, Any]
    problems: tuple[str, ...] = ()


class MemWalHook(BaseHook):
    """A MemWAL table resolved from a ``memwal`` connection, explicit arguments, or both, and
    the jobs run on it (see the module docstring).

    :param memwal_conn_id: connection of type ``memwal`` (optional when ``table`` is given).
    :param table: table URI; overrides the connection's.
    :param storage_options: storage options; override the connection's key by key.
    :param engine: ``local``, ``spark`` or ``ray``.
    :param spark: how Spark jobs are submitted (``memwal.airflow.spark_jobs.SparkSettings``).
    :param ray_conn_id: the connection naming the Ray cluster of ``engine="ray"`` (none: a local Ray).
    """

    conn_name_attr = "memwal_conn_id"
    default_conn_name = "memwal_default"
    conn_type = CONN_TYPE
    hook_name = "MemWAL table"

    def __init__(self, memwal_conn_id: str | None = None, *, table: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, engine: str = "local",
                 spark: SparkSettings | None = None, ray_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memwal_conn_id = memwal_conn_id
        self._table = table
        self._storage_options = dict(storage_options or {})
        self.engine = engine
        self.spark = spark or SparkSettings()
        self.ray_conn_id = ray_conn_id
        self._resolved: tuple[str, dict[str, str]] | None = None
        self._submission: SparkSubmission | ConnectRun | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form (:data:`memwal.airflow.provider.UI_FIELD_BEHAVIOUR`), in the hook's spelling."""
        from memwal.airflow.provider import UI_FIELD_BEHAVIOUR

        return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}

    # -- resolution ---------------------------------------------------------------
    @staticmethod
    def from_connection(conn: Connection) -> tuple[str | None, dict[str, str]]:
        """Table URI and storage options held by a connection object: a ``memwal`` one, or one of
        Airflow's ``aws``, ``wasb``/``adls``, ``google_cloud_platform`` connections (the table URI
        then comes from ``extra.table`` or the task; see ``memwal.airflow.connections``)."""
        from memwal.airflow.connections import CLOUD_CONN_TYPES, storage_options_from_connection

        extra = conn.extra_dejson or {}
        if conn.conn_type in CLOUD_CONN_TYPES:
            options = storage_options_from_connection(conn)
            options.update(_coerce_storage_options(extra.get("storage_options"), f"connection {conn.conn_id!r}"))
            return extra.get("table") or None, options
        uri = extra.get("table") or conn.host or None
        options = _coerce_storage_options(extra.get("storage_options"), f"connection {conn.conn_id!r}")
        if conn.login and "aws_access_key_id" not in options:
            options["aws_access_key_id"] = conn.login
        if conn.password and "aws_secret_access_key" not in options:
            options["aws_secret_access_key"] = conn.password
        return uri, options

    @classmethod
    def connection_options(cls, conn_id: str) -> dict[str, str]:
        """The storage options a connection holds, registered for masking (its table URI aside)."""
        options = cls.from_connection(cls.get_connection(conn_id))[1]
        mask_storage_options(options)
        return options

    def resolve(self) -> tuple[str, dict[str, str]]:
        """``(table_uri, storage_options)``, with every credential registered for masking."""
        if self._resolved is None:
            uri: str | None = None
            options: dict[str, str] = {}
            if self.memwal_conn_id:
                uri, options = self.from_connection(self.get_connection(self.memwal_conn_id))
            options.update({str(k): str(v) for k, v in self._storage_options.items()})
            uri = self._table or uri
            if not uri:
                raise ValueError(
                    "no MemWAL table: give `table` or a memwal connection whose host (or extra.table) is the table URI"
                )
            mask_storage_options(options)
            self._resolved = (uri, options)
        return self._resolved

    @property
    def table_uri(self) -> str:
        return self.resolve()[0]

    @property
    def storage_options(self) -> dict[str, str]:
        return dict(self.resolve()[1])

    def get_conn(self) -> MemWalTable:
        """The table, opened through the public API (``memwal.open``: a Lance table with a MemWAL index)."""
        import memwal

        uri, options = self.resolve()
        return memwal.open(uri, storage_options=options)

    def status(self) -> TableStatus:
        """``memwal status`` of the table (manifests only, never generation data)."""
        return self.get_conn().status()

    def test_connection(self) -> tuple[bool, str]:
        try:
            st = self.status()
        except Exception as exc:  # noqa: BLE001 - reported to the UI, not raised
            return False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return True, f"{st.table}: version {st.version}, {len(st.shards)} shards, {st.unmerged_generations} unmerged"

    # -- running jobs ---------------------------------------------------------------
    def _where(self, job: str) -> str:
        return f"memwal {job} {self.table_uri}"

    def _guarded(self, job: str, call: Callable[[], T]) -> T:
        """``call()``, its memwal errors turned into task failures by their exit codes."""
        from memwal.errors import CancelledError, MemWalError, first_line

        try:
            return call()
        except MemWalError as exc:
            raise job_failed(self._where(job), first_line(exc, self.table_uri), exc.exit_code,
                             cancelled=isinstance(exc, CancelledError)) from None

    def run_action(self, job: str, options: Mapping[str, Any], *, dry_run: bool = False) -> ActionRun:
        """Run ``job`` with ``options`` (the Python API's keywords: ``max_generations=8``):
        its document and its verdict. A failure to run raises (see the module docstring)."""
        from memwal.actions import ACTIONS

        engine = check_engine(self.engine, f"memwal {job}")
        given = {**options, "engine": engine, "dry_run": dry_run}
        validated = self._guarded(job, lambda: ACTIONS[job].options.from_kwargs(**given))
        uri, storage_options = self.resolve()
        if self._in_process(engine):
            result = self._guarded(job, lambda: getattr(self.get_conn(), job)(**given))
            doc = json.loads(result.to_json())
        else:
            outcome = self._submit(job, uri, validated.to_argv(), storage_options)
            doc = self._result(job, outcome, lambda d: bool(ACTIONS[job].document_problems(d)))
            if doc is None:
                return ActionRun(job, uri, {"table": uri, "engine": "spark", "result": None})
        return ActionRun(job, uri, doc, tuple(ACTIONS[job].document_problems(doc)))

    def run_cycle(self, jobs: Sequence[str], options: Mapping[str, Mapping[str, Any]], *,
                  dry_run: bool = False) -> CycleResult:
        """The maintenance cycle (``memwal cycle``): in the task's process, or as ONE
        spark-submit of ``jobs/maintenance.py``. A job that fails is an outcome of the result,
        not an exception (:meth:`raise_for_cycle` makes it the task's failure)."""
        from memwal.backfill import validated_options
        from memwal.cycle import CycleResult, parse_jobs, run_cycle

        engine = check_engine(self.engine, "memwal maintenance")
        names = self._guarded("maintenance", lambda: parse_jobs(list(jobs)))
        validated = self._guarded("maintenance", lambda: validated_options(names, options, engine=engine,
                                                                           dry_run=dry_run))
        uri, storage_options = self.resolve()
        if self._in_process(engine):
            return run_cycle(self._guarded("maintenance", lambda: self.get_conn().table), names, validated)
        # each job's flags; a shared --lease-ttl repeats with one value, which argparse accepts
        argv = ["--jobs", ",".join(names), *(a for o in validated.values() for a in o.to_argv())]
        if dry_run:
            argv.append("--dry-run")
        outcome = self._submit("maintenance", uri, argv, storage_options)
        doc = self._result("maintenance", outcome, lambda d: any(j.get("status") == "failed" for j in d["jobs"]))
        if doc is None:
            raise AirflowException(f"{self._where('maintenance')}: spark-submit wrote no result file (cluster deploy "
                                   "mode?): the cycle's outcome is unknown")
        return CycleResult.from_dict(doc)

    def raise_for_cycle(self, result: CycleResult) -> None:
        """The task's failure for a cycle that failed (by its failed job's exit code); its skip
        for one an operator cancelled."""
        failed = result.failed
        if failed is not None:
            raise job_failed(f"memwal maintenance {failed.job} {result.table}", failed.error, failed.exit_code)
        cancelled = result.cancelled
        if cancelled is not None:
            raise job_failed(f"memwal maintenance {cancelled.job} {result.table}", cancelled.summary, 3,
                             cancelled=True)

    def run_work(self, work: Sequence[TableWork], *, workers: int, max_seconds: float | None) -> list[CycleResult]:
        """A fleet's tables, each its planned jobs through the cycle runner, at most ``workers``
        at once, none started after ``max_seconds`` (``memwal.fleet.run``): on threads of this
        process, or as ONE spark-submit of ``jobs/fleet_chunk.py`` (a Spark task per small table).
        A table's failure is its own result; this raises only when the work could not run."""
        from memwal.cycle import CycleResult
        from memwal.fleet.run import LocalTableRunner

        engine = check_engine(self.engine, "memwal fleet")
        if self._in_process(engine):
            from memwal.actions.engines import engine_for
            from memwal.errors import MemWalError, first_line

            deadline = None if max_seconds is None else time.monotonic() + max_seconds
            try:  # the ray extra missing: bad input, the task not retried
                runner = engine_for("fleet", engine, LocalTableRunner)
            except MemWalError as exc:
                raise job_failed("memwal fleet", first_line(exc), exc.exit_code) from None
            return list(runner.run(work, workers, deadline))
        if max_seconds is not None and max_seconds <= 0:
            return []
        argv = ["--workers", str(workers), *(["--max-seconds", str(max_seconds)] if max_seconds is not None else [])]
        content = json.dumps({"work": [w.to_dict(storage_options=True) for w in work]}).encode()
        self._submission = submission("fleet_chunk", self.spark)
        try:
            outcome = self._submission.run(None, argv, private_target=content)
        finally:
            self._submission = None
        doc = self._result("fleet_chunk", outcome, lambda d: "tables" in d, where=f"memwal fleet ({len(work)} tables)")
        if doc is None:
            raise AirflowException("memwal fleet: spark-submit wrote no result file (cluster deploy mode?)")
        return [CycleResult.from_dict(d) for d in doc["tables"]]

    def _in_process(self, engine: str) -> bool:
        """Whether ``engine`` runs in the task's process (local, and ray as a client of its cluster)."""
        if engine == "ray":
            from memwal.airflow.ray_jobs import use_ray_connection

            use_ray_connection(self.ray_conn_id)
        return engine != "spark"

    def _submit(self, job: str, uri: str, argv: list[str], storage_options: Mapping[str, str]) -> SparkJobOutcome:
        self._submission = submission(job, self.spark)
        try:
            return self._submission.run(uri, argv, storage_options=storage_options)
        finally:
            self._submission = None

    def _result(self, job: str, outcome: SparkJobOutcome, explains_failure: Callable[[dict[str, Any]], bool],
                where: str | None = None) -> dict[str, Any] | None:
        """The result-file protocol: the job's document, or its failure raised; None when
        spark-submit succeeded without writing one (cluster deploy mode)."""
        where = where or self._where(job)
        submitted = f"{where} ({outcome.launcher} {job}.py)"
        if outcome.doc is None:
            if outcome.exited_ok:
                log.warning("%s: spark-submit succeeded but wrote no result file (cluster deploy mode?)", submitted)
                return None
            raise AirflowException(f"{submitted}: failed before the job wrote its result: see the spark-submit output")
        failure = outcome.doc.get("failure")
        if failure:
            raise job_failed(where, failure.get("error"), failure.get("exit_code"),
                             cancelled=failure.get("cancelled") is True)
        if not outcome.exited_ok and not explains_failure(outcome.doc):
            raise AirflowException(f"{submitted}: spark-submit failed after the job wrote its result")
        return outcome.doc

    def on_kill(self) -> None:
        if self._submission is not None:
            self._submission.on_kill()
