"""The snapshot's rows, its Arrow schema and its Lance-file codec (spec: "Shard Snapshot Arrow Schema").

One :class:`ShardRow` per shard holds the fields of the shard's latest manifest plus its
shard field values; a snapshot is those rows encoded as a Lance file, stored inline in the
MemWAL index details or as ``_indices/<uuid>/index.lance`` (:func:`snapshot_file_key`).
Nothing here touches the table: these are pure conversions shared by the planner, the
reader (memwal.snapshot.locate) and the executor.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
from lance.file import LanceFileReader, LanceFileWriter

from memwal.errors import BadInputError, MemWalError, first_line
from memwal.pb import mem_wal_index_pb2
from memwal.table.naming import shard_uuid_bytes, shard_uuid_str
from memwal.table.sharding import ShardValue, shard_field_value_from_bytes
from memwal.table.shards import ShardState

log = logging.getLogger(__name__)

#: Shard count up to which the snapshot is stored inline (the spec's example threshold).
INLINE_THRESHOLD = 100
SNAPSHOT_FILE = "index.lance"
#: Column prefix of shard field values (spec: ``region_field_{field_id}``).
FIELD_COLUMN_PREFIX = "region_field_"
#: Schema metadata key of the snapshot file: lets a reader check it found the right file.
TS_METADATA_KEY = "memwal:snapshot_ts_millis"

STORAGE_INLINE, STORAGE_FILE = "inline", "file"


class SnapshotUnavailableError(MemWalError):
    """A snapshot was published but cannot be read (file gone or corrupt): use the manifests."""


@dataclass
class ShardRow:
    """One shard's snapshot row: the fields of its latest manifest plus its shard field values."""

    shard_id: str
    version: int
    shard_spec_id: int
    writer_epoch: int
    replay_after_wal_entry_position: int
    wal_entry_position_last_seen: int
    current_generation: int
    flushed_generations: list[tuple[int, str]]
    fields: dict[str, ShardValue] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flushed_generations"] = [{"generation": g, "path": p} for g, p in self.flushed_generations]
        return d


@dataclass(frozen=True)
class FieldColumn:
    field_id: str
    result_type: str

    @property
    def column(self) -> str:
        return f"{FIELD_COLUMN_PREFIX}{self.field_id}"

    @property
    def arrow_type(self) -> pa.DataType:
        return arrow_type_of(self.result_type)


_ARROW_TYPES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "utf8": pa.string(),
    "string": pa.string(),
    "large_utf8": pa.large_string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date32:day": pa.date32(),
    "date64": pa.date64(),
    "date64:ms": pa.date64(),
}


def arrow_type_of(result_type: str) -> pa.DataType:
    """Arrow type of a shard field's ``result_type``; unknown types keep the raw entry bytes."""
    return _ARROW_TYPES.get((result_type or "").strip().lower(), pa.binary())


def field_columns(details: mem_wal_index_pb2.MemWalIndexDetails | None) -> list[FieldColumn]:
    """One column per shard field id across all sharding specs (first definition wins)."""
    out: dict[str, FieldColumn] = {}
    for spec in details.sharding_specs if details is not None else []:
        for f in spec.fields:
            out.setdefault(f.field_id, FieldColumn(f.field_id, f.result_type))
    return list(out.values())


FLUSHED_TYPE = pa.list_(pa.struct([("generation", pa.uint64()), ("path", pa.string())]))


def snapshot_schema(columns: Iterable[FieldColumn]) -> pa.Schema:
    """The spec's "Shard Snapshot Arrow Schema"."""
    return pa.schema(
        [
            pa.field("shard_id", pa.binary(16), nullable=False),
            pa.field("version", pa.uint64(), nullable=False),
            pa.field("shard_spec_id", pa.uint32(), nullable=False),
            pa.field("writer_epoch", pa.uint64(), nullable=False),
            pa.field("replay_after_wal_entry_position", pa.uint64(), nullable=False),
            pa.field("wal_entry_position_last_seen", pa.uint64(), nullable=False),
            pa.field("current_generation", pa.uint64(), nullable=False),
            pa.field("flushed_generations", FLUSHED_TYPE, nullable=False),
            *[pa.field(c.column, c.arrow_type) for c in columns],
        ]
    )


def shard_row(state: ShardState, columns: Iterable[FieldColumn]) -> ShardRow:
    """The snapshot row of a decoded shard manifest; field values from its field entries.

    pylance 14's writer records no ``shard_field_entries``, so for its shards every field
    value is null (readers infer bucket values from data when they prune: memwal.read).
    An entry that cannot be decoded for its result type is stored as null (never guessed).
    """
    m = state.manifest
    entries = state.field_entries()
    values: dict[str, ShardValue] = {}
    for c in columns:
        raw = entries.get(c.field_id)
        if raw is None:
            continue
        if pa.types.is_binary(c.arrow_type):
            values[c.field_id] = bytes(raw)
            continue
        try:
            values[c.field_id] = shard_field_value_from_bytes(c.result_type, raw)
        except BadInputError as exc:
            log.warning("shard %s: field %s value not decodable (%s); stored as null", state.shard_id, c.field_id, exc)
    return ShardRow(
        shard_id=state.shard_id,
        version=state.version,
        shard_spec_id=m.shard_spec_id,
        writer_epoch=m.writer_epoch,
        replay_after_wal_entry_position=m.replay_after_wal_entry_position,
        wal_entry_position_last_seen=m.wal_entry_position_last_seen,
        current_generation=m.current_generation,
        flushed_generations=[(g.generation, g.path) for g in state.flushed],
        fields=values,
    )


def rows_to_table(rows: Iterable[ShardRow], columns: list[FieldColumn]) -> pa.Table:
    rows = sorted(rows, key=lambda r: r.shard_id)
    schema = snapshot_schema(columns)
    data: dict[str, Any] = {
        "shard_id": [shard_uuid_bytes(r.shard_id) for r in rows],
        "version": [r.version for r in rows],
        "shard_spec_id": [r.shard_spec_id for r in rows],
        "writer_epoch": [r.writer_epoch for r in rows],
        "replay_after_wal_entry_position": [r.replay_after_wal_entry_position for r in rows],
        "wal_entry_position_last_seen": [r.wal_entry_position_last_seen for r in rows],
        "current_generation": [r.current_generation for r in rows],
        "flushed_generations": [[{"generation": g, "path": p} for g, p in r.flushed_generations] for r in rows],
    }
    for c in columns:
        data[c.column] = [r.fields.get(c.field_id) for r in rows]
    return pa.Table.from_pydict(data, schema=schema)


def table_to_rows(tbl: pa.Table) -> list[ShardRow]:
    """Decode snapshot rows; unknown extra columns are ignored, ``region_field_*`` become fields."""
    names = set(tbl.column_names)
    required = {
        "shard_id",
        "version",
        "shard_spec_id",
        "writer_epoch",
        "replay_after_wal_entry_position",
        "wal_entry_position_last_seen",
        "current_generation",
        "flushed_generations",
    }
    if missing := required - names:
        raise SnapshotUnavailableError(f"snapshot lacks columns {sorted(missing)}")
    field_cols = [n for n in tbl.column_names if n.startswith(FIELD_COLUMN_PREFIX)]
    out = []
    for r in tbl.to_pylist():
        raw = r["shard_id"]
        if not isinstance(raw, bytes) or len(raw) != 16:
            raise SnapshotUnavailableError(f"snapshot has a bad shard_id {raw!r}")
        out.append(
            ShardRow(
                shard_id=shard_uuid_str(raw),
                version=int(r["version"]),
                shard_spec_id=int(r["shard_spec_id"]),
                writer_epoch=int(r["writer_epoch"]),
                replay_after_wal_entry_position=int(r["replay_after_wal_entry_position"]),
                wal_entry_position_last_seen=int(r["wal_entry_position_last_seen"]),
                current_generation=int(r["current_generation"]),
                flushed_generations=sorted(
                    (int(g["generation"]), str(g["path"])) for g in r["flushed_generations"] or []
                ),
                fields={c[len(FIELD_COLUMN_PREFIX) :]: r[c] for c in field_cols if r[c] is not None},
            )
        )
    return out


def encode_lance_file(tbl: pa.Table, *, metadata: dict[str, str] | None = None) -> bytes:
    """The bytes of a Lance file holding ``tbl`` (written through a temporary local file)."""
    with tempfile.TemporaryDirectory(prefix="memwal-snapshot-") as d:
        path = os.path.join(d, SNAPSHOT_FILE)
        writer = LanceFileWriter(path, tbl.schema)
        for k, v in (metadata or {}).items():
            writer.add_schema_metadata(k, v)
        writer.write_batch(tbl)
        writer.close()
        with open(path, "rb") as f:
            return f.read()


def decode_lance_file(data: bytes) -> pa.Table:
    """Read back a Lance file's rows from its bytes (inline snapshots)."""
    with tempfile.TemporaryDirectory(prefix="memwal-snapshot-") as d:
        path = os.path.join(d, SNAPSHOT_FILE)
        with open(path, "wb") as f:
            f.write(data)
        return read_lance_file(path)


def read_lance_file(path: str, storage_options: dict[str, str] | None = None) -> pa.Table:
    """All rows of a Lance file, schema metadata included."""
    try:
        return LanceFileReader(path, storage_options=storage_options or None).read_all().to_table()
    except (OSError, ValueError, RuntimeError) as exc:
        raise SnapshotUnavailableError(f"{path}: not a readable Lance file: {first_line(exc)}") from exc


def decode_snapshot_bytes(data: bytes) -> list[ShardRow]:
    """Rows of an inline snapshot (``b""`` is the spec's "no rows")."""
    if not data:
        return []
    return table_to_rows(decode_lance_file(data))


def snapshot_file_key(index_uuid: str) -> str:
    """The spec's path of a file snapshot: ``_indices/<uuid of the entry naming it>/index.lance``."""
    return f"_indices/{index_uuid}/{SNAPSHOT_FILE}"
