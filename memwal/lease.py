"""Job leases: one active instance per (table, job kind) (DESIGN.md 3.7).

A lease is a small JSON object at ``_mem_wal/_jobs/leases/<kind>.json`` in the table's
store.  It is created with ``put_if_absent`` and from then on only rewritten with
``put_if_match`` against the ETag its writer observed, so of several racing jobs
exactly one wins each write.  Every acquisition increments the fencing ``token``
(release keeps it), so tokens never go backwards; a job carries its token and calls
:meth:`Lease.check` before each side effect, which notices a takeover or an expiry
and raises :class:`LeaseLostError` so the job stops before doing anything more.

Expiry compares ``expires_at`` with the local clock, so the clocks of the machines
running jobs must roughly agree (well within the TTL).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from types import TracebackType

from memwal.errors import (
    BadInputError,
    LeaseHeldError,
    LeaseLostError,
    MemWalError,
    NotFoundError,
    PreconditionFailedError,
)
from memwal.storage import Store

log = logging.getLogger(__name__)

#: Folder (relative to the table root) holding the lease objects.
LEASE_PREFIX = "_mem_wal/_jobs/leases/"

_KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

#: How many read/CAS rounds acquire() tries before calling the lease contended.
_ACQUIRE_ROUNDS = 8


def lease_key(kind: str) -> str:
    """Key of the lease object of a job kind (validated: it becomes part of a path)."""
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise BadInputError(f"invalid job kind {kind!r} for a lease")
    return f"{LEASE_PREFIX}{kind}.json"


def default_holder() -> str:
    """``host:pid:random``: unique per process and per Lease, readable in error messages."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _fmt_time(ts: float) -> str:
    """A UTC timestamp for messages (expiries must be readable by an operator)."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


@dataclass
class LeaseRecord:
    """The lease object's content."""

    kind: str
    holder: str
    token: int
    acquired_at: float
    expires_at: float

    def to_json(self) -> bytes:
        """Serialise (sorted keys, so equal records give equal bytes)."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, *, where: str = "lease") -> LeaseRecord:
        """Parse a lease object; BadInputError if it is not one (never guess a token)."""
        try:
            obj = json.loads(data)
            rec = cls(
                kind=str(obj["kind"]),
                holder=str(obj["holder"]),
                token=int(obj["token"]),
                acquired_at=float(obj["acquired_at"]),
                expires_at=float(obj["expires_at"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise BadInputError(f"corrupt lease object {where}: {exc}") from exc
        if isinstance(obj["token"], bool) or rec.token < 0:
            raise BadInputError(f"corrupt lease object {where}: bad token {obj['token']!r}")
        return rec

    def live(self, now: float) -> bool:
        """Whether the lease is still in force at ``now``."""
        return self.expires_at > now


class Lease:
    """The lease of one job kind on one table, held by this process.

    Use as a context manager (acquire on enter, release on exit), and call
    :meth:`check` before every side effect.
    """

    def __init__(
        self,
        store: Store,
        kind: str,
        *,
        holder: str | None = None,
        ttl_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Describe the lease; nothing is read or written until :meth:`acquire`."""
        if not ttl_seconds > 0:
            raise BadInputError(f"lease TTL must be positive, got {ttl_seconds!r}")
        self.store = store
        self.kind = kind
        self.key = lease_key(kind)
        self.holder = holder or default_holder()
        self.ttl_seconds = float(ttl_seconds)
        self.clock = clock
        #: Fencing token held (0 until acquired).
        self.token = 0
        self._record: LeaseRecord | None = None
        self._etag: str | None = None
        self._held = False

    # -- introspection

    @property
    def held(self) -> bool:
        """Whether this object believes it holds the lease (check() verifies it)."""
        return self._held

    @property
    def record(self) -> LeaseRecord | None:
        """The lease record as last written or read by this holder."""
        return self._record

    @property
    def uri(self) -> str:
        """Full URI of the lease object, for messages."""
        return self.store.uri_for(self.key)

    def __repr__(self) -> str:
        """Kind, holder, token and state, for logs."""
        return (
            f"Lease(kind={self.kind!r}, holder={self.holder!r}, token={self.token}, "
            f"held={self._held}, uri={self.uri!r})"
        )

    # -- acquire

    def acquire(self) -> Lease:
        """Take the lease: create it, or take over an expired or released one with token+1.

        Raises LeaseHeldError (naming the holder and the expiry) if another holder's
        lease is live.  Every write is conditional, so of racing acquirers one wins and
        the others see its live lease.
        """
        for _ in range(_ACQUIRE_ROUNDS):
            now = self.clock()
            try:
                data, etag = self.store.get_with_etag(self.key)
            except NotFoundError:
                rec = LeaseRecord(self.kind, self.holder, 1, now, now + self.ttl_seconds)
                try:
                    new_etag = self.store.put_if_absent(self.key, rec.to_json())
                except PreconditionFailedError:
                    continue  # someone created it first: look at theirs
                self._took(rec, new_etag)
                return self
            current = LeaseRecord.from_json(data, where=self.uri)
            if current.live(now) and current.holder != self.holder:
                raise LeaseHeldError(
                    f"{self.kind} lease on {self.store.root} is held by {current.holder} "
                    f"(token {current.token}) until {_fmt_time(current.expires_at)} "
                    f"({current.expires_at - now:.0f}s from now)"
                )
            # Expired, released, or our own holder name: a new token fences any
            # earlier incarnation of the same holder.
            rec = LeaseRecord(self.kind, self.holder, current.token + 1, now, now + self.ttl_seconds)
            try:
                new_etag = self.store.put_if_match(self.key, rec.to_json(), etag)
            except PreconditionFailedError:
                continue  # it changed under us: re-read
            if current.live(now):
                log.warning("re-acquired own live %s lease (token %d)", self.kind, rec.token)
            elif current.expires_at > 0:
                log.warning(
                    "took over expired %s lease of %s (token %d, expired %s)",
                    self.kind,
                    current.holder,
                    current.token,
                    _fmt_time(current.expires_at),
                )
            self._took(rec, new_etag)
            return self
        raise LeaseHeldError(
            f"{self.kind} lease on {self.store.root} is contended: "
            f"gave up after {_ACQUIRE_ROUNDS} conditional-write races"
        )

    def _took(self, rec: LeaseRecord, etag: str) -> None:
        """Remember a won acquisition (record, ETag for the next CAS, token)."""
        self._record, self._etag, self.token, self._held = rec, etag, rec.token, True
        log.info(
            "acquired %s lease on %s: holder %s, token %d, expires %s",
            self.kind,
            self.store.root,
            rec.holder,
            rec.token,
            _fmt_time(rec.expires_at),
        )

    # -- check / renew

    def _lost(self, why: str) -> LeaseLostError:
        """Mark the lease lost and build the error that stops the job (exit code 3)."""
        self._held = False
        return LeaseLostError(
            f"lost the {self.kind} lease on {self.store.root} (holder {self.holder}, token {self.token}): {why}"
        )

    def check(self) -> None:
        """Verify the lease before a side effect; renew it when half the TTL has passed.

        Re-reads the lease object: LeaseLostError if it is gone, was taken over (another
        token or holder) or has expired.  A renewal is a CAS on the ETag just read, so a
        concurrent takeover makes it fail, which is also LeaseLostError.
        """
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
            raise self._lost(f"expired at {_fmt_time(current.expires_at)}")
        self._record, self._etag = current, etag
        if current.expires_at - now < self.ttl_seconds / 2:
            self._renew(now)

    def renew(self) -> None:
        """Extend the lease now, by CAS on the last ETag this holder saw.

        For long steps that cannot call check() often.  LeaseLostError if the lease
        object changed since (taken over) or this holder's lease has already expired.
        """
        if not self._held or self._record is None:
            raise self._lost("not held (never acquired, released or already lost)")
        now = self.clock()
        if not self._record.live(now):
            raise self._lost(f"expired at {_fmt_time(self._record.expires_at)}")
        self._renew(now)

    def _renew(self, now: float) -> None:
        """CAS a record with a later expiry on the last ETag seen; a lost race is a lost lease."""
        assert self._record is not None and self._etag is not None
        rec = LeaseRecord(self.kind, self.holder, self.token, self._record.acquired_at, now + self.ttl_seconds)
        try:
            etag = self.store.put_if_match(self.key, rec.to_json(), self._etag)
        except PreconditionFailedError:
            raise self._lost("the lease object changed under a renewal") from None
        self._record, self._etag = rec, etag
        log.debug("renewed %s lease (token %d) until %s", self.kind, self.token, _fmt_time(rec.expires_at))

    # -- release

    def acquire_waiting(self, timeout_seconds: float, *, poll_seconds: float = 1.0,
                        sleep: Callable[[float], None] = time.sleep) -> Lease:
        """Take the lease, waiting up to ``timeout_seconds`` for a live holder to finish.

        For jobs that only need the lease briefly (a snapshot refresh serialising with
        mergers), waiting is kinder than failing; past the timeout the holder's
        LeaseHeldError propagates (exit code 3).
        """
        deadline = self.clock() + timeout_seconds
        while True:
            try:
                return self.acquire()
            except LeaseHeldError:
                if self.clock() + poll_seconds > deadline:
                    raise
                sleep(poll_seconds)

    def release(self) -> None:
        """Give the lease up: CAS-write ``expires_at=0`` keeping the token (tokens stay monotonic).

        Never raises: if the lease was already lost or the write fails, it logs instead
        (release runs on the way out, often while another error propagates).
        """
        if not self._held:
            return
        self._held = False
        try:
            data, etag = self.store.get_with_etag(self.key)
            current = LeaseRecord.from_json(data, where=self.uri)
            if current.token != self.token or current.holder != self.holder:
                log.warning(
                    "not releasing %s lease: now held by %s with token %d (ours was %d)",
                    self.kind,
                    current.holder,
                    current.token,
                    self.token,
                )
                return
            rec = LeaseRecord(self.kind, self.holder, self.token, current.acquired_at, 0.0)
            self._etag = self.store.put_if_match(self.key, rec.to_json(), etag)
            self._record = rec
            log.info("released %s lease (token %d)", self.kind, self.token)
        except MemWalError as exc:
            log.warning("could not release %s lease (token %d): %s", self.kind, self.token, exc)

    # -- context manager

    def __enter__(self) -> Lease:
        """Acquire (unless already held, e.g. by ``acquire_waiting``), so a ``with`` block
        runs only while holding the lease."""
        return self if self.held else self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release on every exit; never masks the block's own exception."""
        self.release()
