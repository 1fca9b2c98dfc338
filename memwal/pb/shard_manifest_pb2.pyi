from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ShardStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHARD_STATUS_ACTIVE: _ClassVar[ShardStatus]
    SHARD_STATUS_SEALED: _ClassVar[ShardStatus]
SHARD_STATUS_ACTIVE: ShardStatus
SHARD_STATUS_SEALED: ShardStatus

class UUID(_message.Message):
    __slots__ = ("uuid",)
    UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: bytes
    def __init__(self, uuid: _Optional[bytes] = ...) -> None: ...

class SsTable(_message.Message):
    __slots__ = ("generation", "path", "in_memory_bytes", "physical_rows", "primary_key_bytes")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    IN_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_BYTES_FIELD_NUMBER: _ClassVar[int]
    generation: int
    path: str
    in_memory_bytes: int
    physical_rows: int
    primary_key_bytes: int
    def __init__(self, generation: _Optional[int] = ..., path: _Optional[str] = ..., in_memory_bytes: _Optional[int] = ..., physical_rows: _Optional[int] = ..., primary_key_bytes: _Optional[int] = ...) -> None: ...

class ShardFieldEntry(_message.Message):
    __slots__ = ("field_id", "value")
    FIELD_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    field_id: str
    value: bytes
    def __init__(self, field_id: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class ShardManifest(_message.Message):
    __slots__ = ("version", "writer_epoch", "replay_after_wal_entry_position", "wal_entry_position_last_seen", "current_generation", "sstables", "shard_spec_id", "shard_id", "shard_field_entries", "status")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WRITER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLAY_AFTER_WAL_ENTRY_POSITION_FIELD_NUMBER: _ClassVar[int]
    WAL_ENTRY_POSITION_LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    CURRENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SSTABLES_FIELD_NUMBER: _ClassVar[int]
    SHARD_SPEC_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    version: int
    writer_epoch: int
    replay_after_wal_entry_position: int
    wal_entry_position_last_seen: int
    current_generation: int
    sstables: _containers.RepeatedCompositeFieldContainer[SsTable]
    shard_spec_id: int
    shard_id: UUID
    shard_field_entries: _containers.RepeatedCompositeFieldContainer[ShardFieldEntry]
    status: ShardStatus
    def __init__(self, version: _Optional[int] = ..., writer_epoch: _Optional[int] = ..., replay_after_wal_entry_position: _Optional[int] = ..., wal_entry_position_last_seen: _Optional[int] = ..., current_generation: _Optional[int] = ..., sstables: _Optional[_Iterable[_Union[SsTable, _Mapping]]] = ..., shard_spec_id: _Optional[int] = ..., shard_id: _Optional[_Union[UUID, _Mapping]] = ..., shard_field_entries: _Optional[_Iterable[_Union[ShardFieldEntry, _Mapping]]] = ..., status: _Optional[_Union[ShardStatus, str]] = ...) -> None: ...
