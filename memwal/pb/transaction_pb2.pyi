from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Transaction(_message.Message):
    __slots__ = ("read_version", "uuid", "transaction_properties", "append", "delete", "overwrite", "create_index", "rewrite", "merge", "restore", "reserve_fragments", "update", "project", "update_config", "data_replacement", "update_mem_wal_state", "clone", "update_bases")
    class TransactionPropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    READ_VERSION_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    CREATE_INDEX_FIELD_NUMBER: _ClassVar[int]
    REWRITE_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    RESERVE_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DATA_REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MEM_WAL_STATE_FIELD_NUMBER: _ClassVar[int]
    CLONE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_BASES_FIELD_NUMBER: _ClassVar[int]
    read_version: int
    uuid: str
    transaction_properties: _containers.ScalarMap[str, str]
    append: bytes
    delete: bytes
    overwrite: bytes
    create_index: bytes
    rewrite: bytes
    merge: bytes
    restore: bytes
    reserve_fragments: bytes
    update: TransactionUpdate
    project: bytes
    update_config: bytes
    data_replacement: bytes
    update_mem_wal_state: bytes
    clone: bytes
    update_bases: bytes
    def __init__(self, read_version: _Optional[int] = ..., uuid: _Optional[str] = ..., transaction_properties: _Optional[_Mapping[str, str]] = ..., append: _Optional[bytes] = ..., delete: _Optional[bytes] = ..., overwrite: _Optional[bytes] = ..., create_index: _Optional[bytes] = ..., rewrite: _Optional[bytes] = ..., merge: _Optional[bytes] = ..., restore: _Optional[bytes] = ..., reserve_fragments: _Optional[bytes] = ..., update: _Optional[_Union[TransactionUpdate, _Mapping]] = ..., project: _Optional[bytes] = ..., update_config: _Optional[bytes] = ..., data_replacement: _Optional[bytes] = ..., update_mem_wal_state: _Optional[bytes] = ..., clone: _Optional[bytes] = ..., update_bases: _Optional[bytes] = ...) -> None: ...

class TransactionUpdate(_message.Message):
    __slots__ = ("removed_fragment_ids", "updated_fragments", "new_fragments")
    REMOVED_FRAGMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    NEW_FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    removed_fragment_ids: _containers.RepeatedScalarFieldContainer[int]
    updated_fragments: _containers.RepeatedScalarFieldContainer[bytes]
    new_fragments: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, removed_fragment_ids: _Optional[_Iterable[int]] = ..., updated_fragments: _Optional[_Iterable[bytes]] = ..., new_fragments: _Optional[_Iterable[bytes]] = ...) -> None: ...
