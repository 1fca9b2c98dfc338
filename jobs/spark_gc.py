"""The Spark GC engine: deletions spread over executors, one task per shard.

The plan (every gate, every reason) is made on the driver by the core; executors only
delete the validated prefixes and keys they are handed, through the very functions the
local engine uses (``delete_prefix``, ``delete_objects``): the same manifests-first order,
the same allowed-prefix rule and the same deletion-time refusal of any path that crosses a
symbolic link, reported back to the driver. The driver checks the lease before handing
work out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from pyspark.sql import SparkSession

from jobs.spark_engine import local_session
from memwal.gc import PrefixOutcome, delete_objects, delete_prefix
from memwal.storage import Store, open_store
from memwal.table import Table


def _shard_of(key: str) -> str:
    parts = key.split("/")
    return parts[1] if len(parts) > 1 else ""


class SparkGcEngine:
    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    @classmethod
    def from_active_or_local(cls) -> SparkGcEngine:
        return cls(SparkSession.getActiveSession() or local_session())

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
        return dict(self.spark.sparkContext.parallelize(items, len(items)).flatMap(task).collect())

    def delete_prefixes(self, table: Table, prefixes: list[str], lease) -> list[PrefixOutcome]:
        if lease:
            lease.check()
        done = self._per_shard(table, prefixes, lambda store, ps: [delete_prefix(store, p) for p in ps])
        return [done[p] for p in prefixes]

    def delete_keys(self, table: Table, keys: list[str], lease) -> list[str]:
        """Delete single objects (WAL entries) per shard; returns the keys refused as unsafe."""
        if lease:
            lease.check()

        def delete_batch(store: Store, batch: list[str]) -> list[bool]:
            refused = set(delete_objects(store, batch))
            return [k in refused for k in batch]

        done = self._per_shard(table, keys, delete_batch)
        return [k for k in keys if done.get(k)]
