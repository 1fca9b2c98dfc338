"""Read shard state: manifests, WAL entry metadata and generation directories.

The shard manifest is authoritative for its shard (spec: "Shard Manifest"). We find the
latest version the way the spec prescribes: start at ``version_hint.json`` (or 1) and probe
upwards with HEAD requests until a version is missing, because the hint is written
best-effort and may lag behind.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pyarrow as pa
from google.protobuf.message import DecodeError

from memwal.errors import BadInputError, NotFoundError
from memwal.naming import (
    MEM_WAL_DIR,
    is_shard_dir_name,
    manifest_key,
    parse_generation_dir,
    parse_wal_name,
    shard_dir,
    shard_uuid_str,
    version_hint_key,
    wal_key,
)
from memwal.paths import generation_key
from memwal.pb import shard_manifest_pb2
from memwal.storage import Store

SEALED = shard_manifest_pb2.SHARD_STATUS_SEALED


@dataclass(frozen=True)
class FlushedGeneration:
    generation: int
    path: str
    in_memory_bytes: int
    physical_rows: int


@dataclass(frozen=True)
class ShardState:
    """One version of a shard manifest, decoded."""

    shard_id: str
    version: int
    manifest: shard_manifest_pb2.ShardManifest
    mtime: float

    @property
    def writer_epoch(self) -> int:
        return self.manifest.writer_epoch

    @property
    def current_generation(self) -> int:
        return self.manifest.current_generation

    @property
    def replay_after_wal_entry_position(self) -> int:
        return self.manifest.replay_after_wal_entry_position

    @property
    def status(self) -> str:
        return "sealed" if self.manifest.status == SEALED else "active"

    @property
    def flushed(self) -> list[FlushedGeneration]:
        """Flushed generations in ascending order."""
        return sorted(
            (
                FlushedGeneration(s.generation, s.path, s.in_memory_bytes, s.physical_rows)
                for s in self.manifest.sstables
            ),
            key=lambda g: g.generation,
        )

    def generation(self, g: int) -> FlushedGeneration | None:
        for fg in self.flushed:
            if fg.generation == g:
                return fg
        return None

    def generation_key(self, g: FlushedGeneration) -> str:
        """The validated store key of a generation directory (invariant 5)."""
        return generation_key(self.shard_id, g.path)

    def field_entries(self) -> dict[str, bytes]:
        return {e.field_id: e.value for e in self.manifest.shard_field_entries}


def list_shard_ids(store: Store) -> list[str]:
    """Shard directories under ``_mem_wal/``; our own ``_``-prefixed folders are skipped."""
    return sorted(d for d in store.list_dirs(f"{MEM_WAL_DIR}/") if is_shard_dir_name(d))


def decode_shard_manifest(data: bytes, *, shard_id: str, version: int, where: str, mtime: float = 0.0) -> ShardState:
    try:
        manifest = shard_manifest_pb2.ShardManifest.FromString(data)
    except DecodeError as exc:
        raise BadInputError(f"{where}: corrupt shard manifest: {exc}") from exc
    if manifest.version != version:
        raise BadInputError(
            f"{where}: corrupt shard manifest: it says version {manifest.version}, its name says {version}"
        )
    if manifest.HasField("shard_id") and shard_uuid_str(manifest.shard_id.uuid) != shard_id:
        raise BadInputError(f"{where}: shard manifest belongs to shard {shard_uuid_str(manifest.shard_id.uuid)}")
    return ShardState(shard_id=shard_id, version=version, manifest=manifest, mtime=mtime)


def read_shard_manifest(store: Store, shard_id: str, version: int) -> ShardState:
    key = manifest_key(shard_id, version)
    info = store.head(key)
    data = store.get(key)
    return decode_shard_manifest(
        data, shard_id=shard_id, version=version, where=store.uri_for(key), mtime=info.mtime if info else 0.0
    )


def _version_hint(store: Store, shard_id: str) -> int:
    key = version_hint_key(shard_id)
    try:
        raw = store.get(key)
    except NotFoundError:
        return 1
    try:
        hint = int(json.loads(raw)["version"])
    except (ValueError, KeyError, TypeError):
        # The hint is best-effort by design; a garbled one only costs probes.
        return 1
    return max(hint, 1)


def latest_shard_version(store: Store, shard_id: str) -> int:
    """Latest manifest version (0 when the shard has none), per the spec's hint-and-probe rule."""
    start = _version_hint(store, shard_id)
    if not store.exists(manifest_key(shard_id, start)):
        # A hint ahead of reality (or a missing v1): fall back to listing, which is exact.
        versions = list_manifest_versions(store, shard_id)
        return max(versions) if versions else 0
    v = start
    while store.exists(manifest_key(shard_id, v + 1)):
        v += 1
    return v


def list_manifest_versions(store: Store, shard_id: str) -> list[int]:
    out = []
    for obj in store.list(f"{shard_dir(shard_id)}/manifest/", recursive=False):
        name = obj.key.rsplit("/", 1)[-1]
        if name.endswith(".binpb"):
            pos = parse_wal_name(name.replace(".binpb", ".arrow"))
            if pos is not None:
                out.append(pos)
    return sorted(out)


def latest_shard_manifest(store: Store, shard_id: str) -> ShardState | None:
    v = latest_shard_version(store, shard_id)
    return read_shard_manifest(store, shard_id, v) if v else None


def all_shard_manifests(store: Store) -> dict[str, ShardState]:
    """Latest manifest of every shard that has one."""
    out = {}
    for shard_id in list_shard_ids(store):
        state = latest_shard_manifest(store, shard_id)
        if state is not None:
            out[shard_id] = state
    return out


@dataclass(frozen=True)
class WalEntry:
    position: int
    key: str
    size: int
    mtime: float


def list_wal_entries(store: Store, shard_id: str) -> list[WalEntry]:
    out = []
    for obj in store.list(f"{shard_dir(shard_id)}/wal/", recursive=False):
        pos = parse_wal_name(obj.key.rsplit("/", 1)[-1])
        if pos is not None:
            out.append(WalEntry(pos, obj.key, obj.size, obj.mtime))
    return sorted(out, key=lambda e: e.position)


@dataclass(frozen=True)
class WalEntryMeta:
    position: int
    generation: int
    writer_epoch: int


def read_wal_entry_meta(store: Store, shard_id: str, position: int, *, probe_bytes: int = 64 * 1024) -> WalEntryMeta:
    """Generation and writer epoch of a WAL entry from its schema message only.

    An Arrow IPC stream starts with the schema message, so a ranged read of the head of
    the file is enough; we fall back to the whole file for an unusually large schema.
    """
    key = wal_key(shard_id, position)
    where = store.uri_for(key)
    head = store.get_range(key, 0, probe_bytes)
    for data in (head, None):
        if data is None:
            if len(head) < probe_bytes:
                break
            data = store.get(key)
        try:
            schema = pa.ipc.open_stream(io.BytesIO(data)).schema
        except (pa.ArrowInvalid, OSError):
            continue
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        try:
            return WalEntryMeta(position, int(meta["generation"]), int(meta["writer_epoch"]))
        except (KeyError, ValueError) as exc:
            raise BadInputError(f"{where}: WAL entry schema lacks generation/writer_epoch metadata") from exc
    raise BadInputError(f"{where}: not an Arrow IPC stream")


def generation_readable(store: Store, key: str) -> bool:
    """Whether a generation directory can be opened by Lance: it holds a table manifest.

    GC deletes a generation's manifests first, so a directory with data files but no
    manifest is half collected and must count as missing to every reader and planner.
    """
    return any(o.key.endswith(".manifest") for o in store.list(f"{key}/_versions/", recursive=False))


def list_generation_dirs(store: Store, shard_id: str) -> dict[str, int]:
    """Generation directories present on storage (name -> generation), listed or not."""
    out = {}
    for name in store.list_dirs(f"{shard_dir(shard_id)}/"):
        g = parse_generation_dir(name)
        if g is not None:
            out[name] = g
    return out
