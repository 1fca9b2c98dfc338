"""The Spark GC engine: deletions spread over executors, one task per shard.

The plan (every gate, every reason) is made on the driver by the core; executors only
delete the validated prefixes and keys they are handed, through the very functions the
local engine uses (``delete_prefixes``, ``delete_keys``): the same batches with their
manifests first, the same allowed-prefix rule and the same deletion-time refusal of any path
that crosses a symbolic link, reported back to the driver. The driver checks the lease
before handing out each round of work (``ROUND_ITEMS`` directories or keys), so a lost
lease stops the run before its next round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator

from memwal.spark.engine.session import active_or_local
from pyspark import SparkContext

from memwal.gc import BATCH_OBJECTS, PrefixOutcome, delete_keys, delete_prefixes
from memwal.store import Store, open_store
from memwal.table import Table

#: Directories (or WAL keys) handed out per round: a generation is about 8 objects, so a
#: round is a few local batches per shard.
ROUND_ITEMS = BATCH_OBJECTS


def _shard_of(key: str) -> str:
    parts = key.split("/")
    return parts[1] if len(parts) > 1 else ""


class SparkGcEngine:
    name = "spark"

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc

    @classmethod
    def from_active_or_local(cls) -> SparkGcEngine:
        return cls(active_or_local())

    def _per_shard(self, table: Table, keys: list[str], fn: Callable[[Store, list[str]], list]) -> dict[str, object]:
        """Run ``fn(store, keys_of_one_shard)`` on executors, one task per shard."""
        groups: dict[str, list[str]] = defaultdict(list)
        for k in keys:
            groups[_shard_of(k)].append(k)
        if not groups:
            return {}
        uri, options = table.uri, dict(table.storage_options)

        def task(item: tuple[str, list[str]]) -> list[tuple[str, object]]:
            shard_keys = item[1]
            return list(zip(shard_keys, fn(open_store(uri, options), shard_keys), strict=True))

        items = sorted(groups.items())
        return dict(self.sc.parallelize(items, len(items)).flatMap(task).collect())

    def _rounds(self, items: list[str], lease) -> Iterator[list[str]]:
        """``items`` in rounds of ROUND_ITEMS, the lease checked on the driver before each."""
        for i in range(0, len(items), ROUND_ITEMS):
            if lease:
                lease.check()
            yield items[i:i + ROUND_ITEMS]

    def delete_prefixes(self, table: Table, prefixes: list[str], lease) -> list[PrefixOutcome]:
        done: dict[str, object] = {}
        for chunk in self._rounds(prefixes, lease):
            done.update(self._per_shard(table, chunk, delete_prefixes))
        return [done[p] for p in prefixes]

    def delete_keys(self, table: Table, keys: list[str], lease) -> list[str]:
        """Delete single objects (WAL entries) per shard; returns the keys refused as unsafe."""

        def delete_batch(store: Store, batch: list[str]) -> list[bool]:
            refused = set(delete_keys(store, batch))
            return [k in refused for k in batch]

        done: dict[str, object] = {}
        for chunk in self._rounds(keys, lease):
            done.update(self._per_shard(table, chunk, delete_batch))
        return [k for k in keys if done.get(k)]
