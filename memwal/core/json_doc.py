"""The one JSON reader of documents that come from storage (the fleet's state, its cache).

Whoever can write the store can write these documents, and Python's ``json.loads`` trusts
them in three ways that a one-object attack turned fleet-wide (issue 56, M1 and M3):

* nesting: 200,000 ``[`` raise ``RecursionError``, which no reader caught;
* numbers: ``Infinity``, ``NaN`` and ``1e400`` become non-finite floats, and ``10**400``
  an integer no ``float()`` takes: formatting or comparing them fails far from the read;
* size: a document of small objects costs some 30 to 70 bytes of memory per value, so a
  200 MB file under a byte cap took a plan past 2.5 GB.

:func:`load_json` refuses a document with more than ``max_values`` values before it parses
it (an upper bound counted in one pass over the bytes: each value but the first follows a
``,``, ``:``, ``[`` or ``{``), turns ``RecursionError`` into a :class:`JsonDocError`, and reads
every non-finite number, and every number beyond :data:`MAX_INT`, as ``None``: a bad figure
becomes a missing one, for the reader to skip, rather than an error. Readers still check the
shape of what they use (a list where a mapping belongs is skipped with a warning, never fatal).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

#: Largest magnitude of a number read (a 64-bit signed integer); larger ones read as None.
MAX_INT = (1 << 63) - 1
#: Digits of the largest integer read (longer ones are never converted: a 4,300-digit
#: integer alone costs Python quadratic time).
_MAX_INT_DIGITS = len(str(MAX_INT))


class JsonDocError(ValueError):
    """A document refused: too many values, nested too deep, or not JSON."""


def value_count(data: bytes) -> int:
    """An upper bound on the values of the JSON document ``data`` (one pass, no parsing)."""
    return data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{") + 1


def _int(text: str) -> int | None:
    digits = text.lstrip("-")
    if len(digits) > _MAX_INT_DIGITS:
        return None
    value = int(text)
    return value if -MAX_INT <= value <= MAX_INT else None


def _float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) and abs(value) <= MAX_INT else None


def _constant(_name: str) -> None:
    return None  # NaN, Infinity, -Infinity


def load_json(data: bytes | str, *, max_values: int) -> Any:
    """The document ``data`` holds (see the module docstring); :class:`JsonDocError` when it
    has more than ``max_values`` values, nests deeper than Python's stack, or is not JSON."""
    raw = data.encode() if isinstance(data, str) else data
    count = value_count(raw)
    if count > max_values:
        raise JsonDocError(f"more than {max_values:,} values (up to {count:,}): not read")
    try:
        return json.loads(raw, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise JsonDocError("nested too deep to read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonDocError(f"not JSON ({exc})") from None


def finite(value: Any) -> float | None:
    """``value`` as a bounded finite number (a bool, a string, NaN, an infinity, or a number
    beyond :data:`MAX_INT`: None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not abs(value) <= MAX_INT:  # NaN compares false too
        return None
    return float(value)


def mapping_of(value: Any) -> Mapping[str, Any]:
    """``value`` when a document holds a mapping there (anything else: an empty one)."""
    return value if isinstance(value, Mapping) else {}


def list_of(value: Any) -> list[Any]:
    """``value`` when a document holds a list there (anything else: an empty one)."""
    return value if isinstance(value, list) else []


def mappings_of(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of the list a document holds there (anything else in it, or no list: left out)."""
    return [v for v in list_of(value) if isinstance(v, Mapping)]


__all__ = ["MAX_INT", "JsonDocError", "finite", "list_of", "load_json", "mapping_of", "mappings_of", "value_count"]
