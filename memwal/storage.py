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
import re
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
from memwal.paths import LinkedPathError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Temporary files written by :class:`LocalStore` carry this marker in their name, so
#: listings can skip them (a crashed writer may leave one behind).
TEMP_MARKER = ".memwal-tmp-"

#: How every directory below a store root is opened: never through a symbolic link.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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

    def list_links(self, prefix: str, *, recursive: bool = True) -> list[str]:
        """Keys of symbolic links at or under ``prefix`` (sorted), including a linked component
        of ``prefix`` itself: listings skip links and never follow them, this reports them.
        With ``recursive=False`` only the entries directly under ``prefix`` are looked at.

        Object stores have no links, so the default is none; :class:`LocalStore` overrides it.
        """
        return []

    def list_with_links(self, prefix: str) -> tuple[list[ObjectInfo], list[str]]:
        """:meth:`list` and :meth:`list_links` of one prefix; a local store does both in one walk."""
        return list(self.list(prefix)), self.list_links(prefix)

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

    Links: what lies under the root is data, not trust.  Every path below the root is
    opened one component at a time from its parent's descriptor with ``O_NOFOLLOW``
    (``openat``/``unlinkat``/``fstatat``), so no listing, read, write or delete follows a
    symbolic link, and a link swapped in after a check cannot redirect the call that acts
    on it.  Listings skip links (:meth:`list_links` reports them); reads, writes and
    deletes through one raise :class:`~memwal.paths.LinkedPathError`.  Only the root path
    the store was opened with is trusted as given.
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
        # The trusted root and the components below it that must be opened link-safely
        # (a child store's prefix is table data like any key).
        self._trusted = self._base
        self._sub: tuple[str, ...] = ()

    # -- helpers

    def _path(self, key: str, *, allow_empty: bool = False) -> str:
        """Absolute path of a (validated) key, for messages and for handing paths to Lance."""
        k = _clean_key(key, allow_empty=allow_empty)
        return os.path.join(self._base, *k.split("/")) if k else self._base

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        """An ETag from file metadata (cheap: listings never read file contents)."""
        return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        """ObjectInfo from a stat result (one place builds ETags for head and list)."""
        return ObjectInfo(key=key, size=st.st_size, etag=self._etag(st), mtime=st.st_mtime)

    def _refusal(self, key: str, walk: tuple[str, ...], i: int, parent_fd: int) -> LinkedPathError:
        """The error for component ``walk[i]`` (in ``parent_fd``) being a link or not a directory.

        ``O_DIRECTORY|O_NOFOLLOW`` fails on a link with ENOTDIR as on a file (ELOOP only
        without O_DIRECTORY), so the component is lstat-ed to tell which it is.
        """
        return LinkedPathError(key, os.path.join(self._trusted, *walk[: i + 1]), link=_is_link(parent_fd, walk[i]))

    def _component_key(self, exc: LinkedPathError) -> str:
        """The store key of a refused component ("" when it is above this store's root)."""
        rel = os.path.relpath(exc.where, self._base)
        return "" if rel == "." or rel.startswith("..") else rel.replace(os.sep, "/")

    def _open_dir(self, parts: Iterable[str], *, key: str, create: bool = False) -> int | None:
        """Descriptor of the directory ``parts`` below the root, opened without following links.

        None if a component is missing (``create`` makes them).  LinkedPathError if one is a
        link or not a directory.  The caller closes the descriptor.
        """
        walk = self._sub + tuple(parts)
        if create:
            os.makedirs(self._trusted, exist_ok=True)
        try:
            fd = os.open(self._trusted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            for i, name in enumerate(walk):
                try:
                    nxt = self._open_child_dir(fd, name, create)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._refusal(key, walk, i, fd) from None
                    raise
                os.close(fd)
                fd = nxt
                if fd < 0:
                    return None
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return fd

    @staticmethod
    def _open_child_dir(fd: int, name: str, create: bool) -> int:
        """openat(name, O_DIRECTORY|O_NOFOLLOW), making it first if asked; -1 if missing."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                return -1
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=fd)
        return os.open(name, _DIR_FLAGS, dir_fd=fd)

    def _open_parent(self, key: str, *, create: bool = False) -> tuple[int | None, str]:
        """(descriptor of the directory holding ``key``, last component); see :meth:`_open_dir`."""
        parts = key.split("/")
        return self._open_dir(parts[:-1], key=key, create=create), parts[-1]

    @staticmethod
    def _lstat_regular(dfd: int, name: str) -> os.stat_result | None:
        """lstat of ``name`` in ``dfd`` if it is a regular file, else None (links are not objects)."""
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _refuse_if_link(self, dfd: int, key: str) -> None:
        """Refuse to replace or read a key that is itself a symbolic link."""
        try:
            st = os.stat(key.rsplit("/", 1)[-1], dir_fd=dfd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        if stat.S_ISLNK(st.st_mode):
            raise LinkedPathError(key, self._path(key), link=True)

    def _open_file(self, key: str) -> int | None:
        """Read descriptor of a regular file at ``key``, None if absent or not a file.

        O_NONBLOCK keeps a FIFO planted in the table from hanging the job; it does not
        change reads of a regular file.
        """
        k = _clean_key(key)
        try:
            dfd, name = self._open_parent(k)
        except LinkedPathError as exc:
            if exc.link:
                raise
            return None
        if dfd is None:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LinkedPathError(k, self._path(k), link=True) from None
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENXIO, errno.EISDIR):
                return None
            raise
        finally:
            os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def _not_found(self, key: str) -> NotFoundError:
        """The error for a missing object, naming its full path."""
        return NotFoundError(f"object not found: {self.uri_for(key)}")

    # -- reads

    def get(self, key: str) -> bytes:
        """Read a whole object (NotFoundError if absent): manifests, hints, lease records."""
        return self.get_with_etag(key)[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes (fstat of the open file)."""
        fd = self._open_file(key)
        if fd is None:
            raise self._not_found(key)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            return f.read(), self._etag(st)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` (negative: from the end) to read trailers cheaply."""
        if length < 0:
            raise ValueError("length must be >= 0")
        fd = self._open_file(key)
        if fd is None:
            raise self._not_found(key)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = max(size + start, 0) if start < 0 else start
            if offset >= size or length == 0:
                return b""
            f.seek(offset)
            return f.read(length)

    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime of a regular file; None if absent, a directory or a link."""
        k = _clean_key(key)
        try:
            dfd, name = self._open_parent(k)
        except LinkedPathError:
            return None  # nothing is an object through a link (list_links reports it)
        if dfd is None:
            return None
        try:
            st = self._lstat_regular(dfd, name)
        finally:
            os.close(dfd)
        return None if st is None else self._info(k, st)

    # -- writes

    def _write_temp(self, key: str, data: bytes) -> tuple[int, str, str]:
        """Write ``data`` to a new temporary file in ``key``'s directory.

        Returns (directory descriptor, temporary name, final name): renames and links then
        happen inside that very directory, whatever is swapped in on the path meanwhile.
        The file is fsynced so that a rename never exposes an empty file after a crash.
        """
        # Truncated base name: the temporary name must stay within NAME_MAX.
        tmp = f".{key.rsplit('/', 1)[-1][:100]}{TEMP_MARKER}{uuid.uuid4().hex}"
        for attempt in range(5):
            dfd, name = self._parent_for_write(key)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=dfd)
                break
            except FileNotFoundError:
                # A concurrent delete_many pruned the (empty) directory: recreate it.
                os.close(dfd)
                if attempt == 4:
                    raise
            except BaseException:
                os.close(dfd)
                raise
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            os.close(dfd)
            raise
        return dfd, tmp, name

    def _parent_for_write(self, key: str) -> tuple[int, str]:
        """The (created) directory of ``key``: a link on the way is refused, a file is bad input."""
        try:
            dfd, name = self._open_parent(key, create=True)
        except LinkedPathError as exc:
            if exc.link:
                raise
            raise BadInputError(f"cannot write {self.uri_for(key)}: {exc.where} is not a directory") from None
        if dfd is None:  # the root vanished between makedirs and open
            raise self._not_found("/".join(key.split("/")[:-1]) or key)
        return dfd, name

    @staticmethod
    def _bump_mtime(dfd: int, tmp: str, previous: os.stat_result | None) -> None:
        """Make the new file's mtime strictly greater than the one it replaces (no ETag reuse)."""
        if previous is None:
            return
        st = os.stat(tmp, dir_fd=dfd, follow_symlinks=False)
        if st.st_mtime_ns <= previous.st_mtime_ns:
            ns = previous.st_mtime_ns + 1
            os.utime(tmp, ns=(ns, ns), dir_fd=dfd, follow_symlinks=False)

    def _replace_locked(self, key: str, data: bytes, etag: str | None) -> str:
        """Rename a complete temporary file over ``key`` under the directory's flock.

        With ``etag`` it is a compare-and-swap.  flock locks belong to the open file
        description, and every call opens its own directory descriptor, so other threads
        of this process are excluded as well as other processes.
        """
        k = _clean_key(key)
        dfd, tmp, name = self._write_temp(k, data)
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX)
            self._refuse_if_link(dfd, k)
            current = self._lstat_regular(dfd, name)
            if etag is not None:
                if current is None:
                    raise PreconditionFailedError(f"conditional write failed, object is gone: {self.uri_for(k)}")
                if self._etag(current) != etag:
                    raise PreconditionFailedError(f"conditional write failed, object changed: {self.uri_for(k)}")
            self._bump_mtime(dfd, tmp, current)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return self._etag(os.stat(name, dir_fd=dfd, follow_symlinks=False))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        finally:
            os.close(dfd)  # closing the last descriptor releases the lock

    def put(self, key: str, data: bytes) -> str:
        """Write atomically via a temporary file and rename; returns the new ETag."""
        return self._replace_locked(key, data, None)

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create only if absent: ``link()`` of a complete temporary file fails if the name exists."""
        k = _clean_key(key)
        dfd, tmp, name = self._write_temp(k, data)
        try:
            try:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                self._refuse_if_link(dfd, k)
                raise PreconditionFailedError(f"object already exists: {self.uri_for(k)}") from None
            return self._etag(os.stat(tmp, dir_fd=dfd, follow_symlinks=False))  # same inode as the new object
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            os.close(dfd)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Compare-and-swap under the directory's flock: rename only if the ETag still matches."""
        return self._replace_locked(key, data, etag)

    # -- listing

    def _scan(self, fd: int, rel: str, name_prefix: str, recursive: bool, links: list[str],
              objects: bool = True) -> Iterator[ObjectInfo]:
        """Depth-first walk of an open directory yielding regular files in key order.

        Directories sort as ``name + "/"``, which makes depth-first order equal the order S3
        lists keys in.  Entries are lstat-ed and subdirectories opened with O_NOFOLLOW, so a
        link is never descended into or reported as an object: it is appended to ``links``.
        """
        found: list[tuple[str, str, os.stat_result | None]] = []
        with os.scandir(fd) as it:
            for e in it:
                if not e.name.startswith(name_prefix):
                    continue
                try:  # the entry's type comes with the listing (d_type): only files are stat-ed
                    if e.is_symlink():
                        links.append(rel + e.name)
                    elif e.is_dir(follow_symlinks=False):
                        found.append((e.name + "/", e.name, None))
                    elif objects and TEMP_MARKER not in e.name:
                        found.append((e.name, e.name, e.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # deleted while listing
        found.sort(key=lambda t: t[0])
        for _, name, st in found:
            key = rel + name
            if st is not None:
                if stat.S_ISREG(st.st_mode):
                    yield self._info(key, st)
                continue
            if not recursive:
                continue
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link or a file meanwhile
                    if _is_link(fd, name):
                        links.append(key)
                    continue
                raise
            try:
                yield from self._scan(sub, key + "/", "", True, links, objects)
            finally:
                os.close(sub)

    def _listing(self, prefix: str, recursive: bool, links: list[str], objects: bool = True) -> Iterator[ObjectInfo]:
        """Objects under a (string) prefix; links met on the way, the prefix's own included, go to ``links``.

        With ``objects=False`` only links are looked for: no file is stat-ed or yielded.
        """
        p = _clean_prefix(prefix)
        dir_part, _, name_prefix = p.rpartition("/")
        try:
            fd = self._open_dir(dir_part.split("/") if dir_part else [], key=dir_part or ".")
        except LinkedPathError as exc:
            if exc.link:
                links.append(self._component_key(exc))
            return
        if fd is None:
            return
        try:
            yield from self._scan(fd, dir_part + "/" if dir_part else "", name_prefix, recursive, links, objects)
        finally:
            os.close(fd)

    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order, skipping our temporary files and every link."""
        yield from self._listing(prefix, recursive, [])

    def list_links(self, prefix: str, *, recursive: bool = True) -> list[str]:
        """Symbolic links at or under ``prefix`` (sorted keys), found without following any."""
        links: list[str] = []
        for _ in self._listing(prefix, recursive, links, objects=False):
            pass
        return sorted(set(links))

    def list_with_links(self, prefix: str) -> tuple[list[ObjectInfo], list[str]]:
        """Objects and links under ``prefix`` from one walk of the tree (GC's survey)."""
        links: list[str] = []
        objects = list(self._listing(prefix, True, links))
        return objects, sorted(set(links))

    def list_dirs(self, prefix: str) -> list[str]:
        """Immediate subdirectory names under ``prefix``, sorted; links to directories are not listed."""
        p = _dir_prefix(prefix).rstrip("/")
        try:
            fd = self._open_dir(p.split("/") if p else [], key=p or ".")
        except LinkedPathError:
            return []
        if fd is None:
            return []
        try:
            with os.scandir(fd) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        finally:
            os.close(fd)

    # -- deletes

    def delete_many(self, keys: Iterable[str]) -> int:
        """Unlink files (missing ones are fine) and prune the directories they leave empty.

        Each key is checked when it is deleted, not before: its directory is reached
        component by component with O_NOFOLLOW and only a regular file is unlinked, so a
        link on the way (planted, or swapped in after the caller listed the key) refuses
        that key and nothing is deleted through it.  The other keys still go; then
        LinkedPathError names the refused ones.  Pruning keeps local listings like S3's,
        where a "directory" exists only while objects are under it.

        Keys are deleted in sorted order by one :class:`_TreeDeleter`, which keeps open
        only the directories on the current path: each directory is opened once per call
        (not once per key) and tried for removal once, when the walk leaves it.
        """
        requested = [_clean_key(k) for k in keys]
        ordered = sorted(set(requested))
        refused: list[LinkedPathError] = []
        try:
            root = self._open_dir((), key=".")  # a child store's own prefix may cross a link
        except LinkedPathError as exc:
            root, refused = None, [LinkedPathError(k, exc.where, link=exc.link) for k in ordered]
        if root is not None:
            deleter = _TreeDeleter(self, root)
            try:
                for key in ordered:
                    deleter.delete(key)
            finally:
                deleter.close()
            refused = deleter.refused
        if refused:
            refused[0].refused = [e.path for e in refused]
            raise refused[0]
        return len(requested)

    # -- naming

    def uri_for(self, key: str) -> str:
        """Absolute local path of a key."""
        return self._path(key, allow_empty=True)

    def child(self, prefix: str) -> LocalStore:
        """A store rooted at ``root/prefix``: the prefix is opened link-safely like any key."""
        p = _clean_key(prefix, allow_empty=True)
        if not p:
            return LocalStore(self.root)
        store = LocalStore(self.root.rstrip("/") + "/" + p)
        store._trusted, store._sub = self._trusted, self._sub + tuple(p.split("/"))
        return store


class _TreeDeleter:
    """Deletes keys, given in sorted order, along one link-safe path of open directories.

    Sorted keys under one directory are consecutive, so a stack of descriptors (the
    store root, then each directory of the current key's path, each opened from its
    parent with O_NOFOLLOW) serves every key of a directory with a single open.  When the
    next key leaves a directory, its descriptor is closed and, if this walk emptied
    something in it, it is removed (rmdirat from its parent, never the root): each
    directory is tried once, deepest first, and a failure (not empty, say because a
    writer put a file there meanwhile) stops the climb, as on S3 where a "directory"
    exists only while objects are under it.
    """

    def __init__(self, store: LocalStore, root_fd: int) -> None:
        self.store = store
        self.names: list[str] = []  # the path of open directories below the root
        self.fds: list[int] = [root_fd]
        self.changed: list[bool] = [False]  # per open directory: this walk removed something in it
        self.refused: list[LinkedPathError] = []

    def delete(self, key: str) -> None:
        """Unlink ``key`` if it is a regular file; a link on its path (or as it) refuses it."""
        *parts, name = key.split("/")
        try:
            if not self._enter(parts, key):
                return  # a directory on the way is missing: so is the key
        except LinkedPathError as exc:
            self.refused.append(exc)
            return
        fd = self.fds[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        if stat.S_ISDIR(st.st_mode):
            return  # a "directory" is not an object
        if not stat.S_ISREG(st.st_mode):
            self.refused.append(LinkedPathError(key, self.store._path(key), link=stat.S_ISLNK(st.st_mode)))
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return
        except PermissionError as exc:
            raise MemWalError(f"cannot delete {self.store.uri_for(key)}: {exc}") from exc
        self.changed[-1] = True

    def _enter(self, parts: list[str], key: str) -> bool:
        """Make the open path ``parts``: leave directories not on it, open the rest; False if one is missing."""
        common = 0
        while common < min(len(parts), len(self.names)) and parts[common] == self.names[common]:
            common += 1
        while len(self.names) > common:
            self._leave()
        for name in parts[common:]:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=self.fds[-1])
            except FileNotFoundError:
                return False
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    walk = self.store._sub + tuple(self.names) + (name,)
                    raise self.store._refusal(key, walk, len(walk) - 1, self.fds[-1]) from None
                raise
            self.names.append(name)
            self.fds.append(fd)
            self.changed.append(False)
        return True

    def _leave(self) -> None:
        """Close the deepest open directory and remove it if this walk emptied it."""
        name = self.names.pop()
        os.close(self.fds.pop())
        if not self.changed.pop():
            return
        try:
            os.rmdir(name, dir_fd=self.fds[-1])
        except FileNotFoundError:
            pass  # removed meanwhile: climb on as if this walk had
        except OSError:
            return  # not empty, busy, or no longer a directory: stop climbing
        self.changed[-1] = True

    def close(self) -> None:
        """Leave every open directory (pruning on the way up), then close the root."""
        try:
            while self.names:
                self._leave()
        finally:
            for fd in self.fds:
                os.close(fd)
            self.fds.clear()


def _is_link(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in the directory ``dir_fd`` is a symbolic link (lstat; False if gone)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


# --------------------------------------------------------------------------- factory


def check_table_uri(uri: object) -> str:
    """Validate a table URI before anything is read or written; returns it stripped.

    Accepted: a local path, ``file:///path`` (or ``file://localhost/path``) and
    ``s3://bucket[/prefix]``. Everything else is refused here, once, for every command:
    ``s3a://`` (Hadoop's name: Lance would open another store than ours), an empty or
    malformed bucket, a prefix with empty, ``.`` or ``..`` components (``s3://b//t`` is a
    different key than ``s3://b/t`` on S3 but the same directory locally), query strings
    and fragments (they would silently be dropped).
    """
    if not isinstance(uri, str) or not uri.strip():
        raise BadInputError(f"invalid table URI {uri!r}: empty")
    uri = uri.strip()
    if "\x00" in uri:
        raise BadInputError(f"invalid table URI {uri!r}: contains a NUL byte")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if "://" not in uri and scheme not in _URL_SCHEMES:
        return uri  # a local path (relative paths, and colons in names, are fine)
    if scheme not in ("file", "s3") or "://" not in uri:
        raise BadInputError(
            f"unsupported table URI scheme {scheme!r} in {uri!r}: use a local path, file:///path or s3://bucket/prefix"
        )
    if parsed.query or parsed.fragment or parsed.params:
        raise BadInputError(f"invalid table URI {uri!r}: query strings and fragments are not allowed")
    if scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise BadInputError(f"invalid table URI {uri!r}: expected file:///absolute/path")
        return uri
    if not parsed.netloc:
        raise BadInputError(f"invalid table URI {uri!r}: no bucket (expected s3://bucket/prefix)")
    parts = parsed.path.rstrip("/").split("/")[1:]
    if parsed.path.startswith("//") or any(part in ("", ".", "..") for part in parts):
        raise BadInputError(f"invalid table URI {uri!r}: empty, '.' or '..' component in the prefix")
    if not _S3_BUCKET_RE.match(parsed.netloc):
        raise BadInputError(f"invalid table URI {uri!r}: bad bucket name {parsed.netloc!r}")
    return uri


#: S3 bucket names: 3-63 of lower-case letters, digits, dots and hyphens (plus the
#: upper case and underscores of legacy us-east-1 buckets), starting and ending alphanumeric.
_S3_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")

#: Schemes that mean a URL even when written without ``//`` (``s3:/b/t`` is a typo, not a path).
_URL_SCHEMES = frozenset({"s3", "s3a", "s3n", "file", "gs", "gcs", "az", "abfs", "abfss", "hdfs", "http", "https"})


def open_store(uri: str, storage_options: dict[str, str] | None = None) -> Store:
    """The store for a table URI (validated by :func:`check_table_uri`): ``s3://`` with
    Lance-style options, or a local path.

    Storage options are ignored for local paths.
    """
    uri = check_table_uri(uri)
    if urlparse(uri).scheme.lower() == "s3":
        from memwal.s3_store import S3Store  # boto3 loads only for S3 tables

        return S3Store(uri, storage_options)
    return LocalStore(uri)
