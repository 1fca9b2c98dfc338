"""The SparkSession the engines run on: a classic one (spark-submit's, an application's, or a
local one started early), or a Spark Connect client.

Every engine is written against the DataFrame API only (``mapInArrow``, ``repartitionById``,
``toArrow``: :mod:`memwal.spark.engine.frames`), so the same code runs on both kinds.

**Spark Connect** is selected by a remote URL (``sc://host:port/;token=...``): PySpark's own
``SPARK_REMOTE``, which ``memwal --spark-remote URL`` sets for its process, or an application's
own Connect session. Nothing then starts a JVM here: the client needs no Java, and none of the
classic speed-ups below applies (the server is started and configured by whoever runs it).

**Classic.** Under ``spark-submit`` the entry point makes the session before our code runs and
hands it over (:func:`use_session`). Elsewhere (``memwal merge --engine spark``, the Python API,
tests, benchmarks) the engines start a local one themselves, master ``$MEMWAL_SPARK_MASTER`` or
``local[2]``; inside an application that already has a SparkSession (a notebook, a job of the
caller's), that session is used. The start-up is the classic engine's largest fixed cost, so:

* :func:`start_session` starts it in a background thread as soon as a job knows it will use
  Spark (``memwal.actions.run`` calls it through :func:`memwal.actions.engines.prepare` and
  :data:`memwal.spark.engine.ENGINES` once the table has opened, so bad input starts no JVM),
  and the JVM boots while the job reads manifests and plans;
* the driver JVM maps its classes from this machine's archive when there is one
  (:mod:`memwal.spark.engine.jvm_archive`);
* Python workers import pyspark from the installed package rather than Spark's zip
  (:data:`PYTHON_DAEMON`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import threading
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

LOG4J = Path(__file__).resolve().parent.parent / "log4j2.properties"  # jobs/log4j2.properties
#: Python workers that import the installed pyspark, not Spark's zip, when they are the same
#: version (:mod:`memwal.spark.engine.python_daemon`; what it saves: docs/decisions/0012).
PYTHON_DAEMON = "memwal.spark.engine.python_daemon"
#: PySpark's own variable naming a Spark Connect endpoint (``memwal --spark-remote`` sets it).
REMOTE_ENV = "SPARK_REMOTE"
RETRY_ENV = "MEMWAL_SPARK_CONNECT_RETRY_SECONDS"
DEFAULT_CONNECT_RETRY_SECONDS = 120.0

_lock = threading.Lock()
#: The session the engines use: being started, started, or handed over (:func:`use_session`).
_current: Future[SparkSession] | None = None
#: Whether the exit of this process closes the gateway of the JVM it started (:func:`_close_gateway`).
_closes_gateway = False
#: Default parallelism per Connect session id (asked once: :func:`default_parallelism`).
_parallelism: dict[str, int] = {}


def remote_url() -> str | None:
    """The Spark Connect endpoint this process is pointed at (None: classic Spark)."""
    return os.environ.get(REMOTE_ENV) or None


def redacted(url: str) -> str:
    """A Connect URL as it may be shown: scheme, host and port, never its parameters (a token)."""
    if not url.startswith("sc://"):
        return "a Spark Connect endpoint"
    return "sc://" + re.sub(r"[/;?].*$", "", url.removeprefix("sc://"))


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client (no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_session(url: str) -> SparkSession:
    """A Spark Connect session to ``url`` (the process's default one when it is already open),
    retrying an unreachable server for :func:`connect_retry_seconds` in all, then failing with
    one line (:class:`~memwal.spark.engine.tags.SparkConnectionLost`, exit 1) that names the
    server by :func:`redacted` alone. PySpark's own builder: it also marks the process as a
    Connect client, which its functions and column helpers dispatch on (a process is one or the
    other).

    The builder makes no call: the first one was the first Spark job, which PySpark runs as
    several calls (a configuration read, the plan, a release of the plan, a clean-up at exit),
    each retried for the whole budget on its own: 217 s to the error and 435 s to the exit on
    the 120 s default (issue 83). So the session is proven here, by one cheap call under
    :class:`~memwal.spark.engine.connect_retries.BoundedRetries`, before any job uses it: a
    server that does not answer fails the job at the budget, and the client is closed so that
    nothing calls it again at exit.
    """
    from pyspark.sql import SparkSession

    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)  # our line says it
    spark = SparkSession.builder.remote(url).getOrCreate()  # the server names the application
    bound_retries(spark, connect_retry_seconds())
    try:
        spark.version  # noqa: B018 - one small call: does the server answer?
    except Exception as exc:
        from memwal.spark.engine.tags import SparkConnectionLost

        abandon(spark)
        raise SparkConnectionLost(f"Spark Connect at {redacted(url)}: unreachable ({grpc_reason(exc)})") from None
    return spark


def connect_retry_seconds() -> float:
    """How long a job retries a Spark Connect server it cannot reach before it fails:
    ``$MEMWAL_SPARK_CONNECT_RETRY_SECONDS``, default 120 (PySpark's own policy waits at least
    10 minutes, a job holding its leases all the while)."""
    try:
        return max(0.0, float(os.environ.get(RETRY_ENV, DEFAULT_CONNECT_RETRY_SECONDS)))
    except ValueError:
        return DEFAULT_CONNECT_RETRY_SECONDS


def bound_retries(spark: SparkSession, seconds: float) -> None:
    """Retry what ``spark``'s client calls for ``seconds`` at most
    (:class:`memwal.spark.engine.connect_retries.BoundedRetries`); 0: each call makes one attempt."""
    from memwal.spark.engine.connect_retries import BoundedRetries

    spark.client.set_retry_policies([BoundedRetries(seconds)])


def abandon(spark: SparkSession) -> None:
    """Close a Connect client whose server does not answer, with one attempt at each call it
    makes on the way (the session's release), and forget it as the process's session: a
    later job starts a new one, and PySpark's clean-up at exit skips a closed client."""
    bound_retries(spark, 0)
    with contextlib.suppress(Exception):
        spark.stop()


_DETAILS = re.compile(r'details = "([^"\n]*)"')
_SECRET = re.compile(r"(token|password|secret)=[^;&/\s\"]*", re.IGNORECASE)


def grpc_reason(exc: BaseException) -> str:
    """What a failed Connect call says, in one line: gRPC's ``details`` (``failed to connect to
    all addresses; ... Connection refused``) rather than the ``<_InactiveRpcError ...>`` its
    message begins with; a ``token=`` (or password) in it never shown."""
    text = str(exc)
    found = _DETAILS.search(text)
    line = found.group(1) if found else next((x.strip() for x in text.splitlines() if x.strip()), type(exc).__name__)
    return _SECRET.sub(lambda m: f"{m.group(1)}=...", line)[:300]


def local_context(app: str = "memwal-jobs") -> SparkContext:
    """A local-mode context (or ``$MEMWAL_SPARK_MASTER``'s): UI off unless
    ``MEMWAL_SPARK_UI=1``, warnings only in the log, the JVM class archive when built.

    A JVM that does not come up with the archive is retried once without it (and the
    archive removed): the archive is a cache and must never stop a job. It makes a new
    context (one already running is an error): callers go through :func:`active_or_local`,
    which reuses the session of the process.
    """
    from memwal.spark.engine import jvm_archive

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


def local_session(app: str = "memwal-jobs") -> SparkSession:
    """A classic session over :func:`local_context`."""
    from pyspark.sql import SparkSession

    return SparkSession(local_context(app))


def _close_gateway() -> None:
    """At exit, close the Py4J gateway of the JVM we started before the JVM sees its stdin
    close: the JVM then stops sooner (its shutdown hooks stop the context and remove Spark's
    temporary folders), and a caller that reads our output waits for the JVM too, which
    holds it (docs/decisions/0012-spark-start-up.md)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()


def spark_conf(app: str, java_options: str, *, master: str | None = None) -> SparkConf:
    """The one configuration of our local contexts, with extra driver JVM options."""
    from pyspark import SparkConf

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
    from pyspark import SparkContext

    return SparkContext(conf=spark_conf(app, java_options, master=master))


def use_session(spark: SparkSession) -> None:
    """Make ``spark`` the session every engine of this process uses (spark-submit's, made by
    the entry point)."""
    global _current
    done: Future[SparkSession] = Future()
    done.set_result(spark)
    with _lock:
        _current = done


def _existing() -> SparkSession | None:
    """An application's own session: its active one (this thread's), else the default one."""
    if remote_url() is not None or "SPARK_CONNECT_MODE_ENABLED" in os.environ:
        from pyspark.sql.connect.session import SparkSession as RemoteSession

        remote = RemoteSession.getActiveSession() or RemoteSession._get_default_session()
        return cast("SparkSession | None", remote)  # the same API: pyspark types them apart
    from pyspark.sql import SparkSession

    # None at once when no context runs: no JVM call
    return SparkSession.getActiveSession() or SparkSession._instantiatedSession


def start_session(app: str = "memwal-jobs") -> None:
    """Start the session in a background thread, unless one is there or starting: the
    application's own, else a Connect client when a remote is set (:func:`remote_url`), else
    :func:`local_session`. :func:`active_or_local` then waits for it (and raises what it raised)."""
    global _current
    with _lock:
        if _current is not None and not _stopped(_current):
            return
        starting: Future[SparkSession] = Future()
        _current = starting

    def boot() -> None:
        try:
            url = remote_url()
            existing = _existing()
            if existing is not None and not _ended(existing):
                starting.set_result(existing)
            elif url is not None:
                starting.set_result(connect_session(url))
            else:
                starting.set_result(local_session(app))
        except BaseException as exc:  # handed to whoever waits for the session
            starting.set_exception(exc)

    threading.Thread(target=boot, name="memwal-spark-start", daemon=True).start()


def _ended(spark: SparkSession) -> bool:
    """Whether ``spark`` was stopped (a Connect client closed, a classic context stopped)."""
    if is_connect(spark):
        return bool(getattr(spark, "is_stopped", False))
    return spark.sparkContext._jsc is None


def _stopped(current: Future[SparkSession]) -> bool:
    """Whether ``current`` holds a session stopped since (a failed start is not stopped:
    whoever waits gets its error)."""
    if not current.done() or current.exception() is not None:
        return False
    return _ended(current.result())


def active_or_local(app: str = "memwal-jobs") -> SparkSession:
    """The session of this process (spark-submit's, an application's, a Connect client, or the
    one :func:`start_session` started), waited for; a new one if none or stopped."""
    start_session(app)
    with _lock:
        current = _current
    assert current is not None
    return current.result()  # what the start-up raised, if it failed


def default_parallelism(spark: SparkSession) -> int:
    """The cores the session's tasks get by default: the context's on classic; on Connect,
    how many partitions a plain range gets (asked once per session, a tiny job)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    key = str(getattr(spark, "session_id", id(spark)))
    if key not in _parallelism:
        row = spark.range(0, 1 << 16).selectExpr("spark_partition_id() AS p").selectExpr("max(p)").first()
        _parallelism[key] = max(1, int(row[0] if row is not None and row[0] is not None else 0) + 1)
    return _parallelism[key]
