"""The cheap reads a fleet plans from: what a table needs, from listings and one manifest.

Per table, in requests on an object store:

1. one listing of ``_versions/`` (its first page: V2 manifest names sort newest first) gives
   the latest version's key; discovery made it already when it found the table
   (:mod:`memwal.fleet.sources`), and hands it over (``latest``);
2. the latest manifest (merge progress, catch-up, the published snapshot's time, fragments,
   index coverage) is read only when its key or ETag differs from the cached one;
3. the shards' keys are listed around ``_mem_wal/_jobs/`` (:meth:`Store.list_around`: our
   run history and leases are never paged through): every generation folder with its bytes
   and times, every shard manifest version. On a disk, where a listing costs no request but a
   file each, only names are listed (each shard's folders, manifest versions and WAL entries,
   no file stat-ed), and only what the figures need is walked (:func:`_walk_chosen`): a table
   that keeps a week of merged folders held by its retained versions made every probe walk
   them all (87% of a fleet round over six tables of 4,000 versions, issue 82). And a folder's
   names, there and in ``_versions/``, are listed again only when the folder changed
   (:mod:`memwal.fleet.folders`: a stat tells), so a probe of an idle table costs the same at
   any age; a folder being written is not listed again either: what the probe knew of it is grown
   (the next versions and entries a stat each, the folders the shard's newest manifest names), so
   a probe of a table being written costs the same at any age too;
   On an object store, a ``_mem_wal/`` longer than :data:`WHOLE_PAGES` pages is listed whole once
   in :data:`WHOLE_EVERY_SECONDS` only (the cache keeps when: :attr:`TableFacts.listed_at`, shared by
   a fleet's processes); the probes between list each shard's ``manifest/`` (the fingerprint: an
   idle table costs no more), read the newest where one was committed, walk the folders above the
   merge mark it names, and carry GC's folders forward (:func:`_carried`);
4. only a shard holding generation folders has its latest manifest read (the rows of its
   unmerged generations, and how many generations it lists: what every reader opens).

The listings make a fingerprint: a table whose fingerprint is the cached one reuses its
cached facts, so an idle table costs the two listings (two requests while ``_mem_wal/``'s
keys fit on a page; on a disk, a stat a folder and the files of the few folders walked) and
nothing more. ``requests`` are counted by the store as they are sent
(none on a local disk).
Everything here is an estimate for ranking: each job plans again from the real state, with
every gate; a wrong figure can only order the work differently, never do unsafe work.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from pyroaring import BitMap

from memwal.core import clock as clocks
from memwal.errors import BadInputError, NotFoundError, ReadError
from memwal.fleet.cache import ProbeCache
from memwal.fleet.facts import ManifestFacts, ShardFacts, TableFacts
from memwal.fleet.folders import FolderListings
from memwal.store import ObjectInfo, Store
from memwal.table.listing import WHOLE_PAGES
from memwal.table.manifest import (
    TableManifest,
    decode_table_manifest,
    fragment_stats,
    maintained_indexes,
    refuse_mixed_after_first,
    refuse_mixed_names,
)
from memwal.table.naming import (
    MEM_WAL_DIR,
    MEM_WAL_INDEX_NAME,
    U64_MAX,
    V2_NAME_DIGITS,
    bitrev64,
    parse_generation_dir,
    parse_manifest_name,
    parse_wal_name,
    table_version_of,
    version_hint_key,
)
from memwal.table.shards import ShardState, decode_shard_manifest
from memwal.table.versions_cursor import GROW_PROBES, versions_on_top

log = logging.getLogger(__name__)

_JOBS_FOLDER = "_jobs"
#: Generation folders GC may take that a probe on a disk walks per shard, to estimate their bytes.
_SAMPLED = 8
#: On an object store, a table whose ``_mem_wal/`` is longer than :data:`WHOLE_PAGES` pages has its
#: folders counted from a listing of them all once in this long; the probes between read each shard's
#: manifest versions and the unmerged folders they name, and carry the rest forward (a week of
#: merged folders kept is thousands of pages, once an hour instead of at every round).
WHOLE_EVERY_SECONDS = 3600.0


def latest_manifest(store: Store, prefix: str = "", *, refuse_mixed: bool = False,
                    listings: FolderListings | None = None) -> ObjectInfo | None:
    """The latest table manifest's listing entry under ``prefix`` (a table folder, or ``""``:
    the store's own root), its key relative to ``prefix``; None when there is none (not a
    Lance table). The first of ``_versions/`` in key order (V2 names, newest first: the first
    page of the listing only), else the highest version of the whole listing (older tables).
    Names are read by the one rule of ``_versions/`` (:func:`memwal.table.naming.table_version_of`):
    a stray file there is no manifest.

    A table whose manifests are named by both schemes has no latest anyone may trust (Lance
    refuses it; :func:`memwal.table.manifest.mixed_names_error`), checked by
    :func:`memwal.table.manifest.refuse_mixed_names` in the names the listing reads anyway (every
    name of an older table; after a first V2 name, the next
    :data:`~memwal.table.manifest.NAMES_PAST_THE_FIRST` of the page it came in, as
    :func:`~memwal.table.manifest.latest_version_key` reads them: no request more). With
    ``refuse_mixed`` (the probe) that is the ReadError; without (discovery under a root, where
    one table's error must not fail the others) None, as for a folder with no table: discovery
    then finds the table by its ``_versions/`` folder, hands the probe no entry, and the probe,
    listing again, refuses it, so the fleet reports it as a problem of that table alone.

    ``listings`` (a fleet's probe, on a disk): the names of ``_versions/`` as last listed while the
    folder stands still (:mod:`memwal.fleet.folders`), the first V2 name stat-ed: a listing of every
    version at every round grew with the versions the retention keeps."""
    folder = f"{prefix}_versions/"
    if listings is not None and store.has_directories:
        try:
            named = _latest_named(store, folder, listings)
        except ReadError:
            if refuse_mixed:
                raise
            return None
        if named is not None:
            return replace(named, key=named.key[len(prefix):])
    keys = store.list(folder)
    first: ObjectInfo | None = None
    seen = 0
    for seen, obj in enumerate(keys, 1):  # noqa: B007 - ``seen`` (keys taken) is read after the loop
        name = obj.key[len(folder):]
        if "/" not in name and table_version_of(name) is not None:
            first = obj
            break
    if first is None:
        return None
    try:
        if len(first.key[len(folder):].removesuffix(".manifest")) == V2_NAME_DIGITS:
            refuse_mixed_after_first(store, first.key[len(folder):], (o.key[len(folder):] for o in keys), seen)
        else:
            listed = list(store.list(folder, recursive=False))
            first = max(((v, o) for o in listed if (v := table_version_of(o.key)) is not None),
                        key=lambda p: p[0])[1]
            refuse_mixed_names(store, [o.key[len(folder):] for o in listed])
    except ReadError:
        if refuse_mixed:
            raise
        return None
    return replace(first, key=first.key[len(prefix):])


def _latest_named(store: Store, folder: str, listings: FolderListings) -> ObjectInfo | None:
    """On a disk, the first V2-named manifest of ``folder``'s kept listing, stat-ed, its neighbours
    checked for the other naming scheme as a listing's are (None: no V2 name comes first, or it went
    meanwhile: the caller lists). While the folder moves (a table being written: a version a merge),
    the latest found before is grown by a stat of each next version (:func:`_grown_latest`) instead
    of listing every version again; the naming check is then the last listing's, at most
    :data:`~memwal.fleet.folders.GROWN_REFRESH_SECONDS` old."""

    def first(files: Sequence[str], dirs: Sequence[str]) -> ObjectInfo | None:
        names = (key[len(folder):] for key in files)
        for seen, name in enumerate(names, 1):  # noqa: B007 - ``seen`` (names taken) is read after the loop
            if table_version_of(name) is not None:
                break
        else:
            return None
        if len(name.removesuffix(".manifest")) != V2_NAME_DIGITS:
            return None
        refuse_mixed_after_first(store, name, names, seen)
        return store.head(folder + name)

    def grow(latest: ObjectInfo | None) -> ObjectInfo | None:
        return None if latest is None or folder != "_versions/" else _grown_latest(store, latest)

    return listings.derived(store, folder, "latest", first, grow)


def _grown_latest(store: Store, latest: ObjectInfo) -> ObjectInfo | None:
    """The latest version now, from ``latest`` (found before): that one still the same object (Lance
    writes a version once, by a put-if-absent), then each next while one is
    (:func:`~memwal.table.versions_cursor.versions_on_top`); None when that cannot tell."""
    if (now := store.head(latest.key)) is None or now.etag != latest.etag:
        return None
    version = table_version_of(latest.key.rsplit("/", 1)[-1])
    found = None if version is None else versions_on_top(store, version, GROW_PROBES)
    if found is None:
        return None
    return found[-1][1] if found else now


def _index_coverage(manifest: TableManifest, live: dict[int, int], indexes: Iterable[str]) -> dict[str, float]:
    """Per maintained index, the share of live rows in fragments its bitmap does not cover."""
    total = sum(live.values())
    out: dict[str, float] = {}
    for entry in manifest.user_indices():
        if entry.name not in indexes:
            continue
        covered: set[int] = set()
        for e in manifest.indices:  # an index may be several segments (deltas)
            if e.name == entry.name and e.fragment_bitmap:
                covered |= set(BitMap.deserialize(e.fragment_bitmap))
        missing = sum(rows for fid, rows in live.items() if fid not in covered)
        out[entry.name] = round(missing / total, 4) if total else 0.0
    return out


def _manifest_facts(store: Store, latest: ObjectInfo, tag: str, before: ManifestFacts | None) -> ManifestFacts:
    data = store.get(latest.key)
    where = store.uri_for(latest.key)
    manifest = decode_table_manifest(data, key=latest.key, where=where)
    stats = fragment_stats(data, where=where)
    mem_wal = manifest.mem_wal is not None
    indexes = tuple(i for i in maintained_indexes(manifest) if i != MEM_WAL_INDEX_NAME) if mem_wal else ()
    snapshot = manifest.mem_wal.snapshot_ts_millis if manifest.mem_wal is not None else 0
    merged_at: dict[str, float] = {}
    if before is not None:  # a cold probe cannot tell when the progress moved
        for shard, g in manifest.compacted.items():
            known = before.merged_at.get(shard)
            moved = g != before.compacted.get(shard)
            if moved or known is not None:
                merged_at[shard] = manifest.timestamp if moved else float(known or 0.0)
    return ManifestFacts(tag, manifest.version, mem_wal, indexes, dict(manifest.compacted),
                         {k: dict(v) for k, v in manifest.index_catchup.items()}, snapshot / 1000 if snapshot else None,
                         stats.fragments, stats.physical_rows - stats.deleted_rows, stats.deleted_rows,
                         _index_coverage(manifest, stats.live_rows, indexes), merged_at)


def probe(uri: str, store: Store, cache: ProbeCache | None = None, *, latest: ObjectInfo | None = None,
          now: float | None = None) -> TableFacts:
    """The facts of the table at ``uri`` (see the module docstring). ``latest``: the latest
    manifest's listing entry, when discovery listed ``_versions/`` a moment ago."""
    cache = cache or ProbeCache()
    now = clocks.current()() if now is None else now
    sent = store.requests_sent
    latest = latest or latest_manifest(store, refuse_mixed=True, listings=cache.folders)
    if latest is None:
        raise NotFoundError(f"{store.uri_for('_versions/')}: no table manifest: not a Lance table")
    tag = f"{latest.key}:{latest.etag}"
    m = cache.get_manifest(uri, tag)
    if m is None:
        m = _manifest_facts(store, latest, tag, cache.last_manifest(uri))
        cache.put_manifest(uri, m)
    if not m.mem_wal:
        return TableFacts(uri, m.version, False, (), (), m.fragments, m.live_rows, m.deleted_rows, {}, None, tag,
                          requests=store.requests_sent - sent)
    named: dict[str, _ShardFolders] | None = None
    states: dict[str, ShardState] = {}
    signature = ""
    before = cache.last_facts(uri)
    listed_at: float | None = None
    carried = before is not None and before.listed_at is not None and 0 <= now - before.listed_at < WHOLE_EVERY_SECONDS
    if store.has_directories:
        listing, named, states, signature = _walk_chosen(store, m, cache.folders)
    elif carried:  # long, and counted whole within the hour: the manifests' versions, then what they name
        assert before is not None and before.listed_at is not None
        listing, listed_at = _manifest_versions(store), before.listed_at
        signature = f"\ncarried since {listed_at!r}"
    else:
        pages = store.requests_sent
        listing = list(store.list_around(f"{MEM_WAL_DIR}/", _JOBS_FOLDER))
        listed_at = now if store.requests_sent - pages > WHOLE_PAGES else None
    digest = hashlib.sha1(tag.encode())
    for o in listing:
        digest.update(f"\n{o.key}\t{o.size}\t{o.etag}".encode())
    digest.update(signature.encode())
    fingerprint = digest.hexdigest()
    known = cache.get_facts(uri, fingerprint)
    if known is not None:
        return replace(known, requests=store.requests_sent - sent)
    if carried:
        listing += _unmerged_folders(store, m, listing, states)
    shards, problems = _shards(store, m, listing, named, states)
    if carried:
        assert before is not None
        shards = tuple(_carried(s, before, m, states.get(s.shard_id)) for s in shards)
    facts = TableFacts(uri, m.version, True, m.indexes, shards, m.fragments, m.live_rows, m.deleted_rows,
                       m.unindexed_fraction, m.snapshot_at, fingerprint, problems, store.requests_sent - sent,
                       dict(m.merged_at), listed_at)
    cache.put_facts(facts)
    return facts


def _manifest_versions(store: Store) -> list[ObjectInfo]:
    """Every shard's manifest versions, a listing of each shard's ``manifest/`` (what a writer and
    GC's drains commit: a flush names its folder in one), for a table whose ``_mem_wal/`` is long."""
    root = f"{MEM_WAL_DIR}/"
    return [o for shard in store.list_dirs(root) if not shard.startswith("_")
            for o in store.list(f"{root}{shard}/manifest/")]


def _unmerged_folders(store: Store, m: ManifestFacts, versions: list[ObjectInfo],
                      states: dict[str, ShardState]) -> list[ObjectInfo]:
    """The files of the folders above the merge mark each shard's newest manifest version lists (a
    request a folder), its manifest read into ``states``; a name taken only as a generation folder's
    own name for its generation (storage is untrusted)."""
    newest: dict[str, tuple[int, str]] = {}
    for o in versions:
        parts = o.key.split("/")
        v = parse_manifest_name(parts[3]) if len(parts) == 4 else None
        if v is not None and v > newest.get(parts[1], (0, ""))[0]:
            newest[parts[1]] = (v, o.key)
    out: list[ObjectInfo] = []
    for shard, (_, key) in sorted(newest.items()):
        state = _newest_state(store, shard, key, states)
        merged = m.compacted.get(shard, 0)
        for fg in [] if state is None else state.flushed:
            if fg.generation > merged and parse_generation_dir(fg.path) == fg.generation:
                out += store.list(f"{MEM_WAL_DIR}/{shard}/{fg.path}/")
    return out


def _carried(shard: ShardFacts, before: TableFacts, m: ManifestFacts, state: ShardState | None) -> ShardFacts:
    """``shard`` as read by name (its unmerged folders, none of those GC may take), what its newest
    manifest (``state``) lists, and the folders GC may take carried from ``before``: their count,
    bytes and oldest, and the generations every index caught up to since, with the bytes ``before``
    knew them by when they were unmerged, else its mean a generation (counted, never enumerated: the
    numbers come from storage and the cache). An estimate (the plan's
    figures): what GC deleted since shows at the next whole listing, within
    :data:`WHOLE_EVERY_SECONDS`; when the shard was last written, by its manifests and unmerged
    folders, or the last whole listing's (its WAL, not listed since)."""
    if state is not None:  # what readers open, merged or not: a GC drains or rolls up the merged
        merged = m.compacted.get(shard.shard_id, 0)
        shard = replace(shard, listed=len(state.flushed),
                        listed_merged=sum(1 for fg in state.flushed if fg.generation <= merged),
                        unmerged_rows=sum(fg.physical_rows or 0 for fg in state.flushed if fg.generation > merged))
    old = next((s for s in before.shards if s.shard_id == shard.shard_id), None)
    if old is None:
        return shard
    was = old.merged - max(old.index_behind.values(), default=0)
    gained = max(0, _caught(m, shard.shard_id) - was)
    mean = old.collectable_bytes // old.collectable if old.collectable else 0
    known = [t for g, t in old.unmerged.items() if was < g <= was + gained]
    since = min([t for _, t in known] + ([old.collectable_since] if old.collectable_since is not None else []),
                default=None)
    size = old.collectable_bytes + sum(b for b, _ in known) + mean * (gained - len(known))
    written = max((t for t in (shard.last_write, old.last_write) if t is not None), default=None)
    return replace(shard, collectable=old.collectable + gained, collectable_bytes=size, collectable_since=since,
                   last_write=written)


def _caught(m: ManifestFacts, shard: str) -> int:
    """The highest generation of ``shard`` every maintained index has caught up to (and merged)."""
    return min([m.catchup.get(i, {}).get(shard, 0) for i in m.indexes] + [m.compacted.get(shard, 0)])


@dataclass(frozen=True)
class _ShardFolders:
    """What a probe takes from the listing of a shard's folder, made once a listing and grown while
    the folder moves by the generation folders the shard's newest manifest names (:meth:`grown`):
    nothing here is rebuilt at a probe, and nothing walked name by name (a week beside a busy
    writer is some 350,000 folders)."""

    dirs: frozenset[str]
    by_generation: dict[int, list[str]]  # generation -> its folders' names
    generations: tuple[int, ...]  # the distinct generations, ascending
    folders: tuple[int, ...]  # the generation of each folder, ascending
    signature: str  # a digest of the listing's folder names, for the fingerprint
    #: Folders the shard's newest manifest named since the listing, not in it: (generation, name).
    added: tuple[tuple[int, str], ...] = ()

    def grown(self, state: ShardState) -> _ShardFolders:
        """These folders and those ``state`` names that the listing lacks (a flush since: the writer
        names its folder in the manifest version it commits; a merged one leaves the manifest at the
        next drain, its folder stays until GC takes it, so what was added stays added). A name is
        taken only as a generation folder's own name for its generation: a manifest is storage, and
        storage is untrusted."""
        new = {(fg.generation, fg.path) for fg in state.flushed
               if fg.path not in self.dirs and parse_generation_dir(fg.path) == fg.generation}
        return self if new <= set(self.added) else replace(self, added=tuple(sorted(new | set(self.added))))

    @property
    def newest(self) -> str | None:
        """The newest generation's first folder (when the shard was last flushed)."""
        newest = max(self.generations[-1:] + tuple(g for g, _ in self.added), default=None)
        return None if newest is None else min(self.by_generation.get(newest, []) + [n for g, n in self.added
                                                                                       if g == newest])

    def above(self, merged: int) -> list[str]:
        """Every folder of a generation above ``merged`` (the merge's debt)."""
        at = bisect.bisect_right(self.generations, merged)
        listed = [n for g in self.generations[at:] for n in self.by_generation[g]]
        return listed + [n for g, n in self.added if g > merged]

    def sample(self, caught: int) -> list[str]:
        """One folder each of :data:`_SAMPLED` listed generations at or below ``caught`` (those GC may
        take), spread from the lowest to the highest."""
        at = bisect.bisect_right(self.generations, caught)
        picks = [*range(0, at, max(1, -(-at // _SAMPLED))), at - 1] if at else []
        return [min(self.by_generation[self.generations[i]]) for i in sorted(set(picks))]

    def held(self, caught: int) -> tuple[int, int]:
        """Generations, and folders, at or below ``caught``."""
        extra = [g for g, _ in self.added if g <= caught]
        listed = bisect.bisect_right(self.generations, caught)
        return (listed + len({g for g in extra if g not in self.by_generation}),
                bisect.bisect_right(self.folders, caught) + len(extra))

    @property
    def any(self) -> bool:
        return bool(self.folders or self.added)

    @property
    def names(self) -> str:
        """For the fingerprint: the listing's folders, and those grown since."""
        return self.signature + "".join(f"/{n}" for _, n in self.added)


def _shard_folders(files: Sequence[str], dirs: Sequence[str]) -> _ShardFolders:
    named = sorted((g, name) for name in dirs if (g := parse_generation_dir(name)) is not None)
    by_generation: dict[int, list[str]] = {}
    for g, name in named:
        by_generation.setdefault(g, []).append(name)
    digest = hashlib.sha1("/".join(name for _, name in named).encode()).hexdigest()
    return _ShardFolders(frozenset(dirs), by_generation, tuple(by_generation), tuple(g for g, _ in named), digest)


def _newest_entry(number: Callable[[str], int | None], hint: str) -> Callable[[Sequence[str], Sequence[str]],
                                                                          tuple[str | None, bool]]:
    """The newest entry of a ``manifest/`` or ``wal/`` listing by its number, and whether the
    writer's version hint is among them."""
    def make(keys: Sequence[str], dirs: Sequence[str]) -> tuple[str | None, bool]:
        newest = max(((n, k) for k in keys if (n := number(k.rsplit("/", 1)[-1])) is not None), default=None)
        return (None if newest is None else newest[1]), hint in keys
    return make


def _next_entries(store: Store, number: Callable[[str], int | None]) -> Callable[[tuple[str | None, bool]],
                                                                                tuple[str | None, bool] | None]:
    """Grows a ``manifest/`` or ``wal/`` folder's newest entry (:func:`_newest_entry`) while it moves: that
    entry still there, then each next number's name while one is (a stat each: a writer numbers its
    manifest versions and, by the spec, its WAL entries without gaps, each put once, and GC prunes only
    older ones). None (list the folder): nothing known, that entry gone, or more than
    :data:`GROW_PROBES` new."""
    def grow(known: tuple[str | None, bool]) -> tuple[str | None, bool] | None:
        key, hinted = known
        n = None if key is None else number(key.rsplit("/", 1)[-1])
        if key is None or n is None or n > U64_MAX - GROW_PROBES or store.head(key) is None:
            return None  # a name at the top of the numbers (a forged one) has no next to stat: list
        folder, _, name = key.rpartition("/")
        for later in range(n + 1, n + GROW_PROBES + 1):
            after = f"{folder}/{bitrev64(later)}.{name.rpartition('.')[2]}"
            if store.head(after) is None:
                return key, hinted
            key = after
        return None
    return grow


def _walk_chosen(store: Store, m: ManifestFacts, listings: FolderListings
                 ) -> tuple[list[ObjectInfo], dict[str, _ShardFolders], dict[str, ShardState], str]:
    """On a disk: the objects the figures need, each shard's generation folders, the shard manifests
    read on the way, and the folders' names for the fingerprint.

    Walked: every folder above the merge mark (the merge's debt: bytes and times); one folder of
    each of :data:`_SAMPLED` generations GC may take, spread from the lowest to the highest (when
    the oldest was flushed, and the bytes a folder holds: the collectable bytes are estimated from
    them); the newest folder, and of ``manifest/`` and ``wal/`` the newest entry alone (by name:
    versions and positions grow), for when the shard was last written (a flush writes its key
    index after its manifest). The other folders are counted by name: a week of merged
    folders is some 350,000 names beside a busy writer, ten files each. The names, and what is made
    of them, are those kept while their folder stands still (``listings``: :mod:`memwal.fleet.folders`),
    so an idle table costs a stat a folder at every round, not a name a version, folder and entry.
    While a folder moves, what was made of it is grown: ``manifest/`` and ``wal/`` by a stat of each
    next name, the shard's folders by those its newest manifest names; a folder of the listing that
    the walk finds gone (GC took it) has the shard's folder listed again. The sampled folders' files
    are kept while each folder stands still (:meth:`FolderListings.walked`: merged, written once)."""
    root = f"{MEM_WAL_DIR}/"
    objects: list[ObjectInfo] = []
    named: dict[str, _ShardFolders] = {}
    states: dict[str, ShardState] = {}
    signature: list[str] = []
    for shard in listings.level(store, root)[1]:
        if shard.startswith("_"):
            continue  # our own folders (staging, jobs), as below
        named[shard] = folders = _walk_shard(store, m, listings, shard, objects, states)
        signature.append(f"\n{shard}/\t{folders.names}")
    return objects, named, states, "".join(signature)


def _walk_shard(store: Store, m: ManifestFacts, listings: FolderListings, shard: str,
                objects: list[ObjectInfo], states: dict[str, ShardState]) -> _ShardFolders:
    """One shard of :func:`_walk_chosen`: its folders, the objects walked added to ``objects``."""
    prefix = f"{MEM_WAL_DIR}/{shard}/"
    hint = version_hint_key(shard)  # the writer's, written after each manifest version

    found: dict[str, tuple[str | None, bool]] = {}

    def newest(folder: str, number: Callable[[str], int | None]) -> tuple[str | None, bool]:
        if folder not in found:  # once a probe: growing a moving folder's costs a stat or two
            found[folder] = listings.derived(store, f"{prefix}{folder}/", "newest", _newest_entry(number, hint),
                                             _next_entries(store, number))
        return found[folder]

    def grow(folders: _ShardFolders) -> _ShardFolders | None:
        state = _newest_state(store, shard, newest("manifest", parse_manifest_name)[0], states)
        return None if state is None else folders.grown(state)

    merged, caught = m.compacted.get(shard, 0), _caught(m, shard)
    for _ in range(2):
        folders = listings.derived(store, prefix, "generations", _shard_folders, grow)
        last = [newest_folder] if (newest_folder := folders.newest) else []
        sample = folders.sample(caught)  # caught up, so merged: their files are all written
        listed = {*sample, *last} - {n for _, n in folders.added}
        walked = {name: listings.walked(store, f"{prefix}{name}/") if name in sample
                  else list(store.list(f"{prefix}{name}/")) for name in sorted({*folders.above(merged), *listed})}
        if all(walked[name] for name in listed):
            break
        listings.forget(store, prefix)  # a folder of the listing gone: GC took some, list them again
    objects += (o for files in walked.values() for o in files)
    for folder, number in (("manifest", parse_manifest_name), ("wal", parse_wal_name)):
        if folder in folders.dirs:
            key, hinted = newest(folder, number)
            for k in ([] if key is None else [key]) + [hint] * hinted:
                if (info := store.head(k)) is not None:
                    objects.append(info)
    return folders


def _newest_state(store: Store, shard: str, key: str | None, states: dict[str, ShardState]) -> ShardState | None:
    """The shard's manifest at ``key`` (its newest), read once a probe (None: none, or unreadable:
    the figures then report it, from :func:`_shards`)."""
    version = None if key is None else parse_manifest_name(key.rsplit("/", 1)[-1])
    if key is None or version is None:
        return None
    if (known := states.get(shard)) is not None and known.version == version:
        return known
    try:
        states[shard] = decode_shard_manifest(store.get(key), shard_id=shard, version=version,
                                              where=store.uri_for(key))
    except (NotFoundError, BadInputError):
        return None
    return states[shard]


def _shards(store: Store, m: ManifestFacts, listing: list[ObjectInfo],
            named: dict[str, _ShardFolders] | None = None,
            states: dict[str, ShardState] | None = None) -> tuple[tuple[ShardFacts, ...], tuple[str, ...]]:
    """Per shard, from the listing (and the latest manifest of a shard with unmerged data).
    ``named``: every generation folder per shard, when the listing walked only some
    (:func:`_walk_chosen`): GC's figures count the folders and estimate the bytes from those walked.
    ``states``: shard manifests the walk read already."""
    folders: dict[str, dict[int, list[ObjectInfo]]] = {}
    manifests: dict[str, list[tuple[int, ObjectInfo]]] = {}
    written: dict[str, float] = {}
    for o in listing:
        parts = o.key.split("/")
        if len(parts) < 4 or parts[1].startswith("_"):
            continue  # our own folders (staging, ...) and loose files
        shard, top = parts[1], parts[2]
        written[shard] = max(written.get(shard, 0.0), o.mtime)
        if top == "manifest":
            version = parse_manifest_name(parts[3])
            if version is not None:
                manifests.setdefault(shard, []).append((version, o))
            continue
        g = parse_generation_dir(top)
        if g is not None:
            folders.setdefault(shard, {}).setdefault(g, []).append(o)
    named = named or {}
    out, problems = [], []
    for shard in sorted(set(folders) | set(manifests) | {s for s, f in named.items() if f.any}):
        merged = m.compacted.get(shard, 0)
        gens = folders.get(shard, {})
        unmerged = {g: (sum(o.size for o in objs), min(o.mtime for o in objs)) for g, objs in gens.items()
                    if g > merged}
        caught = _caught(m, shard)
        collectable = {g: objs for g, objs in gens.items() if g <= caught}
        size = sum(o.size for objs in collectable.values() for o in objs)
        count = len(collectable)
        if shard in named:  # one folder walked of each sampled generation: bytes a folder, times the folders
            count, held = named[shard].held(caught)
            size = size * held // len(collectable) if collectable else 0
        versions = sorted(manifests.get(shard, []), key=lambda v: v[0])
        rows = listed = listed_merged = 0
        if not versions:
            problems.append(f"shard {shard}: no manifest")
        elif gens or (shard in named and named[shard].any):  # with no folder, nothing a reader could open
            version, obj = versions[-1]
            try:
                state = (states or {}).get(shard)
                if state is None or state.version != version:
                    state = decode_shard_manifest(store.get(obj.key), shard_id=shard, version=version,
                                                  where=store.uri_for(obj.key))
                # rows a manifest lacks (Lance 9 writers) are left out of this estimate
                rows = sum(fg.physical_rows or 0 for fg in state.flushed if fg.generation > merged)
                listed = len(state.flushed)
                listed_merged = sum(1 for fg in state.flushed if fg.generation <= merged)
            except (NotFoundError, BadInputError) as exc:
                problems.append(f"shard {shard}: {exc}")
        out.append(ShardFacts(
            shard, merged, unmerged, rows, count, size,
            min((o.mtime for objs in collectable.values() for o in objs), default=None),
            {i: max(0, merged - m.catchup.get(i, {}).get(shard, 0)) for i in m.indexes},
            versions[-1][1].mtime if versions else None, written.get(shard), listed, listed_merged))
    return tuple(out), tuple(problems)


__all__ = ["ManifestFacts", "ShardFacts", "TableFacts", "latest_manifest", "probe"]
