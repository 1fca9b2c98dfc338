"""Leases: one live job per (table, job kind), fenced by tokens, renewed by a heartbeat.

- :mod:`memwal.lease.record`: the lease object's content, holders, keys;
- :mod:`memwal.lease.lease`: :class:`Lease` (acquire, check, heartbeat, release);
- :mod:`memwal.lease.heartbeat`: the renewing daemon thread (leases and managed checkpoints);
- :mod:`memwal.lease.admin`: what ``memwal lease`` lists and breaks.
"""

from memwal.lease.admin import (
    CORRUPT,
    DEAD_HOLDER,
    EXPIRED,
    LIVE,
    RELEASED,
    LeaseInfo,
    break_lease,
    describe_lease,
    lease_state,
    list_leases,
)
from memwal.lease.lease import DEFAULT_TTL_SECONDS, Lease
from memwal.lease.record import LEASE_PREFIX, LeaseRecord, default_holder, holder_is_dead, lease_key, parse_holder

__all__ = [
    "CORRUPT", "DEAD_HOLDER", "DEFAULT_TTL_SECONDS", "EXPIRED", "LEASE_PREFIX", "LIVE", "RELEASED", "Lease",
    "LeaseInfo", "LeaseRecord", "break_lease", "default_holder", "describe_lease", "holder_is_dead", "lease_key",
    "lease_state", "list_leases", "parse_holder",
]
