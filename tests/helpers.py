"""Test tools shared by every suite: tree digests and an in-process CLI runner.

Every hostile input asserts three things: the exit code, a one-line message naming the
object, and (on exit 2) that the table tree is byte-for-byte unchanged. The digest never
follows a symlink: it records the link's target text instead, so a test can also prove
that nothing *outside* the table changed when a link inside it points there.

The CLI runs in-process (``memwal.cli.main``): starting a Python with pylance for every
command costs seconds, and the code path is the same. A few end-to-end tests in
``tests/integration/test_cli.py`` still start the real ``memwal`` program.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The repository's root (this file is tests/helpers.py).
ROOT = Path(__file__).resolve().parents[1]


def tree_digest(root: str) -> dict[str, str]:
    """sha256 of every file under ``root`` (links recorded by target, never followed)."""
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link->" + os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISDIR(st.st_mode):
                out[rel + "/"] = "dir"
    return out


@dataclass
class CliRun:
    rc: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        """The lines of stderr that are our error contract (``memwal: error: ...``)."""
        return [line for line in self.stderr.splitlines() if line.startswith("memwal: error:")]


def run_cli(*argv: str) -> CliRun:
    """``memwal ARGV`` in-process: exit code, stdout, stderr (argparse exits are caught)."""
    from memwal.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse usage errors
            rc = exc.code if isinstance(exc.code, int) else 1
    return CliRun(rc, out.getvalue(), err.getvalue())


def assert_one_line_error(run: CliRun, rc: int, *needles: str) -> None:
    """Exit code ``rc``, exactly one ``memwal: error:`` line, no traceback, naming ``needles``."""
    assert run.rc == rc, (run.rc, run.stdout, run.stderr)
    assert len(run.error_lines) == 1, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    line = run.error_lines[0]
    for needle in needles:
        assert needle in line, (needle, line)


LEASES = "_mem_wal/_jobs/leases/"
HISTORY = "_mem_wal/_jobs/history/"


def assert_only_run_records(before: dict[str, str], after: dict[str, str], *jobs: str,
                            also: tuple[str, ...] = ()) -> None:
    """Two :func:`tree_digest` s differ by the runs of ``jobs`` and nothing else: exactly one
    new history record per run (``memwal history``) and lease objects taken and released
    (and the keys ``also``, e.g. GC's run marker). A job run through the API or the CLI
    writes those even when it commits nothing."""
    added = set(after) - set(before)
    assert not set(before) - set(after), sorted(set(before) - set(after))
    records = sorted(k for k in added if k.startswith(HISTORY) and not k.endswith("/"))
    assert sorted(k.rsplit("/", 1)[-1].split("-")[1] for k in records) == sorted(jobs), records
    folders = {k for k in added if k.startswith(HISTORY) and k.endswith("/")}  # a record's month folder
    others = added - set(records) - folders - {"_mem_wal/_jobs/", HISTORY, LEASES}
    changed = {k for k in set(before) & set(after) if before[k] != after[k]}
    unexpected = sorted(k for k in others | changed if not k.startswith(LEASES) and k not in also)
    assert not unexpected, unexpected


def spark_submit(*args: str, submit: str | None = None, java_options: str = "") -> list[str]:
    """``spark-submit ARGS`` as the Spark guide tells a user to run it on a machine with the driver
    JVM's class archive (docs/operations/spark.md: the options ``python -m
    memwal.spark.engine.jvm_archive --java-options`` prints, as ``make demo`` passes them; none when
    there is no archive). Without them each test's driver JVM loaded Spark's classes and compiled
    with both JIT tiers: 21 s of CPU for a small job's spark-submit, against 8-10 s with them.
    ``submit``: another installation's spark-submit (default: this venv's); ``java_options``: the
    caller's own driver JVM options, ahead of the archive's (spark-submit takes one
    ``--driver-java-options``). One test runs the guide's plain command
    (tests/integration/test_spark_merge.py)."""
    from memwal.spark.engine import jvm_archive

    java = f"{java_options} {jvm_archive.java_options()}".strip()
    return [submit or str(Path(sys.executable).parent / "spark-submit"),
            *(["--driver-java-options", java] if java else []), *args]


def airflow_home_env(home: Path) -> dict[str, str]:
    """The environment of a real Airflow home at ``home``: this repo's DAGs, a SQLite metadata
    database in the home, no examples."""
    venv_bin = Path(sys.executable).parent
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("MEMWAL_CONFIG", None)
    return env


#: The metadata database ``airflow db migrate`` made, once per test process (see below).
_MIGRATED_DB: list[Path] = []


def migrated_airflow_home(home: Path) -> dict[str, str]:
    """The environment of a real Airflow home at ``home`` whose metadata database is migrated.

    ``airflow db migrate`` runs once per test process, in a home of its own; each home gets a
    copy of that database file (a migrated SQLite database is one file, and nothing in it names
    its home). Seven homes in the suite each paid a migration before (5 to 8 s each)."""
    home.mkdir(parents=True, exist_ok=True)
    env = airflow_home_env(home)
    if not _MIGRATED_DB:
        template = Path(tempfile.mkdtemp(prefix="memwal-airflow-migrated-"))
        atexit.register(shutil.rmtree, template, True)
        proc = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                              env=airflow_home_env(template), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _MIGRATED_DB.append(template / "airflow.db")
    shutil.copyfile(_MIGRATED_DB[0], home / "airflow.db")
    return env


#: Runs a command, then prints its peak resident set (KiB) and wall seconds on a last stderr line.
_WATCH = ("import resource, subprocess, sys, time\n"
          "t = time.monotonic()\n"
          "try:\n"
          "    rc = subprocess.run(sys.argv[2:], timeout=float(sys.argv[1])).returncode\n"
          "except subprocess.TimeoutExpired:\n"
          "    rc = -9\n"
          "print(f'WATCH {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} {time.monotonic() - t:.1f}', "
          "file=sys.stderr)\n"
          "sys.exit(rc if rc >= 0 else 99)\n")


@dataclass
class WatchedRun(CliRun):
    peak_mb: float = 0.0
    seconds: float = 0.0


def run_watched(argv: list[str], *, kill_after: float = 120, cwd: str | None = None) -> WatchedRun:
    """``argv`` as a real process under a watcher: exit code (99 when killed after
    ``kill_after`` seconds), output, its peak memory (MB) and its wall time. The watcher's only
    child is the command, so the peak is the command's own."""
    run = subprocess.run([sys.executable, "-c", _WATCH, str(kill_after), *argv], capture_output=True, text=True,
                         cwd=cwd, timeout=kill_after + 60)
    lines = run.stderr.splitlines()
    watch = [line for line in lines if line.startswith("WATCH ")][-1].split()
    stderr = "\n".join(line for line in lines if not line.startswith("WATCH ")) + "\n"
    return WatchedRun(run.returncode, run.stdout, stderr, int(watch[1]) / 1024, float(watch[2]))


def memwal_program() -> str:
    """The installed ``memwal`` program of this interpreter's environment."""
    return str(Path(sys.executable).parent / "memwal")


def wait_flushed(writer: Any, flushes: int, *, deadline_seconds: float = 120) -> None:
    """Until a pylance ``ShardWriter`` has flushed ``flushes`` MemTables: its flush runs on a
    background thread, so a job started right after a full MemTable may find nothing yet (a
    condition polled, not a guess at how long the flush takes)."""
    deadline = time.monotonic() + deadline_seconds
    while writer.stats()["memtable_flush_count"] < flushes:
        assert time.monotonic() < deadline, f"the writer did not flush {flushes} MemTables"
        time.sleep(0.005)
