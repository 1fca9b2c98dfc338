"""A Spark job's tag: stopping it on an operator's cancel, and its failure said in one line.

Every engine runs its Spark jobs inside :func:`stoppable_job`: the jobs carry a tag, which is
interrupted when an operator's cancel reaches the running job (:func:`memwal.lease.cancel.stoppable`:
the job's lease is watched while the Spark jobs run). Over Spark Connect the tag is the
session's operation tag (``addTag``, ``interruptTag``); on a classic session it is the
context's job tag (``addJobTag``, ``cancelJobsWithTag``): PySpark 4.3's classic ``addTag`` does
not reach the jobs of ``toArrow``, which run in a thread of their own (observed: its
``interruptTag`` found no job).

What the block raises comes out as one line naming what happened, never Py4J's or gRPC's text:
:class:`SparkJobStopped` after a cancel, :class:`SparkConnectionLost` when the Connect server
could not be reached, our own error raised in a task with its class (so the exit code holds),
else the Python error a task raised.

A failed job's other tasks are stopped asynchronously: a task's Python worker may run a few
seconds more (its monitor's poll and ``spark.python.task.killTimeout``). On a classic session
the block waits for them (:func:`settle`, through the job group its jobs also run in); Spark
Connect shows the client no task, so what a late task writes must fence itself (the merge's
closed staging folder, :mod:`memwal.tasks.merge_tasks`).
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from memwal.spark.engine.session import is_connect, redacted, remote_url

from memwal.errors import MemWalError, first_line
from memwal.lease import cancel

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Spark's local property naming the job group of the jobs a thread starts (classic only).
JOB_GROUP = "spark.jobGroup.id"
#: How long a failed job's cleanup waits for its other tasks to end (classic only).
SETTLE_SECONDS = 60.0


class SparkJobStopped(MemWalError):
    """The Spark job was interrupted because an operator cancelled the run."""


class SparkConnectionLost(MemWalError):
    """The Spark Connect server could not be reached (or lost the session) mid-job."""


@contextmanager
def stoppable_job(spark: SparkSession, name: str) -> Iterator[str]:
    """The Spark jobs this thread starts inside carry the tag ``name`` (yielded), interrupted
    when an operator's cancel reaches the job that runs them; a failure propagates, in one
    line (module docstring), once a classic session's tasks of the tag have ended."""
    stopped = threading.Event()
    connect = is_connect(spark)

    def stop() -> None:
        stopped.set()
        if connect:
            spark.interruptTag(name)
        else:
            spark.sparkContext.cancelJobsWithTag(name)

    if connect:
        spark.addTag(name)
    else:
        spark.sparkContext.addJobTag(name)
    try:
        with _job_group(spark, name) as group, cancel.stoppable(stop):
            try:
                yield name
            except Exception as exc:
                if group is not None:
                    settle(spark.sparkContext, group)
                if stopped.is_set():
                    raise SparkJobStopped(f"the Spark job {name} was interrupted") from None
                raise spark_error(exc) from None
            except KeyboardInterrupt:  # the process is asked to stop (Airflow's on_kill): so is its Spark job
                stop()
                raise
    finally:
        if connect:
            spark.removeTag(name)
        else:
            spark.sparkContext.removeJobTag(name)


@contextmanager
def _job_group(spark: SparkSession, name: str) -> Iterator[str | None]:
    """On a classic session, the jobs also run in a job group (the caller's own when it set
    one), which :func:`settle` finds their tasks by; None over Connect."""
    if is_connect(spark):
        yield None
        return
    sc = spark.sparkContext
    previous = sc.getLocalProperty(JOB_GROUP)
    sc.setLocalProperty(JOB_GROUP, previous or name)
    try:
        yield previous or name
    finally:
        sc.setLocalProperty(JOB_GROUP, previous)  # type: ignore[arg-type]  # None (Java's null) unsets it


def settle(sc: SparkContext, group: str) -> None:
    """Wait, at most :data:`SETTLE_SECONDS`, until no task of ``group``'s jobs still runs."""
    tracker = sc.statusTracker()
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        stages = [s for j in tracker.getJobIdsForGroup(group) if (info := tracker.getJobInfo(j)) is not None
                  for s in info.stageIds]
        if not any((stage := tracker.getStageInfo(s)) is not None and stage.numActiveTasks > 0 for s in stages):
            return
        time.sleep(0.1)
    log.warning("spark job group %s: tasks still running after %.0f s; what they write is left to gc --orphans",
                group, SETTLE_SECONDS)


_PY_ERROR = re.compile(r"^(memwal(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
#: The last line of a Python traceback a task's error carries: ``module.Class: message``.
_LAST_PY_LINE = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)): (.+)$", re.MULTILINE)


def executor_error(exc: BaseException) -> MemWalError | None:
    """Our own error raised on an executor, rebuilt on the driver with its class (so the exit
    code holds) and its one-line message; None when the failure is not ours."""
    found = _PY_ERROR.findall(str(exc))
    if not found:
        return None
    module, name, message = found[-1]
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        cls = MemWalError
    if not (isinstance(cls, type) and issubclass(cls, MemWalError)):
        cls = MemWalError
    return cls(message.strip())


def spark_error(exc: Exception) -> Exception:
    """What a failed Spark job raises, as one line (module docstring); ``exc`` itself when it
    is no Spark failure."""
    if isinstance(exc, MemWalError):
        return exc
    ours = executor_error(exc)
    if ours is not None:
        return ours
    kind = type(exc).__module__
    if kind.startswith("pyspark.errors.exceptions.connect") and _connection_lost(exc):
        return SparkConnectionLost(f"Spark Connect at {redacted(remote_url() or '')}: "
                                   f"connection lost ({first_line(exc)[:300]})")
    if not (kind.startswith("pyspark") or kind.startswith("py4j")):
        return exc
    found = _LAST_PY_LINE.findall(str(exc))
    if found:
        cls, message = found[-1]
        line = f"a Spark task failed: {cls.rsplit('.', 1)[-1]}: {message.strip()}"
        return MemWalError(first_line(MemWalError(line))[:600])
    return MemWalError(first_line(MemWalError(f"the Spark job failed: {_spark_line(exc)}"))[:600])


def _connection_lost(exc: Exception) -> bool:
    """Whether a Connect error says the server is gone or no longer knows the session."""
    text = str(exc)
    return any(s in text for s in ("UNAVAILABLE", "SESSION_NOT_FOUND", "SESSION_CLOSED", "Connection refused",
                                   "failed to connect", "Socket closed", "RST_STREAM", "OPERATION_NOT_FOUND"))


def _spark_line(exc: Exception) -> str:
    """The first meaningful line of a Spark error: Py4J's "An error occurred while calling
    ..." wrapper skipped for the Java exception's own message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("An error occurred while calling")] or ["unexpected failure"]
    return lines[0].removeprefix(": ")[:500]
