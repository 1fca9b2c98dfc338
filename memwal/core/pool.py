"""The one thread pool helper: ``map`` over a bounded pool, results in input order.

Object stores are latency bound (a request waits, it does not compute), and Lance and
pyarrow release the GIL while they read, so reading manifests, WAL headers and generations,
and deleting batches of keys, overlap well on threads. Every such loop goes through
:func:`ordered_map`, so the bounds (at most ``2 * threads`` calls in flight, nothing new
started after a failure) and the thread names are decided once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], threads: int, *, name: str = "memwal") -> Iterator[R]:
    """``map(fn, items)`` on a pool of ``threads``, results in ``items`` order, with at most
    ``2 * threads`` calls in flight: memory holds a bounded window ahead of the consumer.
    With one thread (or one item) it is plain ``map``, on the caller's thread."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        yield from map(fn, items)
        return
    pending: deque[Future[R]] = deque()
    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix=name) as pool:
        try:
            for item in items:
                if len(pending) < 2 * threads:
                    pending.append(pool.submit(fn, item))
                    continue
                done = pending.popleft().result()
                pending.append(pool.submit(fn, item))
                yield done
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:  # a failed or abandoned call: start nothing more
                f.cancel()


def parallel_map(fn: Callable[[T], R], items: Iterable[T], threads: int, *, name: str = "memwal",
                 chunks_per_thread: int | None = None) -> list[R]:
    """:func:`ordered_map`, all results at once. With ``chunks_per_thread``, items go to the
    pool in about that many chunks per thread: a future per item costs more than the item
    itself when there are 10,000 tiny generations to open."""
    items = list(items)
    if chunks_per_thread is None or threads <= 1 or len(items) <= 1:
        return list(ordered_map(fn, items, threads, name=name))
    size = max(1, -(-len(items) // (threads * chunks_per_thread)))
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    return [r for part in ordered_map(lambda chunk: [fn(x) for x in chunk], chunks, threads, name=name) for r in part]
