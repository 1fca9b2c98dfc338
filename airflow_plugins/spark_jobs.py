"""The hook that runs one memwal job file through spark-submit and reads its outcome.

It wraps the Spark provider's ``SparkSubmitHook`` as it is (master, queue and deploy mode
come from a ``spark`` connection) and adds what a memwal job needs around it:

- the job file ``jobs/<job>.py`` of the installed package (``memwal.spark``);
- quiet Spark logs (the project's log4j2 config), no UI and, for a driver on this worker,
  this machine's JVM class archive (``memwal.spark.engine.jvm_archive``), unless the
  caller's ``conf`` says otherwise;
- the storage options only as the path of a 0600 file (``--storage-options-file``),
  because spark-submit, its JVM and the Python driver show their command lines to every
  local user (``ps``, ``/proc/<pid>/cmdline``); the file is removed when the job ends;
- the outcome read from the job's ``--result-file``: the JSON result document, or
  ``{"failure": {"error", "exit_code"}}``; never from the log text.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from memwal.core.secrets import storage_options_file


def job_file(job: str) -> str:
    """Path of ``jobs/<job>.py`` in the installed package (located without importing it)."""
    spec = importlib.util.find_spec("memwal.spark")
    if spec is None or not spec.submodule_search_locations:
        raise AirflowFailException("memwal-jobs (its memwal.spark package) is not installed on this worker")
    path = os.path.join(list(spec.submodule_search_locations)[0], f"{job}.py")
    if not os.path.isfile(path):
        raise AirflowFailException(f"no spark-submit entry point for {job}: {path} is missing")
    return path


def application_args(uri: str, options_file: str | None, result_file: str, job_args: list[str]) -> list[str]:
    """The arguments of the job file: the table, the job's flags, the storage options' file
    (never the options themselves) and the result file."""
    args = [uri, *job_args]
    if options_file:
        args += ["--storage-options-file", options_file]
    return [*args, "--result-file", result_file]


@dataclass
class SparkJobOutcome:
    """What a submitted job left: its result file's document (None: it wrote none) and
    whether spark-submit exited 0."""

    doc: dict[str, Any] | None
    exited_ok: bool


class MemWalSparkSubmitHook(BaseHook):
    """Submit ``jobs/<job>.py`` for one table and return its outcome (see the module docstring).

    :param job: ``merge``, ``catchup``, ``compact``, ``snapshot``, ``gc`` or ``maintenance``.
    :param spark_conn_id: the ``spark`` connection (master, deploy mode, queue).
    :param conf: ``--conf`` settings, over the quiet defaults (:meth:`default_conf`).
    :param env: environment of spark-submit (``PYSPARK_DRIVER_PYTHON`` defaults to this
        worker's interpreter, which has memwal-jobs installed).
    :param submit_kwargs: any other ``SparkSubmitHook`` argument.
    """

    def __init__(self, job: str, *, spark_conn_id: str = "spark_default", conf: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None, submit_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.job = job
        self.application = job_file(job)
        self.spark_conn_id = spark_conn_id
        self.conf = {**self.default_conf(), **(conf or {})}
        self.env = dict(env or {})
        self.submit_kwargs = dict(submit_kwargs or {})
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

    def submit_job(self, uri: str, storage_options: dict[str, str], job_args: list[str]) -> SparkJobOutcome:
        """Run the job to its end (spark-submit exiting non-zero is an outcome, not an error)."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        env = dict(self.env)
        if "PYSPARK_DRIVER_PYTHON" not in env and "PYSPARK_DRIVER_PYTHON" not in os.environ:
            env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # client mode: the driver runs on this worker
        with (
            tempfile.TemporaryDirectory(prefix=f"memwal-{self.job}-") as tmp,
            storage_options_file(storage_options, prefix=f"memwal-{self.job}-options-") as options_file,
        ):
            result_file = os.path.join(tmp, "result.json")
            self._submitting = SparkSubmitHook(
                conf=self.conf,
                conn_id=self.spark_conn_id,
                name=f"memwal-{self.job}",
                application_args=application_args(uri, options_file if storage_options else None, result_file,
                                                  job_args),
                env_vars=env or None,
                **self.submit_kwargs,
            )
            exited_ok = True
            try:
                self._submitting.submit(self.application)
            except AirflowException:  # spark-submit exited non-zero: the result file says why
                exited_ok = False
            finally:
                self._submitting = None
            doc = None
            if os.path.exists(result_file):
                with open(result_file) as f:
                    doc = json.load(f)
        return SparkJobOutcome(doc, exited_ok)

    def on_kill(self) -> None:
        if self._submitting is not None:
            self._submitting.on_kill()
