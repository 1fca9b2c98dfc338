"""The fleet simulation's load: live ``ShardWriter``s in a writer process, and their flush log.

Usage (started by :mod:`bench.fleet.sim`)::

    python -m bench.fleet.load CONFIG.json LOG.jsonl

The config names the tables this process writes to, each with its rate (generations a tick),
the tick length, the moment (epoch seconds) the load starts and how many ticks it lasts. The
schedule is drawn from the config's seed alone, so two phases of the simulation offer the
same load: for each table, flushes come as a Poisson process of its rate, shards in turn.
Every table's writers (one pylance ``ShardWriter`` per shard, small MemTables: one put of
``rows`` new keys, routed by Lance's own sharding, fills one) are opened at the start and
closed at the end, live in between.

After each put, the process waits until the writer reports the MemTable flushed
(``stats()["memtable_flush_count"]``), finds the new generation folder in the shard's
directory, and appends ``{"table", "shard", "generation", "flushed_at", "rows"}`` to the log:
the flush time of the lag the simulation measures. ``flushed_at`` is the first moment the
flush was seen done (polled every 5 ms).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

#: Longest wait for a flush to be reported before the put is logged as unflushed.
FLUSH_WAIT_SECONDS = 20.0


def schedule(tables: list[dict[str, Any]], tick: float, ticks: int, seed: int) -> list[tuple[float, str, int]]:
    """``(offset seconds, table, shard index)`` of every put, in time order (see the module docstring)."""
    events = []
    for t in tables:
        rate = float(t["rate"])
        if rate <= 0:
            continue
        rng = random.Random(f"{seed}:{Path(t['uri']).name}")
        at, n = rng.expovariate(rate / tick), 0
        while at < ticks * tick:
            events.append((at, t["uri"], n % int(t["shards"])))
            n += 1
            at += rng.expovariate(rate / tick)
    return sorted(events)


def _generations(uri: str, shard: str) -> set[int]:
    from memwal.table.naming import parse_generation_dir

    try:
        names = os.listdir(Path(uri, "_mem_wal", shard))
    except FileNotFoundError:
        return set()
    return {g for g in (parse_generation_dir(n) for n in names) if g is not None}


class TableWriters:
    """One table's live writers and the fresh keys of each shard (Lance's routing)."""

    def __init__(self, uri: str, shards: list[str], rows: int) -> None:
        import lance

        from memwal.demo import keys_by_bucket

        self.uri, self.shard_ids, self.rows = uri, shards, rows
        self.ds = lance.dataset(uri)
        self.writers = [self.ds.mem_wal_writer(s, max_memtable_rows=rows, durable_write=False) for s in shards]
        self.seen = [_generations(uri, s) for s in shards]
        self.flushes = [0] * len(shards)
        self.fresh: dict[int, list[int]] = {b: [] for b in range(len(shards))}
        self._keys_by_bucket = keys_by_bucket
        self.next_key = 1_000_000

    def _keys(self, bucket: int) -> list[int]:
        while len(self.fresh[bucket]) < self.rows:
            chunk = list(range(self.next_key, self.next_key + 1024))
            self.next_key += 1024
            for b, ks in self._keys_by_bucket(self.ds, chunk, len(self.shard_ids)).items():
                self.fresh[b] += ks
        out, self.fresh[bucket] = self.fresh[bucket][:self.rows], self.fresh[bucket][self.rows:]
        return out

    def put(self, bucket: int) -> list[dict[str, Any]]:
        """One MemTable's worth of new keys into shard ``bucket``; the generations it flushed."""
        import numpy as np

        from bench.data.tiny import _rows

        writer = self.writers[bucket]
        writer.put(_rows(self.ds.schema, np.array(self._keys(bucket))))
        self.flushes[bucket] += 1
        deadline = time.monotonic() + FLUSH_WAIT_SECONDS
        while writer.stats()["memtable_flush_count"] < self.flushes[bucket] and time.monotonic() < deadline:
            time.sleep(0.005)
        at = time.time()
        shard = self.shard_ids[bucket]
        new = sorted(_generations(self.uri, shard) - self.seen[bucket])
        self.seen[bucket] |= set(new)
        line = {"table": self.uri, "shard": shard, "flushed_at": at}
        if not new:
            return [{**line, "generation": None, "rows": self.rows, "error": "no flush seen"}]
        return [{**line, "generation": g, "rows": self.rows if i == 0 else 0} for i, g in enumerate(new)]

    def close(self) -> None:
        for w in self.writers:
            w.close()


def main(argv: list[str]) -> int:
    config_path, log_path = argv
    cfg = json.loads(Path(config_path).read_text())
    tables = {t["uri"]: TableWriters(t["uri"], t["shard_ids"], cfg["rows"]) for t in cfg["tables"]
              if float(t["rate"]) > 0}
    events = schedule(cfg["tables"], cfg["tick_seconds"], cfg["load_ticks"], cfg["seed"])
    start = float(cfg["start_at"])
    with open(log_path, "a", encoding="utf-8") as log:
        try:
            for offset, uri, bucket in events:
                delay = start + offset - time.time()
                if delay > 0:
                    time.sleep(delay)
                for line in tables[uri].put(bucket):
                    log.write(json.dumps({**line, "due_at": start + offset}) + "\n")
                    log.flush()
        finally:
            for t in tables.values():
                t.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
