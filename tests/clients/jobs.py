"""Every job a client's writes are followed by in the tests, hardest settings first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import memwal
from tests.helpers import run_cli

#: GC as hard as it goes: no grace period, every old version expired (writers keep their defaults).
ZERO = {"grace_seconds": 0, "expire_versions": 0}


def every_job(uri: str, scratch: Path, *, expire_versions: bool = True) -> list[tuple[str, Callable[[], bool]]]:
    """(name, run) of merge, catchup, compact, snapshot, gc, ``memwal cycle`` and ``memwal
    fleet run`` (over the table's folder, under a zero-grace policy) on ``uri``; each run
    returns whether the job succeeded. GC has no grace period and expires every old version;
    with ``expire_versions=False`` it keeps the versions its default keeps (a reader that
    holds the version it opened needs them)."""
    t = memwal.open(uri)
    gc = ZERO if expire_versions else {"grace_seconds": 0}
    args = [arg for k, v in gc.items() for arg in (f"--{k.replace('_', '-')}", str(v))]
    policy = scratch / "zero.yaml"
    policy.write_text("defaults: {options: {gc: {" + ", ".join(f"{k}: {v}" for k, v in gc.items()) + "}}}\n")
    return [
        ("merge", lambda: t.merge().ok),
        ("catchup", lambda: t.catchup().ok),
        ("compact", lambda: t.compact(target_rows_per_fragment=100_000).ok),
        ("snapshot", lambda: t.snapshot().ok),
        ("gc", lambda: t.gc(**gc).ok),
        ("cycle", lambda: run_cli("cycle", uri, *args).rc == 0),
        ("fleet run", lambda: run_cli("fleet", "run", str(Path(uri).parent), "--policy", str(policy)).rc == 0),
    ]
