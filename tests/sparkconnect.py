"""A Spark Connect server on 127.0.0.1 from the installed pyspark, and the environment of a client
that has no Java.

PySpark 4.3 ships the server (``spark-connect_2.13-4.3.0.jar``); it is started as
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer ... spark-internal``
in local mode, a child process in its own process group (its Python workers with it), stopped
or killed by that group's id. One server serves the whole test session (``connect_server`` in
tests/conftest.py): it takes seconds to start. A test that kills it starts it again on the same
port (:meth:`ConnectServer.restart`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import spark_submit
from tests.sparkcluster import cluster_env, free_port

ROOT = Path(__file__).resolve().parent.parent
LOG4J = ROOT / "jobs" / "log4j2.properties"
START_TIMEOUT = 180.0


@dataclass
class ConnectServer:
    """A running server: its ``url`` (``sc://127.0.0.1:PORT``), its folder (logs), its process."""

    folder: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    #: More ``--conf`` settings (the bench gives the driver the memory a local context gets).
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> ConnectServer:
        env = cluster_env()
        self.starts += 1
        log = open(self.folder / f"server-{self.starts}.log", "wb")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            spark_submit("--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                         "--master", "local[2]",
                         "--conf", f"spark.connect.grpc.binding.port={self.port}",
                         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                         "--conf", "spark.ui.enabled=false",
                         "--conf", "spark.python.daemon.module=memwal.spark.engine.python_daemon",
                         *(a for k, v in self.conf.items() for a in ("--conf", f"{k}={v}")),
                         "spark-internal", java_options=f"-Dlog4j2.configurationFile={LOG4J.as_uri()}"),
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.folder)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the Spark Connect server exited with {self.proc.returncode}: "
                                     f"{self.log_tail()}")
            with socket.socket() as s:
                s.settimeout(1.0)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.5)
        raise AssertionError(f"the Spark Connect server did not listen within {START_TIMEOUT:.0f}s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.folder / f"server-{self.starts}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the server and its Python workers (its process group), as a crash would."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)

    def restart(self) -> None:
        self.kill()
        self.start()

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


def start_connect_server(folder: Path) -> ConnectServer:
    return ConnectServer(folder).start()


def javaless_env(url: str | None = None, **extra: str) -> dict[str, str]:
    """This environment without Java: no ``JAVA_HOME``, no ``PATH`` entry that holds a ``java``
    (a JVM started anyway would fail: PySpark's launcher finds none); ``SPARK_REMOTE=url`` if given."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME", "SPARK_REMOTE",
                                                           "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_SUBMIT_ARGS")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent)] + [
        p for p in env.get("PATH", "").split(os.pathsep) if p and not os.path.exists(os.path.join(p, "java"))])
    if url is not None:
        env["SPARK_REMOTE"] = url
    env["MEMWAL_SPARK_CONNECT_RETRY_SECONDS"] = "5"  # a killed server fails the job soon
    env.update(extra)
    return env
