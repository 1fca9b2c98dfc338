"""The probe cache: what earlier probes learnt of each table, shared by every machine of a fleet.

A cache entry is only ever used under the same manifest tag (its key and ETag) or the same
listing fingerprint (:mod:`memwal.fleet.probe`): it saves reads, it never stands in for a table
that changed. It is saved whole to a file or an object (``--cache s3://lake/fleet/cache.json``,
or the state folder's ``cache.json``: :mod:`memwal.fleet.state`) and written back only when a
plan changed it, so a second plan of an unchanged fleet, on any machine, costs one read of it
and no write. Storage is untrusted input: the cache is capped in bytes and in values and read
by the one bounded JSON reader (:mod:`memwal.core.json_doc`); an unreadable cache is ignored
whole (a cold plan), and an entry whose every field is not of its type (a list where a mapping
belongs, a negative count) is dropped alone, with a warning, its table probed afresh: never
fatal, and never one table's entry for another's plan.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.core.json_doc import JsonDocError, finite, load_json
from memwal.errors import MemWalError, NotFoundError
from memwal.fleet.facts import ManifestFacts, ShardFacts, TableFacts
from memwal.fleet.folders import FolderListings
from memwal.fleet.state import CACHE, MAX_BYTES, FleetState, object_at

if TYPE_CHECKING:
    from memwal.store import Store

log = logging.getLogger(__name__)

#: Largest cache read (the state's cap for it).
MAX_CACHE_BYTES = MAX_BYTES[CACHE]
#: Most values a cache read may hold (some 100 a table, more for a shard with a long backlog):
#: a cache of small objects costs up to some 70 bytes of memory a value, so its parse stays
#: near 250 MB or under whatever it holds (issue 56: 200 MB of ``{}`` took a plan past 2.5 GB).
MAX_CACHE_VALUES = 4_000_000
FORMAT = 4


@dataclass
class ProbeCache:
    """Manifest facts and table facts of earlier probes, by table (thread-safe)."""

    manifests: dict[str, ManifestFacts] = field(default_factory=dict)
    facts: dict[str, TableFacts] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: The digest of the bytes it was loaded from (an unchanged cache is not written back).
    _loaded: str | None = field(default=None, repr=False)
    #: Folder listings a probe on a disk reads again only when the folder changed (in memory only:
    #: never saved, each process keeps its own).
    folders: FolderListings = field(default_factory=FolderListings, repr=False, compare=False)

    def known_tables(self) -> frozenset[str]:
        """The tables earlier probes found (discovery need not list their folders again)."""
        with self._lock:
            return frozenset(self.manifests)

    def get_facts(self, uri: str, fingerprint: str) -> TableFacts | None:
        cached = self.last_facts(uri)
        return cached if cached is not None and cached.fingerprint == fingerprint else None

    def put_facts(self, facts: TableFacts) -> None:
        with self._lock:
            self.facts[facts.uri] = facts

    def last_facts(self, uri: str) -> TableFacts | None:
        """The facts last made of ``uri``, whatever its fingerprint (what a probe carries forward)."""
        with self._lock:
            return self.facts.get(uri)

    def last_manifest(self, uri: str) -> ManifestFacts | None:
        """The manifest facts last seen for ``uri``, whatever its tag (what changed since)."""
        with self._lock:
            return self.manifests.get(uri)

    def get_manifest(self, uri: str, tag: str) -> ManifestFacts | None:
        cached = self.last_manifest(uri)
        return cached if cached is not None and cached.tag == tag else None

    def put_manifest(self, uri: str, facts: ManifestFacts) -> None:
        with self._lock:
            self.manifests[uri] = facts

    def keep_only(self, tables: frozenset[str]) -> None:
        """Forget the tables no source holds any more (a dropped table's entry would grow the cache)."""
        with self._lock:
            for part in (self.manifests, self.facts):
                for uri in [u for u in part if u not in tables]:
                    del part[uri]

    # -- bytes

    def to_bytes(self) -> bytes:
        with self._lock:
            doc = {"format": FORMAT, "manifests": {u: asdict(m) for u, m in self.manifests.items()},
                   "facts": {u: asdict(f) for u, f in self.facts.items()}}
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    @property
    def changed(self) -> bool:
        """Whether it differs from what it was loaded from."""
        return hashlib.sha256(self.to_bytes()).hexdigest() != self._loaded

    @classmethod
    def from_bytes(cls, data: bytes | None, where: str) -> ProbeCache:
        cache = cls()
        if not data:
            return cache
        try:
            doc = load_json(data, max_values=MAX_CACHE_VALUES)
        except JsonDocError as exc:
            log.warning("ignoring the fleet cache %s: %s", where, exc)
            return cache
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            log.info("fleet cache %s: another format: starting cold", where)
            return cache
        manifests, facts = doc.get("manifests"), doc.get("facts")
        for uri, entry in (manifests.items() if isinstance(manifests, dict) else ()):
            if (m := _manifest(entry)) is not None:
                cache.manifests[uri] = m
        for uri, entry in (facts.items() if isinstance(facts, dict) else ()):
            if (t := _facts(entry)) is not None and t.uri == uri:
                cache.facts[uri] = t
        dropped = sum(len(part) for part in (manifests, facts) if isinstance(part, dict)) - len(cache.manifests) \
            - len(cache.facts)
        if dropped:
            log.warning("fleet cache %s: %d entries not of their shape: dropped (those tables are probed afresh)",
                        where, dropped)
        cache._loaded = hashlib.sha256(data).hexdigest()
        return cache

    # -- where it lives

    @classmethod
    def load(cls, location: str | None, storage_options: Mapping[str, str] | None = None) -> ProbeCache:
        """The cache at a file path or object URI (None: an empty cache); unreadable: empty."""
        if not location:
            return cls()
        store, key = object_at(location, storage_options)
        return cls._read(store, key, location)

    @classmethod
    def _read(cls, store: Store, key: str, where: str) -> ProbeCache:
        try:
            data = store.get(key, max_bytes=MAX_CACHE_BYTES)
        except NotFoundError:
            return cls()
        except (MemWalError, OSError) as exc:
            log.warning("ignoring the fleet cache %s: %s", where, exc)
            return cls()
        return cls.from_bytes(data, where)

    def save(self, location: str, storage_options: Mapping[str, str] | None = None) -> bool:
        """Write the cache to a file path or object URI when it changed; whether it wrote."""
        store, key = object_at(location, storage_options)
        return self._write(store, key)

    def _write(self, store: Store, key: str) -> bool:
        data = self.to_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._loaded:
            return False
        store.put(key, data)
        self._loaded = digest
        return True

    @classmethod
    def of_state(cls, state: FleetState) -> ProbeCache:
        return cls._read(state.store, CACHE, f"{state.uri}/{CACHE}")

    def save_to_state(self, state: FleetState) -> bool:
        return self._write(state.store, CACHE)


# -- entries, checked field by field (a wrong type drops the entry, never the cache)

def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v: Any) -> bool:
    return finite(v) is not None


def _maybe_number(v: Any) -> bool:
    return v is None or _number(v)


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _map(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(check(x) for x in v.values())


_MANIFEST_FIELDS: dict[str, Callable[[Any], bool]] = {
    "tag": _text, "version": _count, "mem_wal": lambda v: isinstance(v, bool), "indexes": _texts,
    "compacted": _map(_count), "catchup": _map(_map(_count)), "snapshot_at": _maybe_number, "fragments": _count,
    "live_rows": _count, "deleted_rows": _count, "unindexed_fraction": _map(_number), "merged_at": _map(_number)}
_SHARD_FIELDS: dict[str, Callable[[Any], bool]] = {
    "shard_id": _text, "merged": _count,
    "unmerged": lambda v: isinstance(v, dict) and all(
        isinstance(g, str) and g.isdigit() and len(g) <= 19 and isinstance(t, list) and len(t) == 2
        and _count(t[0]) and _number(t[1]) for g, t in v.items()),
    "unmerged_rows": _count, "collectable": _count, "collectable_bytes": _count, "collectable_since": _maybe_number,
    "index_behind": _map(_count), "last_flush": _maybe_number, "last_write": _maybe_number,
    "listed": _count, "listed_merged": _count}
_TABLE_FIELDS: dict[str, Callable[[Any], bool]] = {
    "uri": _text, "version": _count, "mem_wal": lambda v: isinstance(v, bool), "maintained_indexes": _texts,
    "shards": lambda v: isinstance(v, list) and all(_fits(s, _SHARD_FIELDS) for s in v), "fragments": _count,
    "live_rows": _count, "deleted_rows": _count, "unindexed_fraction": _map(_number), "snapshot_at": _maybe_number,
    "fingerprint": _text, "problems": _texts, "requests": _count, "merged_at": _map(_number),
    "listed_at": _maybe_number}


def _fits(entry: Any, fields: Mapping[str, Callable[[Any], bool]]) -> bool:
    """Whether ``entry`` is a mapping of exactly these fields, each of its type."""
    return isinstance(entry, dict) and set(entry) == set(fields) and all(ok(entry[k]) for k, ok in fields.items())


def _manifest(m: Any) -> ManifestFacts | None:
    if not _fits(m, _MANIFEST_FIELDS):
        return None
    return ManifestFacts(**{**m, "indexes": tuple(m["indexes"])})


def _facts(t: Any) -> TableFacts | None:
    if not _fits(t, _TABLE_FIELDS):
        return None
    shards = tuple(ShardFacts(**{**s, "unmerged": {int(g): (v[0], float(v[1])) for g, v in s["unmerged"].items()}})
                   for s in t["shards"])
    return TableFacts(**{**t, "shards": shards, "maintained_indexes": tuple(t["maintained_indexes"]),
                         "problems": tuple(t["problems"])})


__all__ = ["MAX_CACHE_BYTES", "MAX_CACHE_VALUES", "ProbeCache"]
