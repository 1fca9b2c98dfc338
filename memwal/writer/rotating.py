"""A pylance ``ShardWriter`` whose base moves: closed and reopened every so often, without losing a put.

pylance 14's ``ds.mem_wal_writer(shard)`` keeps the dataset it was opened from for its life: its
``lsm_scanner()`` reads that base as it was, plus every generation its shard manifest lists. So
for as long as one writer lives, every row merged since it opened must stay listed for its view
(GC rolls them up: docs/decisions/0054-rollups.md), every list reader reads that rollup beside a
base that already holds it, and the writer's own reads grow with its age. Only closing it and
opening a new one moves the base (measured: a new writer opens in milliseconds and reads 10x
faster afterwards).

:class:`RotatingShardWriter` does that for its user: it holds one writer at a time and, at the
first put or delete after ``rotate_seconds``, closes it (pylance flushes its MemTable as a last
generation, so every acknowledged put is in a generation) and opens a new one on the table's
latest version, under a lock: a put that arrives meanwhile waits and goes to the new writer. GC
then drains what was merged a grace period before the new writer opened, and rolls up only what
was merged since. The new writer claims a new epoch of the shard, which fences the old one; as
the old one is closed first, nothing is fenced that still writes.

Its ``stats()`` adds up the counters of every writer it held (pylance's are per writer), so a
caller waiting for ``memtable_flush_count`` to reach a number sees it rise across rotations
(pylance 14 does not count the flush of a ``close()`` there: a MemTable that was not full when
the writer was replaced becomes a generation no counter shows).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import Any

import lance
import pyarrow as pa

#: How often a writer is replaced by default: ten minutes (docs/operations/deploy.md measures it).
DEFAULT_ROTATE_SECONDS = 600.0


class RotatingShardWriter:
    """One shard's writer, replaced every ``rotate_seconds`` (see the module docstring).

    ``writer_options`` are ``mem_wal_writer``'s own (``max_memtable_rows``, ``durable_write``...).
    """

    def __init__(self, uri: str, shard_id: str, *, rotate_seconds: float = DEFAULT_ROTATE_SECONDS,
                 storage_options: dict[str, str] | None = None, clock: Callable[[], float] = time.monotonic,
                 **writer_options: Any) -> None:
        if not rotate_seconds > 0:
            raise ValueError(f"rotate_seconds: {rotate_seconds!r} must be positive")
        self.uri, self.shard_id = uri, shard_id
        self.rotate_seconds = rotate_seconds
        self.storage_options = storage_options
        self.writer_options = writer_options
        self._clock = clock
        self._lock = threading.RLock()
        self._closed: Counter[str] = Counter()
        #: How many times the writer was replaced; the seconds each replacement took (close and open).
        self.rotations = 0
        self.rotation_seconds: list[float] = []
        self._writer: Any = None
        self._open()

    def _open(self) -> None:
        ds = lance.dataset(self.uri, storage_options=self.storage_options)
        self._writer = ds.mem_wal_writer(self.shard_id, **self.writer_options)
        #: The base version the writer reads (pylance's writer keeps it for its life).
        self.base_version: int = ds.version
        self.opened_at = self._clock()

    @property
    def writer(self) -> Any:
        """The pylance ``ShardWriter`` of the moment (replaced at the next rotation)."""
        return self._writer

    def due(self) -> bool:
        """Whether the writer is old enough to be replaced."""
        return self._clock() - self.opened_at >= self.rotate_seconds

    def put(self, data: pa.Table | pa.RecordBatch) -> None:
        with self._lock:
            self._rotate_if_due()
            self._writer.put(data)

    def delete(self, keys: pa.Table | pa.RecordBatch) -> None:
        with self._lock:
            self._rotate_if_due()
            self._writer.delete(keys)

    def lsm_scanner(self) -> Any:
        """The writer's own view (its base, the listed generations, its MemTable)."""
        with self._lock:
            return self._writer.lsm_scanner()

    def stats(self) -> dict[str, Any]:
        """pylance's counters, added up over every writer held so far."""
        with self._lock:
            now = {k: v for k, v in self._writer.stats().items() if isinstance(v, int)}
            return {**{k: self._closed[k] + v for k, v in now.items()}, "rotations": self.rotations}

    def _rotate_if_due(self) -> None:
        if self.due():
            self.rotate()

    def rotate(self) -> None:
        """Close the writer (its MemTable flushed as a last generation) and open a new one on the
        table's latest version; puts wait meanwhile."""
        with self._lock:
            started = time.perf_counter()
            old = self._writer
            old.close()
            self._closed.update({k: v for k, v in old.stats().items() if isinstance(v, int)})
            self._open()
            self.rotations += 1
            self.rotation_seconds.append(time.perf_counter() - started)
            del self.rotation_seconds[:-100]

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()

    def __enter__(self) -> RotatingShardWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


__all__ = ["DEFAULT_ROTATE_SECONDS", "RotatingShardWriter"]
