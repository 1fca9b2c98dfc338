"""Cancelling a table's running work: asked through its live leases, honoured at safe points.

An operator (``memwal fleet cancel TABLE``) adds a cancel request, ``{by, reason, at}``, to
every *live* lease record of the table by compare-and-swap, keeping the holder, token and
expiry: the lease is still the holder's. The holder meets the request where it re-reads its
lease anyway (:meth:`memwal.lease.Lease.check`, no extra request), and its heartbeat meets it
at its next renewal:

- at a check where nothing is half-done (before a job reads or commits anything, after a
  merge read its batch and before its first commit, before a compaction or a catch-up commits
  what its tasks built, before GC's marker, each repair and rollup, its drain and each batch
  of deletes, and when the job's work is done), it raises :class:`~memwal.errors.CancelledError` (exit code 3); the
  job's ``with`` releases its leases as on any exit (the release writes a record without the
  request), and its history record says ``cancelled``, by whom and why;
- at any other check (between two commits of one merge) it goes on to its next safe point,
  and the request is noted here, in this process: the cycle runner (:mod:`memwal.cycle`)
  starts none of the table's later jobs.

Work an engine hands to others (a Spark job's tasks) runs inside :func:`stoppable`: while it
runs, a watcher reads the job's lease every :data:`WATCH_SECONDS` and, on a request, calls the
engine's ``stop`` (the Spark engines cancel their job group); what the stopped tasks wrote is
removed or left to ``gc --orphans`` as after any failed job, and the job ends ``cancelled``.

A lease that is not live has no running work to cancel: nothing is written for it.
:mod:`memwal.history.cancel_effect` tells the operator whether a request took effect.

**This process's own stop** (:mod:`memwal.lease.stop`: a long-lived follower asked to stop by
SIGTERM or SIGINT, :mod:`memwal.follow`) is met the same way by every job of the process, on every
table, without writing anything: each lease check where nothing is half-done raises
:class:`~memwal.errors.CancelledError`, the cycle runner starts no further job, and the leases
are released as on any exit.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from memwal.core import clock as clocks
from memwal.core.clock import Clock
from memwal.errors import BadInputError, MemWalError, NotFoundError, PreconditionFailedError
from memwal.lease.heartbeat import Heartbeat
from memwal.lease.record import LEASE_PREFIX, LeaseRecord, lease_key
from memwal.lease.stop import process_stop
from memwal.store import Store

#: How often a running job's lease is read while engine work that can be stopped runs (a
#: Spark job): one small read each time, only while such work runs.
WATCH_SECONDS = 5.0


class Held(Protocol):
    """What a run's watcher needs of a lease it holds (:class:`memwal.lease.Lease` is one): a
    protocol here, so that this module, which the lease's renewal calls, needs nothing of it."""

    @property
    def kind(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    def check(self, *, safe_to_stop: bool = False) -> None: ...


_noticed: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Asked:
    """A running job asked to stop: its lease's kind, and who held it then."""

    kind: str
    holder: str
    token: int
    run_id: str | None
    acquired_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "holder": self.holder}


def ask(store: Store, by: str, reason: str, *, now: float | None = None) -> list[Asked]:
    """Ask every live job of the table at ``store`` to stop; the jobs asked, by kind."""
    at = clocks.current()() if now is None else now
    asked = []
    for obj in store.list(LEASE_PREFIX, recursive=False):
        kind = obj.key.rsplit("/", 1)[-1].removesuffix(".json")
        if not obj.key.endswith(".json"):
            continue
        for _attempt in range(5):  # a renewal may swap the record between our read and write
            try:
                data, etag = store.get_with_etag(lease_key(kind))
                rec = LeaseRecord.from_json(data, where=store.uri_for(obj.key))
                if not rec.live(at):
                    break
                rec.cancel = {"by": by, "reason": reason, "at": at}
                store.put_if_match(lease_key(kind), rec.encode(), etag)
                asked.append(Asked(kind, rec.holder, rec.token, rec.run_id, rec.acquired_at))
                break
            except PreconditionFailedError:
                continue
            except (BadInputError, NotFoundError):
                break  # a corrupt lease (memwal lease shows it) or one gone meanwhile: nothing running there
    return sorted(asked, key=lambda a: a.kind)


def request_cancel(store: Store, by: str, reason: str, *, now: float | None = None) -> list[str]:
    """Ask every live job of the table at ``store`` to stop; the job kinds asked."""
    return [a.kind for a in ask(store, by, reason, now=now)]


# -- the holder's side


def noticed(root: str, request: dict[str, Any]) -> None:
    """A holder of a lease on the table at ``root`` saw a cancel request: noted for the cycle
    runner, and the engine work running for it (:func:`stoppable`) is stopped."""
    with _lock:
        _noticed[root] = request
        scopes = list(_scopes.get(root, ()))
    for scope in scopes:
        scope.stop_all(request)


def cancelled(root: str, since: float) -> dict[str, Any] | None:
    """The cancel request a holder of this process saw for the table at ``root``, made at or
    after ``since`` (the start of the caller's work), or None; this process's own stop, whenever
    it was asked, stops every table's work."""
    own = process_stop()
    if own is not None:
        return own
    with _lock:
        request = _noticed.get(root)
    return request if request is not None and float(request.get("at") or 0.0) >= since else None


def describe(request: dict[str, Any]) -> str:
    reason = request.get("reason") or "no reason given"
    return f"cancelled by {request.get('by') or '?'}: {reason}"


@dataclass(eq=False)
class Scope:
    """One job run holding ``leases`` on the table at ``root`` (:func:`running`): the engine
    work that can be stopped meanwhile, and the request that stopped it."""

    root: str
    leases: Sequence[Held]
    stops: list[Callable[[], None]] = field(default_factory=list)
    #: The request that stopped this run's engine work (None: none did).
    stopped: dict[str, Any] | None = None

    def stop_all(self, request: dict[str, Any]) -> None:
        with _lock:
            stops, self.stops = list(self.stops), []
            if stops:
                self.stopped = request
        for stop in stops:
            stop()


_scopes: dict[str, list[Scope]] = {}
_current: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("memwal_cancel_scope", default=None)


@contextlib.contextmanager
def running(root: str, leases: Sequence[Held]) -> Iterator[Scope]:
    """The block is one job's run on the table at ``root`` holding ``leases``: engine work
    started inside it (:func:`stoppable`) is stopped when a cancel request reaches it."""
    scope = Scope(root, list(leases))
    with _lock:
        _scopes.setdefault(root, []).append(scope)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)
        with _lock:
            _scopes[root].remove(scope)
            if not _scopes[root]:
                del _scopes[root]


@contextlib.contextmanager
def stoppable(stop: Callable[[], None], *, every: float = WATCH_SECONDS) -> Iterator[None]:
    """Engine work that can be stopped mid-way (a Spark job's tasks): while the block runs, the
    job's lease is read every ``every`` seconds of its clock, and ``stop()`` is called (once)
    when a cancel request is found there, or by any other check or renewal. Outside a job's
    run (:func:`running`), e.g. a dry run, the block runs unwatched."""
    scope = _current.get()
    if scope is None or not scope.leases:
        yield
        return
    with _lock:
        scope.stops.append(stop)
    lease = scope.leases[0]

    def watch() -> float | None:
        try:
            for held in scope.leases:
                held.check()  # notes a request (noticed() then stops the work); never stops here itself
        except MemWalError:
            return None  # a lost lease: the job stops at its own next check
        with _lock:
            if stop not in scope.stops:
                return None  # stopped, or the block ended
        return lease.clock() + every

    watcher = Heartbeat(f"cancel-watch-{lease.kind}", watch, lease.clock() + every, lease.clock).start()
    try:
        yield
    finally:
        watcher.stop()
        with _lock:
            if stop in scope.stops:
                scope.stops.remove(stop)


__all__ = ["WATCH_SECONDS", "Asked", "Held", "Scope", "ask", "cancelled", "describe", "noticed", "request_cancel",
           "running", "stoppable"]
