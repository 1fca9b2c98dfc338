"""The Spark session the engines run on: spark-submit's, or a local one started early.

Under ``spark-submit`` the session exists before our code runs and every engine uses it.
Elsewhere (``memwal merge --engine spark``, the Python API, tests, benchmarks) the engines
start a session themselves, master ``$MEMWAL_SPARK_MASTER`` or ``local[2]``. Its start-up
is the Spark engine's largest fixed cost, so it is cut twice:

* :func:`start_local_session` starts it in a background thread as soon as a job knows it
  will use Spark (``memwal.actions.run`` calls it through :func:`memwal.actions.engines.prepare`
  and :data:`memwal.spark.engine.ENGINES` once the table has opened, so bad input starts no
  JVM), and the JVM boots while the job reads manifests and plans;
* the driver JVM maps its classes from this machine's archive when there is one
  (:mod:`memwal.spark.engine.jvm_archive`).

The first task of a job waits for Python workers too; they import pyspark from the installed
package rather than Spark's zip (:data:`PYTHON_DAEMON`).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

from memwal.spark.engine import jvm_archive
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LOG4J = Path(__file__).resolve().parent.parent / "log4j2.properties"  # jobs/log4j2.properties
#: Python workers that import the installed pyspark, not Spark's zip, when they are the same
#: version (:mod:`memwal.spark.engine.python_daemon`: a job's first task 0.8 s sooner).
PYTHON_DAEMON = "memwal.spark.engine.python_daemon"

_lock = threading.Lock()
_starting: Future | None = None


def local_session(app: str = "memwal-jobs") -> SparkSession:
    """A local-mode session (or ``$MEMWAL_SPARK_MASTER``'s): UI off unless
    ``MEMWAL_SPARK_UI=1``, warnings only in the log, the JVM class archive when built.

    A JVM that does not come up with the archive is retried once without it (and the
    archive removed): the archive is a cache and must never stop a job.
    """
    archive = jvm_archive.java_options()
    try:
        session = build_session(app, archive)
    except Exception as exc:  # pyspark raises PySparkRuntimeError(JAVA_GATEWAY_EXITED)
        if not archive:
            raise
        jvm_archive.discard(f"the JVM did not start with it ({str(exc).splitlines()[0][:200]})")
        session = build_session(app, "")
    atexit.register(_close_gateway, session)
    return session


def _close_gateway(session: SparkSession) -> None:
    """At exit, close the Py4J gateway of a session we started before the JVM sees its stdin
    close: the JVM then stops (its shutdown hooks stop the context and remove Spark's
    temporary folders) in 0.2 s instead of 0.5 s, and a caller that reads our output waits
    for the JVM too, which holds it (issue 23: a whole ``memwal merge --engine spark``)."""
    gateway = getattr(session.sparkContext, "_gateway", None)
    if gateway is not None:
        gateway.shutdown()


def build_session(app: str, java_options: str, *, master: str | None = None) -> SparkSession:
    """The one session configuration, with extra driver JVM options: what the engines run
    on, and what ``memwal.spark.engine.jvm_archive`` dumps and verifies its archive with (so the
    archive is made by the very JVM flags that will use it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log4j = f"-Dlog4j2.configurationFile={LOG4J.as_uri()}"
    return (
        SparkSession.builder.master(master or os.environ.get("MEMWAL_SPARK_MASTER", "local[2]"))
        .appName(app)
        .config("spark.ui.enabled", "true" if os.environ.get("MEMWAL_SPARK_UI") == "1" else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"{log4j} {java_options}".strip())
        .config("spark.executor.extraJavaOptions", log4j)
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("MEMWAL_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.python.daemon.module", PYTHON_DAEMON)
        .getOrCreate()
    )


def start_local_session(app: str = "memwal-jobs") -> None:
    """Start :func:`local_session` in a background thread, unless a session exists or is
    starting. :func:`active_or_local` then waits for it (and raises what it raised)."""
    global _starting
    with _lock:
        if _starting is not None or SparkSession.getActiveSession() is not None:
            return
        _starting = Future()
        starting = _starting

    def boot() -> None:
        try:
            starting.set_result(local_session(app))
        except BaseException as exc:  # handed to whoever waits for the session
            starting.set_exception(exc)

    threading.Thread(target=boot, name="memwal-spark-start", daemon=True).start()


def active_or_local(app: str = "memwal-jobs") -> SparkSession:
    """The active session (spark-submit's), the one :func:`start_local_session` started, or a new local one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    global _starting
    with _lock:
        starting = _starting
    if starting is not None:
        session = starting.result()  # what the start-up raised, if it failed
        if session.sparkContext._jsc is not None:
            return session
        with _lock:  # stopped since: start afresh
            if _starting is starting:
                _starting = None
    return local_session(app)
