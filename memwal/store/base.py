"""The store interface every job reads and writes a table's side files through (DESIGN 2, 3.7).

Keys are ``/``-separated strings relative to the store root (the table URI).  A local
table and one on S3, Azure Blob Storage or Google Cloud Storage behave the same: atomic
puts, conditional puts (``put_if_absent`` and the compare-and-swap ``put_if_match`` the
leases, merge intents and run history are built on), lexicographically ordered listings,
and batched deletes where a missing key is not an error.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass

from memwal.core.pool import parallel_map
from memwal.errors import BadInputError, NotFoundError, TooLargeError


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or a HEAD tells about one object."""

    key: str  # relative to the store root
    size: int
    etag: str  # opaque: only compare it or hand it back to put_if_match
    mtime: float  # seconds since the epoch


def clean_key(key: str, *, allow_empty: bool = False) -> str:
    """Normalise a key and refuse one that could escape the store root.

    Keys come from manifests and plans (data, not trust: DESIGN 3.5), so ``..``,
    absolute keys and empty components are refused rather than resolved.
    """
    if not isinstance(key, str):
        raise BadInputError(f"object key must be a string, got {type(key).__name__}")
    stripped = key.strip("/")
    if not stripped:
        if allow_empty:
            return ""
        raise BadInputError(f"invalid object key {key!r}: empty")
    parts = stripped.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in stripped or "\x00" in stripped:
        raise BadInputError(f"invalid object key {key!r}")
    return stripped


def clean_prefix(prefix: str) -> str:
    """Normalise a listing prefix: keeps a trailing ``/`` (directory) if given."""
    if prefix in ("", "/"):
        return ""
    trailing = prefix.endswith("/")
    body = clean_key(prefix)
    return body + "/" if trailing else body


#: Folders a listing leaves out: their keys, or a predicate of a folder's key (no trailing slash).
Skip = Collection[str] | Callable[[str], bool]


def skipping(skip: Skip) -> Callable[[str], bool]:
    """``skip`` as a predicate of a folder key."""
    if callable(skip):
        return skip
    folders = frozenset(skip)
    return folders.__contains__


def pruned_folder(key: str, prefix: str, pruned: Callable[[str], bool]) -> str | None:
    """The outermost folder below ``prefix`` holding ``key`` that ``pruned`` leaves out (None: keep it)."""
    start = len(clean_prefix(prefix).rpartition("/")[0])
    cut = key.find("/", start + 1 if start else 0)
    while cut != -1:
        if pruned(key[:cut]):
            return key[:cut]
        cut = key.find("/", cut + 1)
    return None


def dir_prefix(prefix: str) -> str:
    """A prefix forced to name a directory (``a/b`` -> ``a/b/``), for list_dirs."""
    p = clean_prefix(prefix)
    return p if (p == "" or p.endswith("/")) else p + "/"




class Store(abc.ABC):
    """An object store rooted at a table URI; keys are relative to :attr:`root`."""

    root: str

    def get(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """Read a whole object (NotFoundError if absent): manifests, hints, lease records.

        ``max_bytes``: TooLargeError, naming the object, for a larger one, before its body is
        read (storage is untrusted: a record planted at a gigabyte must not be loaded)."""
        return self.get_with_etag(key, max_bytes=max_bytes)[0]

    @abc.abstractmethod
    def get_with_etag(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes, to CAS-write it back later
        (``max_bytes`` as in :meth:`get`)."""

    def get_with_time(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, float]:
        """Read an object and when it was written (0.0: not told): a stat and a read on a disk; one
        GET on an object store, whose answer carries the time (a shard manifest read by every merge
        plan and listing pass HEAD-ed first cost a request a shard more)."""
        info = self.head(key)
        return self.get(key, max_bytes=max_bytes), info.mtime if info else 0.0

    def check_size(self, key: str, size: int, max_bytes: int | None) -> None:
        """TooLargeError if an object of ``size`` bytes is over ``max_bytes`` (None: no cap)."""
        if max_bytes is not None and size > max_bytes:
            raise TooLargeError(self.uri_for(key), size, max_bytes)

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` without fetching the whole object.

        Used to read file trailers (Lance manifests end with a 16-byte trailer).  A negative
        ``start`` counts from the end of the object, like a Python slice.  Bytes past the
        end are simply not returned (a short or empty result).  NotFoundError if absent.
        """

    #: Reads :meth:`get_heads` keeps in flight: on a disk a read is a few system calls and
    #: waits for nothing; an object store's request waits for the network (ObjectStore's).
    READ_THREADS = 1

    def get_heads(self, keys: builtins.list[str], length: int) -> builtins.list[bytes | None]:
        """The first ``length`` bytes of each object, in order; None for one that is absent.

        For many small reads at once (GC's plan reads every WAL entry's schema): an object
        store keeps :data:`READ_THREADS` requests in flight, a disk store reaches each
        directory once rather than once per key.
        """
        return self._each_object(keys, lambda key: self.get_range(key, 0, length))

    def get_many(self, keys: builtins.list[str]) -> builtins.list[bytes | None]:
        """Whole objects, in order; None for one that is absent. For many small objects at
        once, as :meth:`get_heads` (GC's plan reads the manifest of every retained version)."""
        return self._each_object(keys, self.get)

    def _each_object(self, keys: builtins.list[str], read: Callable[[str], bytes]) -> builtins.list[bytes | None]:
        def one(key: str) -> bytes | None:
            try:
                return read(key)
            except NotFoundError:
                return None
        return parallel_map(one, keys, self.READ_THREADS, name="memwal-read")

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime of an object, or None if it does not exist."""

    def exists(self, key: str) -> bool:
        """Whether an object exists (a "directory" with objects under it does not count)."""
        return self.head(key) is not None

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write an object atomically (readers see the old or the new bytes, never a part).

        Returns the new ETag.  Parent "directories" are created as needed.
        """

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create an object only if no object has the key: the first lease write.

        Exactly one of several concurrent callers wins; the others get
        PreconditionFailedError.  Returns the new ETag.
        """

    @abc.abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Compare-and-swap: replace the object only if its ETag is still ``etag``.

        PreconditionFailedError if the ETag changed or the object is gone.  Of several
        concurrent callers holding the same ETag exactly one wins.  Returns the new ETag.
        """

    def move_folder(self, source: str, target: str) -> int | None:
        """Rename the folder ``source`` to ``target``, a name no folder has, in one step, with every
        file in it made durable first; the bytes moved. None where the store cannot (an object store
        has no rename; a disk when something in it is not a file or a folder, it nests deeper than a
        generation does, or ``target`` is on another file system): the caller copies.
        PreconditionFailedError when ``target`` exists."""
        return None

    def folder_stamp(self, prefix: str) -> tuple[int, int, int, int] | None:
        """The folder ``prefix``'s device, inode, modification and change times (ns): what moves when
        an entry is added to it, removed or renamed (None: no such folder, or no folder times: an object
        store). A listing taken while it stood still is that listing still (:mod:`memwal.fleet.folders`)."""
        return None

    @abc.abstractmethod
    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in lexicographic key order.

        ``prefix`` is usually a directory prefix such as ``"_mem_wal/abc/"``.  With
        ``recursive=False`` only objects directly under it are yielded (S3 ``Delimiter='/'``).
        Paginated underneath, so it is safe on directories with many objects.
        """

    def list_around(self, prefix: str, skip_dir: str) -> Iterator[ObjectInfo]:
        """Objects under directory ``prefix``, in key order, except those under its child
        directory ``skip_dir`` (a name): :meth:`list_with_links` leaving that folder out (an
        object store pages past it, a disk does not walk it)."""
        folder = f"{dir_prefix(prefix)}{skip_dir}"
        return iter(self.list_with_links(prefix, skip=(folder,))[0])

    def list_keys(self, prefix: str) -> Iterator[str]:
        """Keys of the objects directly under ``prefix``, in key order: a non-recursive
        :meth:`list` without sizes or times. A local store reads them from the directory
        listing alone, with no stat per file (a folder of 35,000 run records, 5,000 table
        versions); an object store's listing brings sizes anyway."""
        return (o.key for o in self.list(prefix, recursive=False))

    def list_level(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """:meth:`list_keys` and :meth:`list_dirs` of one directory at once, both sorted: an
        object store answers both with one delimiter listing."""
        return builtins.list(self.list_keys(prefix)), self.list_dirs(prefix)

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Immediate child "directory" names under ``prefix`` (no trailing slash), sorted.

        Like S3 CommonPrefixes with delimiter ``/``: finds shards and generations.
        """

    def list_links(self, prefix: str, *, recursive: bool = True) -> builtins.list[str]:
        """Keys of symbolic links at or under ``prefix`` (sorted), including a linked component
        of ``prefix`` itself: listings skip links and never follow them, this reports them.
        With ``recursive=False`` only the entries directly under ``prefix`` are looked at.

        Object stores have no links, so the default is none; :class:`~memwal.store.local.LocalStore` overrides it.
        """
        return []

    def list_dirs_and_links(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """:meth:`list_dirs` and the non-recursive :meth:`list_links` of ``prefix`` (a local
        store reads both from one directory listing)."""
        return self.list_dirs(prefix), self.list_links(prefix, recursive=False)

    def list_with_links(self, prefix: str, *, skip: Skip = ()) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """:meth:`list` and :meth:`list_links` of one prefix, but nothing under the folders ``skip``
        names (folder keys, or a predicate of a folder key: GC's and status's one listing of
        ``_mem_wal/`` without ``_jobs/``). A local store does both in one walk and does not
        enter those folders; an object store lists past them (:meth:`ObjectStore.list_with_links`)."""
        pruned = skipping(skip)
        objects = [o for o in self.list(prefix) if pruned_folder(o.key, prefix, pruned) is None]
        return objects, [k for k in self.list_links(prefix) if pruned_folder(k, prefix, pruned) is None]

    def list_if_short(self, prefix: str, *, skip: Skip = (), pages: int) -> tuple[builtins.list[ObjectInfo],
                                                                                 builtins.list[str]] | None:
        """:meth:`list_with_links`, or None once it would take more than ``pages`` listing requests
        (an object store's; a disk sends none, so its listing is always short): the caller then
        reads the few folders it needs by name instead of paging through every folder kept."""
        return self.list_with_links(prefix, skip=skip)

    #: A file system: directories exist apart from the objects in them, and GC deletes whole
    #: generation directories with :meth:`delete_trees`; an object store's "directories" are
    #: only key prefixes, listed and deleted in requests of many keys.
    has_directories: bool = False

    @property
    def requests_sent(self) -> int:
        """Requests sent to the backend so far: an object store counts them; a disk sends none."""
        return 0

    def delete_trees(self, prefixes: builtins.list[str], *, first: Callable[[str, str], bool],
                     threads: int) -> builtins.list[tuple[int, int, builtins.list[str]]]:
        """Delete every file and directory under each of ``prefixes``, ``first(key, prefix)``
        files of a tree before its others; per prefix (objects deleted, bytes freed, keys refused
        as links). Only stores with directories implement it (:class:`~memwal.store.local.LocalStore`)."""
        raise NotImplementedError(f"{type(self).__name__} has no directories: list its keys and delete_many them")

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete objects in batches; a missing key is not an error (GC reruns converge).

        Returns the number of keys requested.
        """

    @abc.abstractmethod
    def uri_for(self, key: str) -> str:
        """Full URI of a key, for messages, reports and for handing paths to Lance."""

    def not_found(self, key: str) -> NotFoundError:
        """The error for an object that is not there (absent, or gone since it was listed),
        naming its full URI: one message whichever store or caller finds it missing."""
        return NotFoundError(f"object not found: {self.uri_for(key)}")

    @abc.abstractmethod
    def child(self, prefix: str) -> Store:
        """A store rooted at ``root/prefix`` (e.g. one generation dataset), same credentials."""

    def __repr__(self) -> str:
        """Name the store by its root, for logs."""
        return f"{type(self).__name__}({self.root!r})"
