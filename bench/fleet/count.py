"""Requests through memwal's store layer on a local disk, counted per table (the fleet simulation's meter).

:func:`counting` patches :class:`memwal.store.LocalStore`'s public methods, at class level, so
every store of the process is counted however it was made: each outermost call on a store
(a call a method makes on its own store is not counted again, nor are the listings a
generator makes while it is iterated) counts the requests an object store would take for it:
one, two for ``list_around`` (S3 and Azure list before and after the skipped folder), one per
key for ``get_many`` and ``get_heads``. A call is charged to the table whose folder holds the
store's root (``shared`` otherwise: the discovery of a root). Lance's own reads and writes do
not go through this layer and are not counted; :mod:`bench.fleet.plan` counts at an S3 and an
Azure server, where they are.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

#: Requests an object store takes for one call (default 1).
_COST: dict[str, Callable[..., int]] = {
    "list_around": lambda *a, **k: 2,
    "get_many": lambda keys, *a, **k: len(keys),
    "get_heads": lambda keys, *a, **k: len(keys),
}
_METHODS = ("get", "get_with_etag", "get_range", "get_heads", "get_many", "head", "exists", "put", "put_if_absent",
            "put_if_match", "list", "list_around", "list_keys", "list_dirs", "list_links", "list_with_links",
            "delete_many", "delete_trees")


class Meter:
    """Requests by table (see the module docstring); :meth:`take` gives those since the last take."""

    def __init__(self, table_of: Callable[[str], str]) -> None:
        self.table_of = table_of
        self._lock = threading.Lock()
        self._local = threading.local()
        self._counts: Counter[str] = Counter()
        self._taken: Counter[str] = Counter()

    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    @contextlib.contextmanager
    def _inside(self) -> Iterator[None]:
        self._local.depth = self._depth() + 1
        try:
            yield
        finally:
            self._local.depth -= 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Calls made in this block (by this thread) are the bench's own: not counted."""
        with self._inside():
            yield

    def charge(self, root: str, n: int) -> None:
        with self._lock:
            self._counts[self.table_of(root)] += n

    def take(self) -> Counter[str]:
        with self._lock:
            now = Counter(self._counts)
        new = now - self._taken
        self._taken = now
        return new

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        meter = self
        cost = _COST.get(name, lambda *a, **k: 1)

        @functools.wraps(method)
        def counted(store: Any, *args: Any, **kwargs: Any) -> Any:
            if meter._depth() == 0:
                meter.charge(store.root, cost(*args, **kwargs))
            with meter._inside():
                result = method(store, *args, **kwargs)
            return meter._guarded(result) if isinstance(result, Iterator) else result

        return counted

    def _guarded(self, it: Iterator[Any]) -> Iterator[Any]:
        """The iterator, with what it calls while iterated charged to nobody (the call was)."""
        while True:
            with self._inside():
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item


@contextlib.contextmanager
def counting(table_of: Callable[[str], str]) -> Iterator[Meter]:
    """Count every LocalStore call of this process while the block runs (see the module docstring)."""
    from memwal.store import LocalStore

    meter = Meter(table_of)
    saved = {name: LocalStore.__dict__.get(name) for name in _METHODS}
    for name in _METHODS:
        setattr(LocalStore, name, meter.wrap(name, getattr(LocalStore, name)))
    try:
        yield meter
    finally:
        for name, original in saved.items():
            if original is None:
                delattr(LocalStore, name)
            else:
                setattr(LocalStore, name, original)
