"""Read the base table's MemWAL index details at any version, straight from Lance's manifest.

pylance 14 does not expose ``compacted_sstables`` (merge progress) or ``index_catchup`` to
Python, yet every job decides on them, so we decode the table manifest ourselves
(docs/architecture.md, pylance facts): ``_versions/<u64::MAX - v>.manifest`` (V2 naming) or
``_versions/<v>.manifest`` (older tables), ending in a 16-byte trailer that points at the
Manifest message, whose ``index_section`` points at the IndexSection.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from memwal.errors import BadInputError, NotFoundError, ReadError, StateMovedError
from memwal.pb import mem_wal_index_pb2, table_manifest_pb2
from memwal.table.naming import (
    MEM_WAL_DETAILS_TYPE_URL,
    MEM_WAL_INDEX_NAME,
    V2_NAME_DIGITS,
    shard_uuid_str,
    table_version_of,
)

if TYPE_CHECKING:
    from memwal.store import ObjectInfo, Store

_TRAILER = struct.Struct("<qhh4s")
_MAGIC = b"LANC"


@dataclass(frozen=True)
class IndexEntry:
    """One entry of the table's index section (we only need identity and details)."""

    name: str
    uuid: str
    dataset_version: int
    fields: tuple[int, ...]
    type_url: str
    details: bytes
    #: The fragments it covers: a portable 32-bit Roaring bitmap (empty for the MemWAL index).
    fragment_bitmap: bytes = field(default=b"", repr=False)

    @property
    def is_vector(self) -> bool:
        return is_vector_index(self.type_url)


def is_vector_index(type_url: str) -> bool:
    """Whether an index's details type names a vector index (IVF_PQ, IVF_FLAT, HNSW...): one rule
    for the manifest's entries and Lance's ``describe_indices()``; it holds for an index Lance
    built empty too, whose statistics say ``index_type: N/A``."""
    return type_url.endswith("VectorIndexDetails")


@dataclass(frozen=True)
class TableManifest:
    """What memwal-jobs needs from one version of the base table's manifest."""

    version: int
    timestamp: float
    key: str
    indices: tuple[IndexEntry, ...]
    mem_wal: mem_wal_index_pb2.MemWalIndexDetails | None
    compacted: dict[str, int] = field(default_factory=dict)
    index_catchup: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The commit's transaction file under ``_transactions/`` ("" when Lance wrote none).
    transaction_file: str = ""
    #: The table's config (Lance's ``update_config``): merge operators, memwal's table policy.
    config: dict[str, str] = field(default_factory=dict)

    def compacted_generation(self, shard_id: str) -> int:
        """Merge progress of a shard; 0 when nothing was merged."""
        return self.compacted.get(shard_id, 0)

    def user_indices(self) -> list[IndexEntry]:
        """Base-table indexes other than the MemWAL system index."""
        return [i for i in self.indices if i.name != MEM_WAL_INDEX_NAME]


def _version_of(key: str) -> int | None:
    """The table version a ``_versions/`` key names, None for anything else (one rule:
    :func:`memwal.table.naming.table_version_of`)."""
    return table_version_of(key)


#: Characters of a V2 manifest name (``<20 digits>.manifest``); an older name is shorter.
_V2_NAME_CHARS = V2_NAME_DIGITS + len(".manifest")


def _is_v2_name(key: str) -> bool:
    """Whether a key :func:`_version_of` reads as a manifest is named by the V2 scheme."""
    return len(key.rpartition("/")[2]) == _V2_NAME_CHARS


class _OneScheme:
    """Checks that the manifests a listing names all follow one naming scheme, at the cost of a
    length check per name (a listing that parses every name anyway calls :meth:`saw` with each)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.first: dict[bool, str] = {}

    def saw(self, key: str) -> None:
        """``key`` names a manifest: ReadError once both schemes were seen."""
        v2 = _is_v2_name(key)
        if v2 not in self.first:
            self.first[v2] = key
            if len(self.first) == 2:
                raise mixed_names_error(self.store, self.first[False], self.first[True])


def mixed_names_error(store: Store, v1_key: str, v2_key: str) -> ReadError:
    """The error for a table whose ``_versions/`` names manifests by both schemes (exit code 1,
    one line naming the folder and a name of each).

    Lance refuses such a table ("multiple manifest naming schemes"): the two schemes sort
    differently, so which manifest is the latest depends on which names a reader looks at. A
    stray or forged V2 copy of an old manifest beside V1 names sorts first and would pass for the
    latest version, showing a merged generation's value over the owner's later one (issue 83).
    Refused, never resolved: the operator removes the stray, or migrates the table
    (``migrate_manifest_paths_v2``)."""
    v1, v2 = v1_key.rpartition("/")[2], v2_key.rpartition("/")[2]
    return ReadError(f"{store.uri_for(_VERSIONS)}: manifests named by two schemes, {v1} (V1: the version) and "
                     f"{v2} (V2: u64::MAX - version): Lance refuses such a table; remove the stray manifests "
                     "or migrate the table (migrate_manifest_paths_v2)")


def refuse_mixed_names(store: Store, names: Iterable[str]) -> None:
    """ReadError if ``names`` (file names in ``_versions/``, no folder) hold manifests of both naming
    schemes. Cheap for a table of V2 names, however many: a length compared per name, and only the
    few names of another length parsed (a disk's least name is read some ten times a merge)."""
    names = list(names)
    v1 = next((n for n in [n for n in names if len(n) != _V2_NAME_CHARS] if _version_of(n) is not None), None)
    if v1 is None:
        return
    v2 = next((n for n in [n for n in names if len(n) == _V2_NAME_CHARS] if _version_of(n) is not None), None)
    if v2 is not None:
        raise mixed_names_error(store, v1, v2)


def refuse_mixed_after_first(store: Store, first: str, after: Iterator[str], seen: int) -> None:
    """:func:`refuse_mixed_names` over ``first`` (a V2 name, the first manifest a listing of
    ``_versions/`` found, after ``seen`` names) and the next :data:`NAMES_PAST_THE_FIRST` names of
    ``after`` (the listing's rest, names relative to ``_versions/``), taken only from the page
    ``first`` came in on an object store (``list_chunk`` names a request): no request more."""
    page = getattr(store, "list_chunk", 0)
    past = NAMES_PAST_THE_FIRST if not page else max(0, min(NAMES_PAST_THE_FIRST, page - seen))
    refuse_mixed_names(store, [first, *(n for n in itertools.islice(after, past) if "/" not in n)])


def list_versions(store: Store) -> dict[int, str]:
    """Every committed table version and its manifest key, for both naming schemes; ReadError for a
    table that names them by both (:func:`mixed_names_error`: checked for free, every name is read)."""
    out: dict[int, str] = {}
    schemes = _OneScheme(store)
    for key in store.list_keys("_versions/"):
        version = _version_of(key)
        if version is not None:
            schemes.saw(key)
            out[version] = key
    return out


def list_version_infos(store: Store, known: dict[int, ObjectInfo] | None = None) -> dict[int, ObjectInfo]:
    """:func:`list_versions` with each manifest's listing (its ETag tells one manifest from another).

    ``known``: on a disk, what an earlier call returned. The names then come from one ``scandir``
    and only a manifest not known is parsed and stat-ed: a committed version's manifest never
    changes (Lance writes each once, under a name no other commit can take; Lance's session and
    :meth:`memwal.table.Table.remembered` keep decoded manifests on the same ground). A follower's
    GC lists the versions twice after every merge, and the versions grow for as long as the
    retention keeps them: stat-ing each took 12 ms of every pass at 385 versions (minute 8 beside a
    writer that never stops). An object store's listing carries every object's ETag."""
    out: dict[int, ObjectInfo] = {}
    schemes = _OneScheme(store)  # both naming schemes: ReadError, as list_versions
    if not known or not store.has_directories:  # nothing known yet: one listing stats them all
        for info in store.list(_VERSIONS, recursive=False):
            version = _version_of(info.key)
            if version is not None:
                schemes.saw(info.key)
                out[version] = info
        return out
    by_key = {info.key: (version, info) for version, info in known.items()}
    for key in store.list_keys(_VERSIONS):
        found = by_key.get(key)
        if found is None:
            version = _version_of(key)
            head = store.head(key) if version is not None else None
            if version is None or head is None:
                continue  # not a manifest, or expired since the listing
            found = (version, head)
        schemes.saw(key)
        out[found[0]] = found[1]
    return out


_VERSIONS = "_versions/"


#: Names an object store's listing reads past the first V2 manifest to find an older name beside
#: it (only from the page the first came in: no request more).
NAMES_PAST_THE_FIRST = 16


def latest_version_key(store: Store) -> tuple[int, str] | None:
    """The latest table version and its manifest's key (None: no manifest), without listing every
    version: V2 names (``u64::MAX - version``, fixed width) sort newest first, so the listing's first
    manifest is the latest (an object store sends one page; a disk gives its least name, stat-ed
    alone: :meth:`memwal.store.LocalStore.least_key`); a table of older names (the version itself)
    is listed whole. A follower's table commits a version every few seconds, and this is what every
    job and reader reads first.

    A table whose manifests follow both schemes is refused (ReadError, :func:`mixed_names_error`)
    wherever the names are seen anyway: in the whole listing of a table whose first name is older;
    on a disk, among every name the one ``listdir`` read (as Lance refuses it there); on an object
    store, among the next :data:`NAMES_PAST_THE_FIRST` names of the first page. An older name that
    sorts before every V2 name makes the first name older (the whole listing then sees the V2 one);
    one that sorts after them all is found there only when few V2 names precede it (stray copies
    beside older names, the hazard). Lance itself, on an object store, takes the first V2 name
    and checks nothing more (observed with pylance 14 on S3); a check of every name would be the
    whole listing this function exists to avoid."""
    from memwal.store import LocalStore

    # a disk's least name comes from one listdir and one stat; an object store's paged listing stops
    # after the page that holds the first manifest (its non-recursive listing would take every page)
    if isinstance(store, LocalStore):
        least = store.least_key(_VERSIONS, names_seen=lambda names: refuse_mixed_names(store, names))
        keys: Iterator[str] = iter(() if least is None else (least,))
    else:
        keys = (o.key for o in store.list(_VERSIONS))
    for seen, key in enumerate(keys, 1):
        version = _version_of(key) if "/" not in key[len(_VERSIONS):] else None
        if version is None:
            continue
        if _is_v2_name(key):
            refuse_mixed_after_first(store, key[len(_VERSIONS):], (k[len(_VERSIONS):] for k in keys), seen)
            return version, key
        break
    versions = list_versions(store)
    return (max(versions), versions[max(versions)]) if versions else None


def latest_version(store: Store) -> int:
    versions = list_versions(store)
    if not versions:
        raise NotFoundError(f"{store.uri_for('_versions/')}: no table manifest: not a Lance table")
    return max(versions)


def read_table_manifest(store: Store, version: int | None = None, *,
                        versions: dict[int, str] | None = None, latest: bool = False) -> TableManifest:
    """Decode the manifest of ``version`` (latest when None) and its MemWAL index details
    (``versions``: the listing of ``_versions/`` when the caller has it, else it is listed).

    The latest version vanishing between the listing and the read (a newer version was
    committed and a concurrent cleanup expired it) is a lost race: :class:`StateMovedError`
    (``latest``: ``version`` is the latest the caller found).
    """
    versions = list_versions(store) if versions is None else versions
    if not versions:
        raise NotFoundError(f"{store.uri_for('_versions/')}: no table manifest: not a Lance table")
    latest = latest or version is None
    if version is None:
        version = max(versions)
    if version not in versions:
        raise NotFoundError(f"{store.root}: table version {version} does not exist")
    key = versions[version]
    try:
        data = store.get(key)
    except NotFoundError as exc:
        if latest:
            raise StateMovedError(f"{store.root}: the latest table version {version} expired while read") from exc
        raise
    return decode_table_manifest(data, key=key, where=store.uri_for(key))


def _message_at(data: bytes, offset: int, where: str, what: str) -> bytes:
    if offset < 0 or offset + 4 > len(data):
        raise BadInputError(f"{where}: corrupt manifest: {what} offset {offset} is outside the file")
    (length,) = struct.unpack_from("<I", data, offset)
    end = offset + 4 + length
    if end > len(data):
        raise BadInputError(f"{where}: corrupt or truncated manifest: {what} runs past the end")
    return data[offset + 4 : end]


#: What the index section of a manifest decodes to: its entries, the MemWAL index details,
#: merge progress and catch-up. Shared between versions whose index sections are the same bytes.
IndexState = tuple[tuple[IndexEntry, ...], "mem_wal_index_pb2.MemWalIndexDetails | None", dict[str, int],
                   dict[str, dict[str, int]]]


def decode_table_manifest(data: bytes, *, key: str, where: str,
                          shared: dict[bytes, IndexState] | None = None) -> TableManifest:
    """Decode one manifest's head and index section (our ``Manifest`` message names only the
    fields we read, so the parser skips the fragment list).

    ``shared`` maps index-section bytes to what they decoded to: consecutive versions of a
    table usually carry the very same index section (a commit that is not a merge, a
    catch-up or an index change leaves it alone), and decoding the MemWAL progress of
    1,000 shards costs milliseconds, so a caller that decodes many versions (gc's retained
    versions) decodes each distinct section once. Versions decoded through the same
    ``shared`` with equal sections share one ``compacted`` dict: treat it as read-only.
    """
    if len(data) < _TRAILER.size:
        raise BadInputError(f"{where}: truncated manifest ({len(data)} bytes)")
    offset, _major, _minor, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if magic != _MAGIC:
        raise BadInputError(f"{where}: corrupt manifest: bad magic {magic!r}")
    try:
        manifest = table_manifest_pb2.Manifest.FromString(_message_at(data, offset, where, "manifest"))
        section = (_message_at(data, manifest.index_section, where, "index section")
                   if manifest.HasField("index_section") else b"")
        state = shared.get(section) if shared is not None else None
        if state is None:
            state = _decode_index_section(section)
            if shared is not None:
                shared[section] = state
    except DecodeError as exc:
        raise BadInputError(f"{where}: corrupt manifest: {exc}") from exc
    indices, mem_wal, compacted, catchup = state
    ts = manifest.timestamp.seconds + manifest.timestamp.nanos / 1e9
    return TableManifest(
        version=manifest.version,
        timestamp=ts,
        key=key,
        indices=indices,
        mem_wal=mem_wal,
        compacted=compacted,
        index_catchup=catchup,
        transaction_file=manifest.transaction_file,
        config=dict(manifest.config),
    )


@dataclass(frozen=True)
class FragmentStats:
    """The base table's fragments at one version: how many, their rows, and the rows deleted."""

    fragments: int
    physical_rows: int
    deleted_rows: int
    #: Live rows of each fragment, by fragment id.
    live_rows: dict[int, int]


def fragment_stats(data: bytes, *, where: str) -> FragmentStats:
    """The fragment list of a manifest's bytes (decoded apart from :func:`decode_table_manifest`,
    which skips it: most readers never need it)."""
    if len(data) < _TRAILER.size:
        raise BadInputError(f"{where}: truncated manifest ({len(data)} bytes)")
    offset = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)[0]
    try:
        frags = table_manifest_pb2.ManifestFragments.FromString(_message_at(data, offset, where, "manifest")).fragments
    except DecodeError as exc:
        raise BadInputError(f"{where}: corrupt manifest: {exc}") from exc
    live = {f.id: max(0, f.physical_rows - f.deletion_file.num_deleted_rows) for f in frags}
    physical = sum(f.physical_rows for f in frags)
    return FragmentStats(len(frags), physical, physical - sum(live.values()), live)


def _decode_index_section(section: bytes) -> IndexState:
    indices: list[IndexEntry] = []
    mem_wal = None
    for meta in table_manifest_pb2.IndexSection.FromString(section).indices if section else ():
        indices.append(
            IndexEntry(
                name=meta.name,
                uuid=shard_uuid_str(meta.uuid.uuid) if len(meta.uuid.uuid) == 16 else "",
                dataset_version=meta.dataset_version,
                fields=tuple(meta.fields),
                type_url=meta.index_details.type_url,
                details=meta.index_details.value,
                fragment_bitmap=meta.fragment_bitmap,
            )
        )
        if meta.name == MEM_WAL_INDEX_NAME and meta.index_details.type_url.endswith(
            MEM_WAL_DETAILS_TYPE_URL.rsplit("/", 1)[-1]
        ):
            mem_wal = mem_wal_index_pb2.MemWalIndexDetails.FromString(meta.index_details.value)
    compacted, catchup = progress_of(mem_wal)
    return tuple(indices), mem_wal, compacted, catchup


def progress_of(
    details: mem_wal_index_pb2.MemWalIndexDetails | None,
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Merge progress per shard and catch-up per index and shard, keyed by shard UUID string."""
    if details is None:
        return {}, {}
    compacted = {shard_uuid_str(c.shard_id.uuid): c.generation for c in details.compacted_sstables}
    catchup = {
        p.index_name: {shard_uuid_str(c.shard_id.uuid): c.generation for c in p.caught_up_generations}
        for p in details.index_catchup
    }
    return compacted, catchup


def maintained_indexes(manifest: TableManifest) -> list[str]:
    """The indexes the MemWAL index asks to keep caught up (every user index when it says all)."""
    details = manifest.mem_wal
    if details is None:
        return []
    if details.HasField("maintain_all_indexes") and details.maintain_all_indexes:
        return sorted({i.name for i in manifest.user_indices()})
    return list(details.maintained_indexes)
