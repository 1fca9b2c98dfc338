"""Whole processes, timed from start to exit: how every bench runs what it measures.

A scheduler starts ``memwal`` as a new process, so that is what the benches time: the
interpreter, the imports and the work, wall clock from ``exec`` to exit, and the CPU seconds the
process and its children used (the steadier figure on a shared machine). A command's peak memory
is taken by :mod:`bench.harness.peak`, a small launcher, because Linux keeps ``ru_maxrss`` across
``execve``: a child of a large harness reports the harness's peak, not its own.

Every child gets :func:`env`: this checkout first on ``PYTHONPATH`` (``bench`` and ``tests`` import
from it), and Spark's Python workers on this interpreter.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PEAK = Path(__file__).resolve().with_name("peak.py")

#: Lance's harmless line on every merge_insert (DESIGN.md, facts): left out of what is kept.
NOISE = "Index __lance_mem_wal has no fields"


class BenchFailed(Exception):
    """A contender crashed, or did not produce what the others did."""


def env(*, master: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child: this checkout on the path, Spark's workers on this Python,
    ``MEMWAL_SPARK_MASTER`` when ``master`` is given."""
    out = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **extra)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    if master:
        out["MEMWAL_SPARK_MASTER"] = master
    return out


def quiet(text: str) -> str:
    """``text`` without Lance's harmless noise lines."""
    return "\n".join(line for line in text.splitlines() if NOISE not in line)


@dataclass
class Proc:
    """One whole process: what ran, how long (wall, CPU), its peak RSS when taken, its exit code
    and output (stderr without :data:`NOISE`)."""

    argv: list[str]
    seconds: float
    rc: int
    cpu_seconds: float
    peak_rss_mb: float | None = None
    stdout: str = ""
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def error(self, tail: int = 800) -> str:
        return self.stderr[-tail:]

    def check(self) -> Proc:
        """This process, or :class:`BenchFailed` naming it when it failed."""
        if self.rc != 0:
            raise BenchFailed(f"{' '.join(self.argv[:6])} ... exited {self.rc}: {self.error()}")
        return self

    def figures(self) -> dict[str, Any]:
        """The figures a bench records (rounded), with the error when it failed."""
        out: dict[str, Any] = {"seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                               "exit_code": self.rc}
        if self.peak_rss_mb is not None:
            out["peak_rss_mb"] = round(self.peak_rss_mb, 1)
        if self.rc != 0:
            out["error"] = self.error()
        return out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Started:
    """A process started by :func:`start`; :meth:`wait` ends it into a :class:`Proc`."""

    def __init__(self, argv: list[str], popen: dict[str, Any], peak: bool) -> None:
        self.argv = argv
        self.report: Path | None = None
        cmd = argv
        if peak:
            fd, name = tempfile.mkstemp(prefix="memwal-bench-peak-", suffix=".json")
            os.close(fd)
            self.report = Path(name)
            cmd = [sys.executable, str(PEAK), name, "--", *argv]
        popen.setdefault("cwd", ROOT)
        popen.setdefault("env", env())
        self.cpu0 = _children_cpu()
        self.t0 = time.perf_counter()
        self.popen: subprocess.Popen[Any] = subprocess.Popen(cmd, **popen)

    def wait(self, *, input: str | bytes | None = None, timeout: float | None = None) -> Proc:
        if self.popen.stdin is not None and self.popen.stdin.closed:
            self.popen.stdin = None  # the caller wrote its commands and closed it: nothing to flush
        out, err = self.popen.communicate(input, timeout=timeout)
        seconds = time.perf_counter() - self.t0
        cpu = _children_cpu() - self.cpu0
        peak = None
        rc = self.popen.returncode
        if self.report is not None:
            figures = json.loads(self.report.read_text() or "{}")
            self.report.unlink(missing_ok=True)
            cpu, peak, rc = figures.get("cpu_seconds", cpu), figures.get("peak_rss_mb"), figures.get("rc", rc)

        def text(x: str | bytes | None) -> str:
            return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")

        return Proc(self.argv, seconds, rc, cpu, peak, text(out), quiet(text(err)))


def start(argv: list[str], *, peak: bool = False, **popen: Any) -> Started:
    """Start ``argv`` (stdout and stderr piped unless ``popen`` says otherwise); with ``peak``
    under :mod:`bench.harness.peak`, so that its own peak RSS is taken."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return Started(argv, popen, peak)


def run(argv: list[str], *, peak: bool = False, input: str | None = None, timeout: float | None = None,
        **popen: Any) -> Proc:
    """Run ``argv`` to its end: a :class:`Proc` (text output)."""
    if input is not None:
        popen.setdefault("stdin", subprocess.PIPE)
    popen.setdefault("text", True)
    return start(argv, peak=peak, **popen).wait(input=input, timeout=timeout)


def python(*args: str, **kw: Any) -> Proc:
    """``python ARGS`` on this interpreter (``-m bench...``, ``-c ...``)."""
    return run([sys.executable, *args], **kw)


def memwal(*argv: str, options: dict[str, str] | None = None, **kw: Any) -> Proc:
    """``memwal ARGV`` as a scheduler starts it (``python -m memwal.cli``). Storage options go in a
    0600 file: an account key on a command line is readable by every local user, and tests
    running beside a bench watch command lines for keys."""
    from memwal.core.secrets import storage_options_file

    with storage_options_file(options or {}) as path:
        extra = ["--storage-options-file", path] if options else []
        return python("-m", "memwal.cli", *argv, *extra, **kw)


def timers(argv: list[str], which: str, result: Path) -> dict[str, Any]:
    """One ``memwal ARGV`` under :mod:`bench.harness.timers` (function set ``which``), as a
    whole process: its document, or ``{"error": ...}``."""
    proc = python("-m", "bench.harness.timers", "--set", which, "--result", str(result), "--", *argv)
    if proc.rc != 0 or not result.exists():
        return {"error": proc.error(1500)}
    loaded: dict[str, Any] = json.loads(result.read_text())
    return loaded


def peak_rss_mb() -> float:
    """This process's peak resident set (MiB).

    On Linux, ``VmHWM`` of ``/proc/self/status``: the high-water mark of this address space,
    which starts afresh at ``exec``. ``ru_maxrss`` does not: Linux keeps it across ``execve``,
    so a worker forked by a harness holding 800 MiB reported 800 MiB whatever it did itself
    (observed: the figures grew run after run as the harness grew). Elsewhere ``ru_maxrss``
    (KiB on Linux, bytes on macOS). Imports count too (about the same for every contender,
    so ratios understate gaps)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


__all__ = ["NOISE", "PEAK", "ROOT", "BenchFailed", "Proc", "Started", "env", "memwal", "peak_rss_mb", "python",
           "quiet", "run", "start", "timers"]
