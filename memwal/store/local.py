"""The local store: a directory on a POSIX file system, never followed through a link.

obstore's own local backend follows symbolic links and cannot update by ETag, so local
tables keep this store (DESIGN 3.5 and 3.7): every path below the root is opened one
component at a time with ``O_NOFOLLOW``; conditional writes use ``link()`` and a
directory ``flock``.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator

from memwal.errors import BadInputError, LinkedPathError
from memwal.store.base import ObjectInfo, Skip, Store, clean_key, clean_prefix, dir_prefix
from memwal.store.local_reads import read_all, read_each, read_upto
from memwal.store.local_trees import delete_trees
from memwal.store.local_walk import DIR_FLAGS, TEMP_MARKER, TreeDeleter, is_file, is_link, listing
from memwal.store.local_writes import LocalWrites

#: How many entries :meth:`LocalStore.least_key` passes over (links, folders, temporary files) before
#: it lets the sorted listing decide.
LEAST_KEY_TRIES = 8


class LocalStore(LocalWrites, Store):
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
    deletes through one raise :class:`~memwal.errors.LinkedPathError`.  Only the root path
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
        k = clean_key(key, allow_empty=allow_empty)
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
        return LinkedPathError(key, os.path.join(self._trusted, *walk[: i + 1]), link=is_link(parent_fd, walk[i]))

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
            return os.open(name, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                return -1
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=fd)
        return os.open(name, DIR_FLAGS, dir_fd=fd)

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
        k = clean_key(key)
        try:
            dfd, name = self._open_parent(k)
        except LinkedPathError as exc:
            if exc.link:
                raise
            return None
        if dfd is None:
            return None
        try:
            return self._open_regular(dfd, k, name)
        finally:
            os.close(dfd)

    def _open_regular(self, dfd: int, key: str, name: str) -> int | None:
        """Read descriptor of the regular file ``name`` in ``dfd`` (key ``key``), None if absent
        or not a file; LinkedPathError if it is a link."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LinkedPathError(key, self._path(key), link=True) from None
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENXIO, errno.EISDIR):
                return None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    # -- reads

    def get_with_etag(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes (fstat of the open file); a file
        that grows past ``max_bytes`` while it is read is refused as well."""
        fd = self._open_file(key)
        if fd is None:
            raise self.not_found(key)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            self.check_size(key, st.st_size, max_bytes)
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
            self.check_size(key, len(data), max_bytes)
            return data, self._etag(st)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` (negative: from the end) to read trailers cheaply."""
        if length < 0:
            raise ValueError("length must be >= 0")
        fd = self._open_file(key)
        if fd is None:
            raise self.not_found(key)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = max(size + start, 0) if start < 0 else start
            if offset >= size or length == 0:
                return b""
            f.seek(offset)
            return f.read(length)

    def get_heads(self, keys: builtins.list[str], length: int) -> builtins.list[bytes | None]:
        """The first ``length`` bytes of each file, in order (None: absent or not a file), each
        directory reached without following a link once, not once per key (against a
        :meth:`get_range` each: docs/decisions/0022-local-heads-by-directory.md). A link as a
        key or on its way raises LinkedPathError, as get_range does."""
        return read_each(self, keys, lambda fd: read_upto(fd, length))

    def get_many(self, keys: builtins.list[str]) -> builtins.list[bytes | None]:
        """Whole files, in order (None: absent or not a file), each directory reached once
        as by :meth:`get_heads`: the manifests of 5,000 versions, which a :meth:`get` each
        reaches through every folder above them."""
        return read_each(self, keys, read_all)

    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime of a regular file; None if absent, a directory or a link."""
        k = clean_key(key)
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

    # -- listing

    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order, skipping our temporary files and every link."""
        yield from listing(self, prefix, recursive, [])

    def _names_in(self, dir_key: str, keep: Callable[[os.DirEntry[str]], bool]) -> builtins.list[str]:
        """Sorted names of the entries of directory ``dir_key`` that ``keep`` accepts, from one
        ``scandir`` of a directory reached without following a link (a linked or missing
        directory has none). The entry type comes with the listing (d_type): no stat per entry."""
        try:
            fd = self._open_dir(dir_key.split("/") if dir_key else [], key=dir_key or ".")
        except LinkedPathError:
            return []
        if fd is None:
            return []
        try:
            with os.scandir(fd) as it:
                return sorted(e.name for e in it if keep(e))
        finally:
            os.close(fd)

    def folder_stamp(self, prefix: str) -> tuple[int, int, int, int] | None:
        """The folder's device, inode, modification and change times (ns), the folder reached
        without following a link (a linked or missing one: None). The change time is no tool's to
        set: a folder put back with its old modification time (``cp -a``) has another."""
        dir_key = dir_prefix(prefix).rstrip("/")
        try:
            fd = self._open_dir(dir_key.split("/") if dir_key else [], key=dir_key or ".")
        except LinkedPathError:
            return None
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns

    def list_keys(self, prefix: str) -> Iterator[str]:
        """Regular files directly under ``prefix``, sorted, from one ``scandir`` (no file is
        stat-ed); links and temporary files are skipped, as by :meth:`list`."""
        dir_part, _, name_prefix = clean_prefix(prefix).rpartition("/")
        names = self._names_in(dir_part, lambda e: e.name.startswith(name_prefix) and TEMP_MARKER not in e.name
                               and e.is_file(follow_symlinks=False))
        rel = f"{dir_part}/" if dir_part else ""
        return iter([rel + name for name in names])

    def list_links(self, prefix: str, *, recursive: bool = True) -> builtins.list[str]:
        """Symbolic links at or under ``prefix`` (sorted keys), found without following any."""
        links: list[str] = []
        for _ in listing(self, prefix, recursive, links, objects=False):
            pass
        return sorted(set(links))

    def list_with_links(self, prefix: str, *, skip: Skip = ()) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """Objects and links under ``prefix`` from one walk of the tree (GC's survey); the
        directories ``skip`` names are not walked."""
        links: list[str] = []
        objects = list(listing(self, prefix, True, links, skip=skip))
        return objects, sorted(set(links))

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Immediate subdirectory names under ``prefix``, sorted; links to directories are not listed."""
        return self._names_in(dir_prefix(prefix).rstrip("/"), lambda e: e.is_dir(follow_symlinks=False))

    def list_level(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """:meth:`list_keys` and :meth:`list_dirs` of one folder (``prefix`` ends with ``/``) from one
        ``scandir``: a shard's manifest versions, thousands beside a writer that never reopens, are
        listed so by every job a follower runs."""
        if not prefix.endswith("/"):
            return super().list_level(prefix)
        dir_key = dir_prefix(prefix).rstrip("/")
        files: list[str] = []
        dirs: list[str] = []

        def keep(e: os.DirEntry[str]) -> bool:
            if e.is_dir(follow_symlinks=False):
                dirs.append(e.name)
            elif TEMP_MARKER not in e.name and e.is_file(follow_symlinks=False):
                files.append(e.name)
            return False

        self._names_in(dir_key, keep)
        rel = f"{dir_key}/" if dir_key else ""
        return [rel + name for name in sorted(files)], sorted(dirs)

    def least_key(self, prefix: str, *, names_seen: Callable[[builtins.list[str]], None] | None = None) -> str | None:
        """The first of :meth:`list_keys` (None: no file), from one ``listdir`` and a stat of that
        file alone: a table's latest version is the least of its version names (V2 names sort
        newest first), read some ten times a merge, among thousands a follower's table keeps.

        ``names_seen``: given every name the ``listdir`` found under ``prefix`` (not yet checked
        for being files), before the least is chosen; it may raise. The directory is read whole
        anyway, so a caller that must refuse it by what else it holds (a table whose manifests are
        named by two schemes, which Lance refuses) checks that for no further request."""
        dir_part, _, name_prefix = clean_prefix(prefix).rpartition("/")
        try:
            fd = self._open_dir(dir_part.split("/") if dir_part else [], key=dir_part or ".")
        except LinkedPathError:
            return None
        if fd is None:
            return None
        rel = f"{dir_part}/" if dir_part else ""
        try:
            names = [n for n in os.listdir(fd) if n.startswith(name_prefix)] if name_prefix else os.listdir(fd)
            if names_seen is not None:
                names_seen(names)
            for _ in range(LEAST_KEY_TRIES):
                if not names:
                    return None
                name = min(names)
                if TEMP_MARKER not in name and is_file(fd, name):
                    return rel + name
                names.remove(name)
        finally:
            os.close(fd)
        return next(iter(self.list_keys(prefix)), None)  # many links or folders first: the listing decides

    def list_dirs_and_links(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """:meth:`list_dirs` and the non-recursive :meth:`list_links` of one directory from one
        ``scandir`` (types from d_type, nothing stat-ed): a follower's listings read a shard's
        folder of thousands of generation folders this way, at every lag and listing pass."""
        dir_key = dir_prefix(prefix).rstrip("/")
        try:
            fd = self._open_dir(dir_key.split("/") if dir_key else [], key=dir_key or ".")
        except LinkedPathError as exc:
            return [], [self._component_key(exc)] if exc.link else []
        if fd is None:
            return [], []
        rel = f"{dir_key}/" if dir_key else ""
        dirs: list[str] = []
        links: list[str] = []
        try:
            with os.scandir(fd) as it:
                for e in it:
                    try:
                        if e.is_symlink():
                            links.append(rel + e.name)
                        elif e.is_dir(follow_symlinks=False):
                            dirs.append(e.name)
                    except FileNotFoundError:
                        continue  # deleted while listing
        finally:
            os.close(fd)
        return sorted(dirs), sorted(links)

    # -- deletes

    def delete_many(self, keys: Iterable[str]) -> int:
        """Unlink files (missing ones are fine) and prune the directories they leave empty.

        Each key is checked when it is deleted, not before: its directory is reached
        component by component with O_NOFOLLOW and only a regular file is unlinked, so a
        link on the way (planted, or swapped in after the caller listed the key) refuses
        that key and nothing is deleted through it.  The other keys still go; then
        LinkedPathError names the refused ones.  Pruning keeps local listings like S3's,
        where a "directory" exists only while objects are under it.

        Keys are deleted in sorted order by one :class:`TreeDeleter`, which keeps open
        only the directories on the current path: each directory is opened once per call
        (not once per key) and tried for removal once, when the walk leaves it.
        """
        requested = [clean_key(k) for k in keys]
        ordered = sorted(set(requested))
        refused: list[LinkedPathError] = []
        try:
            root = self._open_dir((), key=".")  # a child store's own prefix may cross a link
        except LinkedPathError as exc:
            root, refused = None, [LinkedPathError(k, exc.where, link=exc.link) for k in ordered]
        if root is not None:
            deleter = TreeDeleter(self, root)
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

    has_directories = True

    def delete_trees(self, prefixes: builtins.list[str], *, first: Callable[[str, str], bool],
                     threads: int) -> builtins.list[tuple[int, int, builtins.list[str]]]:
        """Whole directory trees in two phases, every directory held open from its listing to
        its removal (:mod:`memwal.store.local_trees`: why, and what each phase checks), on
        ``threads`` threads."""
        return delete_trees(self, [clean_key(p) for p in prefixes], first=first, threads=threads)

    # -- naming

    def uri_for(self, key: str) -> str:
        """Absolute local path of a key."""
        return self._path(key, allow_empty=True)

    def child(self, prefix: str) -> LocalStore:
        """A store rooted at ``root/prefix``: the prefix is opened link-safely like any key."""
        p = clean_key(prefix, allow_empty=True)
        if not p:
            return LocalStore(self.root)
        store = LocalStore(self.root.rstrip("/") + "/" + p)
        store._trusted, store._sub = self._trusted, self._sub + tuple(p.split("/"))
        return store
