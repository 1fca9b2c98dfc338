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
   any age;
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

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from pyroaring import BitMap

from memwal.errors import BadInputError, NotFoundError, ReadError
from memwal.fleet.cache import ProbeCache
from memwal.fleet.facts import ManifestFacts, ShardFacts, TableFacts
from memwal.fleet.folders import FolderListings
from memwal.store import ObjectInfo, Store
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
    V2_NAME_DIGITS,
    parse_generation_dir,
    parse_manifest_name,
    parse_wal_name,
    table_version_of,
    version_hint_key,
)
from memwal.table.shards import decode_shard_manifest

log = logging.getLogger(__name__)

_JOBS_FOLDER = "_jobs"
#: Generation folders GC may take that a probe on a disk walks per shard, to estimate their bytes.
_SAMPLED = 8


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
    meanwhile: the caller lists)."""
    files, _ = listings.level(store, folder)
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


def probe(uri: str, store: Store, cache: ProbeCache | None = None, *, latest: ObjectInfo | None = None) -> TableFacts:
    """The facts of the table at ``uri`` (see the module docstring). ``latest``: the latest
    manifest's listing entry, when discovery listed ``_versions/`` a moment ago."""
    cache = cache or ProbeCache()
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
    named: dict[str, dict[str, int]] | None = None
    signature = ""
    if store.has_directories:
        listing, named, signature = _walk_chosen(store, m, cache.folders)
    else:
        listing = list(store.list_around(f"{MEM_WAL_DIR}/", _JOBS_FOLDER))
    digest = hashlib.sha1(tag.encode())
    for o in listing:
        digest.update(f"\n{o.key}\t{o.size}\t{o.etag}".encode())
    digest.update(signature.encode())
    fingerprint = digest.hexdigest()
    known = cache.get_facts(uri, fingerprint)
    if known is not None:
        return replace(known, requests=store.requests_sent - sent)
    shards, problems = _shards(store, m, listing, named)
    facts = TableFacts(uri, m.version, True, m.indexes, shards, m.fragments, m.live_rows, m.deleted_rows,
                       m.unindexed_fraction, m.snapshot_at, fingerprint, problems, store.requests_sent - sent,
                       dict(m.merged_at))
    cache.put_facts(facts)
    return facts


def _caught(m: ManifestFacts, shard: str) -> int:
    """The highest generation of ``shard`` every maintained index has caught up to (and merged)."""
    return min([m.catchup.get(i, {}).get(shard, 0) for i in m.indexes] + [m.compacted.get(shard, 0)])


@dataclass(frozen=True)
class _ShardFolders:
    """What a probe takes from the listing of a shard's folder, made once while it stands still."""

    dirs: frozenset[str]
    named: dict[str, int]  # generation folder -> generation
    by_generation: dict[int, list[str]]
    signature: str  # the folders' names, for the fingerprint


def _shard_folders(files: Sequence[str], dirs: Sequence[str]) -> _ShardFolders:
    named = {name: g for name in dirs if (g := parse_generation_dir(name)) is not None}
    by_generation: dict[int, list[str]] = {}
    for name, g in named.items():
        by_generation.setdefault(g, []).append(name)
    return _ShardFolders(frozenset(dirs), named, by_generation, "/".join(sorted(named)))


def _newest_entry(number: Callable[[str], int | None], hint: str) -> Callable[[Sequence[str], Sequence[str]],
                                                                          tuple[str | None, bool]]:
    """The newest entry of a ``manifest/`` or ``wal/`` listing by its number, and whether the
    writer's version hint is among them."""
    def make(keys: Sequence[str], dirs: Sequence[str]) -> tuple[str | None, bool]:
        newest = max(((n, k) for k in keys if (n := number(k.rsplit("/", 1)[-1])) is not None), default=None)
        return (None if newest is None else newest[1]), hint in keys
    return make


def _walk_chosen(store: Store, m: ManifestFacts,
                 listings: FolderListings) -> tuple[list[ObjectInfo], dict[str, dict[str, int]], str]:
    """On a disk: the objects the figures need, each shard's generation folders (name ->
    generation), and the folders' names for the fingerprint.

    Walked: every folder above the merge mark (the merge's debt: bytes and times); one folder of
    each of :data:`_SAMPLED` generations GC may take, spread from the lowest to the highest (when
    the oldest was flushed, and the bytes a folder holds: the collectable bytes are estimated from
    them); the newest folder, and of ``manifest/`` and ``wal/`` the newest entry alone (by name:
    versions and positions grow), for when the shard was last written (a flush writes its key
    index after its manifest). The other folders are counted by name: a week of merged
    folders is some 350,000 names beside a busy writer, ten files each. The names, and what is made
    of them, are those kept while their folder stands still (``listings``: :mod:`memwal.fleet.folders`),
    so an idle table costs a stat a folder at every round, not a name a version, folder and entry."""
    root = f"{MEM_WAL_DIR}/"
    objects: list[ObjectInfo] = []
    named: dict[str, dict[str, int]] = {}
    signature: list[str] = []
    for shard in listings.level(store, root)[1]:
        if shard.startswith("_"):
            continue  # our own folders (staging, jobs), as below
        prefix = f"{root}{shard}/"
        folders = listings.derived(store, prefix, "generations", _shard_folders)
        by_generation = folders.by_generation
        named[shard] = folders.named
        signature.append(f"\n{shard}/\t{folders.signature}")
        merged, caught = m.compacted.get(shard, 0), _caught(m, shard)
        collectable = sorted(g for g in by_generation if g <= caught)
        sample = collectable[::max(1, -(-len(collectable) // _SAMPLED))] + collectable[-1:]
        walked = {n for g, names in by_generation.items() if g > merged for n in names}
        walked |= {min(by_generation[g]) for g in [*sample, *([max(by_generation)] if by_generation else [])]}
        for name in sorted(walked):
            objects += store.list(f"{prefix}{name}/")
        hint = version_hint_key(shard)  # the writer's, written after each manifest version
        for folder, number in (("manifest", parse_manifest_name), ("wal", parse_wal_name)):
            if folder in folders.dirs:
                newest, hinted = listings.derived(store, f"{prefix}{folder}/", "newest", _newest_entry(number, hint))
                for key in ([] if newest is None else [newest]) + [hint] * hinted:
                    if (info := store.head(key)) is not None:
                        objects.append(info)
    return objects, named, "".join(signature)


def _shards(store: Store, m: ManifestFacts, listing: list[ObjectInfo],
            named: dict[str, dict[str, int]] | None = None) -> tuple[tuple[ShardFacts, ...], tuple[str, ...]]:
    """Per shard, from the listing (and the latest manifest of a shard with unmerged data).
    ``named``: every generation folder per shard (name -> generation), when the listing walked only some
    (:func:`_walk_chosen`): GC's figures count the names and estimate the bytes from those walked."""
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
    numbers = {shard: list(generations.values()) for shard, generations in (named or {}).items()}
    out, problems = [], []
    for shard in sorted(set(folders) | set(manifests) | {s for s, gs in numbers.items() if gs}):
        merged = m.compacted.get(shard, 0)
        gens = folders.get(shard, {})
        unmerged = {g: (sum(o.size for o in objs), min(o.mtime for o in objs)) for g, objs in gens.items()
                    if g > merged}
        caught = _caught(m, shard)
        collectable = {g: objs for g, objs in gens.items() if g <= caught}
        size = sum(o.size for objs in collectable.values() for o in objs)
        if named is not None:  # one folder walked of each sampled generation: bytes a folder, times the folders
            held = [g for g in numbers.get(shard, ()) if g <= caught]
            size = size * len(held) // len(collectable) if collectable else 0
            collectable = {g: collectable.get(g, []) for g in held}
        versions = sorted(manifests.get(shard, []), key=lambda v: v[0])
        rows = listed = listed_merged = 0
        if not versions:
            problems.append(f"shard {shard}: no manifest")
        elif gens or numbers.get(shard):  # with no folder on storage, nothing can be listed that a reader could open
            version, obj = versions[-1]
            try:
                state = decode_shard_manifest(store.get(obj.key), shard_id=shard, version=version,
                                              where=store.uri_for(obj.key))
                # rows a manifest lacks (Lance 9 writers) are left out of this estimate
                rows = sum(fg.physical_rows or 0 for fg in state.flushed if fg.generation > merged)
                listed = len(state.flushed)
                listed_merged = sum(1 for fg in state.flushed if fg.generation <= merged)
            except (NotFoundError, BadInputError) as exc:
                problems.append(f"shard {shard}: {exc}")
        out.append(ShardFacts(
            shard, merged, unmerged, rows, len(collectable), size,
            min((o.mtime for objs in collectable.values() for o in objs), default=None),
            {i: max(0, merged - m.catchup.get(i, {}).get(shard, 0)) for i in m.indexes},
            versions[-1][1].mtime if versions else None, written.get(shard), listed, listed_merged))
    return tuple(out), tuple(problems)


__all__ = ["ManifestFacts", "ShardFacts", "TableFacts", "latest_manifest", "probe"]
