"""Many small reads of :class:`~memwal.store.local.LocalStore` at once, each folder reached once.

A read of one key opens every folder from the store root down without following a link
(DESIGN 3.5), a few system calls per component. GC's plan reads the heads of 10,000 WAL
entries and the whole manifests of 5,000 table versions, most of them in a handful of
folders: :func:`read_each` opens each folder once, the same link-safe way, and then each
file in it with one ``openat(O_NOFOLLOW)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from memwal.errors import LinkedPathError
from memwal.store.base import clean_key


class Opened(Protocol):
    """What the reads need of the local store: its link-safe opens."""

    def _open_dir(self, parts: list[str], *, key: str, create: bool = False) -> int | None: ...

    def _open_regular(self, dfd: int, key: str, name: str) -> int | None: ...


def read_each(store: Opened, keys: list[str], read: Callable[[int], bytes]) -> list[bytes | None]:
    """``read`` of each key's open file, in order; None for a key that is absent or not a
    regular file. A link as a key or on its way raises LinkedPathError, as a single read does."""
    out: list[bytes | None] = []
    dirs: dict[str, int | None] = {}
    try:
        for key in keys:
            k = clean_key(key)
            parent, _, name = k.rpartition("/")
            if parent not in dirs:
                dirs[parent] = None  # closed in finally even if the open below raises
                try:
                    dirs[parent] = store._open_dir(parent.split("/") if parent else [], key=k)
                except LinkedPathError as exc:
                    if exc.link:
                        raise
            dfd = dirs[parent]
            fd = None if dfd is None else store._open_regular(dfd, k, name)
            if fd is None:
                out.append(None)
                continue
            try:
                out.append(read(fd))
            finally:
                os.close(fd)
    finally:
        for dfd in dirs.values():
            if dfd is not None:
                os.close(dfd)
    return out


def read_all(fd: int) -> bytes:
    """Everything from the start of an open file to its end (the caller keeps the descriptor)."""
    with open(fd, "rb", buffering=0, closefd=False) as f:
        return f.readall()


def read_upto(fd: int, length: int) -> bytes:
    """Up to ``length`` bytes from the start of an open file (fewer at its end)."""
    chunks: list[bytes] = []
    while length > 0:
        data = os.read(fd, length)
        if not data:
            break
        chunks.append(data)
        length -= len(data)
    return b"".join(chunks)
