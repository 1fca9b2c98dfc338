"""The lease of one job kind on one table, held by this process (invariant 7, docs/architecture.md).

A lease object is created with ``put_if_absent`` and from then on only rewritten with
``put_if_match`` against the ETag its writer observed, so of several racing jobs exactly one
wins each write. Every acquisition increments the fencing ``token`` (release keeps it), so
tokens never go backwards.

**Heartbeat.** While a lease is held, a daemon thread renews it by compare-and-swap at most
every TTL/3 (with jitter), so a job may run for many TTLs and a single step (a long Spark
stage, a big ``merge_insert``, a slow store) may outlast the TTL. When a renewal finds the
lease taken over, already expired (the process was frozen or partitioned past its TTL), or
the store unreachable until the lease ran out, the lease is **fenced**: :meth:`Lease.check`,
which every job calls before each side effect, then raises :class:`~memwal.errors.LeaseLostError` (exit 3).
A frozen process (SIGSTOP) cannot renew, so another job can still take the lease over; the
commit fences of each job (bound delete pass, merge intents, progress markers) keep a late
commit harmless: a lease check is not a fence (hazard H5).

Expiry compares ``expires_at`` with the local clock, so the clocks of the machines running
jobs must roughly agree (well within the TTL). A live lease whose holder is a process of this
host that no longer exists is taken over at once (a ``kill -9`` does not block a kind for a
whole TTL); a holder on another host is never presumed dead.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from types import TracebackType

from memwal.core import clock as clocks
from memwal.core import steps
from memwal.core.clock import Clock
from memwal.core.validate import lease_ttl as _check_ttl
from memwal.errors import (
    BadInputError,
    ConflictError,
    LeaseHeldError,
    MemWalError,
    NotFoundError,
    PreconditionFailedError,
)
from memwal.lease.guard import check_create, note_table, noted_gone
from memwal.lease.heartbeat import Heartbeat, renewal_interval
from memwal.lease.record import LeaseRecord, default_holder, fmt_time, holder_is_dead, lease_key
from memwal.lease.renewal import Renewing, store_errors
from memwal.lease.stop import process_stop
from memwal.store import Store

log = logging.getLogger("memwal.lease")

#: How many read/CAS rounds acquire() tries before calling the lease contended.
_ACQUIRE_ROUNDS = 8

#: Default lease TTL (seconds): the CLI's ``--lease-ttl`` default.
DEFAULT_TTL_SECONDS = 300.0


#: :meth:`Lease.inspect` found no lease record.
_MISSING = "missing"


class Lease(Renewing):
    """The lease of one job kind on one table, held by this process.

    Use as a context manager (acquire on enter, release on exit), and call :meth:`check`
    before every side effect. ``heartbeat=False`` leaves renewal to :meth:`check` alone (for
    tools that hold a lease for a moment only).
    """

    def __init__(
        self,
        store: Store,
        kind: str,
        *,
        holder: str | None = None,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Clock | None = None,
        run_id: str | None = None,
        heartbeat: bool = True,
    ) -> None:
        """Describe the lease; nothing is read or written until :meth:`acquire`."""
        self.store = store
        self.kind = kind
        self.key = lease_key(kind)
        self.holder = holder or default_holder()
        self.ttl_seconds = float(_check_ttl("lease TTL", ttl_seconds))
        self.clock = clock or clocks.current()
        if not isinstance(self.clock, Clock):
            raise TypeError(f"{self.clock!r} is not a memwal.core.clock.Clock (it needs __call__ and wait_until)")
        self.run_id = run_id
        self.use_heartbeat = heartbeat
        #: Fencing token held (0 until acquired).
        self.token = 0
        #: Renewals the heartbeat made (for reports and metrics).
        self.renewals = 0
        self._record: LeaseRecord | None = None
        self._etag: str | None = None
        self._held = False
        self._fenced: str | None = None
        self._heartbeat: Heartbeat | None = None
        self._lock = threading.RLock()
        #: What :meth:`inspect` read, for the first acquisition round to start from instead of
        #: reading it again: (data, ETag), :data:`_MISSING`, or None once used (or never read).
        self._inspected: tuple[bytes, str] | str | None = None

    # -- introspection

    @property
    def held(self) -> bool:
        """Whether this object believes it holds the lease (check() verifies it)."""
        return self._held

    @property
    def fenced(self) -> str | None:
        """Why the heartbeat found the lease lost (None while it is not)."""
        return self._fenced

    @property
    def record(self) -> LeaseRecord | None:
        """The lease record as last written or read by this holder."""
        return self._record

    def __repr__(self) -> str:
        return (f"Lease(kind={self.kind!r}, holder={self.holder!r}, token={self.token}, "
                f"held={self._held}, uri={self.uri!r})")

    # -- acquire

    def acquire(self) -> Lease:
        """Take the lease: create it, or take over an expired or released one with token+1.

        Raises LeaseHeldError (naming the holder and the expiry) if another holder's lease
        is live. Every write is conditional, so of racing acquirers one wins and the others
        see its live lease.
        """
        from memwal.core.retry import after_conflict

        with store_errors(self.uri):
            note_table(self.store)  # a table removed later gets no lease folder back (memwal.lease.guard)
            try:
                return after_conflict(lambda _n: self._acquire_round(), what=f"{self.kind} lease on {self.store.root}",
                                      attempts=_ACQUIRE_ROUNDS, base_seconds=0.01, max_seconds=0.2)
            except ConflictError:
                raise LeaseHeldError(f"{self.kind} lease on {self.store.root} is contended: "
                                     f"gave up after {_ACQUIRE_ROUNDS} conditional-write races") from None

    def _new_record(self, token: int, now: float) -> LeaseRecord:
        return LeaseRecord(self.kind, self.holder, token, now, now + self.ttl_seconds, renewed_at=now,
                           host=socket.gethostname(), pid=os.getpid(), run_id=self.run_id)

    def _acquire_round(self) -> Lease:
        """Create the lease, or take over an expired, released or dead holder's one; a lost
        conditional write raises PreconditionFailedError (the retry reads again)."""
        now = self.clock()
        seen, self._inspected = self._inspected, None
        try:
            data, etag = self._stored_for_acquire(seen, now)
        except NotFoundError:
            if seen != _MISSING:  # inspect() found no folder there a moment ago
                self._refuse_folder()
            rec = self._new_record(1, now)
            steps.step("lease.before-write")
            check_create(self.store, self.uri)
            try:
                new_etag = self.store.put_if_absent(self.key, rec.encode())
            except PreconditionFailedError:
                self._refuse_folder()
                raise  # someone created it first: look at theirs
            self._took(rec, new_etag)
            return self
        current = LeaseRecord.from_json(data, where=self.uri)
        dead = current.live(now) and current.holder != self.holder and holder_is_dead(current.holder)
        if current.live(now) and current.holder != self.holder and not dead:
            raise LeaseHeldError(
                f"{self.kind} lease on {self.store.root} is held by {current.holder} "
                f"(token {current.token}{', run ' + current.run_id if current.run_id else ''}) until "
                f"{fmt_time(current.expires_at)} ({current.expires_at - now:.0f}s from now)"
            )
        # Expired, released, or our own holder name: a new token fences any earlier
        # incarnation of the same holder.
        rec = self._new_record(current.token + 1, now)
        steps.step("lease.before-write")
        new_etag = self.store.put_if_match(self.key, rec.encode(), etag)  # lost race: retried
        if dead:
            log.warning("took over the %s lease of dead holder %s (token %d, would have expired %s): "
                        "its process is gone from this host", self.kind, current.holder, current.token,
                        fmt_time(current.expires_at))
        elif current.live(now):
            log.warning("re-acquired own live %s lease (token %d)", self.kind, rec.token)
        elif current.expires_at > 0:
            log.warning("took over expired %s lease of %s (token %d, expired %s)", self.kind, current.holder,
                        current.token, fmt_time(current.expires_at))
        self._took(rec, new_etag)
        return self

    def _stored_for_acquire(self, seen: tuple[bytes, str] | str | None, now: float) -> tuple[bytes, str]:
        """The stored record and its ETag: what :meth:`inspect` read when it allows taking the
        lease (none there, or one that is free to take now), else read now. A record another
        holder held live when inspected is read again (it may have been released since). The
        write that takes the lease is conditional on this ETag, so a record changed since
        inspect() read it fails the write and the next round reads it afresh."""
        if seen == _MISSING:
            raise NotFoundError(f"{self.uri}: no lease")
        if isinstance(seen, tuple):
            rec = LeaseRecord.from_json(seen[0], where=self.uri)
            if not rec.live(now) or rec.holder == self.holder:
                return seen
        return self.store.get_with_etag(self.key)

    def _refuse_folder(self) -> None:
        """BadInputError if the lease path is a folder: no write can ever create the lease
        there, and retrying would only report a live holder that does not exist."""
        folder, _, name = self.key.rpartition("/")
        if name in self.store.list_dirs(folder + "/"):
            raise BadInputError(f"lease object {self.uri} is a folder, not a lease: move it away and rerun")

    def inspect(self) -> LeaseRecord | None:
        """The stored record (None if there is none), read and validated without writing.

        Jobs call it for every lease they will need before taking the first, so a corrupt
        lease or a folder in its place fails the job with nothing written at all.
        """
        try:
            with store_errors(self.uri):
                note_table(self.store)  # a table removed later gets no lease folder back (memwal.lease.guard)
                data, etag = self.store.get_with_etag(self.key)
        except NotFoundError:
            self._refuse_folder()
            self._inspected = _MISSING
            return None
        rec = LeaseRecord.from_json(data, where=self.uri)
        self._inspected = (data, etag)
        return rec

    def _took(self, rec: LeaseRecord, etag: str) -> None:
        """Remember a won acquisition and start the heartbeat."""
        with self._lock:
            self._record, self._etag, self.token, self._held, self._fenced = rec, etag, rec.token, True, None
        log.info("acquired %s lease on %s: holder %s, token %d, ttl %gs, expires %s", self.kind, self.store.root,
                 rec.holder, rec.token, self.ttl_seconds, fmt_time(rec.expires_at))
        if self.use_heartbeat:
            renewed = rec.acquired_at if rec.renewed_at is None else rec.renewed_at  # a record we wrote: set
            self._heartbeat = Heartbeat(f"{self.kind}-{self.token}", self._beat,
                                        renewed + renewal_interval(self.ttl_seconds), self.clock).start()

    # -- check / renew

    def check(self, *, safe_to_stop: bool = False) -> None:
        """Verify the lease before a side effect (LeaseLostError once it is lost).

        Re-reads the lease object: lost if it is gone, was taken over (another token or
        holder), has expired, or the heartbeat already found it lost. Without a heartbeat it
        renews the lease here once half the TTL has passed. An operator's cancel request in
        the record (:mod:`memwal.lease.cancel`), or this process's own stop, stops the job here
        with CancelledError when the caller says nothing is half-done (``safe_to_stop``), and is
        noted otherwise.
        """
        with store_errors(self.uri), self._lock:
            if self._fenced is not None:
                raise self._lost(self._takeover_reason(self._fenced))
            if not self._held:
                raise self._lost("not held (never acquired, released or already lost)")
            now = self.clock()
            try:
                data, etag = self.store.get_with_etag(self.key)
            except NotFoundError:
                raise self._lost("the lease object is gone") from None
            current = LeaseRecord.from_json(data, where=self.uri)
            if current.token != self.token or current.holder != self.holder:
                raise self._lost(f"taken over by {current.holder} with token {current.token}")
            if not current.live(now):
                raise self._lost(f"expired at {fmt_time(current.expires_at)}")
            self._record, self._etag = current, etag
            request = current.cancel if current.cancel is not None else process_stop()
            if request is not None:
                self._cancel_requested(request, safe_to_stop)
            beating = self._heartbeat is not None and self._heartbeat.running
            if not beating and current.expires_at - now < self.ttl_seconds / 2:
                self._renew(now)

    def safe_point(self) -> None:
        """:meth:`check` where nothing is half-done: an operator's cancel stops the job here."""
        self.check(safe_to_stop=True)

    # -- wait / release

    def acquire_waiting(self, timeout_seconds: float, *, poll_seconds: float = 1.0,
                        sleep: Callable[[float], None] | None = None) -> Lease:
        """Take the lease, waiting up to ``timeout_seconds`` for a live holder to finish.

        For jobs that only need the lease briefly (a snapshot refresh serialising with
        mergers), waiting is kinder than failing; past the timeout the holder's
        LeaseHeldError propagates (exit code 3).
        """
        from memwal.core.retry import while_busy

        def say_why(exc: BaseException) -> None:  # why the job is not starting, not just a stall
            log.info("waiting up to %.0fs: %s", timeout_seconds, exc)

        try:  # this process asked to stop (a follower's SIGTERM) waits no more: held, as past the timeout
            return while_busy(self.acquire, busy=lambda exc: isinstance(exc, LeaseHeldError) and process_stop() is None,
                              timeout_seconds=timeout_seconds, poll_seconds=poll_seconds, on_first_wait=say_why,
                              clock=self.clock, sleep=sleep)
        except LeaseHeldError as exc:
            why = "no longer waited for: this process is stopping" if process_stop() is not None else (
                f"waited {timeout_seconds:.0f}s for it")
            raise LeaseHeldError(f"{exc} ({why})") from None

    def release(self) -> None:
        """Give the lease up: stop the heartbeat, then CAS-write ``expires_at=0`` keeping the
        token (tokens stay monotonic).

        Never raises: if the lease was already lost or the write fails, it logs instead
        (release runs on the way out, often while another error propagates).
        """
        if self._heartbeat is not None:
            self._heartbeat.stop()
        with self._lock:
            if self._fenced is not None:
                log.log(logging.INFO if self._gone() else logging.WARNING,
                        "not releasing the %s lease (token %d): it was lost (%s)", self.kind, self.token, self._fenced)
                return
            if not self._held:
                return
            self._held = False
            try:
                if self._release_as_known():
                    return
                data, etag = self.store.get_with_etag(self.key)
                current = LeaseRecord.from_json(data, where=self.uri)
                if current.token != self.token or current.holder != self.holder:
                    log.warning("not releasing %s lease: now held by %s with token %d (ours was %d)", self.kind,
                                current.holder, current.token, self.token)
                    return
                rec = LeaseRecord(self.kind, self.holder, self.token, current.acquired_at, 0.0,
                                  renewed_at=current.renewed_at, host=current.host, pid=current.pid,
                                  run_id=current.run_id)
                self._etag = self.store.put_if_match(self.key, rec.encode(), etag)
                self._record = rec
                log.info("released %s lease (token %d)", self.kind, self.token)
            except (MemWalError, OSError) as exc:
                if isinstance(exc, NotFoundError | PreconditionFailedError) and self._gone():
                    # its table is gone (the object with it): the caller says that, once
                    log.info("not releasing the %s lease (token %d): the table is gone", self.kind, self.token)
                    return
                log.warning("could not release %s lease (token %d): %s", self.kind, self.token, exc)

    def _gone(self) -> bool:
        """Whether the table of this lease is gone (a release then has nothing to say)."""
        try:
            return noted_gone(self.store)
        except (MemWalError, OSError):
            return False

    def _release_as_known(self) -> bool:
        """Release with one write: the record as this holder last wrote or read it, on
        condition that its ETag is still the stored one (then the stored record is ours, and
        reading it first would tell nothing new). False when it changed since (an operator's
        cancel request, a takeover): :meth:`release` reads it and decides."""
        known, etag = self._record, self._etag
        if known is None or etag is None or known.token != self.token or known.holder != self.holder:
            return False
        rec = LeaseRecord(self.kind, self.holder, self.token, known.acquired_at, 0.0, renewed_at=known.renewed_at,
                          host=known.host, pid=known.pid, run_id=known.run_id)
        try:
            self._etag = self.store.put_if_match(self.key, rec.encode(), etag)
        except PreconditionFailedError:
            return False
        self._record = rec
        log.info("released %s lease (token %d)", self.kind, self.token)
        return True

    # -- context manager

    def __enter__(self) -> Lease:
        """Acquire (unless already held, e.g. by ``acquire_waiting``), so a ``with`` block
        runs only while holding the lease."""
        return self if self.held else self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Release on every exit; never masks the block's own exception."""
        self.release()
