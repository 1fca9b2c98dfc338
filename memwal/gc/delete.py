"""The one way GC deletes: link-safe, batched, manifests first, checked at deletion time.

Two strategies behind one call, :func:`delete_prefixes`, chosen by the store. On an object
store a folder's objects are the ones the plan listed (the one listing of ``_mem_wal/``: no
second listing), deleted in requests of many keys (S3 1,000, an Azure blob batch 256; GCS a
key a request, several at once); a file written into a planned folder since is left for the
next run. On a file system whole directory trees go in phases through descriptors held open
from listing to removal (:meth:`Store.delete_trees`, :mod:`memwal.store.local_trees`): a
link is refused where it is found, at deletion time. Either way every key must be one of
ours (:func:`memwal.table.paths.check_deletable`), each batch's Lance manifests go before its
other files, and ``before_batch`` (the lease check) runs before each batch. ``done`` hears the
folders (or keys) each batch finished: a display's progress, never a change of batches.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import NamedTuple

from memwal.core.pool import parallel_map
from memwal.errors import LinkedPathError, UnsafePathError
from memwal.store import ObjectInfo, Store
from memwal.table.paths import check_deletable, shard_of_key

log = logging.getLogger(__name__)


#: Objects deleted per batch: the lease is checked before each batch, and a batch is two
#: rounds of requests (its manifests, then its other files: on S3 eight requests of 1,000 keys
#: at most, sent at once), so a lost lease stops the run within one batch while thousands of
#: generations cost a few checks and about as many requests as their keys need.
BATCH_OBJECTS = 8000


#: Objects in a generation directory, about (Lance's manifest, transaction, data file, primary
#: key index and bloom filter): sizes a batch of whole directories on a file system.
OBJECTS_PER_GENERATION = 8


#: Delete requests (or, on a file system, threads) a batch is spread over at once, each of at
#: least DELETE_SLICE_MIN keys unless a request takes fewer: this overlaps the latency of an
#: object store's requests, and of a disk's where each unlink waits (on a journalled ext4,
#: where one thread would do, eight cost little: docs/decisions/0002-delete-threads.md).
DELETE_THREADS = 8


DELETE_SLICE_MIN = 250


#: Told the folders (or keys) a batch finished, in order.
Done = Callable[[list[str]], None]


class Target(NamedTuple):
    """A folder to delete whole, and the objects the plan listed in it (an object store deletes
    exactly those; a file system walks the folder again)."""

    prefix: str
    listed: tuple[ObjectInfo, ...] = ()


class PrefixOutcome(NamedTuple):
    """What deleting one directory did (picklable: Spark executors return it)."""

    objects: int  # objects deleted
    bytes: int  # bytes freed
    unsafe: list[str]  # keys refused: links found, or paths that crossed one at deletion time


def under(key: str, prefix: str) -> bool:
    """Whether ``key`` is ``prefix`` or lies below it."""
    return key == prefix or key.startswith(prefix + "/")


def check_under(key: str, prefix: str) -> None:
    """Belt and braces for invariant 5: every key we delete lies under the planned prefix."""
    if not key.startswith(prefix.rstrip("/") + "/"):
        raise UnsafePathError(shard_of_key(prefix + "/x"), key, f"not under {prefix}")


def delete_objects(store: Store, keys: Sequence[str]) -> list[str]:
    """The one way GC deletes objects, for every engine and store; returns the keys refused.

    Every key must be one of ours (:func:`check_deletable`; otherwise UnsafePathError and
    nothing of the batch is deleted). The store then checks each key when it deletes it:
    a local store refuses a key whose path crosses a symbolic link (an object store has
    none) and still deletes the others.
    """
    for key in keys:
        check_deletable(key)
    if not keys:
        return []
    try:
        store.delete_many(keys)
    except LinkedPathError as exc:
        log.warning("gc refused %d path(s) crossing a symbolic link or a non-directory, first: %s",
                    len(exc.refused), exc)
        return list(exc.refused)
    return []


def delete_prefixes(store: Store, targets: Sequence[Target], *, before_batch: Callable[[], None] | None = None,
                    done: Done | None = None) -> list[PrefixOutcome]:
    """Delete everything under generation (or staging) folders, batch by batch, manifests first
    (see the module docstring); outcomes in ``targets`` order.

    In each batch every folder's Lance manifests (``_versions/``) go before any of its other
    files, and a folder whose manifest was refused keeps its other files too, so no folder is
    left half-deleted because of a link.
    """
    for t in targets:
        check_deletable(t.prefix)
    if store.has_directories:
        return _delete_trees(store, [t.prefix for t in targets], before_batch, done)
    objs = {t.prefix: list(t.listed) for t in targets}
    outcomes: dict[str, PrefixOutcome] = {}
    deleter = partial(_delete_concurrently, store)
    for batch in _batches([t.prefix for t in targets], objs):
        if before_batch:
            before_batch()
        outcomes.update(_delete_batch(deleter, batch, objs))
        if done:
            done(batch)
    return [outcomes[t.prefix] for t in targets]


def _delete_trees(store: Store, prefixes: list[str], before_batch: Callable[[], None] | None,
                  done: Done | None) -> list[PrefixOutcome]:
    """On a file system: whole directories, about :data:`BATCH_OBJECTS` objects a batch (a
    generation holds about :data:`OBJECTS_PER_GENERATION`), each batch listed, unlinked and
    removed in phases by the store (:meth:`Store.delete_trees`) with the same rules as on an
    object store: manifests first, a link refuses its directory."""
    per_batch = max(1, BATCH_OBJECTS // OBJECTS_PER_GENERATION)
    outcomes: list[PrefixOutcome] = []
    for i in range(0, len(prefixes), per_batch):
        if before_batch:
            before_batch()
        batch = prefixes[i:i + per_batch]
        outcomes += [PrefixOutcome(*o) for o in store.delete_trees(batch, first=_is_manifest, threads=DELETE_THREADS)]
        if done:
            done(batch)
    return outcomes


def _batches(prefixes: list[str], objs: dict[str, list[ObjectInfo]]) -> Iterator[list[str]]:
    """Whole directories grouped until a group holds about BATCH_OBJECTS objects."""
    batch: list[str] = []
    count = 0
    for prefix in prefixes:
        batch.append(prefix)
        count += len(objs[prefix])
        if count >= BATCH_OBJECTS:
            yield batch
            batch, count = [], 0
    if batch:
        yield batch


def _delete_batch(deleter: Callable[[list[str]], set[str]], batch: list[str],
                  objs: dict[str, list[ObjectInfo]]) -> dict[str, PrefixOutcome]:
    """Two steps: every manifest of the batch, then the other files of the directories whose
    manifests all went. ``deleter`` deletes keys and returns those refused."""
    owner: dict[str, str] = {}
    for prefix in batch:
        for o in objs[prefix]:
            check_under(o.key, prefix)
            owner[o.key] = prefix
    deleted: Counter[str] = Counter()
    freed: Counter[str] = Counter()
    refused: dict[str, list[str]] = defaultdict(list)

    def delete(items: list[ObjectInfo]) -> None:
        no = deleter([o.key for o in items])
        for o in items:
            if o.key in no:
                refused[owner[o.key]].append(o.key)
            else:
                deleted[owner[o.key]] += 1
                freed[owner[o.key]] += o.size

    delete([o for p in batch for o in objs[p] if _is_manifest(o.key, p)])
    delete([o for p in batch if p not in refused for o in objs[p] if not _is_manifest(o.key, p)])
    return {p: PrefixOutcome(deleted[p], freed[p], sorted(refused.get(p, []))) for p in batch}


def _is_manifest(key: str, prefix: str) -> bool:
    """Whether ``key`` is a Lance table manifest of a dataset under ``prefix`` (they go first)."""
    return "/_versions/" in key[len(prefix):]


def delete_keys(store: Store, keys: Sequence[str], *, before_batch: Callable[[], None] | None = None,
                done: Done | None = None) -> list[str]:
    """Delete single objects (WAL entries, run records) in batches, ``before_batch`` before each;
    returns the keys refused."""
    refused: set[str] = set()
    for i in range(0, len(keys), BATCH_OBJECTS):
        if before_batch:
            before_batch()
        batch = list(keys[i:i + BATCH_OBJECTS])
        refused |= _delete_concurrently(store, batch)
        if done:
            done(batch)
    return [k for k in keys if k in refused]


def _delete_concurrently(store: Store, keys: list[str]) -> set[str]:
    """:func:`delete_objects` over consecutive slices of ``keys`` at once; returns the keys refused.

    Every slice goes through the same per-key checks; running them at once overlaps the
    latency of the requests of an object store. The call returns when every slice is done,
    so what the caller orders across calls stays ordered.
    """
    per_request = getattr(store, "delete_batch", 0)  # an object store's keys per delete request
    threads = getattr(store, "deletes_in_flight", DELETE_THREADS)
    step = max(min(DELETE_SLICE_MIN, per_request or DELETE_SLICE_MIN), -(-len(keys) // threads))
    if per_request > 1:
        step = -(-step // per_request) * per_request  # whole requests: 1,000 keys each on S3, not 375
    slices = [keys[i:i + step] for i in range(0, len(keys), step)]
    if len(slices) <= 1:
        return set(delete_objects(store, keys))
    parts = parallel_map(partial(delete_objects, store), slices, threads, name="memwal-delete")
    return {k for refused in parts for k in refused}
