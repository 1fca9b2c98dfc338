"""The merge contenders run and compared: each a whole process on its own copy of one table,
each result checked row for row against the reference (``ours``) and its merge progress."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.processes import BenchFailed, run


def run_contender(contender: str, table_dir: str, logs: Path, tag: str, *,
                  profile: str | None = None) -> dict[str, Any]:
    """One contender (:mod:`bench.merge.contenders`) as a whole process, timed from start to exit:
    its own document (inner seconds, peak RSS, what it did) and ``whole_seconds``."""
    result = logs / f"{tag}.result.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "bench.merge.contenders", contender, table_dir, "--result", str(result)]
    if profile:
        cmd += ["--profile", profile]
    t0 = time.perf_counter()
    proc = run(cmd)
    whole = time.perf_counter() - t0
    (logs / f"{tag}.log").write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}\n")
    if proc.rc != 0 or not result.exists():
        raise BenchFailed(f"{contender} exited {proc.rc} on {table_dir}:\n{proc.error(3000)}")
    doc: dict[str, Any] = json.loads(result.read_text())
    doc["whole_seconds"] = whole
    return doc


def table_state(path: str) -> tuple[Any, dict[str, int]]:
    """The base table sorted by primary key, and the merge progress per shard."""
    import lance

    from memwal.table import open_table
    from memwal.table.schema import primary_key_of

    table = open_table(path)
    pk = primary_key_of(table)
    rows = lance.dataset(path).to_table().sort_by([(k, "ascending") for k in pk])
    return rows.combine_chunks(), dict(table.manifest().compacted)


def same_rows(a: Any, b: Any) -> bool:
    if a.column_names != b.column_names or a.num_rows != b.num_rows:
        return False
    return all(a.column(c).combine_chunks().equals(b.column(c).combine_chunks()) for c in a.column_names)


def lsm_view(path: str) -> Any:
    """What an LSM reader sees of the unmerged table: what every merge must give."""
    from memwal.inspect.verify import lsm_view as view
    from memwal.table import open_table

    return view(open_table(path))


def set_merge_op(path: str, op: str) -> None:
    """One UpdateConfig commit setting ``value``'s operator (``replace`` folds nothing), so
    the tables compared differ only in that config value, not in their history."""
    import lance

    lance.dataset(path).update_config({"memwal.merge-op.value": op})


__all__ = ["run_contender", "same_rows", "set_merge_op", "lsm_view", "table_state"]
