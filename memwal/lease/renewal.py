"""Renewing a held lease: on :meth:`Lease.check`, on request, and by its heartbeat.

The heartbeat side of :class:`memwal.lease.lease.Lease`: a renewal is a compare-and-swap on
the last ETag the holder saw; a renewal that finds the lease taken over, already expired
(the process stalled past its TTL) or the store unreachable until the lease ran out
*fences* the lease, so that the job's next check stops it (exit 3). Kept apart from the
acquisition so that each reads in one sitting; :class:`Renewing` works on the attributes
:class:`~memwal.lease.lease.Lease` sets up (store, key, holder, token, TTL, clock, lock,
record, ETag).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from memwal.errors import CancelledError, LeaseLostError, MemWalError, PreconditionFailedError
from memwal.lease import cancel
from memwal.lease.heartbeat import renewal_interval
from memwal.lease.record import LeaseRecord, fmt_time
from memwal.observe import metrics

if TYPE_CHECKING:
    from memwal.core.clock import Clock
    from memwal.store import Store

log = logging.getLogger("memwal.lease")

#: Why a renewal lost a lease whose object is gone (removed with its table, most often).
OBJECT_GONE = "the lease object is gone"


@contextlib.contextmanager
def store_errors(uri: str) -> Iterator[None]:
    """A store failure on a lease object (permissions, a full disk, a folder in the way)
    becomes one MemWalError naming the object, never a raw OSError."""
    try:
        yield
    except OSError as exc:
        raise MemWalError(f"cannot read or write lease object {uri}: {exc.strerror or exc}") from exc


class Renewing:
    """Renewal and fencing of a held lease (mixed into :class:`~memwal.lease.lease.Lease`)."""

    store: Store
    key: str
    kind: str
    holder: str
    token: int
    ttl_seconds: float
    clock: Clock
    renewals: int
    _record: LeaseRecord | None
    _etag: str | None
    _held: bool
    _fenced: str | None
    _lock: threading.RLock

    @property
    def uri(self) -> str:
        """Full URI of the lease object, for messages."""
        return self.store.uri_for(self.key)

    def _lost(self, why: str) -> LeaseLostError:
        """Mark the lease lost and build the error that stops the job (exit code 3)."""
        self._held = False
        return LeaseLostError(
            f"lost the {self.kind} lease on {self.store.root} (holder {self.holder}, token {self.token}): {why}"
        )

    def _fence(self, why: str, *, quiet: bool = False) -> None:
        """The heartbeat found the lease lost: the next check stops the job. ``quiet``: said at
        info only (its table is gone, which the job or the follower says)."""
        with self._lock:
            if self._fenced is None:
                self._fenced, self._held = why, False
                metrics.lease_lost(self.kind)
        log.log(logging.INFO if quiet else logging.WARNING,
                "lost the %s lease on %s (token %d): %s; the job stops before its next side effect",
                self.kind, self.store.root, self.token, why)

    def renew(self) -> None:
        """Extend the lease now, by CAS on the last ETag this holder saw (LeaseLostError if
        the lease changed since, or this holder's lease has already expired)."""
        with store_errors(self.uri), self._lock:
            if self._fenced is not None:
                raise self._lost(self._fenced)
            if not self._held or self._record is None:
                raise self._lost("not held (never acquired, released or already lost)")
            now = self.clock()
            if not self._record.live(now):
                raise self._lost(f"expired at {fmt_time(self._record.expires_at)}")
            self._renew(now)

    def _renew(self, now: float) -> None:
        """CAS a record with a later expiry on the last ETag seen; a lost race is a lost lease."""
        assert self._record is not None and self._etag is not None
        rec = LeaseRecord(self.kind, self.holder, self.token, self._record.acquired_at, now + self.ttl_seconds,
                          renewed_at=now, host=self._record.host, pid=self._record.pid, run_id=self._record.run_id,
                          cancel=self._record.cancel)
        try:
            etag = self.store.put_if_match(self.key, rec.encode(), self._etag)
        except PreconditionFailedError:
            if not self._adopt_cancel():
                gone = not self.store.exists(self.key)
                raise self._lost(OBJECT_GONE if gone else "the lease object changed under a renewal") from None
            self._renew(now)  # the record is still ours, with a cancel request added: renew that
            return
        self._record, self._etag = rec, etag
        self.renewals += 1
        metrics.lease_renewed(self.kind)
        log.debug("renewed %s lease (token %d) until %s", self.kind, self.token, fmt_time(rec.expires_at))

    def _adopt_cancel(self) -> bool:
        """After a lost renewal CAS: whether the record changed only by an operator's cancel
        request (same holder and token), which is then adopted as the record last seen."""
        try:
            data, etag = self.store.get_with_etag(self.key)
            current = LeaseRecord.from_json(data, where=self.uri)
        except (MemWalError, OSError):
            return False
        if current.token != self.token or current.holder != self.holder or current.cancel is None:
            return False
        if self._record is not None and self._record.cancel == current.cancel:
            return False  # no new request: something else changed it
        self._record, self._etag = current, etag
        self._cancel_requested(current.cancel, False)
        return True

    def _cancel_requested(self, request: dict[str, Any], safe_to_stop: bool) -> None:
        """Note an operator's cancel request; stop the job now if nothing is half-done."""
        cancel.noticed(self.store.root, request)
        if safe_to_stop:
            raise CancelledError(f"{self.kind} on {self.store.root}: {cancel.describe(request)}")

    def _beat(self) -> float | None:
        """One heartbeat: renew, and say when the next is due (None: stop, the lease is gone).

        A store that cannot be reached is retried sooner, until the lease would have expired:
        past that moment another job may rightly have taken it, so the lease is fenced.
        """
        with self._lock:
            if not self._held or self._record is None:
                return None
            now = self.clock()
            if not self._record.live(now):
                self._fence(f"it expired at {fmt_time(self._record.expires_at)} before the heartbeat could renew "
                            "it (the process stalled, or could not reach the store)")
                return None
            try:
                self._renew(now)
            except LeaseLostError as exc:
                # a lease object gone (its table removed, as a rule) is said by whoever holds it,
                # at its next check: the job's exit 3, or the follower's line that the table is gone
                self._fence(self._takeover_reason(str(exc)), quiet=str(exc).endswith(OBJECT_GONE))
                return None
            except (MemWalError, OSError) as exc:
                remaining = self._record.expires_at - now
                log.warning("could not renew the %s lease (token %d), %.0fs before it expires: %s", self.kind,
                            self.token, remaining, exc)
                return now + min(renewal_interval(self.ttl_seconds), max(remaining / 2, 0.0))
            except Exception as exc:  # noqa: BLE001 - a renewal we do not understand is a lost lease
                self._fence(f"its renewal failed: {exc}")
                return None
            return now + renewal_interval(self.ttl_seconds)

    def _takeover_reason(self, fallback: str) -> str:
        """Who holds the lease now if another holder took it (best effort), else ``fallback``."""
        try:
            current = LeaseRecord.from_json(self.store.get(self.key), where=self.uri)
        except (MemWalError, OSError):
            return fallback
        if current.token == self.token and current.holder == self.holder:
            return fallback
        return f"taken over by {current.holder} with token {current.token}"
