"""What each retained version had merged, remembered between GC runs (issue 23).

Gate (c) needs the merge progress of every version a reader may still open (:mod:`memwal.table.retained`),
and the only place that progress lives is each version's manifest: without this digest every gc
plan reads every retained version's manifest, a GET each on an object store
(docs/decisions/0015-retained-progress-once.md). A manifest never changes once committed, so
what it says can be remembered: a GC run that deletes leaves
``_mem_wal/_jobs/retained-progress.json`` behind, and the next plan (its dry run included) reads
from the manifests only the versions committed since, the versions it has work for.

Why this cannot hide a holder:
- An entry is used only for the manifest it was read from: the same key *and* the same ETag
  from this plan's listing (size, mtime and inode on a disk, the content's ETag on an object
  store). A branch deleted and made again reuses keys, never the ETags, so its manifests are read.
- The digest names only progress values and versions, never a key to read or delete: a stale
  entry is one that no listed manifest matches. A forged one (whoever writes the storage sees
  the keys and ETags) can say any progress: lower holds more back; higher is what that writer
  could do by deleting the folders outright. So an entry saves reads, never decides a verdict
  (issue 83): before a plan frees anything (a folder, a listing entry, a version) or raises an
  alarm (``progress-unproven``, a failing verify, a repair plan), or names a version as what holds
  a folder back, the entries that decide it are checked against their manifests
  (:func:`memwal.table.retained.vouch`); one that disagrees makes the plan read every manifest,
  and a whole GC run rewrites the digest from them (:meth:`ProgressDigest.same` compares what the
  entries say, not only which manifests they stand for), so a forged entry does not persist.
  Only a digest this process wrote from manifests it read (:attr:`ProgressDigest.trusted`) is
  taken without that check: a follower pays the check once, not at every pass.
- Anything malformed (not JSON, a wrong type, a negative generation) discards the whole digest:
  the plan then reads every manifest, as without one. It is a cache, never a reason to fail.
- Writing it is the run's last step, after the deletions, and it records facts about
  immutable manifests: an author that lost its lease writes nothing wrong (hazard H5), and
  two runs that race leave one complete digest (an atomic put each).

A whole GC run writes it; a listing pass (``gc --listed-only``, a follower's every few seconds)
does not: its plan reads what the digest lacks from the manifests once, and the table object it
runs on remembers that for its next passes (:func:`memwal.table.retained.retained_versions`).
GC's own shard-manifest versions, which ``memwal status`` tells from a writer's, are recorded
apart (:mod:`memwal.table.compactions`); a digest written before keeps them in a field no
longer read.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NotRequired, TypedDict, TypeVar

from memwal.core.json_doc import load_json
from memwal.errors import MemWalError, NotFoundError
from memwal.store import Store
from memwal.table.naming import JOBS_DIR

log = logging.getLogger(__name__)

DIGEST_KEY = f"{JOBS_DIR}/retained-progress.json"
T = TypeVar("T")
FORMAT = 1


@dataclass(frozen=True)
class Remembered:
    """What one manifest said: its version, commit time and merge progress per shard."""

    key: str  # the manifest's key from the table root
    etag: str  # the listing's ETag of the manifest this was read from
    version: int
    timestamp: float
    compacted: dict[str, int]  # shared by entries with the same progress: read-only
    #: The commit's transaction file, as its manifest named it (a cache: never a receipt's binding).
    transaction_file: str | None = None


class ProgressDigest:
    """The remembered manifests, found by key and ETag. ``trusted``: every entry is what this
    process read from its manifest (the bytes it wrote itself); a digest decoded from storage is
    not, whoever wrote it, and its entries are checked before they decide a verdict."""

    def __init__(self, entries: Iterable[Remembered] = (), *, trusted: bool = False) -> None:
        self._by_key = {e.key: e for e in entries}
        self.trusted = trusted

    def __len__(self) -> int:
        return len(self._by_key)

    def add(self, entries: Iterable[Remembered]) -> None:
        """Remember ``entries`` too (a table object's record of what it read, grown by each plan)."""
        self._by_key.update((e.key, e) for e in entries)

    def entries(self) -> list[Remembered]:
        return list(self._by_key.values())

    def get(self, key: str, etag: str, version: int) -> Remembered | None:
        """The entry for exactly this manifest (key, ETag and version), or None: read it."""
        e = self._by_key.get(key)
        return e if e is not None and e.etag == etag and e.version == version else None

    def same(self, entries: Iterable[Remembered]) -> bool:
        """Whether ``entries`` are exactly the remembered ones, saying the same (then there is
        nothing to write). What they say counts too: a digest whose entries disagree with the
        manifests read since is rewritten, not kept because it names the same files (issue 83)."""
        entries = list(entries)
        return len(entries) == len(self._by_key) and all(
            (e_ := self.get(e.key, e.etag, e.version)) is not None and e_.compacted == e.compacted
            and e_.timestamp == e.timestamp and (e_.transaction_file or None) == (e.transaction_file or None)
            for e in entries)


def load_digest(store: Store) -> ProgressDigest:
    """The digest in ``store``; an empty one when there is none or it is unusable (logged). The
    same bytes as this process wrote or decoded last for the table are not decoded again
    (:data:`_DECODED`)."""
    return load_cache(store, DIGEST_KEY, lambda doc: ProgressDigest(_decode(doc)), ProgressDigest(), memo=_DECODED)


#: The digest each table's store read or wrote last in this process, with its bytes (at most
#: :data:`DECODED_KEPT` tables): a follower's listing pass reads it after every merge, some 35
#: times a minute, and decoding 1,409 versions' entries took 11.6 ms of CPU each time. Only the
#: very same bytes are answered from here; :func:`save_digest` leaves what it wrote.
_DECODED: OrderedDict[str, tuple[bytes, Any]] = OrderedDict()
DECODED_KEPT = 16
_MEMO_LOCK = threading.Lock()


#: The largest cache :func:`load_cache` reads, and the most JSON values it decodes: whoever can write
#: the table's storage can write these objects, and their size must not size a job's memory. A
#: digest of 1,389 retained versions is 226 KB (163 bytes, 6 values, a version), so this is
#: some 400,000 versions, what the default 7-day retention keeps of a table merged every 1.5 s
#: (docs/operations/deploy.md gives such a table 10 minutes); decoding costs 30-70 bytes of memory a
#: value (:mod:`memwal.core.json_doc`). A larger cache is not used: GC reads the manifests it spares.
CACHE_MAX_BYTES = 64 << 20
CACHE_MAX_VALUES = CACHE_MAX_BYTES // 16


def load_cache(store: Store, key: str, decode: Callable[[Any], T], empty: T,
               memo: OrderedDict[str, tuple[bytes, Any]] | None = None) -> T:
    """A JSON cache GC keeps under ``_jobs/`` (this digest, the WAL headers' one), decoded; ``empty``
    when there is none, it cannot be read, it is over :data:`CACHE_MAX_BYTES` or
    :data:`CACHE_MAX_VALUES` (not fetched, or not decoded), or it is malformed in any way (logged):
    never a failure. ``memo``: what the same bytes decoded to before, by the object's URI
    (read-only results only)."""
    try:
        data = store.get(key, max_bytes=CACHE_MAX_BYTES)
    except NotFoundError:
        return empty
    except (MemWalError, OSError) as exc:
        log.warning("not using %s: %s", store.uri_for(key), exc)
        return empty
    uri = store.uri_for(key)
    with _MEMO_LOCK:
        seen = None if memo is None else memo.get(uri)
    if seen is not None and seen[0] == data:
        return seen[1]  # type: ignore[no-any-return]
    try:
        decoded = decode(load_json(data, max_values=CACHE_MAX_VALUES))
        if memo is not None:
            _memorise(memo, uri, data, decoded)
        return decoded
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
        log.warning("not using %s: malformed: %s", store.uri_for(key), exc)
        return empty


def save_digest(store: Store, entries: list[Remembered], *, before: ProgressDigest | None = None,
                trusted: bool = False) -> bool:
    """Remember ``entries`` (the versions retained now) unless the digest (``before``, as read
    earlier by the caller, else read now) says exactly that; True when written. ``trusted``: every
    entry was read from its manifest in this process (then this process takes the bytes it wrote
    back unchecked; nobody else does). Never raises: a GC run that cannot leave its digest has
    still done its work."""
    try:
        known = load_digest(store) if before is None else before
        if known.same(entries):
            return False
        data = json.dumps(_encode(entries), separators=(",", ":")).encode()
        store.put(DIGEST_KEY, data)
        # what a decode of these bytes gives, without one: the next plan reads them back
        _memorise(_DECODED, store.uri_for(DIGEST_KEY), data, ProgressDigest(
            [e if type(e.timestamp) is float and e.transaction_file != "" else
             replace(e, timestamp=float(e.timestamp), transaction_file=e.transaction_file or None) for e in entries],
            trusted=trusted))
        return True
    except (MemWalError, OSError) as exc:
        log.warning("could not write %s: %s", store.uri_for(DIGEST_KEY), exc)
        return False


def _memorise(memo: OrderedDict[str, tuple[bytes, Any]], uri: str, data: bytes, decoded: Any) -> None:
    with _MEMO_LOCK:  # a fleet's tables run on threads
        memo[uri] = (data, decoded)
        memo.move_to_end(uri)
        while len(memo) > DECODED_KEPT:
            memo.popitem(last=False)


class _Document(TypedDict):
    """The digest as stored: columns of the remembered manifests, progress maps once each."""

    format: int
    shards: list[str]  # shard ids, referred to by index
    sections: list[list[int]]  # each a flat [shard index, generation, ...] progress map
    keys: list[str]
    etags: list[str]
    versions: list[int]
    timestamps: list[float]
    section_of: list[int]  # each entry's progress map, by index into sections
    transactions: NotRequired[list[str]]  # each entry's transaction file ("" unknown); older digests lack it


def _encode(entries: list[Remembered]) -> _Document:
    """Each distinct progress map once (consecutive versions mostly share one), shards by index."""
    shards: dict[str, int] = {}
    sections: list[list[int]] = []
    by_id: dict[int, int] = {}
    by_items: dict[tuple[tuple[str, int], ...], int] = {}
    section_of: list[int] = []
    for e in entries:
        j = by_id.get(id(e.compacted))
        if j is None:
            items = tuple(sorted(e.compacted.items()))
            j = by_items.get(items)
            if j is None:
                j = by_items[items] = len(sections)
                sections.append([x for s, g in items for x in (shards.setdefault(s, len(shards)), g)])
            by_id[id(e.compacted)] = j
        section_of.append(j)
    return {"format": FORMAT, "shards": list(shards), "sections": sections,
            "keys": [e.key for e in entries], "etags": [e.etag for e in entries],
            "versions": [e.version for e in entries], "timestamps": [e.timestamp for e in entries],
            "section_of": section_of, "transactions": [e.transaction_file or "" for e in entries]}


def _decode(doc: Any) -> list[Remembered]:
    """The entries of a parsed document (untrusted JSON: every value is checked here)."""
    if doc["format"] != FORMAT:
        raise ValueError(f"format {doc['format']!r}, not {FORMAT}")
    shards = doc["shards"]
    if not all(isinstance(s, str) for s in shards):
        raise TypeError("a shard id is not a string")
    sections: list[dict[str, int]] = []
    for flat in doc["sections"]:
        pairs = dict(zip(flat[0::2], flat[1::2], strict=True))
        if not all(type(i) is int and 0 <= i < len(shards) and type(g) is int and g >= 0 for i, g in pairs.items()):
            raise ValueError("a progress value is not a generation")
        sections.append({shards[i]: g for i, g in pairs.items()})
    columns = [doc[c] for c in ("keys", "etags", "versions", "timestamps", "section_of")]
    keys, etags, versions, timestamps, section_of = columns
    if len({len(c) for c in columns}) != 1:
        raise ValueError("columns of different lengths")
    if not (_only(keys, str) and _only(etags, str) and _only(versions, int) and _only(section_of, int)
            and _only(timestamps, int, float) and all(map(math.isfinite, timestamps))
            and all(0 <= j < len(sections) for j in section_of)):
        raise ValueError("a manifest entry is malformed")
    txns = doc.get("transactions") or [""] * len(keys)
    if len(txns) != len(keys) or not _only(txns, str):
        txns = [""] * len(keys)  # a cache: a bad column is only left unused
    return [Remembered(k, e, v, float(t), sections[j], x or None)
            for k, e, v, t, j, x in zip(keys, etags, versions, timestamps, section_of, txns, strict=True)]


def _only(values: Sequence[object], *types: type) -> bool:
    """Every value is exactly one of ``types`` (``True`` is not a version)."""
    return set(map(type, values)) <= set(types)


__all__ = ["DIGEST_KEY", "ProgressDigest", "Remembered", "load_cache", "load_digest", "save_digest"]
