"""Every job a client's writes are followed by in the tests, hardest settings first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import memwal
from tests.helpers import run_cli

#: GC as hard as it goes: no grace period, every old version expired (writers keep their defaults).
ZERO = {"grace_seconds": 0, "expire_versions": 0}


def every_job(uri: str, scratch: Path) -> list[tuple[str, Callable[[], bool]]]:
    """(name, run) of merge, catchup, compact, snapshot, gc, ``memwal cycle`` and ``memwal
    fleet run`` (over the table's folder, under a zero-grace policy) on ``uri``; each run
    returns whether the job succeeded."""
    t = memwal.open(uri)
    policy = scratch / "zero.yaml"
    policy.write_text("defaults: {options: {gc: {grace_seconds: 0, expire_versions: 0}}}\n")
    return [
        ("merge", lambda: t.merge().ok),
        ("catchup", lambda: t.catchup().ok),
        ("compact", lambda: t.compact(target_rows_per_fragment=100_000).ok),
        ("snapshot", lambda: t.snapshot().ok),
        ("gc", lambda: t.gc(**ZERO).ok),
        ("cycle", lambda: run_cli("cycle", uri, "--grace-seconds", "0", "--expire-versions", "0").rc == 0),
        ("fleet run", lambda: run_cli("fleet", "run", str(Path(uri).parent), "--policy", str(policy)).rc == 0),
    ]
