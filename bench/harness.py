"""The shared harness of the benchmarks: contenders as whole worker processes, the state
of a table to compare contenders row for row, medians, and the machine a run was on."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


NOISE = "Index __lance_mem_wal has no fields"


class BenchFailed(Exception):
    """A contender crashed or produced a different table."""


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_worker(contender: str, table_dir: str, logs: Path, tag: str, *, profile: str | None = None) -> dict:
    """One contender as a whole process, timed from start to exit."""
    result = logs / f"{tag}.result.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "bench.workers", contender, table_dir, "--result", str(result)]
    if profile:
        cmd += ["--profile", profile]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    whole = time.perf_counter() - t0
    stderr = "\n".join(line for line in proc.stderr.splitlines() if NOISE not in line)
    (logs / f"{tag}.log").write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{stderr}\n")
    if proc.returncode != 0 or not result.exists():
        raise BenchFailed(f"{contender} exited {proc.returncode} on {table_dir}:\n{stderr[-3000:]}")
    doc = json.loads(result.read_text())
    doc["whole_seconds"] = whole
    return doc


def table_state(path: str):
    """The base table sorted by primary key, and the merge progress per shard."""
    import lance

    from memwal.table import open_table
    from memwal.table.schema import primary_key_of

    table = open_table(path)
    pk = primary_key_of(table)
    rows = lance.dataset(path).to_table().sort_by([(k, "ascending") for k in pk])
    return rows, dict(table.manifest().compacted)


def same_rows(a, b) -> bool:
    if a.column_names != b.column_names or a.num_rows != b.num_rows:
        return False
    return all(a.column(c).combine_chunks().equals(b.column(c).combine_chunks()) for c in a.column_names)


def lsm_view(path: str):
    from memwal.inspect.verify import lsm_view as view
    from memwal.table import open_table

    return view(open_table(path))


def summarize(runs: list[dict]) -> dict:
    whole = [r["whole_seconds"] for r in runs]
    inner = [r["inner_seconds"] for r in runs]
    out = {
        "whole_seconds": statistics.median(whole),
        "inner_seconds": statistics.median(inner),
        "whole_seconds_min": min(whole),
        "inner_seconds_min": min(inner),
        "runs": runs,
        "identical": all(r.get("identical", False) for r in runs),
    }
    rss = [r["peak_rss_mb"] for r in runs if "peak_rss_mb" in r]
    if rss:
        out["peak_rss_mb"] = statistics.median(rss)
    for k in ("commits", "generations", "rows_upserted", "rows_deleted", "spark_startup_seconds"):
        vals = [r[k] for r in runs if k in r]
        if vals:
            out[k] = statistics.median(vals) if k.endswith("seconds") else vals[0]
    return out


def set_merge_op(path: str, op: str) -> None:
    """One UpdateConfig commit setting ``value``'s operator (``replace`` folds nothing), so
    the tables compared differ only in that config value, not in their history."""
    import lance

    lance.dataset(path).update_config({"memwal.merge-op.value": op})


def machine_info() -> dict:
    import lance
    import pyarrow

    info = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pylance": lance.__version__,
        "pyarrow": pyarrow.__version__,
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
