"""One listing of a table's ``_mem_wal/``: every shard's manifests, generation folders and WAL.

GC and ``status`` need, per shard, the manifest versions (to find the latest, and gaps), the
generation folders present with their files (what to delete, the bytes not yet merged, when a
generation was flushed) and, for GC, the WAL entries. One paged listing of ``_mem_wal/`` tells
all of it: every object with its size, ETag and time comes with the listing. It leaves out
what neither reads here: ``_jobs/`` (leases, run history, checkpoints: their packages read
them), folders that are not shards, and, when asked, the WAL (status) or the merge staging.
On an object store a page that ends inside a left-out folder is followed by a request that
starts after it (:meth:`memwal.store.Store.list_with_links`), so a year of run records costs
one request, not thirty-five. On a disk the same walk also reports every symbolic link met
(never followed): GC holds what a link could redirect. A caller that needs only the folders the
shard manifests list (a status, the lag, GC's listing pass) walks those by name, on a disk always,
on an object store once the listing is longer than :data:`WHOLE_PAGES` pages (a week of merged
folders kept is thousands).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from memwal.store import ObjectInfo, Store
from memwal.table.naming import (
    MEM_WAL_DIR,
    ROLLUP_MARKER,
    STAGING_DIR,
    is_shard_dir_name,
    parse_generation_dir,
    parse_manifest_name,
    parse_wal_name,
    table_version_of,
)

STAGING = STAGING_DIR.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class WalEntry:
    position: int
    key: str
    size: int
    mtime: float
    etag: str = ""


@dataclass(frozen=True)
class ShardListing:
    """What the listing found in one shard's folder."""

    shard_id: str
    #: Files directly under ``manifest/`` by version (names that are no version are left out).
    manifests: Mapping[int, ObjectInfo] = field(default_factory=dict)
    #: Versions whose name under ``manifest/`` is a folder (never valid).
    manifest_dirs: tuple[int, ...] = ()
    #: Generation folders present: name -> every object under it, in key order.
    generations: Mapping[str, tuple[ObjectInfo, ...]] = field(default_factory=dict)
    #: WAL entries in position order (empty when the WAL was not listed).
    wal: tuple[WalEntry, ...] = ()
    wal_listed: bool = True

    def generation_dirs(self) -> Mapping[str, int]:
        """Generation folders present, name -> generation (as :func:`memwal.table.shards.list_generation_dirs`).

        Read once per listing: a whole GC's gates, orphans and receipts each ask, and a week of
        merged generations is some 70,000 names a shard (issue 82)."""
        return self._generation_dirs

    @cached_property
    def _generation_dirs(self) -> Mapping[str, int]:
        return {name: g for name in self.generations if (g := parse_generation_dir(name)) is not None}

    def bytes_under(self, name: str) -> int:
        return sum(o.size for o in self.generations.get(name, ()))

    def flushed_at(self, name: str) -> float | None:
        """When a generation folder's Lance manifest was written (None: it has none)."""
        times = [o.mtime for o in self.generations.get(name, ()) if _is_table_manifest(o.key, name)]
        return min(times) if times else None

    def is_rollup(self, name: str) -> bool:
        """Whether the folder is a rollup memwal wrote (it holds :data:`ROLLUP_MARKER`)."""
        return any(o.key.endswith(f"{name}/{ROLLUP_MARKER}") for o in self.generations.get(name, ()))

    def key_indexed(self, name: str) -> bool:
        """Whether the folder holds a primary-key index (``_pk_index/``): every list reader opens
        it, and fails on a generation without one (upstream lance#9035: a flush that did not wait
        for its key index)."""
        return any(f"{name}/_pk_index/" in o.key for o in self.generations.get(name, ()))

    def readable(self, name: str) -> bool:
        """Whether Lance can open the generation: it holds a table manifest (GC deletes those first)."""
        return any(_is_table_manifest(o.key, name) for o in self.generations.get(name, ()))


class LazyFolders(Mapping[str, tuple[ObjectInfo, ...]]):
    """A shard's generation folders on a disk, name -> every object under it, each folder walked
    the first time its objects are asked for (its name, from the shard folder's listing, is known
    at once): a whole GC run asks for the objects of the folders it lists, deletes, proves or finds
    orphaned, and a table that keeps a week of merged generations has thousands more, each held
    by a retained version whatever its files (84,000 files at 8,000 versions: issue 82). A link
    met in a walked folder goes to ``links`` (the listing's :meth:`MemWalListing.links_met`): a
    folder never walked is never deleted, and a link in its place is met by the shard's listing."""

    def __init__(self, store: Store, prefix: str, names: Collection[str], links: list[str]) -> None:
        self._store, self._prefix, self._links = store, prefix, links
        self._names = sorted(set(names))
        self._known = frozenset(self._names)
        self._walked: dict[str, tuple[ObjectInfo, ...]] = {}

    def __getitem__(self, name: str) -> tuple[ObjectInfo, ...]:
        if name not in self._known:
            raise KeyError(name)
        found = self._walked.get(name)
        if found is None:
            objects, links = self._store.list_with_links(f"{self._prefix}{name}/")
            self._links.extend(links)
            found = self._walked[name] = tuple(objects)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass(frozen=True)
class MemWalListing:
    shards: Mapping[str, ShardListing]
    #: Merge staging folders: name -> every object under it (empty when not listed).
    staging: Mapping[str, tuple[ObjectInfo, ...]] = field(default_factory=dict)
    #: Symbolic links met under ``_mem_wal/`` outside ``_jobs/`` (a disk only), never followed.
    links: tuple[str, ...] = ()
    #: Links met since, in the generation folders walked when first asked for (:class:`LazyFolders`).
    walked_links: list[str] = field(default_factory=list)

    def links_met(self) -> tuple[str, ...]:
        """Every link met so far: the listing's, and those of the folders walked since."""
        return tuple(sorted({*self.links, *self.walked_links}))


#: Pages of an object store's listing of ``_mem_wal/`` (1,000 keys each on S3, 5,000 on Azure)
#: past which a caller that can name the folders it needs has only those read (issue 82): a table
#: merged every few seconds keeps a week of merged generation folders under the default
#: retention, ten files each, and every follower's lag and listing pass paged through all of them.
#: Past as many pages of ``_versions/``, a listing pass grows the versions it knew instead of
#: listing them (:meth:`memwal.table.versions_cursor.VersionsCursor.grow`).
WHOLE_PAGES = 8
#: How long a ``_mem_wal/`` found longer than :data:`WHOLE_PAGES` is read by name without trying
#: the whole listing first (a GC since may have shortened it): the follower's passes do not pay
#: those pages at each flush. A cost choice only: both ways read what their callers judge.
LONG_SECONDS = 600.0
#: Requests a read by name may take, as many times :data:`WHOLE_PAGES`: past it (shard manifests
#: listing hundreds of folders, never a followed table's few), the whole listing, however long.
BY_NAME_PAGES = 8
#: Tables remembered as long (a fleet's process reads many): past it, all are forgotten.
_LONG_KEPT = 4096
_long: dict[str, float] = {}

Names = Mapping[str, Collection[str]] | Callable[[MemWalListing], Mapping[str, Collection[str]]]


def list_mem_wal(store: Store, *, wal: bool = True, staging: bool = True, manifests: bool = True,
                 generations: Callable[[str, int], bool] | None = None,
                 named: Names | None = None, lazy: bool = False) -> MemWalListing:
    """One listing of ``_mem_wal/`` (see the module docstring); ``wal=False`` leaves every WAL
    out, ``staging=False`` the merge staging, ``manifests=False`` every shard's manifest versions
    (the lag finds each shard's latest from its hint: beside a writer that never reopens, its
    versions grow by some 50 a minute); ``generations(shard, generation)``, when given,
    says which generation folders to walk (the lag reads the unmerged ones only: a table that
    keeps a week of merged generations has thousands of folders a status would walk), and then,
    on a disk, only those are walked (:func:`_walk_chosen`); ``named``, on a disk, gives for some
    shards the folder names to walk (those of their chosen generations a shard manifest lists), so
    their folders' names are not listed. An object store keeps its one paged listing while it takes
    at most :data:`WHOLE_PAGES` requests (a walk of chosen folders costs a request per shard and
    per folder: requests are money, ``status`` reads at most 2 a shard, issue 41); past them, a
    caller that gives ``named`` has the named folders walked as on a disk (:func:`_read_by_name`).
    ``named`` may be a function of the shards' manifest versions and WAL, listed first: the
    names their latest manifests list. ``lazy``, on a disk and with no ``generations``: every
    generation folder is named, and walked only when its objects are asked for
    (:class:`LazyFolders`: a whole GC run)."""
    root = f"{MEM_WAL_DIR}/"
    lazy = lazy and generations is None and store.has_directories
    skipped = {name for name, listed in (("wal", wal), ("manifest", manifests)) if not listed}
    if generations is not None and store.has_directories:
        walked = _walk_chosen(store, root, skipped, staging, generations, named or {})
        assert walked is not None  # no most to pass
        objects, links, folders = walked
    else:
        def left_out(folder: str) -> bool:
            parts = folder[len(root):].split("/")
            if len(parts) == 1:
                return not (is_shard_dir_name(parts[0]) or (staging and parts[0] == STAGING))
            if len(parts) == 2 and is_shard_dir_name(parts[0]) and (generations is not None or lazy):
                g = parse_generation_dir(parts[1])
                if g is not None and (lazy or (generations is not None and not generations(parts[0], g))):
                    return True
            return len(parts) == 2 and parts[1] in skipped and is_shard_dir_name(parts[0])

        by_name = None if named is None or store.has_directories else \
            _read_by_name(store, root, skipped, staging, generations, named, left_out)
        objects, links = by_name or store.list_with_links(root, skip=left_out)
        folders = {sid: store.list_dirs(f"{root}{sid}/") for sid in store.list_dirs(root) if is_shard_dir_name(sid)} \
            if store.has_directories else {}
    return _assembled(store, objects, links, folders, wal=wal, manifests=manifests, generations=generations,
                      lazy=lazy)


def _assembled(store: Store, objects: list[ObjectInfo], links: list[str], folders: Mapping[str, list[str]], *,
               wal: bool, manifests: bool, generations: Callable[[str, int], bool] | None,
               lazy: bool) -> MemWalListing:
    """The listing of ``_mem_wal/`` the objects walked make; ``folders``: on a disk, each shard's
    folder names (an empty folder is a folder too)."""
    root = f"{MEM_WAL_DIR}/"
    shards: dict[str, _Shard] = {}
    stage: dict[str, list[ObjectInfo]] = {}
    for o in objects:
        parts = o.key[len(root):].split("/")
        if len(parts) < 3:
            continue  # a file directly in _mem_wal/ or in a shard's folder: not ours to read
        top = parts[0]
        if top == STAGING:
            stage.setdefault(parts[1], []).append(o)
        elif is_shard_dir_name(top):
            shards.setdefault(top, _Shard()).add(parts[1:], o)
    for sid, names in folders.items():  # a disk's empty folders: a shard, generation or version with no file
        s = shards.setdefault(sid, _Shard())
        for name in names:
            if (g := parse_generation_dir(name)) is not None and (generations is None or generations(sid, g)):
                s.gens.setdefault(name, [])
        if manifests:
            s.manifest_dirs |= {v for d in store.list_dirs(f"{root}{sid}/manifest/")
                                if (v := parse_manifest_name(d)) is not None}
    walked: list[str] = []
    done = {sid: s.done(sid, wal) for sid, s in sorted(shards.items())}
    if lazy:
        done = {sid: replace(shard, generations=LazyFolders(store, f"{root}{sid}/", shard.generations, walked))
                for sid, shard in done.items()}
    return MemWalListing(done, {k: tuple(v) for k, v in sorted(stage.items())}, tuple(sorted(set(links))), walked)


def read_by_name_now(store: Store) -> bool:
    """Whether :func:`list_mem_wal` reads ``store``'s ``_mem_wal/`` by name without trying its pages
    first (an object store's found longer than :data:`WHOLE_PAGES` within :data:`LONG_SECONDS`): a
    caller whose ``named`` reads the shard manifests from the listing's own walk of their versions
    need not list them before (GC's listing pass)."""
    return not store.has_directories and time.monotonic() - _long.get(store.uri_for(f"{MEM_WAL_DIR}/"),
                                                                      -LONG_SECONDS) < LONG_SECONDS


def _read_by_name(store: Store, root: str, skipped: set[str], staging: bool,
                  generations: Callable[[str, int], bool] | None, named: Names,
                  left_out: Callable[[str], bool]) -> tuple[list[ObjectInfo], list[str]] | None:
    """On an object store: the whole listing while it takes at most :data:`WHOLE_PAGES` requests;
    past them, the folders ``named`` names walked by name (:func:`_walk_chosen`: a request a
    folder, each shard's ``manifest/`` and ``wal/`` unless left out, the shards' names) unless
    those are more than :data:`BY_NAME_PAGES` times as many requests. None: list whole. A
    ``_mem_wal/`` found long is read by name for :data:`LONG_SECONDS` without its pages tried first."""
    where = store.uri_for(root)
    now = time.monotonic()
    if not read_by_name_now(store):
        short = store.list_if_short(root, skip=left_out, pages=WHOLE_PAGES)
        if short is not None:
            _long.pop(where, None)
            return short
        if len(_long) >= _LONG_KEPT:
            _long.clear()
        _long[where] = now
    walked = _walk_chosen(store, root, skipped, staging, generations or (lambda sid, g: True), named,
                          most=BY_NAME_PAGES * WHOLE_PAGES)
    return None if walked is None else walked[:2]


def _walk_chosen(store: Store, root: str, skipped: set[str], staging: bool, generations: Callable[[str, int], bool],
                 named: Names, *, most: int | None = None
                 ) -> tuple[list[ObjectInfo], list[str], dict[str, list[str]]] | None:
    """The objects and links of the folders a listing wants, and each shard's chosen generation
    folders (on a disk, an empty one is a folder too). Each shard's folder is listed one level
    down (its generation folders' names: a failed flush's folder shares its number under another
    prefix, so the names are listed, not guessed), then only the chosen generation folders, the
    manifest versions and the WAL unless ``skipped``, and the staging when asked, are walked. A
    table that keeps a week of merged generations holds thousands of folders: a walk of the
    shard's whole folder judged every one of them, entry by entry, at each of a follower's lags
    and listing passes (23 of its 29 ms at 1,900 folders). A link in ``_mem_wal/`` or a shard's
    folder is reported, as the whole walk reports it.

    A shard in ``named`` is not listed one level down: its named folders that are generation folder
    names (a name from a manifest is untrusted: no other name, no ``/``, is walked) and chosen are
    walked (a link, where the walk meets it; a folder with no file, missing or empty, is not told
    apart). The lag after each of a follower's jobs names the folders the shard's manifest lists
    above the merge mark (it reads their files' times): listing the names of the shard's folders
    was a third of it at minute 27 beside pylance, 1,900 folders kept by the 7-day retention.
    ``named`` as a function is given the listing of every shard's manifest versions and WAL,
    walked first. None: the named folders to walk are more than ``most``."""
    objects: list[ObjectInfo] = []
    tops, links = store.list_dirs_and_links(root)
    folders: dict[str, list[str]] = {}
    shards = [top for top in tops if is_shard_dir_name(top)]

    def walk(prefix: str) -> None:
        found, linked = store.list_with_links(prefix)
        objects.extend(found)
        links.extend(linked)

    if staging and STAGING in tops:
        walk(f"{root}{STAGING}/")
    for top in shards:  # the versions and WAL first: the names to walk may be read from them
        for name in ("manifest", "wal"):
            if name not in skipped:
                walk(f"{root}{top}/{name}/")
    names = named(_assembled(store, objects, [], {}, wal="wal" not in skipped, manifests="manifest" not in skipped,
                             generations=generations, lazy=False)) if callable(named) else named
    chosen = {top: [name for name in sorted(set(names[top])) if (g := parse_generation_dir(name)) is not None
                    and generations(top, g)] for top in shards if top in names}
    if most is not None and sum(map(len, chosen.values())) > most:
        return None
    for top in shards:
        shard = f"{root}{top}/"
        if top in chosen:
            walked = folders[top] = []
            for name in chosen[top]:
                before = len(objects)
                walk(f"{shard}{name}/")
                if len(objects) > before:
                    walked.append(name)
        else:
            found, linked = store.list_dirs_and_links(shard)
            links.extend(linked)
            folders[top] = [n for n in found if (g := parse_generation_dir(n)) is not None and generations(top, g)]
            for name in folders[top]:
                walk(f"{shard}{name}/")
    return objects, links, folders


class _Shard:
    """A shard's objects as the listing meets them."""

    def __init__(self) -> None:
        self.manifests: dict[int, ObjectInfo] = {}
        self.manifest_dirs: set[int] = set()
        self.gens: dict[str, list[ObjectInfo]] = {}
        self.wal: list[WalEntry] = []

    def add(self, rest: list[str], o: ObjectInfo) -> None:
        name = rest[0]
        if name == "manifest":
            version = parse_manifest_name(rest[1])
            if version is not None and len(rest) == 2:
                self.manifests[version] = o
            elif version is not None:
                self.manifest_dirs.add(version)
        elif name == "wal":
            position = parse_wal_name(rest[1]) if len(rest) == 2 else None
            if position is not None:
                self.wal.append(WalEntry(position, o.key, o.size, o.mtime, o.etag))
        elif parse_generation_dir(name) is not None:
            self.gens.setdefault(name, []).append(o)

    def done(self, shard_id: str, wal: bool) -> ShardListing:
        return ShardListing(shard_id, dict(sorted(self.manifests.items())), tuple(sorted(self.manifest_dirs)),
                            {k: tuple(v) for k, v in sorted(self.gens.items())},
                            tuple(sorted(self.wal, key=lambda e: e.position)), wal)


def _is_table_manifest(key: str, name: str) -> bool:
    head, _, file = key.rpartition("/")
    return head.endswith(f"{name}/_versions") and table_version_of(file) is not None
