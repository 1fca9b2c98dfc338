"""Reading a published snapshot, wherever it is stored, and keeping it (hazard H3).

Lance gives the MemWAL entry a new UUID on every update (every merge), so the
``_indices/<uuid>/index.lance`` of a file snapshot is only at the spec's path until the next
progress commit. :func:`read_snapshot` then finds the entry that named the file by a binary
search over the table versions (``snapshot_ts_millis`` only grows), and checks the
timestamp stored in the file's schema metadata.

Lance's version cleanup removes an index directory once no retained version names its
UUID, so expiring the versions up to the latest would delete the published file while the
latest entry still publishes it (observed past 100 shards: scan fell back to manifests
with "snapshot file ... not found"). So whatever expires versions does it inside
:func:`snapshot_file_kept`: it holds the file's bytes (:func:`hold_snapshot_file`) and puts a
copy under the *live* entry's own UUID, the spec's path, which the cleanup keeps
(:func:`keep_snapshot_file`), before and again after the cleanup (a merge in between moves
the live entry once more).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from lance.file import LanceFileReader

from memwal.errors import NotFoundError, PreconditionFailedError, first_line
from memwal.snapshot.format import (
    STORAGE_FILE,
    STORAGE_INLINE,
    TS_METADATA_KEY,
    ShardRow,
    SnapshotUnavailableError,
    decode_lance_file,
    read_lance_file,
    snapshot_file_key,
    table_to_rows,
)
from memwal.snapshot.versions import TableVersions, mem_wal_entry
from memwal.table import Table
from memwal.table.manifest import TableManifest


@dataclass
class LoadedSnapshot:
    """A published snapshot, decoded."""

    snapshot_ts_millis: int
    num_shards: int
    storage: str
    rows: list[ShardRow]
    path: str | None = None  # store key of the file (file storage)
    #: The stored Arrow schema (metadata removed): a refresh republishes when its columns differ.
    schema: pa.Schema | None = None


def read_snapshot(table: Table, manifest: TableManifest | None = None) -> LoadedSnapshot | None:
    """The snapshot published at ``manifest``'s version (latest when None).

    None when none was ever published (``snapshot_ts_millis == 0``: ``initialize_mem_wal``
    sets ``num_shards`` but writes no snapshot). Raises :class:`SnapshotUnavailableError`
    when one was published but cannot be read.
    """
    manifest = manifest or table.require_mem_wal()
    details = manifest.mem_wal
    if details is None or details.snapshot_ts_millis <= 0:
        return None
    ts = details.snapshot_ts_millis
    if details.HasField("inline_snapshots"):
        if not details.inline_snapshots:  # the spec's "no rows"
            return LoadedSnapshot(ts, details.num_shards, STORAGE_INLINE, [])
        try:
            tbl = decode_lance_file(details.inline_snapshots)
            rows = table_to_rows(tbl)
        except SnapshotUnavailableError:
            raise
        except Exception as exc:  # noqa: BLE001 - any decoding failure means: use the manifests
            raise SnapshotUnavailableError(f"inline snapshot is not readable: {first_line(exc)}") from exc
        return LoadedSnapshot(ts, details.num_shards, STORAGE_INLINE, rows, schema=tbl.schema.remove_metadata())
    key = _find_snapshot_file(table, manifest, ts)
    tbl = read_lance_file(table.store.uri_for(key), table.storage_options)
    return LoadedSnapshot(
        ts, details.num_shards, STORAGE_FILE, table_to_rows(tbl), key, schema=tbl.schema.remove_metadata()
    )


def _file_ts(table: Table, key: str) -> int | None:
    """The snapshot timestamp a snapshot file carries in its schema metadata (None: no such file)."""
    if not table.store.exists(key):
        return None
    try:
        reader = LanceFileReader(table.store.uri_for(key), storage_options=table.storage_options or None)
        md = reader.metadata().schema.metadata or {}
    except (OSError, ValueError, RuntimeError, AttributeError):
        return None
    try:
        return int(md[TS_METADATA_KEY.encode()])
    except (KeyError, TypeError, ValueError):
        return None


def _find_snapshot_file(table: Table, manifest: TableManifest, ts: int) -> str:
    """The file a file snapshot lives in, despite H3 (the entry's UUID changes on every update)."""
    entry = mem_wal_entry(manifest)
    candidates: list[str] = []
    if entry is not None and entry.uuid:
        candidates.append(snapshot_file_key(entry.uuid))
        if _file_ts(table, candidates[0]) == ts:
            return candidates[0]
    try:
        return _search_versions(table, manifest, ts, candidates)
    except NotFoundError as exc:  # a version expired while we searched (a concurrent gc)
        raise SnapshotUnavailableError(f"snapshot file of snapshot_ts_millis={ts}: {exc}") from exc


def _search_versions(table: Table, manifest: TableManifest, ts: int, candidates: list[str]) -> str:
    index = TableVersions(table.store)
    versions = sorted(v for v in index.keys if v <= manifest.version)
    cache: dict[int, TableManifest] = {}

    def at(v: int) -> TableManifest:
        if v not in cache:
            cache[v] = index.at(v)
        return cache[v]

    def ts_at(v: int) -> int:
        d = at(v).mem_wal
        return d.snapshot_ts_millis if d is not None else 0

    # snapshot_ts_millis only grows across versions (each refresh writes a larger one):
    # find the first version carrying this snapshot, whose entry named the file.
    lo, hi = 0, len(versions)
    while lo < hi:
        mid = (lo + hi) // 2
        if ts_at(versions[mid]) >= ts:
            hi = mid
        else:
            lo = mid + 1
    for i in range(lo, min(lo + 8, len(versions))):  # a repair round may name a copy a bit later
        v = versions[i]
        if ts_at(v) != ts:
            break
        e = mem_wal_entry(at(v))
        if e is not None and e.uuid:
            key = snapshot_file_key(e.uuid)
            candidates.append(key)
            if _file_ts(table, key) == ts:
                return key
    tried = ", ".join(dict.fromkeys(candidates)) or "nothing"
    raise SnapshotUnavailableError(f"snapshot file of snapshot_ts_millis={ts} not found (tried {tried})")


@dataclass
class HeldSnapshot:
    """A published file snapshot's bytes, held while its file may be deleted."""

    snapshot_ts_millis: int
    key: str
    data: bytes


def hold_snapshot_file(table: Table) -> HeldSnapshot | None:
    """The file snapshot the latest table version publishes (None: inline, none, or
    already unreadable: then there is nothing left to keep, and ``memwal verify`` says so)."""
    manifest = table.require_mem_wal()
    details = manifest.mem_wal
    if details is None or details.snapshot_ts_millis <= 0 or details.HasField("inline_snapshots"):
        return None
    try:
        key = _find_snapshot_file(table, manifest, details.snapshot_ts_millis)
        return HeldSnapshot(details.snapshot_ts_millis, key, table.store.get(key))
    except (SnapshotUnavailableError, NotFoundError):
        return None


def keep_snapshot_file(table: Table, held: HeldSnapshot) -> str | None:
    """Make the latest version's own MemWAL entry name a copy of ``held``: write it to
    ``_indices/<live entry uuid>/index.lance`` unless it is there already. Returns the key
    written (None: nothing to do, or a newer snapshot was published meanwhile: it is the
    refresh's, at its own entry's path)."""
    manifest = table.require_mem_wal()
    details = manifest.mem_wal
    entry = mem_wal_entry(manifest)
    if details is None or details.snapshot_ts_millis != held.snapshot_ts_millis or entry is None or not entry.uuid:
        return None
    key = snapshot_file_key(entry.uuid)
    if _file_ts(table, key) == held.snapshot_ts_millis:
        return None
    try:
        table.store.put_if_absent(key, held.data)
    except PreconditionFailedError:
        return None  # written meanwhile (by another keeper): checked by the next read
    return key


@contextlib.contextmanager
def snapshot_file_kept(table: Table) -> Iterator[list[str]]:
    """Around an expiry of table versions: the published file snapshot stays readable (H3).

    Yields the list of the copies written (store keys), filled before the block and after it.
    """
    held = hold_snapshot_file(table)
    kept: list[str] = []
    if held is not None and (key := keep_snapshot_file(table, held)):
        kept.append(key)
    try:
        yield kept
    finally:
        if held is not None and (key := keep_snapshot_file(table, held)):
            kept.append(key)
