"""The probe cache: what earlier probes learnt of each table, shared by every machine of a fleet.

A cache entry is only ever used under the same manifest tag (its key and ETag) or the same
listing fingerprint (:mod:`memwal.fleet.probe`): it saves reads, it never stands in for a table
that changed. It is saved whole to a file or an object (``--cache s3://lake/fleet/cache.json``,
or the state folder's ``cache.json``: :mod:`memwal.fleet.state`) and written back only when a
plan changed it, so a second plan of an unchanged fleet, on any machine, costs one read of it
and no write. An unreadable cache is ignored whole (a cold plan), never fatal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from memwal.errors import MemWalError, NotFoundError
from memwal.fleet.facts import ManifestFacts, ShardFacts, TableFacts

if TYPE_CHECKING:
    from memwal.fleet.state import FleetState
    from memwal.store import Store

log = logging.getLogger(__name__)

#: Largest cache read (some 2 KB a table).
MAX_CACHE_BYTES = 256 << 20
FORMAT = 2


@dataclass
class ProbeCache:
    """Manifest facts and table facts of earlier probes, by table (thread-safe)."""

    manifests: dict[str, ManifestFacts] = field(default_factory=dict)
    facts: dict[str, TableFacts] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: The digest of the bytes it was loaded from (an unchanged cache is not written back).
    _loaded: str | None = field(default=None, repr=False)

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
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                log.info("fleet cache %s: another format: starting cold", where)
                return cache
            for uri, m in doc["manifests"].items():
                cache.manifests[uri] = ManifestFacts(**{**m, "indexes": tuple(m["indexes"])})
            for uri, t in doc["facts"].items():
                shards = tuple(ShardFacts(**{**s, "unmerged": {int(g): tuple(v) for g, v in s["unmerged"].items()}})
                               for s in t["shards"])
                cache.facts[uri] = TableFacts(**{**t, "shards": shards, "maintained_indexes":
                                                 tuple(t["maintained_indexes"]), "problems": tuple(t["problems"])})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("ignoring the fleet cache %s: %s", where, exc)
            return cls()
        cache._loaded = hashlib.sha256(data).hexdigest()
        return cache

    # -- where it lives

    @classmethod
    def load(cls, location: str | None, storage_options: Mapping[str, str] | None = None) -> ProbeCache:
        """The cache at a file path or object URI (None: an empty cache); unreadable: empty."""
        if not location:
            return cls()
        from memwal.fleet.state import object_at

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
        from memwal.fleet.state import object_at

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
        from memwal.fleet.state import CACHE

        return cls._read(state.store, CACHE, f"{state.uri}/{CACHE}")

    def save_to_state(self, state: FleetState) -> bool:
        from memwal.fleet.state import CACHE

        return self._write(state.store, CACHE)


__all__ = ["MAX_CACHE_BYTES", "ProbeCache"]
