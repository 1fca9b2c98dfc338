"""Validation of user-supplied values, one function per kind of value.

The CLI's argparse converters and the Python API (``memwal.actions.run_action``) both
call these, so a value refused on the command line is refused the same way from Python,
and before anything is read or written. Every refusal is a :class:`BadInputError`
naming the option and saying what is wrong.

Why so strict: ``float("nan")`` compares false with everything, so ``nan < 0`` passes a
naive "not negative" check and a NaN grace period silently disables the reader grace
gate; ``inf`` or ``1e300`` seconds overflow datetime arithmetic deep inside a job.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import SupportsFloat, SupportsIndex, SupportsInt

from memwal.errors import BadInputError

#: Longest duration accepted anywhere (100 years): anything longer is a typo, and
#: larger values overflow timestamp arithmetic.
MAX_DURATION_SECONDS = 100 * 365.25 * 24 * 3600

#: Largest integer option (counts, rows, bytes): what a signed 64-bit field can hold.
MAX_INT = 2**63 - 1


#: What ``float()`` converts (anything else is not a number).
FLOATS = (str, bytes, bytearray, memoryview, SupportsFloat, SupportsIndex)
#: What ``int()`` converts.
INTS = (str, bytes, bytearray, SupportsInt, SupportsIndex)


def _number(name: str, value: object) -> float:
    """A finite float from ``value`` (text or number); bools and NaN/inf are refused."""
    if isinstance(value, bool):
        raise BadInputError(f"{name}: expected a number, got {value!r}")
    if not isinstance(value, FLOATS):
        raise BadInputError(f"{name}: {value!r} is not a number")
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(n):
        raise BadInputError(f"{name}: {value!r} is not a finite number")
    return n


def duration(name: str, value: object, *, allow_zero: bool = True) -> float:
    """Seconds (a number, its text, or a :class:`~datetime.timedelta`): finite, not negative
    (positive unless ``allow_zero``), at most 100 years."""
    n = _number(name, value.total_seconds() if isinstance(value, timedelta) else value)
    if n < 0 or (n == 0 and not allow_zero):
        raise BadInputError(f"{name}: {value!r} must be {'non-negative' if allow_zero else 'positive'}")
    if n > MAX_DURATION_SECONDS:
        raise BadInputError(f"{name}: {value!r} seconds is absurd (at most {MAX_DURATION_SECONDS:.0f}, 100 years)")
    return n


def fraction(name: str, value: object) -> float:
    """A fraction of rows: finite and in [0, 1]."""
    n = _number(name, value)
    if not 0.0 <= n <= 1.0:
        raise BadInputError(f"{name}: {value!r} must be between 0 and 1")
    return n


def positive_int(name: str, value: object) -> int:
    """A count: an integer from 1 to 2**63-1 (text like ``1e3`` or ``2.5`` is refused)."""
    if isinstance(value, bool) or isinstance(value, float):
        raise BadInputError(f"{name}: expected an integer, got {value!r}")
    if not isinstance(value, INTS):
        raise BadInputError(f"{name}: {value!r} is not an integer")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{name}: {value!r} is not an integer") from None
    if n <= 0:
        raise BadInputError(f"{name}: {value!r} must be positive")
    if n > MAX_INT:
        raise BadInputError(f"{name}: {value!r} is too large (at most {MAX_INT})")
    return n


#: What ``--expire-versions`` takes to keep every base-table version.
NEVER = "never"


def expiry(name: str, value: object) -> float | str:
    """A version-expiry age in seconds, or ``never`` (keep every version)."""
    if isinstance(value, str) and value.strip().lower() in (NEVER, "none"):
        return NEVER
    return duration(name, value)


def interval(name: str, value: object) -> float:
    """How often something recurs: a positive duration (every 0 seconds is a busy loop)."""
    return duration(name, value, allow_zero=False)


def lease_ttl(name: str, value: object) -> float:
    """A lease TTL: a positive duration (a zero TTL would expire at once)."""
    return duration(name, value, allow_zero=False)

