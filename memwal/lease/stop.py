"""This process's own stop: every job of the process stops at its next safe point (a follower's SIGTERM).

A long-lived follower asked to stop (SIGTERM, SIGINT: :mod:`memwal.follow.signals`) asks every job
of its process, on every table, to stop where nothing is half-done. The jobs meet it where they
meet an operator's cancel (:mod:`memwal.lease.cancel`): at each lease check a job makes where it
could stop, which then raises :class:`~memwal.errors.CancelledError`; nothing is written for it.
It is set from a signal handler, so setting it is one assignment and takes no lock (a handler runs
between two bytecodes of the main thread, which may hold any lock at that moment). Nothing here
imports the leases: they read it.
"""

from __future__ import annotations

from typing import Any

#: This process's own stop request (None: not asked).
_process_stop: dict[str, Any] | None = None


def stop_process(by: str, reason: str, at: float) -> None:
    """Ask every job of this process to stop at its next safe point: safe to call from a signal
    handler (one assignment, no lock, no I/O)."""
    global _process_stop
    _process_stop = {"by": by, "reason": reason, "at": at}


def process_stop() -> dict[str, Any] | None:
    """This process's own stop request, or None."""
    return _process_stop


def clear_process_stop() -> None:
    """Forget this process's stop request (a process that goes on after it: tests, a notebook)."""
    global _process_stop
    _process_stop = None


__all__ = ["clear_process_stop", "process_stop", "stop_process"]
