"""What a phase of the fleet simulation records as it runs (:mod:`bench.fleet.sim`): every table run
with its jobs' statuses and seconds, each merge commit with its version's own time, GC's
deletions, and the generation folders on storage at each tick (listed directly, not through
memwal's store layer, so the sampling is not counted as the runner's requests)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from bench.fleet.count import Meter


def shards_on_storage(uris: list[str]) -> dict[str, dict[str, list[int]]]:
    """The generation folders each shard holds (a plain listing: not through the store layer)."""
    from memwal.table.naming import parse_generation_dir

    out: dict[str, dict[str, list[int]]] = {}
    for uri in uris:
        base = Path(uri, "_mem_wal")
        shards = {}
        for shard in (os.listdir(base) if base.exists() else []):
            if shard.startswith("_"):
                continue
            names = os.listdir(base / shard) if (base / shard).is_dir() else []
            shards[shard] = sorted(g for g in (parse_generation_dir(x) for x in names) if g is not None)
        out[uri] = shards
    return out


class Recorder:
    """What a phase saw: every table run, its merge commits with their versions' times."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.lock = threading.Lock()
        self.cycles: list[dict[str, Any]] = []
        self.merges: list[dict[str, Any]] = []
        self.statuses: dict[str, int] = {}
        self.job_seconds: dict[str, float] = {}
        self.gc = {"runs": 0, "runs_deleting_nothing": 0, "generations_deleted": 0}

    def table_run(self, result: Any, started_at: float | None = None) -> None:
        from memwal.store import open_store
        from memwal.table.manifest import read_table_manifest

        seconds = sum(j.seconds for j in result.jobs)
        ended = time.time()
        merges = []
        merge = result.outcome("merge")
        if merge is not None and merge.version is not None:
            with self.meter.paused():  # the bench's own read
                at = read_table_manifest(open_store(result.table), merge.version).timestamp
            merges = [{"table": result.table, "shard": s["shard_id"], "from": s["from_generation"],
                       "to": s["to_generation"], "at": at, "version": merge.version}
                      for s in (merge.document or {}).get("shards", [])]
        with self.lock:
            self.cycles.append({"table": result.table, "started_at": started_at or ended - seconds,
                                "seconds": seconds, "failed": result.failed is not None})
            self.merges += merges
            for j in result.jobs:
                key = f"{j.job} {j.status}"
                self.statuses[key] = self.statuses.get(key, 0) + 1
                self.job_seconds[key] = round(self.job_seconds.get(key, 0.0) + j.seconds, 3)
                if j.job == "gc" and j.document is not None:
                    deleted = len(j.document.get("deleted", []))
                    self.gc["runs"] += 1
                    self.gc["runs_deleting_nothing"] += deleted == 0
                    self.gc["generations_deleted"] += deleted
