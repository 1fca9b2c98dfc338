"""The clock every job reads: wall time, and waiting for a moment to come.

Leases expire, heartbeats renew them and checkpoints run out on a clock. Reading it through
one object, instead of ``time.time()`` scattered over the code, lets a test move time by
hand (delta-rs injects its clock into vacuum for the same reason): a job whose step lasts
three lease TTLs is then a test that takes milliseconds and does not depend on how busy the
machine is.

A :class:`Clock` is called for the time (``clock()``, seconds since the epoch) and can wait
until a deadline or until a stop event is set (:meth:`Clock.wait_until`), which is what a
background renewer needs. :func:`current` is the process's clock (the system clock unless a
test installed another with :func:`use`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Wall time and waiting on it."""

    def __call__(self) -> float:
        """Seconds since the epoch."""

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        """Block until the clock reaches ``deadline`` or ``stop`` is set; True if stopped."""


class SystemClock:
    """The machine's wall clock."""

    def __call__(self) -> float:
        return time.time()

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                return stop.is_set()
            if stop.wait(remaining):
                return True

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM = SystemClock()
_current: Clock = SYSTEM


def current() -> Clock:
    """The process's clock: what every lease, heartbeat, checkpoint and GC reads."""
    return _current


@contextlib.contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Install ``clock`` as the process's clock for the block (tests move time by hand)."""
    global _current
    if not isinstance(clock, Clock):
        raise TypeError(f"{clock!r} is not a Clock (it needs __call__ and wait_until)")
    saved, _current = _current, clock
    try:
        yield clock
    finally:
        _current = saved
