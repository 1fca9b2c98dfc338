"""SIGTERM and SIGINT, for a follower: stop at the next safe point, release the leases, exit 0.

A service manager (systemd, Kubernetes, Airflow killing a task) stops a process with SIGTERM and
waits a grace period (30 s by default in Kubernetes and systemd) before SIGKILL. So the first
signal does not interrupt anything: it asks every job of this process to stop where nothing is
half-done (:func:`memwal.lease.stop.stop_process`, met at the jobs' safe points exactly as an
operator's cancel is), and the follower starts nothing new. The job running then ends at its
next safe point (its leases released by its ``with``), the follower releases its own lease and
returns. A second signal changes nothing: leaving a commit half-done is what SIGKILL is for.

The handler only assigns (a handler runs between two bytecodes of the main thread, which may
hold any lock then); the follower's waits are sliced (:data:`SLICE_SECONDS`) so it notices.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from memwal.lease.stop import clear_process_stop, stop_process

#: How often a waiting follower looks whether it was asked to stop.
SLICE_SECONDS = 0.1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """A follower's stop: by a signal (while the block runs, in the main thread), by
    :meth:`stop` (its time is up), or never."""

    def __init__(self) -> None:
        #: Why the follower stops (``SIGTERM``, ``SIGINT``, ``max-seconds``...), None while it runs.
        self.reason: str | None = None
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()
        clear_process_stop()  # the stop was this follower's: a process that goes on is not stopped

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.stop(signal.Signals(signum).name)

    def stop(self, reason: str) -> None:
        """Stop at the next safe point, for ``reason`` (the first reason given stands)."""
        if self.reason is not None:
            return
        self.reason = reason
        stop_process(f"memwal follow (pid {os.getpid()})", f"{reason}: the follower is stopping",
                            time.time())

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def wait(self, seconds: float, *, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Wait ``seconds`` or until asked to stop; whether asked."""
        deadline = time.monotonic() + seconds
        while not self.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sleep(min(SLICE_SECONDS, left))
        return self.stopped


__all__ = ["SLICE_SECONDS", "STOP_SIGNALS", "StopSignals"]
