"""The one way GC deletes: link-safe, batched, manifests first, checked at deletion time.

Two strategies behind one call, :func:`delete_prefixes`, chosen by the store: on an object
store, the directories are listed (a shard's at once) and their keys deleted in requests of
many keys; on a file system, whole directory trees go in phases through descriptors held
open from listing to removal (:meth:`Store.delete_trees`, :mod:`memwal.store.local_trees`),
which is what makes 10,000 generations cost about the same as an unchecked ``rm`` (issue 23).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from memwal.core.pool import parallel_map
from memwal.errors import LinkedPathError, UnsafePathError
from memwal.store import ObjectInfo, Store
from memwal.table import Table
from memwal.table.paths import check_deletable, shard_of_key

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)


#: Objects deleted per batch: the lease is checked before each batch, and a batch is two
#: store calls (its manifests, then its other files), so a lost lease stops the run within
#: one batch while thousands of generations cost a few dozen checks, not one each.
BATCH_OBJECTS = 4000


#: Objects in a generation directory, about (Lance's manifest, transaction, data file, primary
#: key index and bloom filter): sizes a batch of whole directories on a file system.
OBJECTS_PER_GENERATION = 8


#: Up to this many directories of one parent are listed one by one; more, and the parent
#: (a shard directory) is listed once: one walk instead of one per generation.
PER_DIRECTORY_LISTING_MAX = 16


#: Delete requests a batch is spread over at once, each of at least DELETE_SLICE_MIN keys
#: (S3 takes 1,000 keys a request): on an object store this overlaps request latency. On a
#: file system it is the most threads a batch of trees is deleted on; how many actually pay
#: depends on the file system, so the store finds out from its own batches
#: (:class:`memwal.store.local_trees.Pace`): one thread on ext4 with a journal (4.0 s for
#: 10,000 generations against 6.8 s on eight), eight where each unlink waits for the disk
#: (ext4 without a journal mounted with ``discard``: an unchecked unlink took 11-12 s on one
#: thread, 4.3-5.4 s on eight).
DELETE_THREADS = 8


DELETE_SLICE_MIN = 250


def under(key: str, prefix: str) -> bool:
    """Whether ``key`` is ``prefix`` or lies below it."""
    return key == prefix or key.startswith(prefix + "/")


def check_under(key: str, prefix: str) -> None:
    """Belt and braces for invariant 5: every key we delete lies under the planned prefix."""
    if not key.startswith(prefix.rstrip("/") + "/"):
        raise UnsafePathError(shard_of_key(prefix + "/x"), key, f"not under {prefix}")


class PrefixOutcome(NamedTuple):
    """What deleting one directory did (picklable: Spark executors return it)."""

    objects: int  # objects deleted
    bytes: int  # bytes freed
    unsafe: list[str]  # keys refused: links found, or paths that crossed one at deletion time


def delete_objects(store: Store, keys: list[str]) -> list[str]:
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


def delete_prefix(store: Store, prefix: str) -> PrefixOutcome:
    """Delete everything under one generation (or staging) directory (see :func:`delete_prefixes`)."""
    return delete_prefixes(store, [prefix])[0]


def delete_prefixes(store: Store, prefixes: list[str], *,
                    before_batch: Callable[[], None] | None = None) -> list[PrefixOutcome]:
    """Delete everything under generation (or staging) directories, batch by batch, manifests first.

    Checked now, at execution, not only when planned: a link at or anywhere under a
    directory, or on the way to it, refuses that whole directory (nothing in it is deleted,
    the links are reported), and a link swapped in after this check is refused per key by
    the store. In each batch every directory's Lance manifests (``_versions/``) go before
    any of their other files, and a directory whose manifest was refused keeps its other
    files too, so no directory is left half-deleted because of a link. ``before_batch``
    (the lease check) runs before each batch of about :data:`BATCH_OBJECTS` objects, so a
    lost lease stops the run before its next batch. Outcomes are in ``prefixes`` order.
    On a file system the same rules hold per directory tree, checked in place right before
    its unlinks (:func:`_delete_trees`).
    """
    for prefix in prefixes:
        check_deletable(prefix)
    if store.has_directories:
        return _delete_trees(store, prefixes, before_batch)
    objs, links = survey(store, prefixes)
    outcomes: dict[str, PrefixOutcome] = {}
    ready: list[str] = []
    for prefix in objs:
        bad = sorted({link for link in links if under(link, prefix) or under(prefix, link)})
        if bad:
            outcomes[prefix] = PrefixOutcome(0, 0, bad)
        else:
            ready.append(prefix)
    deleter = partial(_delete_concurrently, store)
    for batch in _batches(ready, objs):
        if before_batch:
            before_batch()
        outcomes.update(_delete_batch(deleter, batch, objs))
    return [outcomes[p] for p in prefixes]


def _delete_trees(store: Store, prefixes: list[str], before_batch: Callable[[], None] | None) -> list[PrefixOutcome]:
    """On a file system: whole directories, about :data:`BATCH_OBJECTS` objects a batch (a
    generation holds about :data:`OBJECTS_PER_GENERATION`), each batch listed, unlinked and
    removed in phases by the store (:meth:`Store.delete_trees`) with the same rules as on an
    object store: manifests first, a link refuses its directory."""
    per_batch = max(1, BATCH_OBJECTS // OBJECTS_PER_GENERATION)
    outcomes: list[PrefixOutcome] = []
    for i in range(0, len(prefixes), per_batch):
        if before_batch:
            before_batch()
        done = store.delete_trees(prefixes[i:i + per_batch], first=_is_manifest, threads=DELETE_THREADS)
        outcomes += [PrefixOutcome(*o) for o in done]
    return outcomes


def survey(store: Store, prefixes: list[str], *, links_under: str | None = None,
           skip: Collection[str] = ()) -> tuple[dict[str, list[ObjectInfo]], list[str]]:
    """The objects under each directory and every link met, listed now.

    Many directories of one parent (a shard's generations) are found by one walk of the
    parent instead of one walk each; a few are listed one by one (a big shard with little
    to collect is not walked whole). With ``links_under`` (a folder holding every prefix),
    every link anywhere under it is reported too: a store with directories then walks that
    folder once for both (GC's plan: one walk instead of two, issue 23), an object store
    has no links and lists as before. Folders keyed in ``skip`` are not looked into for
    links (a link in a skipped folder's place is still reported).
    """
    objs: dict[str, list[ObjectInfo]] = {p: [] for p in prefixes}
    if links_under is not None and store.has_directories:
        found, links = store.list_with_links(f"{links_under}/", skip=skip)
        for o in found:
            owner = o.key
            while owner and owner not in objs:
                owner = owner.rpartition("/")[0]
            if owner:
                objs[owner].append(o)
        return objs, links
    by_parent: dict[str, list[str]] = defaultdict(list)
    for prefix in objs:
        by_parent[prefix.rpartition("/")[0]].append(prefix)
    links = []
    for parent, group in by_parent.items():
        for root in [parent] if len(group) > PER_DIRECTORY_LISTING_MAX else group:
            found, found_links = store.list_with_links(f"{root}/")
            links += found_links
            for o in found:
                owner = f"{parent}/{o.key[len(parent) + 1:].split('/', 1)[0]}"
                if owner in objs and o.key.startswith(owner + "/"):
                    objs[owner].append(o)
    if links_under is not None:
        inside = tuple(f"{k}/" for k in skip)
        links = sorted(set(links) | {k for k in store.list_links(f"{links_under}/") if not k.startswith(inside)})
    return objs, links


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


def delete_keys(store: Store, keys: list[str], *, before_batch: Callable[[], None] | None = None) -> list[str]:
    """Delete single objects (WAL entries) in batches, ``before_batch`` before each; returns the keys refused."""
    refused: set[str] = set()
    for i in range(0, len(keys), BATCH_OBJECTS):
        if before_batch:
            before_batch()
        refused |= _delete_concurrently(store, keys[i:i + BATCH_OBJECTS])
    return [k for k in keys if k in refused]


def _delete_concurrently(store: Store, keys: list[str]) -> set[str]:
    """:func:`delete_objects` over consecutive slices of ``keys`` at once; returns the keys refused.

    Every slice goes through the same per-key checks; running them at once overlaps the
    latency of the requests of an object store. The call returns when every slice is done,
    so what the caller orders across calls stays ordered.
    """
    step = max(DELETE_SLICE_MIN, -(-len(keys) // DELETE_THREADS))
    per_request = getattr(store, "delete_batch", 0)  # an object store's keys per delete request
    if per_request > 1:
        step = -(-step // per_request) * per_request  # whole requests: 1,000 keys each on S3, not 375
    slices = [keys[i:i + step] for i in range(0, len(keys), step)]
    if len(slices) <= 1:
        return set(delete_objects(store, keys))
    parts = parallel_map(partial(delete_objects, store), slices, DELETE_THREADS, name="memwal-delete")
    return {k for refused in parts for k in refused}


class LocalGcEngine:
    """Deletes in-process, through the same :func:`delete_prefixes` / :func:`delete_keys` as Spark,
    checking the lease before every batch."""

    name = "local"

    def delete_prefixes(self, table: Table, prefixes: list[str], lease: Lease | None) -> list[PrefixOutcome]:
        return delete_prefixes(table.store, prefixes, before_batch=lease.check if lease else None)

    def delete_keys(self, table: Table, keys: list[str], lease: Lease | None) -> list[str]:
        """Delete single objects (WAL entries); returns the keys refused as unsafe."""
        return delete_keys(table.store, keys, before_batch=lease.check if lease else None)
