"""The cheap reads a fleet plans from: what a table needs, from listings and one manifest.

Per table, in requests on an object store:

1. one listing of ``_versions/`` (its first page: V2 manifest names sort newest first) gives
   the latest version's key;
2. the latest manifest (merge progress, catch-up, the published snapshot's time, fragments,
   index coverage) is read only when its key or ETag differs from the cached one;
3. the shards' keys are listed around ``_mem_wal/_jobs/`` (:meth:`Store.list_around`: our
   run history and leases are never paged through): every generation folder with its bytes
   and times, every shard manifest version;
4. only a shard holding unmerged generations has its latest manifest read (their rows).

The listings make a fingerprint: a table whose fingerprint is the cached one reuses its
cached facts, so an idle table costs the two listings (two requests while ``_mem_wal/``'s
keys fit on a page) and nothing more. ``requests`` are counted by the store as they are sent
(none on a local disk).
Everything here is an estimate for ranking: each job plans again from the real state, with
every gate; a wrong figure can only order the work differently, never do unsafe work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

from pyroaring import BitMap

from memwal.errors import BadInputError, NotFoundError
from memwal.store import ObjectInfo, Store
from memwal.table.manifest import TableManifest, decode_table_manifest, fragment_stats, maintained_indexes
from memwal.table.naming import (
    MEM_WAL_DIR,
    MEM_WAL_INDEX_NAME,
    V2_NAME_DIGITS,
    parse_generation_dir,
    parse_manifest_name,
    table_version_of,
)
from memwal.table.shards import decode_shard_manifest

log = logging.getLogger(__name__)

_JOBS_FOLDER = "_jobs"


@dataclass(frozen=True)
class ShardFacts:
    """One shard, as its listing and the table manifest tell it."""

    shard_id: str
    merged: int
    #: Generation number -> (bytes on storage, oldest file time) of every generation folder
    #: above the merged one, and the rows of those the shard manifest lists.
    unmerged: dict[int, tuple[int, float]]
    unmerged_rows: int
    #: Generation folders at or below every index's catch-up (GC may take them), their bytes,
    #: and the oldest one's flush time (none can go before it is older than GC's retention).
    collectable: int
    collectable_bytes: int
    collectable_since: float | None
    #: Generations merged but not yet indexed, per maintained index.
    index_behind: dict[str, int]
    #: When its newest manifest was written (a writer's last flush).
    last_flush: float | None


@dataclass(frozen=True)
class TableFacts:
    """What the fleet knows of one table (see the module docstring)."""

    uri: str
    version: int
    mem_wal: bool
    maintained_indexes: tuple[str, ...]
    shards: tuple[ShardFacts, ...]
    fragments: int
    live_rows: int
    deleted_rows: int
    unindexed_fraction: dict[str, float]
    snapshot_at: float | None
    fingerprint: str
    problems: tuple[str, ...] = ()
    #: Requests this probe sent (listings and reads), for the fleet's request budget.
    requests: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ManifestFacts:
    """What the fleet takes from one table manifest (plain data: it is cached, and saved)."""

    tag: str  # the manifest's key and ETag
    version: int
    mem_wal: bool
    indexes: tuple[str, ...]
    compacted: dict[str, int]
    catchup: dict[str, dict[str, int]]
    snapshot_at: float | None
    fragments: int
    live_rows: int
    deleted_rows: int
    unindexed_fraction: dict[str, float]


@dataclass
class ProbeCache:
    """Manifest facts and table facts of earlier probes, by table (thread-safe); saved to and
    loaded from a JSON file so that separate runs (an Airflow task each tick) share it. A cache
    is only ever used under the same manifest tag or listing fingerprint: it saves reads, it
    never stands in for a table that changed. An unreadable cache file is ignored whole."""

    manifests: dict[str, ManifestFacts] = field(default_factory=dict)
    facts: dict[str, TableFacts] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def known_tables(self) -> frozenset[str]:
        """The tables earlier probes found (discovery need not list their folders again)."""
        with self._lock:
            return frozenset(self.manifests)

    def get_facts(self, uri: str, fingerprint: str) -> TableFacts | None:
        with self._lock:
            cached = self.facts.get(uri)
        return cached if cached is not None and cached.fingerprint == fingerprint else None

    def put_facts(self, facts: TableFacts) -> None:
        with self._lock:
            self.facts[facts.uri] = facts

    def get_manifest(self, uri: str, tag: str) -> ManifestFacts | None:
        with self._lock:
            cached = self.manifests.get(uri)
        return cached if cached is not None and cached.tag == tag else None

    def put_manifest(self, uri: str, facts: ManifestFacts) -> None:
        with self._lock:
            self.manifests[uri] = facts

    def save(self, path: str) -> None:
        """Write the cache to ``path`` atomically (a file of our own: never a link followed)."""
        from memwal.inspect.page import write_chunks

        with self._lock:
            doc = {"format": 1, "manifests": {u: asdict(m) for u, m in self.manifests.items()},
                   "facts": {u: asdict(f) for u, f in self.facts.items()}}
        write_chunks(path, [json.dumps(doc)])

    @classmethod
    def load(cls, path: str | None) -> ProbeCache:
        cache = cls()
        if not path or not os.path.isfile(path):
            return cache
        try:
            with open(path, encoding="utf-8") as f:
                if os.fstat(f.fileno()).st_size > MAX_CACHE_BYTES:  # refused before a byte is read
                    raise ValueError(f"larger than {MAX_CACHE_BYTES:,} bytes")
                text = f.read(MAX_CACHE_BYTES + 1)
            if len(text) > MAX_CACHE_BYTES:
                raise ValueError(f"larger than {MAX_CACHE_BYTES:,} bytes")
            doc = json.loads(text)
            if doc.get("format") != 1:
                return cache
            for uri, m in doc["manifests"].items():
                cache.manifests[uri] = ManifestFacts(**{**m, "indexes": tuple(m["indexes"])})
            for uri, t in doc["facts"].items():
                shards = tuple(ShardFacts(**{**s, "unmerged": {int(g): tuple(v) for g, v in s["unmerged"].items()}})
                               for s in t["shards"])
                cache.facts[uri] = TableFacts(**{**t, "shards": shards, "maintained_indexes":
                                                 tuple(t["maintained_indexes"]), "problems": tuple(t["problems"])})
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring the fleet cache %s: %s", path, exc)
            return cls()
        return cache


#: Largest cache file read (some 2 KB a table).
MAX_CACHE_BYTES = 256 << 20


def _latest_manifest(store: Store) -> ObjectInfo:
    """The latest table manifest's listing entry: the first manifest of ``_versions/`` in key
    order (V2 names), else the highest version of a full listing (older tables). Names are
    read by the one rule of ``_versions/`` (:func:`memwal.table.naming.table_version_of`): a
    stray file there is no manifest."""
    first: ObjectInfo | None = None
    for obj in store.list("_versions/", recursive=False):
        if table_version_of(obj.key) is not None:
            first = obj
            break
    if first is None:
        raise NotFoundError(f"{store.uri_for('_versions/')}: no table manifest: not a Lance table")
    if len(first.key.rsplit("/", 1)[-1].removesuffix(".manifest")) == V2_NAME_DIGITS:
        return first
    manifests = [(v, o) for o in store.list("_versions/", recursive=False)
                 if (v := table_version_of(o.key)) is not None]
    return max(manifests, key=lambda p: p[0])[1]


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


def _manifest_facts(store: Store, latest: ObjectInfo, tag: str) -> ManifestFacts:
    data = store.get(latest.key)
    where = store.uri_for(latest.key)
    manifest = decode_table_manifest(data, key=latest.key, where=where)
    stats = fragment_stats(data, where=where)
    mem_wal = manifest.mem_wal is not None
    indexes = tuple(i for i in maintained_indexes(manifest) if i != MEM_WAL_INDEX_NAME) if mem_wal else ()
    snapshot = manifest.mem_wal.snapshot_ts_millis if manifest.mem_wal is not None else 0
    return ManifestFacts(tag, manifest.version, mem_wal, indexes, dict(manifest.compacted),
                         {k: dict(v) for k, v in manifest.index_catchup.items()}, snapshot / 1000 if snapshot else None,
                         stats.fragments, stats.physical_rows - stats.deleted_rows, stats.deleted_rows,
                         _index_coverage(manifest, stats.live_rows, indexes))


def probe(uri: str, store: Store, cache: ProbeCache | None = None) -> TableFacts:
    """The facts of the table at ``uri`` (see the module docstring)."""
    cache = cache or ProbeCache()
    sent = store.requests_sent
    latest = _latest_manifest(store)
    tag = f"{latest.key}:{latest.etag}"
    m = cache.get_manifest(uri, tag)
    if m is None:
        m = _manifest_facts(store, latest, tag)
        cache.put_manifest(uri, m)
    if not m.mem_wal:
        return TableFacts(uri, m.version, False, (), (), m.fragments, m.live_rows, m.deleted_rows, {}, None, tag,
                          requests=store.requests_sent - sent)
    listing = list(store.list_around(f"{MEM_WAL_DIR}/", _JOBS_FOLDER))
    digest = hashlib.sha1(tag.encode())
    for o in listing:
        digest.update(f"\n{o.key}\t{o.size}\t{o.etag}".encode())
    fingerprint = digest.hexdigest()
    known = cache.get_facts(uri, fingerprint)
    if known is not None:
        return replace(known, requests=store.requests_sent - sent)
    shards, problems = _shards(store, m, listing)
    facts = TableFacts(uri, m.version, True, m.indexes, shards, m.fragments, m.live_rows, m.deleted_rows,
                       m.unindexed_fraction, m.snapshot_at, fingerprint, problems, store.requests_sent - sent)
    cache.put_facts(facts)
    return facts


def _shards(store: Store, m: ManifestFacts,
            listing: list[ObjectInfo]) -> tuple[tuple[ShardFacts, ...], tuple[str, ...]]:
    """Per shard, from the listing (and the latest manifest of a shard with unmerged data)."""
    folders: dict[str, dict[int, list[ObjectInfo]]] = {}
    manifests: dict[str, list[tuple[int, ObjectInfo]]] = {}
    for o in listing:
        parts = o.key.split("/")
        if len(parts) < 4 or parts[1].startswith("_"):
            continue  # our own folders (staging, ...) and loose files
        shard, top = parts[1], parts[2]
        if top == "manifest":
            version = parse_manifest_name(parts[3])
            if version is not None:
                manifests.setdefault(shard, []).append((version, o))
            continue
        g = parse_generation_dir(top)
        if g is not None:
            folders.setdefault(shard, {}).setdefault(g, []).append(o)
    out, problems = [], []
    for shard in sorted(set(folders) | set(manifests)):
        merged = m.compacted.get(shard, 0)
        gens = folders.get(shard, {})
        unmerged = {g: (sum(o.size for o in objs), min(o.mtime for o in objs)) for g, objs in gens.items()
                    if g > merged}
        caught = min([m.catchup.get(i, {}).get(shard, 0) for i in m.indexes] + [merged])
        collectable = {g: objs for g, objs in gens.items() if g <= caught}
        versions = sorted(manifests.get(shard, []), key=lambda v: v[0])
        rows = 0
        if not versions:
            problems.append(f"shard {shard}: no manifest")
        elif unmerged:
            version, obj = versions[-1]
            try:
                state = decode_shard_manifest(store.get(obj.key), shard_id=shard, version=version,
                                              where=store.uri_for(obj.key))
                # rows a manifest lacks (Lance 9 writers) are left out of this estimate
                rows = sum(fg.physical_rows or 0 for fg in state.flushed if fg.generation > merged)
            except (NotFoundError, BadInputError) as exc:
                problems.append(f"shard {shard}: {exc}")
        out.append(ShardFacts(
            shard, merged, unmerged, rows, len(collectable), sum(o.size for objs in collectable.values() for o in objs),
            min((o.mtime for objs in collectable.values() for o in objs), default=None),
            {i: max(0, merged - m.catchup.get(i, {}).get(shard, 0)) for i in m.indexes},
            versions[-1][1].mtime if versions else None))
    return tuple(out), tuple(problems)


__all__ = ["ManifestFacts", "ProbeCache", "ShardFacts", "TableFacts", "probe"]
