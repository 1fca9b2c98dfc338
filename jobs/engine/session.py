"""The SparkContext the engines run on: spark-submit's, or a local one started early.

The engines need a SparkContext and nothing more: every stage is Python over Arrow bytes in
RDD tasks, and every commit is the driver's. A SparkSession on top adds Spark SQL's set-up,
which no engine uses (its cost: docs/decisions/0012-spark-start-up.md).

Under ``spark-submit`` the entry point makes the context before our code runs and hands it
over (:func:`use_context`). Elsewhere (``memwal merge --engine spark``, the Python API,
tests, benchmarks) the engines start a local one themselves, master
``$MEMWAL_SPARK_MASTER`` or ``local[2]``; inside an application that already has a
SparkSession (a notebook, a job of the caller's), that session's context is used. The
start-up is the Spark engine's largest fixed cost, so it is cut three times:

* :func:`start_local_context` starts it in a background thread as soon as a job knows it
  will use Spark (``memwal.actions.run`` calls it through :func:`memwal.actions.engines.prepare`
  and :data:`memwal.spark.engine.ENGINES` once the table has opened, so bad input starts no
  JVM), and the JVM boots while the job reads manifests and plans;
* no SparkSession (above);
* the driver JVM maps its classes from this machine's archive when there is one
  (:mod:`memwal.spark.engine.jvm_archive`).

The first task of a job waits for Python workers too; they import pyspark from the installed
package rather than Spark's zip (:data:`PYTHON_DAEMON`).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

from memwal.spark.engine import jvm_archive
from pyspark import SparkConf, SparkContext

LOG4J = Path(__file__).resolve().parent.parent / "log4j2.properties"  # jobs/log4j2.properties
#: Python workers that import the installed pyspark, not Spark's zip, when they are the same
#: version (:mod:`memwal.spark.engine.python_daemon`; what it saves: docs/decisions/0012).
PYTHON_DAEMON = "memwal.spark.engine.python_daemon"

_lock = threading.Lock()
#: The context the engines use: being started, started, or handed over (:func:`use_context`).
_current: Future[SparkContext] | None = None
#: Whether the exit of this process closes the gateway of the JVM it started (:func:`_close_gateway`).
_closes_gateway = False


def local_context(app: str = "memwal-jobs") -> SparkContext:
    """A local-mode context (or ``$MEMWAL_SPARK_MASTER``'s): UI off unless
    ``MEMWAL_SPARK_UI=1``, warnings only in the log, the JVM class archive when built.

    A JVM that does not come up with the archive is retried once without it (and the
    archive removed): the archive is a cache and must never stop a job. It makes a new
    context (one already running is an error): callers go through :func:`active_or_local`,
    which reuses the context of the process.
    """
    archive = jvm_archive.java_options()
    try:
        sc = build_context(app, archive)
    except Exception as exc:  # pyspark raises PySparkRuntimeError(JAVA_GATEWAY_EXITED)
        if not archive:
            raise
        jvm_archive.discard(f"the JVM did not start with it ({str(exc).splitlines()[0][:200]})")
        sc = build_context(app, "")
    global _closes_gateway
    with _lock:
        if not _closes_gateway:  # once: a context started again after a stop shares the JVM
            atexit.register(_close_gateway)
            _closes_gateway = True
    return sc


def _close_gateway() -> None:
    """At exit, close the Py4J gateway of the JVM we started before the JVM sees its stdin
    close: the JVM then stops sooner (its shutdown hooks stop the context and remove Spark's
    temporary folders), and a caller that reads our output waits for the JVM too, which
    holds it (docs/decisions/0012-spark-start-up.md)."""
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()


def spark_conf(app: str, java_options: str, *, master: str | None = None) -> SparkConf:
    """The one configuration of our local contexts, with extra driver JVM options."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log4j = f"-Dlog4j2.configurationFile={LOG4J.as_uri()}"
    return (
        SparkConf()
        .setMaster(master or os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"))
        .setAppName(app)
        .set("spark.ui.enabled", "true" if os.environ.get("MEMWAL_SPARK_UI") == "1" else "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.extraJavaOptions", f"{log4j} {java_options}".strip())
        .set("spark.executor.extraJavaOptions", log4j)
        .set("spark.driver.memory", os.environ.get("MEMWAL_SPARK_DRIVER_MEMORY", "2g"))
        .set("spark.python.daemon.module", PYTHON_DAEMON)
    )


def build_context(app: str, java_options: str, *, master: str | None = None) -> SparkContext:
    """A context of :func:`spark_conf`: what the engines run on, and what
    ``memwal.spark.engine.jvm_archive`` dumps and verifies its archive with (so the archive is
    made by the very JVM flags that will use it)."""
    return SparkContext(conf=spark_conf(app, java_options, master=master))


def use_context(sc: SparkContext) -> None:
    """Make ``sc`` the context every engine of this process uses (spark-submit's, made by
    the entry point)."""
    global _current
    done: Future[SparkContext] = Future()
    done.set_result(sc)
    with _lock:
        _current = done


def start_local_context(app: str = "memwal-jobs") -> None:
    """Start :func:`local_context` in a background thread, unless a context is there or
    starting; an application's own SparkSession lends its context instead.
    :func:`active_or_local` then waits for it (and raises what it raised)."""
    global _current
    with _lock:
        if _current is not None and not _stopped(_current):
            return
        starting: Future[SparkContext] = Future()
        _current = starting

    def boot() -> None:
        try:
            from pyspark.sql import SparkSession  # None at once when no context runs: no JVM call

            session = SparkSession.getActiveSession()
            starting.set_result(session.sparkContext if session is not None else local_context(app))
        except BaseException as exc:  # handed to whoever waits for the context
            starting.set_exception(exc)

    threading.Thread(target=boot, name="memwal-spark-start", daemon=True).start()


def _stopped(current: Future[SparkContext]) -> bool:
    """Whether ``current`` holds a context stopped since (a failed start is not stopped:
    whoever waits gets its error)."""
    if not current.done() or current.exception() is not None:
        return False
    return current.result()._jsc is None


def active_or_local(app: str = "memwal-jobs") -> SparkContext:
    """The context of this process (spark-submit's, an application's session's, or the one
    :func:`start_local_context` started), waited for; a new local one if none or stopped."""
    start_local_context(app)
    with _lock:
        current = _current
    assert current is not None
    return current.result()  # what the start-up raised, if it failed
