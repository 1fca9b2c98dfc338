"""A case's run: its document, its folders, and what it leaves under ``--out``.

Every case writes one JSON document (``OUT/<name>.json``) and, when it draws one, its chart
(``OUT/<name>.png``), and prints a short summary to stderr. :class:`Run` gives each the same
frame: what ran (``benchmark``, ``started_at``, the case's config), the machine (cores, versions,
memory) and its load average at the start and at the end, since on a shared machine a figure means
little without it, and the run's ``total_seconds``. A case without ``--out`` prints its document
to stdout instead.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

Draw = Callable[[dict[str, Any], Path], None]
Summary = Callable[[dict[str, Any]], str]


def log(msg: str, tag: str = "bench") -> None:
    print(f"[{tag} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine_info() -> dict[str, Any]:
    """Cores, memory, Python, pylance, pyarrow, pyspark and Java versions, and the load now."""
    import lance
    import pyarrow

    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pylance": lance.__version__,
        "pyarrow": pyarrow.__version__,
        "load_average_at_start": os.getloadavg(),
    }
    try:
        import pyspark

        info["pyspark"] = pyspark.__version__
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        info["memory_gb"] = round(kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        info["java"] = (java.stderr or java.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return info


def parser(prog: str, doc: str | None, *, work: bool = True, smoke: bool = False) -> argparse.ArgumentParser:
    """The arguments every case shares: ``--out`` (where its JSON and chart go), ``--work`` (also
    ``--workdir``: where its tables are written and, for the cases that cache them, kept; by default a
    temporary folder removed at the end) and, for cases with a tiny size, ``--smoke``."""
    p = argparse.ArgumentParser(prog=f"python -m bench {prog}", description=(doc or "").split("\n\n")[0])
    p.add_argument("--out", help="write OUT/<name>.json and its chart there (default: the JSON to stdout)")
    if work:
        p.add_argument("--work", "--workdir", dest="work",
                       help="where tables are written and kept (default: a temporary folder, removed after)")
    if smoke:
        p.add_argument("--smoke", action="store_true", help="tiny tables, seconds: checks the harness, not speed")
    return p


class Run:
    """One run of a case: ``doc`` to fill, ``work`` to build in, :meth:`publish` at the end.

    Used as a context manager: on leaving, a temporary work folder is removed (a given one is
    kept, as a cache of the tables it holds)."""

    def __init__(self, name: str, about: str, *, out: str | Path | None, work: str | Path | None = None,
                 **config: Any) -> None:
        self.name = name
        self.out = Path(out).resolve() if out else None
        self.started = time.perf_counter()
        self._own_work = work is None
        self.work = Path(work).resolve() if work else Path(tempfile.mkdtemp(prefix=f"memwal-bench-{name}-"))
        self.work.mkdir(parents=True, exist_ok=True)
        if self.out:
            self.out.mkdir(parents=True, exist_ok=True)
            for stale in (f"{name}.json", f"{name}.png"):
                (self.out / stale).unlink(missing_ok=True)
        self.doc: dict[str, Any] = {"benchmark": about,
                                    "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                                    "machine": machine_info(), **config}

    @property
    def logs(self) -> Path:
        """``OUT/logs`` (or the work folder's): the children's output, kept for a post-mortem."""
        folder = (self.out or self.work) / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def log(self, msg: str) -> None:
        log(msg, self.name)

    def publish(self, *, draw: Draw | None = None, summary: Summary | None = None) -> dict[str, Any]:
        """The run's seconds and the load at its end into the document; the summary to stderr; the
        document to ``OUT/NAME.json`` (stdout without ``--out``) and the chart to ``OUT/NAME.png``."""
        doc = self.doc
        doc["total_seconds"] = round(time.perf_counter() - self.started, 1)
        doc["machine"]["load_average_at_end"] = os.getloadavg()
        if summary is not None:
            print(summary(doc), file=sys.stderr)
        text = json.dumps(doc, indent=1, default=str) + "\n"
        if self.out is None:
            sys.stdout.write(text)
            return doc
        (self.out / f"{self.name}.json").write_text(text)
        if draw is not None:
            draw(doc, self.out / f"{self.name}.png")
        log(f"wrote {self.out / f'{self.name}.json'}" + (" and its chart" if draw else ""), self.name)
        return doc

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._own_work:
            shutil.rmtree(self.work, ignore_errors=True)


@contextlib.contextmanager
def figure(path: Path, *, rows: int = 1, cols: int = 1, size: tuple[float, float], dpi: int = 110,
          squeeze: bool = True) -> Iterator[tuple[Any, Any]]:
    """A figure of ``rows`` x ``cols`` panels to draw on (``with figure(...) as (fig, axes)``), laid out
    and saved to ``path`` on leaving; matplotlib on its file backend, so no display is needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=squeeze)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)


__all__ = ["Draw", "Run", "Summary", "figure", "log", "machine_info", "parser"]
