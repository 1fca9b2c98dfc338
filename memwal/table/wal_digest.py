"""What WAL entries' headers said, remembered between GC runs (issue 41).

GC's gate (e) needs, for a WAL entry it cannot place from the shard manifest and the listing,
the generation (or fence-sentinel epoch) in the entry's schema metadata: a ranged GET each.
An entry never changes once written, so what its header said is remembered here, beside the
retained-progress digest: ``_mem_wal/_jobs/wal-headers.json``. A header is read once, ever.

Why this cannot widen what GC deletes:
- An entry is used only for the object it was read from: the same key *and* the same ETag in
  this plan's listing. An entry rewritten (a writer reusing a position GC freed) has another
  ETag and is read again.
- It names only what a header said, never a key to read or delete.
- Anything malformed (not JSON, a wrong type, a negative generation) discards the whole digest:
  GC then reads the headers it needs, as without one. It is a cache, never a reason to fail.
- It is written last in a run, with only the entries still on storage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memwal.errors import MemWalError
from memwal.store import Store
from memwal.table.naming import JOBS_DIR
from memwal.table.progress_digest import load_cache

log = logging.getLogger(__name__)

DIGEST_KEY = f"{JOBS_DIR}/wal-headers.json"
FORMAT = 1


@dataclass(frozen=True)
class Header:
    """What one WAL entry's schema metadata says."""

    etag: str
    generation: int | None  # None for a fence sentinel, 0 (UNLABELLED) when the header names none
    writer_epoch: int


class WalDigest:
    """Remembered headers by key; an entry counts only under the same ETag."""

    def __init__(self, entries: Mapping[str, Header] | None = None) -> None:
        self._by_key = dict(entries or {})

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: str, etag: str) -> Header | None:
        h = self._by_key.get(key)
        return h if h is not None and etag and h.etag == etag else None

    def items(self) -> Iterable[tuple[str, Header]]:
        return self._by_key.items()


def load_wal_digest(store: Store) -> WalDigest:
    """The digest in ``store``; an empty one when there is none or it is unusable (logged)."""
    return load_cache(store, DIGEST_KEY, lambda doc: WalDigest(_decode(doc)), WalDigest())


def save_wal_digest(store: Store, headers: Mapping[str, Header], before: WalDigest) -> bool:
    """Remember ``headers`` (entries still on storage) unless the digest says exactly that;
    True when written. Never raises: a run that cannot leave its digest has still done its work."""
    if len(headers) == len(before) and all(before.get(k, h.etag) == h for k, h in headers.items()):
        return False
    try:
        store.put(DIGEST_KEY, json.dumps(_encode(headers), separators=(",", ":")).encode())
        return True
    except (MemWalError, OSError) as exc:
        log.warning("could not write %s: %s", store.uri_for(DIGEST_KEY), exc)
        return False


def _encode(headers: Mapping[str, Header]) -> dict[str, Any]:
    keys = sorted(headers)
    return {"format": FORMAT, "keys": keys, "etags": [headers[k].etag for k in keys],
            "generations": [headers[k].generation for k in keys], "epochs": [headers[k].writer_epoch for k in keys]}


def _decode(doc: dict[str, Any]) -> dict[str, Header]:
    if doc["format"] != FORMAT:
        raise ValueError(f"format {doc['format']!r}, not {FORMAT}")
    keys, etags, gens, epochs = (doc[c] for c in ("keys", "etags", "generations", "epochs"))
    if not (isinstance(keys, list) and isinstance(etags, list) and isinstance(gens, list)
            and isinstance(epochs, list) and len(keys) == len(etags) == len(gens) == len(epochs)):
        raise ValueError("columns are not lists of one length")
    if not (all(type(k) is str for k in keys) and all(type(e) is str and e for e in etags)
            and all(g is None or (type(g) is int and g >= 0) for g in gens)
            and all(type(e) is int and e >= 0 for e in epochs)):
        raise ValueError("an entry is malformed")
    return {k: Header(e, g, p) for k, e, g, p in zip(keys, etags, gens, epochs, strict=True)}


__all__ = ["DIGEST_KEY", "Header", "WalDigest", "load_wal_digest", "save_wal_digest"]
