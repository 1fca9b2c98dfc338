"""One object-store interface over a local directory and ``s3://`` (DESIGN.md sections 2, 3.7).

Keys are ``/``-separated strings relative to the store root (the table URI).  Every job
reads and writes the table's side files through a :class:`Store`, so a local table and
an S3 table behave the same: atomic puts, conditional puts (``put_if_absent`` and the
compare-and-swap ``put_if_match`` the leases are built on), lexicographically ordered
listings, and batched deletes where a missing key is not an error.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import logging
import os
import stat
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlparse

from memwal.errors import (
    BadInputError,
    MemWalError,
    NotFoundError,
    PreconditionFailedError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Temporary files written by :class:`LocalStore` carry this marker in their name, so
#: listings can skip them (a crashed writer may leave one behind).
TEMP_MARKER = ".memwal-tmp-"


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or a HEAD tells about one object."""

    key: str  # relative to the store root
    size: int
    etag: str  # opaque: only compare it or hand it back to put_if_match
    mtime: float  # seconds since the epoch


def _clean_key(key: str, *, allow_empty: bool = False) -> str:
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


def _clean_prefix(prefix: str) -> str:
    """Normalise a listing prefix: keeps a trailing ``/`` (directory) if given."""
    if prefix in ("", "/"):
        return ""
    trailing = prefix.endswith("/")
    body = _clean_key(prefix)
    return body + "/" if trailing else body


def _dir_prefix(prefix: str) -> str:
    """A prefix forced to name a directory (``a/b`` -> ``a/b/``), for list_dirs."""
    p = _clean_prefix(prefix)
    return p if (p == "" or p.endswith("/")) else p + "/"


class Store(abc.ABC):
    """An object store rooted at a table URI; keys are relative to :attr:`root`."""

    root: str

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Read a whole object (NotFoundError if absent): manifests, hints, lease records."""

    @abc.abstractmethod
    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes, to CAS-write it back later."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` without fetching the whole object.

        Used to read file trailers (Lance manifests end with a 16-byte trailer).  A negative
        ``start`` counts from the end of the object, like a Python slice.  Bytes past the
        end are simply not returned (a short or empty result).  NotFoundError if absent.
        """

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

    @abc.abstractmethod
    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in lexicographic key order.

        ``prefix`` is usually a directory prefix such as ``"_mem_wal/abc/"``.  With
        ``recursive=False`` only objects directly under it are yielded (S3 ``Delimiter='/'``).
        Paginated underneath, so it is safe on directories with many objects.
        """

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> list[str]:
        """Immediate child "directory" names under ``prefix`` (no trailing slash), sorted.

        Like S3 CommonPrefixes with delimiter ``/``: finds shards and generations.
        """

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete objects in batches; a missing key is not an error (GC reruns converge).

        Returns the number of keys requested.
        """

    @abc.abstractmethod
    def uri_for(self, key: str) -> str:
        """Full URI of a key, for messages, reports and for handing paths to Lance."""

    @abc.abstractmethod
    def child(self, prefix: str) -> Store:
        """A store rooted at ``root/prefix`` (e.g. one generation dataset), same credentials."""

    def __repr__(self) -> str:
        """Name the store by its root, for logs."""
        return f"{type(self).__name__}({self.root!r})"


# --------------------------------------------------------------------------- local


class LocalStore(Store):
    """A directory on a local (POSIX) file system.

    Atomicity comes from the file system: puts write a temporary file in the target's
    directory and rename it into place; ``put_if_absent`` hard-links the temporary file
    (link fails if the name exists); ``put_if_match`` holds an exclusive ``flock`` on the
    target's directory while it compares and renames, which serialises threads and
    processes without leaving lock files inside the table.

    ETags are ``<mtime_ns>-<size>-<inode>``.  Every write gives the new file an mtime
    strictly greater than the file it replaces, so an ETag is never reused for the same
    key (no ABA), even on file systems with coarse timestamps that recycle inodes.
    """

    def __init__(self, uri: str) -> None:
        """Root the store at a plain path or a ``file://`` URI (the directory may not exist yet)."""
        self.root = uri
        path = uri
        if path.startswith("file://"):
            path = path[len("file://") :]
            if path.startswith("localhost/"):
                path = path[len("localhost") :]
        if not path:
            raise BadInputError(f"invalid local table path {uri!r}")
        self._base = os.path.abspath(os.path.expanduser(path))

    # -- helpers

    def _path(self, key: str, *, allow_empty: bool = False) -> str:
        """Absolute path of a (validated) key."""
        k = _clean_key(key, allow_empty=allow_empty)
        return os.path.join(self._base, *k.split("/")) if k else self._base

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        """An ETag from file metadata (cheap: listings never read file contents)."""
        return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        """ObjectInfo from a stat result (one place builds ETags for head and list)."""
        return ObjectInfo(key=key, size=st.st_size, etag=self._etag(st), mtime=st.st_mtime)

    def _write_temp(self, path: str, data: bytes) -> str:
        """Write ``data`` to a new temporary file next to ``path``; returns its path.

        The temporary file is in the same directory so rename/link stay atomic.  It is
        fsynced so that a rename never exposes an empty file after a crash.
        """
        directory = os.path.dirname(path)
        # Truncated base name: the temporary name must stay within NAME_MAX.
        base = os.path.basename(path)[:100]
        tmp = os.path.join(directory, f".{base}{TEMP_MARKER}{uuid.uuid4().hex}")
        for attempt in range(5):
            os.makedirs(directory, exist_ok=True)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileNotFoundError:
                # A concurrent delete_many pruned the (empty) directory: recreate it.
                if attempt == 4:
                    raise
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    @staticmethod
    def _bump_mtime(tmp: str, previous: os.stat_result | None) -> None:
        """Make the new file's mtime strictly greater than the one it replaces (no ETag reuse)."""
        if previous is None:
            return
        st = os.stat(tmp)
        if st.st_mtime_ns <= previous.st_mtime_ns:
            ns = previous.st_mtime_ns + 1
            os.utime(tmp, ns=(ns, ns))

    @contextlib.contextmanager
    def _dir_lock(self, directory: str) -> Iterator[None]:
        """Exclusive flock on a directory: serialises writers of keys in it.

        flock locks belong to the open file description, so each call opening its own
        descriptor excludes other threads of this process as well as other processes.
        """
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor releases the lock

    @staticmethod
    def _stat_file(path: str) -> os.stat_result | None:
        """stat() of a regular file, None if absent or not a file."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _not_found(self, key: str) -> NotFoundError:
        """The error for a missing object, naming its full path."""
        return NotFoundError(f"object not found: {self.uri_for(key)}")

    # -- reads

    def get(self, key: str) -> bytes:
        """Read a whole object (NotFoundError if absent): manifests, hints, lease records."""
        return self.get_with_etag(key)[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes (fstat of the open file)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                return f.read(), self._etag(st)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(key) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` (negative: from the end) to read trailers cheaply."""
        if length < 0:
            raise ValueError("length must be >= 0")
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                offset = max(size + start, 0) if start < 0 else start
                if offset >= size or length == 0:
                    return b""
                f.seek(offset)
                return f.read(length)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(key) from None

    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime of an object, or None if it does not exist."""
        k = _clean_key(key)
        st = self._stat_file(self._path(k))
        return None if st is None else self._info(k, st)

    # -- writes

    def put(self, key: str, data: bytes) -> str:
        """Write atomically via a temporary file and rename; returns the new ETag."""
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            with self._dir_lock(os.path.dirname(path)):
                self._bump_mtime(tmp, self._stat_file(path))
                os.replace(tmp, path)
                return self._etag(os.stat(path))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create only if absent: ``link()`` of a complete temporary file fails if the name exists."""
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise PreconditionFailedError(f"object already exists: {self.uri_for(key)}") from None
            return self._etag(os.stat(tmp))  # same inode as the new object
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Compare-and-swap under the directory's flock: rename only if the ETag still matches."""
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            with self._dir_lock(os.path.dirname(path)):
                current = self._stat_file(path)
                if current is None:
                    raise PreconditionFailedError(f"conditional write failed, object is gone: {self.uri_for(key)}")
                if self._etag(current) != etag:
                    raise PreconditionFailedError(f"conditional write failed, object changed: {self.uri_for(key)}")
                self._bump_mtime(tmp, current)
                os.replace(tmp, path)
                return self._etag(os.stat(path))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # -- listing

    def _walk(self, directory: str, rel: str, name_prefix: str, recursive: bool) -> Iterator[ObjectInfo]:
        """Depth-first walk yielding files in lexicographic order of their full keys.

        Directories sort as ``name + "/"``, which makes depth-first order equal the order
        S3 lists keys in.
        """
        try:
            with os.scandir(directory) as it:
                entries = [e for e in it if e.name.startswith(name_prefix)]
        except (FileNotFoundError, NotADirectoryError):
            return
        keyed: list[tuple[str, os.DirEntry[str], bool]] = []
        for e in entries:
            try:
                is_dir = e.is_dir(follow_symlinks=True)
            except OSError:
                continue
            if not is_dir and TEMP_MARKER in e.name:
                continue
            keyed.append((e.name + "/" if is_dir else e.name, e, is_dir))
        keyed.sort(key=lambda t: t[0])
        for _, e, is_dir in keyed:
            key = rel + e.name
            if is_dir:
                if recursive:
                    yield from self._walk(e.path, key + "/", "", True)
                continue
            try:
                st = e.stat(follow_symlinks=True)
            except FileNotFoundError:
                continue  # deleted while listing
            if stat.S_ISREG(st.st_mode):
                yield self._info(key, st)

    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order, skipping our temporary files."""
        p = _clean_prefix(prefix)
        dir_part, _, name_prefix = p.rpartition("/")
        directory = self._path(dir_part, allow_empty=True)
        rel = dir_part + "/" if dir_part else ""
        yield from self._walk(directory, rel, name_prefix, recursive)

    def list_dirs(self, prefix: str) -> list[str]:
        """Immediate subdirectory names under ``prefix`` (os.scandir), sorted."""
        directory = self._path(_dir_prefix(prefix), allow_empty=True)
        try:
            with os.scandir(directory) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=True))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- deletes

    def delete_many(self, keys: Iterable[str]) -> int:
        """Unlink files (missing ones are fine), then prune directories left empty.

        Pruning keeps local listings like S3's, where a "directory" exists only while
        objects are under it (an emptied generation must not show up in list_dirs).
        """
        count = 0
        parents: set[str] = set()
        for key in keys:
            count += 1
            path = self._path(key)
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                continue
            except PermissionError as exc:
                if os.path.isdir(path):  # EPERM on some systems for unlink(dir)
                    continue
                raise MemWalError(f"cannot delete {path}: {exc}") from exc
            parents.add(os.path.dirname(path))
        for parent in sorted(parents, key=len, reverse=True):
            self._prune(parent)
        return count

    def _prune(self, directory: str) -> None:
        """Remove ``directory`` and its ancestors while empty, never the store root."""
        while directory != self._base and directory.startswith(self._base + os.sep):
            try:
                os.rmdir(directory)
            except OSError as exc:
                if exc.errno != errno.ENOENT:  # not empty (or busy): stop climbing
                    return
            directory = os.path.dirname(directory)

    # -- naming

    def uri_for(self, key: str) -> str:
        """Absolute local path of a key."""
        return self._path(key, allow_empty=True)

    def child(self, prefix: str) -> LocalStore:
        """A store rooted at ``root/prefix``."""
        p = _clean_key(prefix, allow_empty=True)
        if not p:
            return LocalStore(self.root)
        return LocalStore(self.root.rstrip("/") + "/" + p)


# --------------------------------------------------------------------------- factory


def open_store(uri: str, storage_options: dict[str, str] | None = None) -> Store:
    """The store for a table URI: ``s3://`` (with Lance-style options) or a local path.

    Storage options are ignored for local paths.  Other schemes are refused.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise BadInputError(f"invalid table URI {uri!r}")
    uri = uri.strip()
    scheme = urlparse(uri).scheme.lower()
    if scheme in ("s3", "s3a"):
        from memwal.s3_store import S3Store  # boto3 loads only for S3 tables

        return S3Store(uri, storage_options)
    if scheme in ("", "file"):
        return LocalStore(uri)
    raise BadInputError(f"unsupported table URI scheme {scheme!r} in {uri!r}: use a local path or s3://")
