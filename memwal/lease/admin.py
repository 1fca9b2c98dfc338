"""The operator's view of leases: list them, describe one, break a stuck one.

``memwal lease TABLE`` shows every lease (live, expired, released, held by a dead local
process, or corrupt) with its holder, host, pid, run id and last renewal, so a stuck job
can be found; ``--break KIND --yes`` clears one.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

from memwal.core import clock as clocks
from memwal.core.document import Document
from memwal.errors import BadInputError, LeaseHeldError, NotFoundError, PreconditionFailedError
from memwal.lease.lease import Lease
from memwal.lease.record import (
    KIND_RE,
    LEASE_PREFIX,
    MAX_TIMESTAMP,
    LeaseRecord,
    default_holder,
    fmt_time,
    holder_is_dead,
)
from memwal.store import Store

log = logging.getLogger("memwal.lease")

#: States of a stored lease, as ``memwal lease`` reports them.
LIVE, EXPIRED, RELEASED, DEAD_HOLDER, CORRUPT = "live", "expired", "released", "dead-holder", "corrupt"


@dataclass
class LeaseInfo(Document):
    """One stored lease as an operator sees it (``memwal lease TABLE --json``)."""

    kind: str
    uri: str
    state: str
    holder: str | None = None
    host: str | None = None
    pid: int | None = None
    run_id: str | None = None
    token: int | None = None
    acquired_at: float | None = None
    renewed_at: float | None = None
    expires_at: float | None = None
    expires: str | None = None
    renewed: str | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
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
    now = clocks.current()() if now is None else now
    lease = Lease(store, kind, heartbeat=False)
    try:
        rec = lease.inspect()
    except BadInputError as exc:
        return LeaseInfo(kind=kind, uri=lease.uri, state=CORRUPT, problem=str(exc))
    if rec is None:
        return None
    return LeaseInfo(kind=kind, uri=lease.uri, state=lease_state(rec, now), holder=rec.holder, host=rec.host,
                     pid=rec.pid, run_id=rec.run_id, token=rec.token, acquired_at=rec.acquired_at,
                     renewed_at=rec.renewed_at, expires_at=rec.expires_at,
                     expires=fmt_time(rec.expires_at) if rec.expires_at else None,
                     renewed=fmt_time(rec.renewed_at) if rec.renewed_at else None)


def list_leases(store: Store, now: float | None = None) -> list[LeaseInfo]:
    """Every lease stored on a table (objects, and folders squatting a lease path), by kind."""
    kinds = {o.key.rsplit("/", 1)[-1][: -len(".json")] for o in store.list(LEASE_PREFIX, recursive=False)
             if o.key.endswith(".json")}
    kinds |= {d[: -len(".json")] for d in store.list_dirs(LEASE_PREFIX) if d.endswith(".json")}
    out = []
    for kind in sorted(kinds):
        if not KIND_RE.match(kind):
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
    lease = Lease(store, kind, heartbeat=False)
    try:
        data, etag = store.get_with_etag(lease.key)
    except NotFoundError:
        lease._refuse_folder()
        raise BadInputError(f"no {kind} lease on {store.root} ({lease.uri} does not exist)") from None
    try:
        old = LeaseRecord.from_json(data, where=lease.uri)
        rec = LeaseRecord(kind, old.holder, old.token, old.acquired_at, 0.0, renewed_at=old.renewed_at,
                          host=old.host, pid=old.pid, run_id=old.run_id)
    except BadInputError:
        rec = LeaseRecord(kind, *_salvage(data), 0.0)
    holder, token = rec.holder, rec.token
    try:
        store.put_if_match(lease.key, rec.encode(), etag)
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
        token = int(clocks.current()() * 1000)
    acquired = obj.get("acquired_at")
    if isinstance(acquired, bool) or not isinstance(acquired, int | float):
        return holder, token, 0.0
    return holder, token, float(acquired) if math.isfinite(acquired) and 0 <= acquired <= MAX_TIMESTAMP else 0.0
