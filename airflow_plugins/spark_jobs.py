"""spark-submit of one memwal job file, and the result file it leaves: the Spark client of
:class:`memwal.airflow.hooks.MemWalHook` (operators never use it directly).

Which client runs a job follows the connection :class:`SparkSettings` names
(:func:`submission`): a ``spark`` connection, spark-submit (:class:`SparkSubmission`); a
``spark_connect`` connection (the provider's Spark Connect type: host, port, user id, token,
SSL), the job file run by this worker's Python as a Spark Connect client (:class:`ConnectRun`),
with no JVM on the worker and the endpoint, token included, only in the child's environment
(``SPARK_REMOTE``), never in its arguments.

It wraps the Spark provider's ``SparkSubmitHook`` as it is (master, queue and deploy mode
come from a ``spark`` connection) and adds what a memwal job needs around it:

- the job file ``jobs/<job>.py`` of the installed package (``memwal.spark``);
- quiet Spark logs (the project's log4j2 config), no UI and, for a driver on this worker,
  this machine's JVM class archive (``memwal.spark.engine.jvm_archive``), unless the
  caller's ``conf`` says otherwise;
- credentials only in 0600 files in a private directory (the storage options as
  ``--storage-options-file``, a fleet chunk's work file), because spark-submit, its JVM and
  the Python driver show their command lines to every local user (``ps``,
  ``/proc/<pid>/cmdline``); the files are removed when the job ends;
- the outcome read from the job's ``--result-file``: the JSON result document, or
  ``{"failure": {"error", "exit_code"}}``; never from the log text.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from memwal.core.secrets import storage_options_file, write_private_file


@dataclass(frozen=True)
class SparkSettings:
    """How jobs are submitted: the ``spark`` connection (master, deploy mode, queue), ``--conf``
    settings over the quiet defaults, the environment of spark-submit (``PYSPARK_DRIVER_PYTHON``
    defaults to this worker's interpreter, which has memwal-jobs installed) and any other
    ``SparkSubmitHook`` argument (``executor_memory``, ``num_executors``, ``deploy_mode`` ...)."""

    conn_id: str = "spark_default"
    conf: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    submit: Mapping[str, Any] = field(default_factory=dict)


def job_file(job: str) -> str:
    """Path of ``jobs/<job>.py`` in the installed package (located without importing it)."""
    spec = importlib.util.find_spec("memwal.spark")
    if spec is None or not spec.submodule_search_locations:
        raise AirflowFailException("memwal-jobs (its memwal.spark package) is not installed on this worker")
    path = os.path.join(list(spec.submodule_search_locations)[0], f"{job}.py")
    if not os.path.isfile(path):
        raise AirflowFailException(f"no spark-submit entry point for {job}: {path} is missing")
    return path


def application_args(target: str, options_file: str | None, result_file: str, job_args: list[str]) -> list[str]:
    """The arguments of the job file: its target (the table, or a fleet chunk's work file), the
    job's flags, the storage options' file (never the options themselves) and the result file."""
    args = [target, *job_args]
    if options_file:
        args += ["--storage-options-file", options_file]
    return [*args, "--result-file", result_file]


@dataclass(frozen=True)
class SparkJobOutcome:
    """What a submitted job left: its result file's document (None: it wrote none), whether
    its launcher exited 0, and what that launcher was (for messages)."""

    doc: dict[str, Any] | None
    exited_ok: bool
    launcher: str = "spark-submit"


#: The provider's connection type of a Spark Connect endpoint (``SparkConnectHook.conn_type``).
SPARK_CONNECT = "spark_connect"


def submission(job: str, settings: SparkSettings) -> SparkSubmission | ConnectRun:
    """The client that runs ``job`` on the Spark the settings' connection names."""
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(settings.conn_id)
    return ConnectRun(job, settings) if conn.conn_type == SPARK_CONNECT else SparkSubmission(job, settings)


def _read_result(result_file: str) -> dict[str, Any] | None:
    if not os.path.exists(result_file):
        return None
    with open(result_file) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


@contextlib.contextmanager
def job_files(job: str, target: str | None, job_args: list[str], storage_options: Mapping[str, str] | None,
              private_target: bytes | None) -> Iterator[tuple[list[str], str]]:
    """A job's arguments (:func:`application_args`) and its result file's path, in a private
    folder removed afterwards with the 0600 files that hold its secrets (the storage options;
    ``private_target``: the target is this content, in a file of its own)."""
    with (
        tempfile.TemporaryDirectory(prefix=f"memwal-{job}-") as tmp,
        storage_options_file(storage_options or {}, prefix=f"memwal-{job}-options-") as options_file,
    ):
        if private_target is not None:
            target = os.path.join(tmp, "target.json")
            write_private_file(target, private_target)
        result_file = os.path.join(tmp, "result.json")
        yield application_args(target or "", options_file if storage_options else None, result_file,
                               job_args), result_file


class SparkSubmission:
    """One job file submitted, run to its end, and its result file read."""

    def __init__(self, job: str, settings: SparkSettings) -> None:
        self.job = job
        self.application = job_file(job)
        self.settings = settings
        self.conf = {**self.default_conf(), **dict(settings.conf)}
        self._submitting: Any = None

    def default_conf(self) -> dict[str, str]:
        from memwal.spark.engine import jvm_archive

        log4j = os.path.join(os.path.dirname(self.application), "log4j2.properties")
        quiet = f"-Dlog4j2.configurationFile=file:{log4j}"
        return {
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": f"{quiet} {jvm_archive.java_options()}".strip(),
            "spark.executor.extraJavaOptions": quiet,
        }

    def run(self, target: str | None, job_args: list[str], *, storage_options: Mapping[str, str] | None = None,
            private_target: bytes | None = None) -> SparkJobOutcome:
        """Run the job to its end (spark-submit exiting non-zero is an outcome, not an error).
        ``private_target``: the target is this content, in a 0600 file of its own."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        env = dict(self.settings.env)
        if "PYSPARK_DRIVER_PYTHON" not in env and "PYSPARK_DRIVER_PYTHON" not in os.environ:
            env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # client mode: the driver runs on this worker
        with job_files(self.job, target, job_args, storage_options, private_target) as (args, result_file):
            self._submitting = SparkSubmitHook(
                conf=self.conf,
                conn_id=self.settings.conn_id,
                name=f"memwal-{self.job}",
                application_args=args,
                env_vars=env or None,
                **dict(self.settings.submit),
            )
            exited_ok = True
            try:
                self._submitting.submit(self.application)
            except AirflowException:  # spark-submit exited non-zero: the result file says why
                exited_ok = False
            finally:
                self._submitting = None
            doc = _read_result(result_file)
        return SparkJobOutcome(doc, exited_ok)

    def on_kill(self) -> None:
        if self._submitting is not None:
            self._submitting.on_kill()


class ConnectRun:
    """One job file run as a Spark Connect client (``python jobs/<job>.py``, ``SPARK_REMOTE`` the
    connection's URL from the provider's ``SparkConnectHook``), to its end, its result file read.
    ``conf`` and ``submit`` settings are spark-submit's and do not apply: the server has its own."""

    launcher = "Spark Connect"

    def __init__(self, job: str, settings: SparkSettings) -> None:
        self.job = job
        self.application = job_file(job)
        self.settings = settings
        self._child: subprocess.Popen[bytes] | None = None

    def run(self, target: str | None, job_args: list[str], *, storage_options: Mapping[str, str] | None = None,
            private_target: bytes | None = None) -> SparkJobOutcome:
        """As :meth:`SparkSubmission.run`; the job's output goes to the task's log."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        env = {**os.environ, **dict(self.settings.env),
               "SPARK_REMOTE": SparkConnectHook(self.settings.conn_id).get_connection_url()}
        with job_files(self.job, target, job_args, storage_options, private_target) as (args, result_file):
            self._child = subprocess.Popen([sys.executable, self.application, *args], env=env,
                                           cwd=os.path.dirname(result_file))
            try:
                exited_ok = self._child.wait() == 0
            finally:
                self._child = None
            doc = _read_result(result_file)
        return SparkJobOutcome(doc, exited_ok, self.launcher)

    def on_kill(self) -> None:
        """Interrupt the client: its running Spark job ends with it (the server drops its operations)."""
        child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
