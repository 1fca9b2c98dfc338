"""Deleting whole directory trees on a local file system: GC's generations, in two phases.

A generation is a directory of a few small files in a few subdirectories; GC deletes thousands
at once. On ext4 the order of the system calls decides the cost more than their number, so, as
a fast ``rm -rf`` does, a batch is first listed whole, then unlinked, then removed:

1. **open**: every directory of every tree is opened from its parent's descriptor with
   ``O_NOFOLLOW`` and listed; a link at or under a tree, or on the way to it, refuses that
   whole tree, which is then left untouched.
2. **unlink and remove**, tree by tree: every directory of the tree is first checked to be still
   where it was listed (from the store root without a link, the same inode), so one moved away
   and replaced by a link is refused and nothing in it removed; then every file, the ``first``
   ones (its Lance manifests) before the others (a tree whose first files were refused keeps
   the rest). A directory quiet when listed (:data:`QUIET_NS`) whose ctime has not moved since
   holds exactly the files listed, which are unlinked without another look; any other file is
   ``lstat``-ed through its directory's descriptor right before its unlink. Then the tree's
   directories go, children first, each from its parent's descriptor; one not empty stays,
   and so does its parent.

Every directory stays open from phase 1 until just before its own removal (ext4 puts a
directory removed while open on its journalled orphan list), so a call opens as many trees as
a quarter of the process's descriptors allows (:func:`trees_at_once`). Phase 2 runs on the
caller's threads (docs/decisions/0002-delete-threads.md). Nothing is ever deleted through a link.
"""

from __future__ import annotations

import os
import resource
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from memwal.core import steps
from memwal.core.pool import parallel_map
from memwal.errors import LinkedPathError
from memwal.store.local_walk import Walked, open_subdir, unlink_entry, unlink_regular

#: What one tree's deletion did: (objects deleted, bytes freed, keys refused as unsafe).
TreeOutcome = tuple[int, int, list[str]]

#: Threads listing a batch (phase 1): opens and listings only wait for the CPU, and more
#: threads than cores add contention.
LIST_THREADS = 2

#: Phase 2 hands each thread its trees in about this many chunks (a chunk checks its parents once).
UNLINK_CHUNKS_PER_THREAD = 4

#: At most this many trees are open at once (a generation holds about five directories).
TREES_AT_ONCE_MAX = 512

#: A directory whose ctime is at least this old when it is listed is quiet: if its ctime
#: is the same when its files are unlinked, its entries are the ones listed. The margin
#: covers file systems that keep ctime in coarse steps (two seconds on FAT, one on ext4
#: with small inodes, a clock tick elsewhere): a change after the listing then always
#: moves the ctime. Generations GC deletes were written long before.
QUIET_NS = 2_000_000_000


def trees_at_once(dirs_per_tree: int = 8) -> int:
    """Trees one phase-1 may hold open: a quarter of the process's descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return TREES_AT_ONCE_MAX
    return max(4, min(TREES_AT_ONCE_MAX, soft // (4 * dirs_per_tree)))


@dataclass
class _Dir:
    """An open directory of a tree: removed in phase 2 from its parent's descriptor."""

    parent_fd: int
    name: str
    fd: int
    key: str
    identity: tuple[int, int]  # (device, inode) of what was opened: stat's, as the check's
    ctime: int | None  # ctime (ns) when listed, if the directory was quiet then (QUIET_NS)


@dataclass
class _Tree:
    prefix: str
    parent_fd: int = -1
    dirs: list[_Dir] = field(default_factory=list)  # the tree's root first, parents before children
    # (directory fd, name, key, size as listed; -1: not a regular file then)
    files: list[tuple[int, str, str, int]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0
    refused: list[str] = field(default_factory=list)


def delete_trees(store: Walked, prefixes: list[str], *, first: Callable[[str, str], bool],
                 threads: int) -> list[TreeOutcome]:
    """Delete every file and directory under each of ``prefixes`` (directory keys below the
    store root), ``first(key, prefix)`` files of a tree before its others; per prefix, in
    order, (objects deleted, bytes freed, keys refused: links met, or files swapped for one).
    See the module docstring for the phases and what each checks."""
    step = trees_at_once()
    out: list[TreeOutcome] = []
    for i in range(0, len(prefixes), step):
        out += _delete_batch(store, prefixes[i:i + step], first, max(1, threads))
    return out


def _delete_batch(store: Walked, prefixes: list[str], first: Callable[[str, str], bool],
                  threads: int) -> list[TreeOutcome]:
    trees = [_Tree(p) for p in prefixes]
    parents: dict[str, tuple[int | None, list[str]]] = {}
    try:
        for t in trees:  # the trees' parents (a shard directory), each opened once, link-safely
            parent = t.prefix.rpartition("/")[0]
            if parent not in parents:
                parents[parent] = _open_parent(store, parent)
            fd, t.links = parents[parent][0], list(parents[parent][1])
            t.parent_fd = -1 if fd is None else fd
        parallel_map(_open_tree, [t for t in trees if t.parent_fd >= 0 and not t.links], min(threads, LIST_THREADS),
                     name="memwal-delete", chunks_per_thread=1)
        steps.step("store.trees-listed")
        ready = [t for t in trees if t.dirs and not t.links]
        size = max(1, -(-len(ready) // (threads * UNLINK_CHUNKS_PER_THREAD)))
        parallel_map(lambda chunk: _unlink_trees(store, chunk, first),
                     [ready[i:i + size] for i in range(0, len(ready), size)], threads, name="memwal-delete")
    finally:
        for t in trees:
            for d in t.dirs:
                if d.fd >= 0:
                    os.close(d.fd)
        for fd, _ in parents.values():
            if fd is not None:
                os.close(fd)
    return [(t.objects, t.bytes, sorted(set(t.links or t.refused))) for t in trees]


def _open_parent(store: Walked, parent: str) -> tuple[int | None, list[str]]:
    """The parent directory's descriptor (None if missing: so is every tree in it), or None and
    the link on the way to it (every tree in it is refused)."""
    try:
        return store._open_dir(parent.split("/") if parent else [], key=parent or "."), []
    except LinkedPathError as exc:
        return None, [store._component_key(exc) or parent] if exc.link else []


def _open_tree(tree: _Tree) -> None:
    """Phase 1 for one tree: open and list every directory of it, noting links (a regular file
    where the tree should be is not a tree: nothing to delete)."""
    name = tree.prefix.rpartition("/")[2]
    fd = open_subdir(tree.parent_fd, name, tree.prefix, tree.links)
    if fd is not None:
        tree.dirs.append(_opened(tree.parent_fd, name, fd, tree.prefix))
        _list(tree, fd, tree.prefix)


def _opened(parent_fd: int, name: str, fd: int, key: str) -> _Dir:
    """A directory just opened, stat-ed before it is listed (so a change made while it is
    listed moves the ctime recorded)."""
    st = os.fstat(fd)
    quiet = time.time_ns() - st.st_ctime_ns >= QUIET_NS
    return _Dir(parent_fd, name, fd, key, _identity(st), st.st_ctime_ns if quiet else None)


def _identity(st: os.stat_result) -> tuple[int, int]:
    """What tells a directory from another: its device and inode, both from stat (a listing's
    inode number can differ from stat's, on overlayfs for one)."""
    return st.st_dev, st.st_ino


def _list(tree: _Tree, fd: int, rel: str) -> None:
    """Every entry under the open directory ``fd`` (key ``rel``): files noted with their lstat's
    size, directories opened from ``fd`` with O_NOFOLLOW and listed in turn, links noted and
    never entered."""
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        key = f"{rel}/{e.name}"
        try:
            if e.is_symlink():
                tree.links.append(key)
                continue
            if not e.is_dir(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                tree.files.append((fd, e.name, key, st.st_size if stat.S_ISREG(st.st_mode) else -1))
                continue
        except FileNotFoundError:
            continue  # deleted while listing
        sub = open_subdir(fd, e.name, key, tree.links)
        if sub is not None:
            tree.dirs.append(_opened(fd, e.name, sub, key))
            _list(tree, sub, key)


def _unlink_trees(store: Walked, trees: list[_Tree], first: Callable[[str, str], bool]) -> None:
    """Phase 2 for some trees: their parents checked in place (reached afresh from the store
    root without a link: once per parent), then tree by tree, its directories checked in place,
    its first files, (if none of those was refused) the others, and its directories."""
    moved: dict[int, str | None] = {}
    for tree in trees:
        if tree.parent_fd not in moved:
            moved[tree.parent_fd] = _parent_moved(store, tree)
        parent_moved = moved[tree.parent_fd]
        if parent_moved is not None:
            tree.links.append(parent_moved)
            continue
        where, unchanged = _in_place(tree)
        if where is not None:
            tree.links.append(where)
        else:
            _unlink_tree(store, tree, first, unchanged)
            _remove_dirs(tree)


def _unlink_tree(store: Walked, tree: _Tree, first: Callable[[str, str], bool], unchanged: set[int]) -> None:
    """The tree's first files, then (if none of those was refused) the others, through the
    directories' descriptors; those of the ``unchanged`` directories as listed."""
    for files in ([f for f in tree.files if first(f[2], tree.prefix)],
                  [f for f in tree.files if not first(f[2], tree.prefix)]):
        for fd, name, key, size in files:
            _unlink(store, tree, fd, name, key, size if fd in unchanged and size >= 0 else None)
        if tree.refused:
            return


def _parent_moved(store: Walked, tree: _Tree) -> str | None:
    """The key of the tree's parent directory, or of the link on the way to it, if it is no
    longer the directory that was opened (reached afresh from the store root); else None."""
    parent = tree.prefix.rpartition("/")[0]
    fd, links = _open_parent(store, parent)
    if fd is None:
        return links[0] if links else parent
    try:
        held, now = os.fstat(tree.parent_fd), os.fstat(fd)
    finally:
        os.close(fd)
    return None if _identity(held) == _identity(now) else parent


def _in_place(tree: _Tree) -> tuple[str | None, set[int]]:
    """The key of the first directory of the tree that its parent no longer names (moved away,
    or a link in its place), parents before children, or None when every one is in place;
    and the descriptors of the directories whose entries are still the ones listed (quiet
    then, the same ctime now)."""
    unchanged: set[int] = set()
    for d in tree.dirs:
        try:
            st = os.stat(d.name, dir_fd=d.parent_fd, follow_symlinks=False)
        except OSError:
            return d.key, unchanged
        if not stat.S_ISDIR(st.st_mode) or _identity(st) != d.identity:
            return d.key, unchanged
        if st.st_ctime_ns == d.ctime:
            unchanged.add(d.fd)
    return None, unchanged


def _unlink(store: Walked, tree: _Tree, fd: int, name: str, key: str, listed: int | None) -> None:
    """Unlink one regular file through its directory's descriptor: as listed (``listed``, its
    size then: its directory has not changed since), or lstat-ed right before; a link swapped
    in is refused, never unlinked; gone, or not a file (a directory made meanwhile stays, and
    so do its parents; a FIFO is not an object): nothing to do."""
    if listed is not None:
        if unlink_entry(store, fd, name, key):
            tree.objects += 1
            tree.bytes += listed
        return
    st = unlink_regular(store, fd, name, key)
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        tree.refused.append(key)
    elif stat.S_ISREG(st.st_mode):
        tree.objects += 1
        tree.bytes += st.st_size


def _remove_dirs(tree: _Tree) -> None:
    """rmdir the tree's directories, children before parents (the listing's order reversed);
    one that cannot go (not empty) is left, and its parent then fails the same way."""
    for d in reversed(tree.dirs):
        os.close(d.fd)  # first: ext4 keeps a directory removed while open on its orphan list
        d.fd = -1
        try:
            os.rmdir(d.name, dir_fd=d.parent_fd)
        except OSError:
            pass  # gone already, not empty, or no longer a directory: left as it is
