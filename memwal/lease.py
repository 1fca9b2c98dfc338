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

A holder is named ``host:pid:random``. A live lease whose holder is on this host and
whose process is gone (``os.kill(pid, 0)`` says no such process) is taken over at once
instead of blocking every run of its kind for the rest of the TTL: a job killed with
SIGKILL never released it. A holder on another host is never presumed dead.

A lease object whose timestamps are not finite, negative, or beyond the year 9999 (e.g.
``expires_at`` 1e18, ``inf``, ``nan``) is treated as corrupt, not as expired: no job
wrote it, so guessing could hand one lease to two holders. It is refused with
BadInputError (exit code 2) naming the object; ``memwal lease TABLE --break KIND --yes``
clears it. A lease path that is a folder is refused the same way, at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from types import TracebackType

from memwal.errors import (
    BadInputError,
    ConflictError,
    LeaseHeldError,
    LeaseLostError,
    MemWalError,
    NotFoundError,
    PreconditionFailedError,
)
from memwal.storage import Store
from memwal.validate import lease_ttl as _check_ttl

log = logging.getLogger(__name__)

#: Folder (relative to the table root) holding the lease objects.
LEASE_PREFIX = "_mem_wal/_jobs/leases/"

_KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

#: How many read/CAS rounds acquire() tries before calling the lease contended.
_ACQUIRE_ROUNDS = 8

#: Default lease TTL (seconds): the CLI's ``--lease-ttl`` default.
DEFAULT_TTL_SECONDS = 300.0

#: Latest timestamp a lease record may hold (9999-12-31T23:59:59Z): past it, datetime
#: cannot even format it, and no job ever wrote one.
MAX_TIMESTAMP = 253402300799.0


def lease_key(kind: str) -> str:
    """Key of the lease object of a job kind (validated: it becomes part of a path)."""
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise BadInputError(f"invalid job kind {kind!r} for a lease")
    return f"{LEASE_PREFIX}{kind}.json"


def default_holder() -> str:
    """``host:pid:random``: unique per process and per Lease, readable in error messages."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _fmt_time(ts: float) -> str:
    """A UTC timestamp for messages (expiries must be readable by an operator).

    Never raises: a message about a strange lease must not fail on its strange value.
    """
    try:
        return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return repr(ts)


@contextlib.contextmanager
def _store_errors(uri: str) -> Iterator[None]:
    """A store failure on a lease object (permissions, a full disk, a folder in the way)
    becomes one MemWalError naming the object, never a raw OSError."""
    try:
        yield
    except OSError as exc:
        raise MemWalError(f"cannot read or write lease object {uri}: {exc.strerror or exc}") from exc


def parse_holder(holder: str) -> tuple[str, int] | None:
    """``(host, pid)`` of a ``host:pid:random`` holder name, None for any other name."""
    host, sep, rest = holder.partition(":")
    pid, sep2, _ = rest.partition(":")
    if not (sep and sep2 and host and pid.isdigit()):
        return None
    return host, int(pid)


def holder_is_dead(holder: str) -> bool:
    """Whether a holder is a process of THIS host that no longer exists.

    Only a definite "no such process" counts: a process of another user (PermissionError)
    is alive, another host's process is unknowable, and our own pid is alive by definition.
    """
    parsed = parse_holder(holder)
    if parsed is None or parsed[0] != socket.gethostname():
        return False
    pid = parsed[1]
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return False


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
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise BadInputError(f"corrupt lease object {where}: {exc}") from exc
        if isinstance(obj["token"], bool) or rec.token < 0:
            raise BadInputError(f"corrupt lease object {where}: bad token {obj['token']!r}")
        for name in ("acquired_at", "expires_at"):
            value = getattr(rec, name)
            if not (math.isfinite(value) and 0 <= value <= MAX_TIMESTAMP):
                raise BadInputError(
                    f"corrupt lease object {where}: {name} {obj[name]!r} is not a sane timestamp "
                    f"(clear it with: memwal lease TABLE --break {rec.kind} --yes)"
                )
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
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Describe the lease; nothing is read or written until :meth:`acquire`."""
        ttl_seconds = _check_ttl("lease TTL", ttl_seconds)
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
        with _store_errors(self.uri):
            return self._acquire()

    def _acquire(self) -> Lease:
        """acquire() without the translation of store errors: one read-then-CAS round, redone
        (by the project's one retry primitive) whenever a concurrent writer won the CAS."""
        from memwal.retry import after_conflict

        try:
            return after_conflict(lambda _n: self._acquire_round(), what=f"{self.kind} lease on {self.store.root}",
                                  attempts=_ACQUIRE_ROUNDS, base_seconds=0.01, max_seconds=0.2)
        except ConflictError:
            raise LeaseHeldError(
                f"{self.kind} lease on {self.store.root} is contended: "
                f"gave up after {_ACQUIRE_ROUNDS} conditional-write races"
            ) from None

    def _acquire_round(self) -> Lease:
        """Create the lease, or take over an expired, released or dead holder's one; a lost
        conditional write raises PreconditionFailedError (the retry reads again)."""
        now = self.clock()
        try:
            data, etag = self.store.get_with_etag(self.key)
        except NotFoundError:
            self._refuse_folder()
            rec = LeaseRecord(self.kind, self.holder, 1, now, now + self.ttl_seconds)
            try:
                new_etag = self.store.put_if_absent(self.key, rec.to_json())
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
                f"(token {current.token}) until {_fmt_time(current.expires_at)} "
                f"({current.expires_at - now:.0f}s from now)"
            )
        # Expired, released, or our own holder name: a new token fences any
        # earlier incarnation of the same holder.
        rec = LeaseRecord(self.kind, self.holder, current.token + 1, now, now + self.ttl_seconds)
        new_etag = self.store.put_if_match(self.key, rec.to_json(), etag)  # lost race: retried
        if dead:
            log.warning(
                "took over the %s lease of dead holder %s (token %d, would have expired %s): "
                "its process is gone from this host",
                self.kind,
                current.holder,
                current.token,
                _fmt_time(current.expires_at),
            )
        elif current.live(now):
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
            with _store_errors(self.uri):
                data = self.store.get(self.key)
        except NotFoundError:
            self._refuse_folder()
            return None
        return LeaseRecord.from_json(data, where=self.uri)

    def _took(self, rec: LeaseRecord, etag: str) -> None:
        """Remember a won acquisition (record, ETag for the next CAS, token)."""
        self._record, self._etag, self.token, self._held = rec, etag, rec.token, True
        log.info(
            "acquired %s lease on %s: holder %s, token %d, ttl %gs, expires %s",
            self.kind,
            self.store.root,
            rec.holder,
            rec.token,
            self.ttl_seconds,
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
        with _store_errors(self.uri):
            self._check()

    def _check(self) -> None:
        """check() without the translation of store errors."""
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
            with _store_errors(self.uri):
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
        waited = False
        while True:
            try:
                return self.acquire()
            except LeaseHeldError as exc:
                if self.clock() + poll_seconds > deadline:
                    raise LeaseHeldError(f"{exc} (waited {timeout_seconds:.0f}s for it)") from None
                if not waited:  # say why the job is not starting (once), not just stall
                    log.info("waiting up to %.0fs: %s", timeout_seconds, exc)
                    waited = True
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
        except (MemWalError, OSError) as exc:
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


# -- operator view: list and break ------------------------------------------------------

#: States of a stored lease, as ``memwal lease`` reports them.
LIVE, EXPIRED, RELEASED, DEAD_HOLDER, CORRUPT = "live", "expired", "released", "dead-holder", "corrupt"


@dataclass
class LeaseInfo:
    """One stored lease as an operator sees it (``memwal lease TABLE --json``)."""

    kind: str
    uri: str
    state: str
    holder: str | None = None
    token: int | None = None
    acquired_at: float | None = None
    expires_at: float | None = None
    expires: str | None = None
    problem: str | None = None

    def to_dict(self) -> dict:
        """The JSON form (all fields)."""
        return asdict(self)


def lease_state(rec: LeaseRecord, now: float) -> str:
    """live, expired, released (expiry 0) or dead-holder (live, but its local process is gone)."""
    if rec.expires_at == 0:
        return RELEASED
    if not rec.live(now):
        return EXPIRED
    return DEAD_HOLDER if holder_is_dead(rec.holder) else LIVE


def describe_lease(store: Store, kind: str, now: float | None = None) -> LeaseInfo | None:
    """The stored lease of one kind (None if there is none); a corrupt one is reported, not raised."""
    now = time.time() if now is None else now
    lease = Lease(store, kind)
    try:
        rec = lease.inspect()
    except BadInputError as exc:
        return LeaseInfo(kind=kind, uri=lease.uri, state=CORRUPT, problem=str(exc))
    if rec is None:
        return None
    return LeaseInfo(
        kind=kind,
        uri=lease.uri,
        state=lease_state(rec, now),
        holder=rec.holder,
        token=rec.token,
        acquired_at=rec.acquired_at,
        expires_at=rec.expires_at,
        expires=_fmt_time(rec.expires_at) if rec.expires_at else None,
    )


def list_leases(store: Store, now: float | None = None) -> list[LeaseInfo]:
    """Every lease stored on a table (objects, and folders squatting a lease path), by kind."""
    kinds = {o.key.rsplit("/", 1)[-1][: -len(".json")] for o in store.list(LEASE_PREFIX, recursive=False)
             if o.key.endswith(".json")}
    kinds |= {d[: -len(".json")] for d in store.list_dirs(LEASE_PREFIX) if d.endswith(".json")}
    out = []
    for kind in sorted(kinds):
        if not _KIND_RE.match(kind):
            continue  # not ours: no job can take a lease of that name
        info = describe_lease(store, kind, now)
        if info is not None:
            out.append(info)
    return out


def break_lease(store: Store, kind: str, *, breaker: str | None = None) -> LeaseRecord:
    """Clear a stuck lease: CAS-write it released (expiry 0) keeping its token.

    The next acquisition then takes token+1, so tokens stay monotonic and the old
    holder, if it still runs, finds its lease expired at its next check and stops. A
    corrupt record's token is kept when readable; otherwise the token becomes the current
    time in milliseconds, above any token real acquisitions (one per job run) reach.
    """
    lease = Lease(store, kind)
    try:
        data, etag = store.get_with_etag(lease.key)
    except NotFoundError:
        lease._refuse_folder()
        raise BadInputError(f"no {kind} lease on {store.root} ({lease.uri} does not exist)") from None
    try:
        old = LeaseRecord.from_json(data, where=lease.uri)
        holder, token, acquired = old.holder, old.token, old.acquired_at
    except BadInputError:
        holder, token, acquired = _salvage(data)
    rec = LeaseRecord(kind, holder, token, acquired, 0.0)
    try:
        store.put_if_match(lease.key, rec.to_json(), etag)
    except PreconditionFailedError:
        raise LeaseHeldError(
            f"{kind} lease on {store.root} changed while breaking it: look again with memwal lease"
        ) from None
    log.warning(
        "broke the %s lease on %s (holder %s, token %d) by %s", kind, store.root, holder, token,
        breaker or default_holder(),
    )
    return rec


def _salvage(data: bytes) -> tuple[str, int, float]:
    """Holder, token and acquisition time of a corrupt record, as far as they can be read."""
    try:
        obj = json.loads(data)
    except ValueError:
        obj = {}
    obj = obj if isinstance(obj, dict) else {}
    holder = str(obj.get("holder", "unknown"))
    token = obj.get("token")
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        token = int(time.time() * 1000)
    acquired = obj.get("acquired_at")
    ok = isinstance(acquired, int | float) and not isinstance(acquired, bool) and math.isfinite(acquired)
    return holder, token, float(acquired) if ok and 0 <= acquired <= MAX_TIMESTAMP else 0.0
