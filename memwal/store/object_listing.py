"""Listings of :class:`~memwal.store.object.ObjectStore`: paged, each page retried on its own,
and one listing that skips left-out folders by asking for the next page from past them.

Mixed into ``ObjectStore``, whose request wrapper (``_call``, which counts and retries) and key
mapping it uses. Why a page, not a key, is the unit of retry: a stream that failed is finished,
and a new one starts after the last key already yielded, so a retry neither repeats nor drops a
key.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import obstore

from memwal.store.base import ObjectInfo, Skip, Store, clean_prefix, dir_prefix, pruned_folder, skipping

if TYPE_CHECKING:
    from obstore import ObjectMeta

T = TypeVar("T")

#: Objects per listing page: what one request returns (S3 and GCS at most 1,000; Azure 5,000).
LIST_CHUNK = {"s3": 1000, "az": 5000, "abfss": 5000, "gs": 1000, "memory": 1000}
#: Sorts after every character a key can hold: ``folder/`` + this starts a listing past ``folder/``.
PAST = "\U0010ffff"


class ObjectListing(Store):
    """The listing methods of :class:`~memwal.store.object.ObjectStore`."""

    _backend: Any
    list_chunk: int

    @abc.abstractmethod
    def _call(self, what: str, key: str, fn: Callable[[], T], *, counted: bool = True) -> T: ...

    @abc.abstractmethod
    def _count(self) -> None: ...

    @abc.abstractmethod
    def _full(self, key: str) -> str: ...

    @abc.abstractmethod
    def _full_prefix(self, prefix: str) -> str: ...

    @abc.abstractmethod
    def _rel(self, path: str) -> str: ...

    @abc.abstractmethod
    def _info(self, meta: ObjectMeta) -> ObjectInfo: ...

    def _pages(self, full_prefix: str, offset: str | None = None) -> Iterator[Sequence[ObjectMeta]]:
        """Listing pages under a directory prefix (after the full path ``offset``, if given),
        each page's request retried on its own.

        A stream that failed is finished: the next attempt opens a new one that starts after
        the last key already yielded, so a retry neither repeats nor drops a key.
        """
        prefix = full_prefix.rstrip("/") or None
        last: str | None = offset
        stream = iter(obstore.list(self._backend, prefix, offset=offset, chunk_size=self.list_chunk))

        sent = False

        def next_page() -> Sequence[ObjectMeta] | None:
            """One page; counted as a request when one was sent: a failed attempt, a page, or the
            first answer of an empty listing (the end of a stream sends nothing)."""
            nonlocal stream, sent
            try:
                page = next(stream, None)
            except BaseException:
                self._count()
                stream = iter(obstore.list(self._backend, prefix, offset=last, chunk_size=self.list_chunk))
                raise
            if page or not sent:
                self._count()
            sent = True
            return page

        while True:
            page = self._call("list", "", next_page, counted=False)
            if not page:
                return
            last = str(page[-1]["path"])
            yield page

    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order (a string prefix, as on S3).

        object_store lists "directories"; a prefix that ends inside a name (``gen/000``) is
        served by listing its parent one level deep and recursing only into matching names.
        """
        full = self._full_prefix(prefix)
        if full == "" or full.endswith("/"):
            if recursive:
                for page in self._pages(full):
                    for meta in page:
                        if not str(meta["path"]).endswith("/"):
                            yield self._info(meta)
            else:
                yield from self._one_level(full, "")
            return
        parent, _, name_prefix = full.rpartition("/")
        yield from self._one_level(parent + "/" if parent else "", name_prefix, recursive=recursive)

    def _one_level(self, full_dir: str, name_prefix: str, *, recursive: bool = False) -> Iterator[ObjectInfo]:
        """Objects directly in a directory (and, recursively, in its matching subdirectories), in order."""
        listed = self._call("list", "", lambda: obstore.list_with_delimiter(self._backend,
                                                                            full_dir.rstrip("/") or None))
        entries: builtins.list[tuple[str, ObjectMeta | None]] = []
        for obj in listed["objects"]:
            name = str(obj["path"])[len(full_dir):]
            if name.startswith(name_prefix) and name:
                entries.append((name, obj))
        if recursive:
            for cp in listed["common_prefixes"]:
                name = str(cp)[len(full_dir):].rstrip("/")
                if name.startswith(name_prefix):
                    entries.append((name + "/", None))
        for name, meta in sorted(entries, key=lambda e: e[0]):
            if meta is not None:
                yield self._info(meta)
            else:
                for page in self._pages(full_dir + name):
                    for m in page:
                        yield self._info(m)

    def list_with_links(self, prefix: str, *, skip: Skip = ()) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """Every object under ``prefix`` but those in the folders ``skip`` names, in key order
        (an object store has no links): one paged listing which, when a page ends inside a
        left-out folder, asks for the next page from past that folder instead."""
        return self._skipping(prefix, skip, None) or [], []

    def list_if_short(self, prefix: str, *, skip: Skip = (), pages: int) -> tuple[builtins.list[ObjectInfo],
                                                                                 builtins.list[str]] | None:
        """:meth:`list_with_links` within ``pages`` pages, else None (no page past them is asked for)."""
        listed = self._skipping(prefix, skip, pages)
        return None if listed is None else (listed, [])

    def _skipping(self, prefix: str, skip: Skip, pages: int | None) -> builtins.list[ObjectInfo] | None:
        """:meth:`list_with_links`' objects; None when a page more than ``pages`` would be needed."""
        pruned = skipping(skip)
        full = self._full_prefix(dir_prefix(prefix))
        rel_prefix = clean_prefix(dir_prefix(prefix))
        decided: dict[str, str | None] = {}
        out: builtins.list[ObjectInfo] = []
        offset: str | None = None
        taken = 0
        while True:
            jump: str | None = None
            for page in self._pages(full, offset):
                taken += 1
                for meta in page:
                    if str(meta["path"]).endswith("/"):
                        continue
                    info = self._info(meta)
                    parent = info.key.rpartition("/")[0]
                    if parent not in decided:
                        decided[parent] = pruned_folder(info.key, rel_prefix, pruned)
                    if decided[parent] is None:
                        out.append(info)
                if len(page) < self.list_chunk:
                    break  # a short page is the last: nothing to jump over
                if pages is not None and taken >= pages:
                    return None  # a full page: another may follow, past the budget
                jump = decided.get(self._rel(str(page[-1]["path"])).rpartition("/")[0])
                if jump is not None:
                    break
            if jump is None:
                return out
            offset = f"{self._full(jump)}/{PAST}"

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Immediate "directory" names under ``prefix`` (one delimiter listing), sorted."""
        return self.list_level(prefix)[1]

    def list_level(self, prefix: str) -> tuple[builtins.list[str], builtins.list[str]]:
        """Keys of the objects and names of the "directories" directly under ``prefix``, both
        sorted, from one delimiter listing."""
        full = self._full_prefix(dir_prefix(prefix))
        listed = self._call("list", "", lambda: obstore.list_with_delimiter(self._backend, full.rstrip("/") or None))
        keys = sorted(self._info(obj).key for obj in listed["objects"] if str(obj["path"])[len(full):])
        return keys, sorted(n for n in (str(cp)[len(full):].rstrip("/") for cp in listed["common_prefixes"]) if n)
