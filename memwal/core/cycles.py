"""Python's cycle collector paused while a job plans (issue 82).

A plan reads the table's state into objects: a whole GC of a table that keeps a week of versions
builds a few for each retained version, generation folder and WAL entry (some two million at
50,000 flushes), and keeps them to the end of the plan. None of them needs the cycle collector:
reference counting frees them, as it frees Arrow's buffers. But CPython's collector runs after
every 700 allocations and traverses the objects that survived, the older generations again and
again as they grow: measured, a third of a whole GC's dry run at 67,618 versions (5.5 s with it,
3.9 s without, the same peak memory). So a plan runs with the collector paused, which resumes
after it; what a paused collector leaves (a reference cycle made meanwhile, rare) it collects at
its next run. The pause is one per process: a fleet plans tables on threads, and the collector runs
again when the last of the pauses ends, if it ran when the first began (a host that turned it off
keeps it off).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_pauses = 0
_resume = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The block runs with Python's cycle collector paused (see the module docstring)."""
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


__all__ = ["collector_paused"]
