"""A class-data-sharing archive (AppCDS) for the driver JVM: Spark starts in half the time.

Most of a local Spark start is the driver JVM loading and verifying some 15,000 classes. The
JVM can map them from an archive made by an earlier run of the same JVM with the same class
path (``-XX:SharedArchiveFile``, JDK 13+), and the driver of a maintenance job is short-lived
and only schedules, so it runs with the C1 compiler only (``-XX:TieredStopAtLevel=1``). The
start-up halves (figures and how to reproduce them: docs/decisions/0012-spark-start-up.md).

The archive is a cache, never required: :func:`java_options` returns nothing when there is
none for this JVM, Spark and class path (they are part of its name), and a JVM that finds
an archive it cannot use (class path changed) ignores it. A *truncated* archive crashes the
JVM, so one is only ever published by renaming a file that a verification run already used
with ``-Xshare:on``; :func:`memwal.spark.engine.session.local_context` still falls back to no
archive (and removes it) if the JVM does not come up with it.

Build it once per machine, after installing (``make install`` does; a cluster's edge node
or Airflow worker runs it once)::

    python -m memwal.spark.engine.jvm_archive          # build if missing; prints its path
    python -m memwal.spark.engine.jvm_archive --java-options   # the options to pass, or nothing

It lives in ``$MEMWAL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/memwal``, ``~/.cache/memwal``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: Only C1: a maintenance driver runs seconds to minutes and its JVM side only schedules.
C1_ONLY = "-XX:TieredStopAtLevel=1"
#: A JVM that cannot use the archive (class path changed) says so on stdout; keep it quiet.
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"
#: What the dump run exercises (:func:`_context_run`), part of the archive's name: an archive of an
#: older workload (RDD jobs only, without Spark SQL's classes) is rebuilt, not kept, since the
#: session's start pays for every class the archive lacks (figures: docs/benchmarks/spark.md, "Spark
#: Connect, classic Spark and the local engine").
WORKLOAD = "dataframes-1"
#: Seconds the dump run may take (start a context, run a small shuffle job, write the archive).
BUILD_TIMEOUT = 300


def cache_dir() -> Path:
    """Where archives are kept (created on demand)."""
    explicit = os.environ.get("MEMWAL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memwal"


def _java_binary() -> str | None:
    """The java that spark-submit will run (``$JAVA_HOME/bin/java``, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def _spark_home() -> str | None:
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError:
        return None
    with contextlib.suppress(Exception):
        return os.path.realpath(_find_spark_home())
    return None


def archive_path() -> Path | None:
    """The archive for this JVM binary, pyspark version, Spark installation and class path
    settings (None: no Java or no Spark here). The name changes with any of them, so an
    archive that cannot match is not even offered to the JVM."""
    java, spark_home = _java_binary(), _spark_home()
    if java is None or spark_home is None:
        return None
    st = os.stat(java)
    jars = os.path.join(spark_home, "jars")
    listing = sorted(os.listdir(jars)) if os.path.isdir(jars) else []
    # The class path also holds the configuration directory and any extra class path.
    env = [os.environ.get(k, "") for k in ("SPARK_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")]
    key = "\0".join([java, str(st.st_size), str(st.st_mtime_ns), spark_home, *env, *listing, WORKLOAD])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / f"spark-{_home_tag(spark_home)}-{metadata.version('pyspark')}-{digest}.jsa"


def _home_tag(spark_home: str) -> str:
    """A short name for a Spark installation: archives of other installations (other
    virtualenvs on the machine) are left alone when this one's is rebuilt."""
    return hashlib.sha256(spark_home.encode()).hexdigest()[:8]


def java_options() -> str:
    """Driver JVM options that use this machine's archive, or "" when there is none."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    # A JVM that crashes on a damaged archive writes its report beside it, not into the cwd.
    archive = shlex.quote(f"-XX:SharedArchiveFile={path}")
    errors = shlex.quote(f"-XX:ErrorFile={path.parent}/hs_err_pid%p.log")
    return f"{archive} {QUIET_CDS} {C1_ONLY} {errors}"


def discard(reason: str) -> None:
    """Remove this machine's archive (the JVM did not start with it)."""
    path = archive_path()
    if path is not None and path.exists():
        log.warning("removing the JVM class archive %s: %s", path, reason)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def build(*, force: bool = False) -> Path | None:
    """Make the archive if it is missing (or ``force``); returns its path, None without Java/Spark.

    A child process starts a context that dumps the classes it loaded when its JVM exits;
    once that JVM is gone, a second child starts a context with the new file and
    ``-Xshare:on`` (which fails unless the archive is whole and matches), and only then is
    the file renamed into place. Concurrent builds each use their own temporary file.
    """
    path = archive_path()
    if path is None:
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        out = _child("--dump", str(tmp)).split()
        if not out or not out[-1].isdigit():
            raise RuntimeError("the dump run did not report its JVM")
        jvm_pid = int(out[-1])
        _wait_gone(jvm_pid, BUILD_TIMEOUT)
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise RuntimeError("the JVM wrote no archive")
        _child("--verify", str(tmp))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    home_tag = path.name.split("-")[1]
    for old in path.parent.glob(f"spark-{home_tag}-*.jsa"):  # this installation's stale archives
        if old != path:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()
    return path


def _child(mode: str, archive: str) -> str:
    """Run this module in a child process in ``mode``; its stdout (RuntimeError if it failed)."""
    proc = subprocess.run([sys.executable, "-m", "memwal.spark.engine.jvm_archive", mode, archive],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{mode[2:]} run failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def _wait_gone(pid: int, timeout: float) -> None:
    """Wait until process ``pid`` has exited (the JVM writes the archive as it exits)."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the JVM (pid {pid}) did not exit within {timeout:.0f} s")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Whether a process exists (an exited JVM is reparented and reaped by init)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tag_sizes(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The archive's shuffle job's second stage: the bytes a partition received."""
    import pyarrow as pa

    total = sum(len(b) for batch in batches for b in batch.column(1).to_pylist())
    yield pa.RecordBatch.from_pydict({"part": pa.array([total], pa.int32()), "blob": [b""]})


def _context_run(java_opts: str) -> int:
    """In a child: a local session with ``java_opts`` runs small DataFrame jobs shaped like the
    merge engine's (``mapInArrow``, ``repartitionById``, ``toArrow``: so Spark SQL's classes are
    loaded too); returns the JVM's pid."""
    import pyarrow as pa
    from memwal.spark.engine.frames import run_tasks, task_frame, task_ids
    from memwal.spark.engine.session import build_context
    from pyspark.sql import SparkSession

    sc = build_context("memwal-jvm-archive", java_opts, master="local[2]")
    spark = SparkSession(sc)

    def tag(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in task_ids(batches):
            yield pa.RecordBatch.from_pydict({"part": pa.array([i % 4, (i + 1) % 4], pa.int32()),
                                              "blob": [bytes(64), bytes(64)]})

    out = (task_frame(spark, 8).mapInArrow(tag, "part int, blob binary").repartitionById(4, "part")
           .mapInArrow(tag_sizes, "part int, blob binary").toArrow())
    assert sum(out.column("part").to_pylist()) == 16 * 64
    assert run_tasks(spark, [1, 2], lambda i: [i]) == [1, 2]
    jvm = sc._jvm
    assert jvm is not None, "a started context has its JVM gateway"
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    sc.stop()
    return pid


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memwal.spark.engine.jvm_archive", description=__doc__.splitlines()[0])
    p.add_argument("--java-options", action="store_true", help="print the driver JVM options to use (or nothing)")
    p.add_argument("--force", action="store_true", help="rebuild even if an archive exists")
    p.add_argument("--dump", metavar="FILE", help=argparse.SUPPRESS)
    p.add_argument("--verify", metavar="FILE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dump:
        print(_context_run(f"-XX:ArchiveClassesAtExit={args.dump} {QUIET_CDS}"))
        return 0
    if args.verify:
        print(_context_run(f"-Xshare:on -XX:SharedArchiveFile={args.verify} {QUIET_CDS}"))
        return 0
    if args.java_options:
        print(java_options())
        return 0
    started = time.perf_counter()
    try:
        path = build(force=args.force)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"memwal: JVM class archive not built (Spark starts without it): {exc}", file=sys.stderr)
        return 1
    if path is None:
        print("memwal: no java or no pyspark here: no JVM class archive", file=sys.stderr)
        return 1
    print(f"JVM class archive: {path} ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
