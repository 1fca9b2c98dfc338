"""One digest of a table's rows that every client's process computes alike (stdlib only: it
runs in lance-context's and LanceDB's own virtual environments too).

The steady-state bench (``bench/read/steady.py``) checks each read of a client against the model of
what was written without shipping the rows back: the sum, modulo 2**64, of a 64-bit hash of
each row's key and value. Order does not matter, and the model updates it per write.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

MASK = (1 << 64) - 1


def row_hash(key: object, value: object) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{value}".encode(), digest_size=8).digest(), "little")


def rows_digest(pairs: Iterable[tuple[object, object]]) -> int:
    """The digest of (key, value) pairs."""
    total = 0
    for k, v in pairs:
        total = (total + row_hash(k, v)) & MASK
    return total
