"""The link-safe walks of :class:`~memwal.store.local.LocalStore`: listing and deleting.

Every directory below a store root is opened from its parent's descriptor with
``O_NOFOLLOW`` (DESIGN 3.5: paths are data, not trust), so no walk descends into, reports
as an object, or deletes through a symbolic link; a link is reported instead.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from typing import Protocol

from memwal.errors import LinkedPathError, MemWalError
from memwal.store.base import ObjectInfo, Skip, clean_prefix, skipping


class Walked(Protocol):
    """What the walks need of the local store (:class:`memwal.store.local.LocalStore`)."""

    _sub: tuple[str, ...]

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo: ...

    def _open_dir(self, parts: list[str], *, key: str, create: bool = False) -> int | None: ...

    def _component_key(self, exc: LinkedPathError) -> str: ...

    def _path(self, key: str) -> str: ...

    def _refusal(self, key: str, walk: tuple[str, ...], i: int, parent_fd: int) -> LinkedPathError: ...

    def uri_for(self, key: str) -> str: ...

#: Temporary files written by :class:`~memwal.store.local.LocalStore` carry this marker in their name, so
#: listings can skip them (a crashed writer may leave one behind).
TEMP_MARKER = ".memwal-tmp-"

#: How every directory below a store root is opened: never through a symbolic link.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def scan(store: Walked, fd: int, rel: str, name_prefix: str, recursive: bool, links: list[str],
         objects: bool = True, skip: Skip = ()) -> Iterator[ObjectInfo]:
    """Depth-first walk of an open directory yielding regular files in key order.

    Directories sort as ``name + "/"``, which makes depth-first order equal the order S3
    lists keys in.  Entries are lstat-ed and subdirectories opened with O_NOFOLLOW, so a
    link is never descended into or reported as an object: it is appended to ``links``.
    The walk keeps its own stack of open directories rather than nesting generators, so an
    object costs the same at any depth (GC plans walk 80,000 files five levels down).
    A directory ``skip`` names (its key, or a predicate of it) is not descended into (a link in
    its place is still reported).
    """
    pruned = skipping(skip)
    stack: list[tuple[int, str, Iterator[tuple[str, str, os.stat_result | None]]]] = [
        (fd, rel, _entries(fd, rel, name_prefix, links, objects))]
    try:
        while stack:
            dfd, drel, entries = stack[-1]
            for _, name, st in entries:
                key = drel + name
                if st is not None:
                    if stat.S_ISREG(st.st_mode):
                        yield store._info(key, st)
                    continue
                if not recursive or pruned(key):
                    continue
                sub = open_subdir(dfd, name, key, links)
                if sub is not None:
                    stack.append((sub, key + "/", _entries(sub, key + "/", "", links, objects)))
                    break
            else:
                stack.pop()
                if stack:  # the caller's own directory stays open
                    os.close(dfd)
    finally:
        for dfd, _, _ in stack[1:]:
            os.close(dfd)


def _entries(fd: int, rel: str, name_prefix: str, links: list[str],
             objects: bool) -> Iterator[tuple[str, str, os.stat_result | None]]:
    """A directory's entries in key order: (sort key, name, lstat) for files, (sort key, name,
    None) for directories; links go to ``links``, our temporary files are skipped."""
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
    return iter(found)


def open_subdir(fd: int, name: str, key: str, links: list[str]) -> int | None:
    """``name`` in ``fd`` opened with O_NOFOLLOW; None if it is gone or was swapped for a link
    (noted in ``links``) or a file meanwhile."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            if is_link(fd, name):
                links.append(key)
            return None
        raise


def listing(store: Walked, prefix: str, recursive: bool, links: list[str],
            objects: bool = True, skip: Skip = ()) -> Iterator[ObjectInfo]:
    """Objects under a (string) prefix; links met on the way, the prefix's own included, go to ``links``.

    With ``objects=False`` only links are looked for: no file is stat-ed or yielded. The
    directories ``skip`` names are not walked.
    """
    p = clean_prefix(prefix)
    dir_part, _, name_prefix = p.rpartition("/")
    try:
        fd = store._open_dir(dir_part.split("/") if dir_part else [], key=dir_part or ".")
    except LinkedPathError as exc:
        if exc.link:
            links.append(store._component_key(exc))
        return
    if fd is None:
        return
    try:
        yield from scan(store, fd, dir_part + "/" if dir_part else "", name_prefix, recursive, links, objects, skip)
    finally:
        os.close(fd)


class TreeDeleter:
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

    def __init__(self, store: Walked, root_fd: int) -> None:
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
        st = unlink_regular(self.store, fd, name, key)
        if st is None:
            return
        if not stat.S_ISREG(st.st_mode):
            self.refused.append(LinkedPathError(key, self.store._path(key), link=stat.S_ISLNK(st.st_mode)))
            return
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
                fd = os.open(name, DIR_FLAGS, dir_fd=self.fds[-1])
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


def unlink_regular(store: Walked, fd: int, name: str, key: str) -> os.stat_result | None:
    """Unlink ``name`` in the directory ``fd`` if it is a regular file, checked by lstat right
    before: its lstat, or None when it is gone or a directory (not an object). Anything else
    (a link, a FIFO) comes back not unlinked: ``S_ISREG`` of the result tells."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        return st
    return st if unlink_entry(store, fd, name, key) else None


def unlink_entry(store: Walked, fd: int, name: str, key: str) -> bool:
    """Unlink ``name`` in the directory ``fd`` as it is (unlinkat never follows a link): whether
    it was there. The caller has made sure what it is."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    except PermissionError as exc:
        raise MemWalError(f"cannot delete {store.uri_for(key)}: {exc}") from exc
    return True


def is_file(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in the directory ``dir_fd`` is a regular file (lstat: a link is not; False if gone)."""
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def is_link(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in the directory ``dir_fd`` is a symbolic link (lstat; False if gone)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
