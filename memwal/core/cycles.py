"""Python's cycle collector paused while a job, a status or a verify runs (issue 82).

They read the table's state into objects: a whole GC's plan of a table that keeps a week of
versions holds a few for each retained version, generation folder and WAL entry (some 410,000
objects the collector tracks at 50,000 flushes, against 70,000 for the imports and the open
table). None of them needs the cycle collector: reference counting frees them, as it frees Arrow's
buffers. But CPython's collector runs after every 700 allocations and traverses the objects that
survived, the older generations again and again as they grow: measured, some 30% of a whole GC's
dry run at 67,618 versions (5.4-5.7 s with it, 3.8-4.0 s without, the same peak memory). So they
run with the collector paused, and it resumes after them; what it would have found meanwhile (a
reference cycle, rare) it collects at its next run. The pause is one per process: a fleet runs
tables on threads, and the collector runs again when the last of the pauses ends, if it ran when
the first began (a host that turned it off keeps it off). Where pauses overlap without end (a fleet
follower's tables on two threads), a pause that ends while others run collects once the collector
has been paused :data:`MAX_PAUSED_SECONDS`: the garbage a paused collector leaves stays bounded.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator

#: Longest the collector stays paused while pauses overlap: then one collection, at a pause's end.
MAX_PAUSED_SECONDS = 60.0

_lock = threading.Lock()
_pauses = 0
_resume = False
_since = 0.0  # when the collector was paused, or last collected while paused (monotonic)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The block runs with Python's cycle collector paused (see the module docstring)."""
    global _pauses, _resume, _since
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
            _since = time.monotonic()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
            overdue = _pauses > 0 and _resume and time.monotonic() - _since > MAX_PAUSED_SECONDS
            if overdue:
                _since = time.monotonic()
        if overdue:
            gc.collect()


__all__ = ["collector_paused"]
