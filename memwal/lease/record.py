"""The lease object's content and what can be told about its holder.

A lease object is small JSON at ``_mem_wal/_jobs/leases/<kind>.json``. Besides the fencing
``token`` and the expiry it names who holds it (``holder`` = ``host:pid:random``, plus
``host``, ``pid`` and the job's ``run_id``) and when the holder last proved it was alive
(``renewed_at``): what an operator needs to find a stuck job (``memwal lease``).

A record whose timestamps are not finite, negative, or beyond the year 9999 (``expires_at``
1e18, ``inf``, ``nan``) is corrupt, not expired: no job wrote it, so guessing could hand one
lease to two holders. It is refused with BadInputError (exit code 2) naming the object;
``memwal lease TABLE --break KIND --yes`` clears it.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from memwal.errors import BadInputError

#: Folder (relative to the table root) holding the lease objects.
LEASE_PREFIX = "_mem_wal/_jobs/leases/"

KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")

#: Latest timestamp a lease record may hold (9999-12-31T23:59:59Z): past it, datetime
#: cannot even format it, and no job ever wrote one.
MAX_TIMESTAMP = 253402300799.0


def lease_key(kind: str) -> str:
    """Key of the lease object of a job kind (validated: it becomes part of a path)."""
    if not isinstance(kind, str) or not KIND_RE.match(kind):
        raise BadInputError(f"invalid job kind {kind!r} for a lease")
    return f"{LEASE_PREFIX}{kind}.json"


def default_holder() -> str:
    """``host:pid:random``: unique per process and per Lease, readable in error messages."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def fmt_time(ts: float) -> str:
    """A UTC timestamp for messages (expiries must be readable by an operator).

    Never raises: a message about a strange lease must not fail on its strange value.
    """
    try:
        return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return repr(ts)


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


def _sane_time(value: float) -> bool:
    return math.isfinite(value) and 0 <= value <= MAX_TIMESTAMP


def _cancel_of(value: object) -> dict[str, Any] | None:
    """A cancel request as stored (who, why, when: text clipped, a sane time), or None; a
    malformed one is still a request (the operator asked), with what could be read of it."""
    if value is None:
        return None
    doc = value if isinstance(value, dict) else {}
    at = doc.get("at")
    when = float(at) if isinstance(at, int | float) and not isinstance(at, bool) and _sane_time(float(at)) else 0.0
    return {"by": str(doc.get("by") or "?")[:200], "reason": str(doc.get("reason") or "")[:500], "at": when}


@dataclass
class LeaseRecord:
    """The lease object's content."""

    kind: str
    holder: str
    token: int
    acquired_at: float
    expires_at: float
    #: When the holder last renewed it (its heartbeat): acquisition time until the first renewal.
    renewed_at: float | None = None
    host: str | None = None
    pid: int | None = None
    run_id: str | None = None
    #: An operator's request that the holder stop at its next safe point: ``{by, reason, at}``
    #: (:mod:`memwal.lease.cancel`); renewals carry it, a release clears it.
    cancel: dict[str, Any] | None = None

    def encode(self) -> bytes:
        """Serialise (sorted keys, so equal records give equal bytes)."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, *, where: str = "lease") -> LeaseRecord:
        """Parse a lease object; BadInputError if it is not one (never guess a token).

        Records written before heartbeats existed have no ``renewed_at``/``host``/``pid``/
        ``run_id``: they are read from the holder name and the acquisition time.
        """
        try:
            obj = json.loads(data)
            rec = cls(
                kind=str(obj["kind"]),
                holder=str(obj["holder"]),
                token=int(obj["token"]),
                acquired_at=float(obj["acquired_at"]),
                expires_at=float(obj["expires_at"]),
                renewed_at=float(obj["renewed_at"]) if obj.get("renewed_at") is not None else None,
                host=str(obj["host"]) if obj.get("host") is not None else None,
                pid=int(obj["pid"]) if obj.get("pid") is not None else None,
                run_id=str(obj["run_id"]) if obj.get("run_id") is not None else None,
                cancel=_cancel_of(obj.get("cancel")),
            )
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise BadInputError(f"corrupt lease object {where}: {exc}") from exc
        if isinstance(obj["token"], bool) or rec.token < 0:
            raise BadInputError(f"corrupt lease object {where}: bad token {obj['token']!r}")
        for name in ("acquired_at", "expires_at", "renewed_at"):
            value = getattr(rec, name)
            if value is not None and not _sane_time(value):
                raise BadInputError(
                    f"corrupt lease object {where}: {name} {obj[name]!r} is not a sane timestamp "
                    f"(clear it with: memwal lease TABLE --break {rec.kind} --yes)"
                )
        parsed = parse_holder(rec.holder)
        if parsed is not None:
            rec.host = rec.host or parsed[0]
            rec.pid = rec.pid if rec.pid is not None else parsed[1]
        if rec.renewed_at is None and rec.expires_at:
            rec.renewed_at = rec.acquired_at
        return rec

    def live(self, now: float) -> bool:
        """Whether the lease is still in force at ``now``."""
        return self.expires_at > now
