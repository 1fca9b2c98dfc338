"""GC as tasks: deletions spread over the engine's workers, one task per shard.

The plan (every gate, every reason, and on an object store the files it listed) is made on
the driver by the core; tasks only delete the validated folders and keys they are handed,
through the very functions the local engine uses (``delete_prefixes``, ``delete_keys``): the
same batches with their manifests first, the same allowed-prefix rule and the same
deletion-time refusal of any path that crosses a symbolic link, reported back to the driver.
The driver checks the lease before handing out each round of work (``ROUND_ITEMS`` folders or
keys), so a lost lease or an operator's cancel stops the run before its next round (a round's
deletions are never cut short: the tasks are not cancelled), and tells ``done`` what each
round finished.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from memwal.gc import BATCH_OBJECTS, PrefixOutcome, Target, delete_keys, delete_prefixes
from memwal.store import Store, open_store
from memwal.table import Table
from memwal.table.paths import shard_of_key
from memwal.tasks import TaskRunner, task_uri

if TYPE_CHECKING:
    from memwal.lease import Lease

#: Folders (or WAL keys) handed out per round: a generation is about 8 objects, so a round is
#: a few local batches per shard.
ROUND_ITEMS = BATCH_OBJECTS

Item = TypeVar("Item")


class TaskGcEngine:
    """A :class:`memwal.gc.GcEngine` whose deletions run on ``runner``, one task per shard."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner
        self.name = runner.name

    def _per_shard(self, table: Table, items: Sequence[Item], key: Callable[[Item], str],
                   fn: Callable[[Store, list[Item]], list[Any]]) -> dict[str, Any]:
        """Run ``fn(store, items_of_one_shard)`` in tasks, one per shard; results by item key."""
        groups: dict[str | None, list[Item]] = defaultdict(list)
        for item in items:
            groups[shard_of_key(key(item))].append(item)
        if not groups:
            return {}
        uri, options = task_uri(table), dict(table.storage_options)

        def task(group: tuple[str | None, list[Item]]) -> list[tuple[str, Any]]:
            mine = group[1]
            return list(zip([key(i) for i in mine], fn(open_store(uri, options), mine), strict=True))

        shards = sorted(groups.items(), key=lambda kv: kv[0] or "")
        return dict(self.runner.run_tasks(shards, task))

    def _rounds(self, items: Sequence[Item], lease: Lease | None) -> Iterator[list[Item]]:
        """``items`` in rounds of ROUND_ITEMS, the lease checked on the driver before each."""
        for i in range(0, len(items), ROUND_ITEMS):
            if lease:
                lease.safe_point()  # between rounds nothing is half-done: an operator's cancel stops the run here
            yield list(items[i:i + ROUND_ITEMS])

    def delete_prefixes(self, table: Table, targets: Sequence[Target], lease: Lease | None,
                        done: Callable[[list[str]], None] | None = None) -> list[PrefixOutcome]:
        out: dict[str, Any] = {}
        for chunk in self._rounds(targets, lease):
            out.update(self._per_shard(table, chunk, lambda t: t.prefix, lambda store, ts: delete_prefixes(store, ts)))
            if done:
                done([t.prefix for t in chunk])
        return [out[t.prefix] for t in targets]

    def delete_keys(self, table: Table, keys: Sequence[str], lease: Lease | None,
                    done: Callable[[list[str]], None] | None = None) -> list[str]:
        """Delete single objects (WAL entries) per shard; returns the keys refused as unsafe."""

        def delete_batch(store: Store, batch: list[str]) -> list[bool]:
            refused = set(delete_keys(store, batch))
            return [k in refused for k in batch]

        out: dict[str, Any] = {}
        for chunk in self._rounds(keys, lease):
            out.update(self._per_shard(table, chunk, lambda k: k, delete_batch))
            if done:
                done(chunk)
        return [k for k in keys if out.get(k)]
