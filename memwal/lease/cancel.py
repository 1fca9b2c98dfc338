"""Cancelling a table's running work: asked through its live leases, honoured at safe points.

An operator (``memwal fleet cancel TABLE``) adds a cancel request, ``{by, reason, at}``, to
every *live* lease record of the table by compare-and-swap, keeping the holder, token and
expiry: the lease is still the holder's. The holder meets the request where it re-reads its
lease anyway (:meth:`memwal.lease.Lease.check`, no extra request):

- at a check where nothing is half-done (before a job reads or commits anything, before a
  compaction commits what its tasks wrote, before GC's marker), it raises
  :class:`~memwal.errors.CancelledError`; the job's ``with`` releases its leases as on any
  exit (the release writes a record without the request);
- at any other check (between two passes of one merge) it goes on to its next safe point,
  and the request is noted here, in this process: the cycle runner (:mod:`memwal.cycle`)
  starts none of the table's later jobs.

A lease that is not live has no running work to cancel: nothing is written for it.
"""

from __future__ import annotations

import threading
from typing import Any

from memwal.core import clock as clocks
from memwal.errors import PreconditionFailedError
from memwal.lease.record import LEASE_PREFIX, LeaseRecord, lease_key
from memwal.store import Store

_noticed: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def request_cancel(store: Store, by: str, reason: str, *, now: float | None = None) -> list[str]:
    """Ask every live job of the table at ``store`` to stop; the job kinds asked."""
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
                asked.append(kind)
                break
            except PreconditionFailedError:
                continue
    return sorted(asked)


def noticed(root: str, request: dict[str, Any]) -> None:
    """A holder of a lease on the table at ``root`` saw a cancel request."""
    with _lock:
        _noticed[root] = request


def cancelled(root: str, since: float) -> dict[str, Any] | None:
    """The cancel request a holder of this process saw for the table at ``root``, made at or
    after ``since`` (the start of the caller's work), or None."""
    with _lock:
        request = _noticed.get(root)
    return request if request is not None and float(request.get("at") or 0.0) >= since else None


def describe(request: dict[str, Any]) -> str:
    reason = request.get("reason") or "no reason given"
    return f"cancelled by {request.get('by') or '?'}: {reason}"


__all__ = ["cancelled", "describe", "noticed", "request_cancel"]
