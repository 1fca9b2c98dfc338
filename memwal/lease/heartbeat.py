"""A heartbeat: a daemon thread that proves, on a clock, that its owner is alive.

A lease outlives a long step only if its holder renews it while the step runs (Hudi's
heartbeat for table services, SlateDB's worker heartbeat): a merge whose one
``merge_insert`` takes longer than the TTL must not lose its lease to a second merger, and a
reader's checkpoint must not expire under a long query. The owner gives a ``beat`` function
that renews once and returns when the next beat is due (or None to stop); the heartbeat
calls it on its own thread until the owner stops it. Waiting goes through the owner's
:class:`~memwal.core.clock.Clock`, so a test moves the heartbeat by moving the clock.

The thread never raises into the job: ``beat`` itself decides what a failed renewal means
(a lease is then *fenced*: the job stops at its next check, see :mod:`memwal.lease.lease`).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from memwal.core.clock import Clock

log = logging.getLogger(__name__)

#: Name prefix of every heartbeat thread (a test clock waits until these have settled).
THREAD_PREFIX = "memwal-heartbeat"


def renewal_interval(ttl_seconds: float, *, jitter: float = 0.2, rng: Callable[[], float] = random.random) -> float:
    """At most a third of the TTL, shortened by up to ``jitter`` of it so that many holders
    started together do not renew in lockstep: two renewals fit in every TTL even when one
    is late."""
    return ttl_seconds / 3 * (1 - jitter * rng())


class _BeatThread(threading.Thread):
    """A heartbeat's daemon thread; ``clock`` names the clock it sleeps on (a test clock finds
    the threads waiting on it by this attribute)."""

    def __init__(self, target: Callable[[], None], name: str, clock: Clock) -> None:
        super().__init__(target=target, name=name, daemon=True)
        self.clock = clock


class Heartbeat:
    """Calls ``beat()`` at the times it asks for, on a daemon thread, until stopped."""

    def __init__(self, name: str, beat: Callable[[], float | None], first_due: float, clock: Clock) -> None:
        self.name = f"{THREAD_PREFIX}-{name}"
        self._beat = beat
        self._due = first_due
        self._clock = clock
        self._stop = threading.Event()
        self._thread: _BeatThread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Heartbeat:
        self._thread = _BeatThread(self._run, self.name, self._clock)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and wait for the thread (unless called from the thread itself)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        due: float | None = self._due
        while due is not None:
            if self._clock.wait_until(due, self._stop):
                return
            try:
                due = self._beat()
            except Exception:  # noqa: BLE001 - a heartbeat must never die silently mid-job
                log.exception("%s: a beat failed unexpectedly; stopping the heartbeat", self.name)
                return
