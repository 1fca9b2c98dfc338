"""pylance 14's own writer-side readers, as users read a MemWAL table: support for the tests.

A user reads through ``ShardWriter.lsm_scanner()`` (the base table as the writer opened it,
and every generation its shard manifest lists, merged or not) or builds ``ShardSnapshot``s
from the shard manifests the same way and hands them to ``LsmScanner.from_snapshots``. Both
fail on a listed generation that is gone (hazard H6): these helpers read exactly so, never
through memwal's own reader, which lists only unmerged generations.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
from lance.mem_wal import LsmScanner, ShardWriter

from memwal.demo import Model, Workload, create_base_table, demo_schema, shard_ids_for
from memwal.read.plan import plan_read
from memwal.table import open_table
from tests.helpers import wait_flushed

DIM = 8


def rows_for(keys: list[int], tag: str, seed: int) -> pa.Table:
    """Rows of the demo schema for ``keys`` (later duplicates win, as in a MemTable)."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(keys, pa.int64()),
        "name": [f"{tag}-{k}" for k in keys],
        "value": rng.random(len(keys)),
        "vec": pa.array(list(rng.random((len(keys), DIM), dtype=np.float32)), pa.list_(pa.float32(), DIM)),
    }, schema=demo_schema(DIM))


class LiveWriter:
    """A ``ShardWriter`` kept open, its writes tracked in a model: one flushed generation a call."""

    def __init__(self, uri: str, shard_id: str, model: Model, *, rows: int = 30, seed: int = 0) -> None:
        self.uri, self.shard_id, self.model, self.rows = uri, shard_id, model, rows
        self.rng = random.Random(seed)
        self.writer: ShardWriter = lance.dataset(uri).mem_wal_writer(
            shard_id, max_memtable_rows=rows + 1, durable_write=False)
        self.n = 0

    def generation(self, keys: list[int]) -> None:
        """Put rows for ``keys`` (new and updated), delete one live key, and flush once."""
        self.n += 1
        batch = rows_for(keys[: self.rows], f"w{self.n}", seed=self.rng.randrange(1 << 30))
        self.writer.put(batch)
        self.model.put(batch)
        gone = [k for k in keys[: self.rows] if k in self.model.rows][:1]
        self.writer.delete(pa.table({"id": pa.array(gone, pa.int64())}))
        self.model.delete(gone)
        self.wait_flushed()

    def wait_flushed(self) -> None:
        """Until the writer's background flush of every full MemTable has landed (a condition
        polled, not a guess at how long it takes)."""
        wait_flushed(self.writer, self.n)

    def view(self) -> list[dict[str, Any]]:
        """What ``lsm_scanner()`` shows through this writer, sorted by key."""
        return sorted(self.writer.lsm_scanner().to_table().to_pylist(), key=lambda r: r["id"])

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> LiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def client_view(uri: str) -> list[dict[str, Any]]:
    """The table as a user's reader builds it from the shard manifests: the latest base table
    and every listed generation, merged or not, through pylance's ``LsmScanner``."""
    table = open_table(uri)
    plan = plan_read(table, source="manifests", include_merged=True)
    rows = LsmScanner.from_snapshots(table.dataset(), plan.snapshots).to_table()
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


def live_writer(tmp_path: Path, workload: Workload) -> Iterator[LiveWriter]:
    """A fixture's body: a table of ``workload`` under ``tmp_path`` and a ``ShardWriter`` kept open
    on its first shard, closed at the end (a writer fenced by a newer one, or closed by the test,
    has nothing left to do)."""
    uri = str(tmp_path / "lake" / "t")
    _, model = create_base_table(uri, workload)
    writer = LiveWriter(uri, shard_ids_for(workload)[0], model)
    yield writer
    try:
        writer.close()
    except (OSError, RuntimeError, ValueError):
        pass
