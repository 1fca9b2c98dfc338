"""Writes to a local directory: atomic, conditional, and never through a symbolic link.

A put writes a temporary file in the target's own directory (opened without following
links from the store root) and renames it into place, so a reader sees the old or the new
bytes, never a part. ``put_if_absent`` hard-links the complete temporary file (``link()``
fails if the name exists); ``put_if_match`` is a compare-and-swap under an exclusive
``flock`` of the directory, the ETag being the file's inode, size and modification time.
Mixed into :class:`memwal.store.local.LocalStore`, whose no-follow opens it uses.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import os
import stat
import uuid

from memwal.core.retry import after_transient
from memwal.errors import BadInputError, LinkedPathError, PreconditionFailedError
from memwal.store.base import Store, clean_key
from memwal.store.local_walk import DIR_FLAGS, TEMP_MARKER, is_link


class LocalWrites(Store):
    """Atomic and conditional writes of :class:`~memwal.store.local.LocalStore`."""

    # The no-follow opens these writes go through, implemented by LocalStore.

    @abc.abstractmethod
    def _open_parent(self, key: str, *, create: bool = False) -> tuple[int | None, str]: ...

    @abc.abstractmethod
    def _refuse_if_link(self, dfd: int, key: str) -> None: ...

    @abc.abstractmethod
    def _path(self, key: str, *, allow_empty: bool = False) -> str: ...

    @staticmethod
    @abc.abstractmethod
    def _lstat_regular(dfd: int, name: str) -> os.stat_result | None: ...

    @staticmethod
    @abc.abstractmethod
    def _etag(st: os.stat_result) -> str: ...

    def _write_temp(self, key: str, data: bytes, *, make_dirs: bool = True) -> tuple[int, str, str]:
        """Write ``data`` to a new temporary file in ``key``'s directory (``make_dirs=False``: one
        that exists; a missing one is a :class:`PreconditionFailedError`, the object being gone).

        Returns (directory descriptor, temporary name, final name): renames and links then
        happen inside that very directory, whatever is swapped in on the path meanwhile.
        The file is fsynced so that a rename never exposes an empty file after a crash.
        """
        # Truncated base name: the temporary name must stay within NAME_MAX.
        tmp = f".{key.rsplit('/', 1)[-1][:100]}{TEMP_MARKER}{uuid.uuid4().hex}"

        def create() -> tuple[int, str, int]:
            dfd, name = self._parent_for_write(key, make_dirs=make_dirs)
            try:
                return dfd, name, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                          0o644, dir_fd=dfd)
            except BaseException:
                os.close(dfd)
                raise

        # A concurrent delete_many may prune the (empty) directory between its creation and
        # ours: it is created again.
        dfd, name, fd = after_transient(create, what=f"creating a file in {key.rsplit('/', 1)[0]}",
                                        is_transient=lambda exc: isinstance(exc, FileNotFoundError), base_seconds=0.0)
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

    def _parent_for_write(self, key: str, *, make_dirs: bool = True) -> tuple[int, str]:
        """The directory of ``key``, created unless ``make_dirs`` is False (a rewrite of an object
        whose folder is gone must not bring the folders back: a removed table's path would be made
        again by a job still running on it): a link on the way is refused, a file is bad input."""
        try:
            dfd, name = self._open_parent(key, create=make_dirs)
        except LinkedPathError as exc:
            if exc.link:
                raise
            raise BadInputError(f"cannot write {self.uri_for(key)}: {exc.where} is not a directory") from None
        if dfd is None and not make_dirs:
            raise PreconditionFailedError(f"conditional write failed, object is gone: {self.uri_for(key)}")
        if dfd is None:  # the root vanished between makedirs and open
            raise self.not_found("/".join(key.split("/")[:-1]) or key)
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
        k = clean_key(key)
        dfd, tmp, name = self._write_temp(k, data, make_dirs=etag is None)
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
        k = clean_key(key)
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

    def move_folder(self, source: str, target: str) -> int | None:
        """``rename()`` of the folder ``source`` to ``target`` (see :meth:`Store.move_folder`), both
        reached without following a link. Its files are fsynced first, as each put's are, so a crash
        after the rename never leaves a moved file empty. ``rename()`` refuses a ``target`` that holds
        anything or is not a folder; an empty folder there is replaced (it held nothing)."""
        src, dst = clean_key(source), clean_key(target)
        sfd, sname = self._open_parent(src)
        if sfd is None:
            raise self.not_found(src)
        try:
            try:
                size = _synced_tree(sfd, sname)
            except FileNotFoundError:
                raise self.not_found(src) from None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise LinkedPathError(src, self._path(src), link=is_link(sfd, sname)) from None
                raise
            if size is None:
                return None
            dfd, dname = self._parent_for_write(dst)
            try:
                os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    return None
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise PreconditionFailedError(f"folder already exists: {self.uri_for(dst)}") from None
                raise
            finally:
                os.close(dfd)
            return size
        finally:
            os.close(sfd)


#: Folders below a moved folder's top: a Lance generation has two (``_indices/<uuid>/``). Deeper is
#: no writer's; it is left to the copy, whose walk keeps its own stack (this one recurses, and holds
#: a descriptor a level).
MOVE_DEPTH = 8


def _synced_tree(parent: int, name: str, depth: int = MOVE_DEPTH) -> int | None:
    """fsync every file under the folder ``name`` of ``parent`` (opened without following a
    link); their bytes. None when the folder holds anything but files and folders (a link: the
    copy a caller falls back to skips it, as every listing does), or folders more than ``depth``
    deep. FileNotFoundError: no folder."""
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    try:
        size = 0
        with os.scandir(fd) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    inner = _synced_tree(fd, e.name, depth - 1) if depth else None
                    if inner is None:
                        return None
                    size += inner
                elif e.is_file(follow_symlinks=False):
                    f = os.open(e.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                    try:
                        st = os.fstat(f)
                        if not stat.S_ISREG(st.st_mode):
                            return None
                        os.fsync(f)
                        size += st.st_size
                    finally:
                        os.close(f)
                else:
                    return None
        return size
    finally:
        os.close(fd)
