"""Shard writers said to be closed: what lets GC stop waiting for a writer storage cannot tell
from a quiet one (issue 84).

A writer that was closed leaves no trace a quiet one does not (:mod:`memwal.table.writer`), so GC
keeps what a live writer's view needs until the writer idle period passes (a day by default). Whoever
knows better, the operator (``memwal writers TABLE --closed SHARD --yes``) or memwal's own
:class:`memwal.writer.rotating.RotatingShardWriter` when it is closed, records it here, in
``_mem_wal/_jobs/writers-closed.json``: per shard, the writer's epoch and its last write as storage
showed them, when and by whom.

A record counts only for the writer it names, as it was: the same epoch, and no write since
(:meth:`ClosedWriter.covers`). A write after it (the writer was not closed after all), or a new
writer (a new epoch), makes it void by itself; nothing has to remove it. It is the operator's word,
kept where a person can read it (``memwal writers``, ``memwal status``), and it is what it says:
saying a live writer is closed lets GC drain what that writer's memory still lists, and the
writer's next list read then fails on a folder that is gone, as after the idle period.
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from memwal.core import clock as clocks
from memwal.core.json_doc import load_json
from memwal.errors import MemWalError, NotFoundError, PreconditionFailedError, TooLargeError
from memwal.store import Store
from memwal.table.naming import JOBS_DIR
from memwal.table.progress_digest import CACHE_MAX_BYTES, CACHE_MAX_VALUES, load_cache

log = logging.getLogger(__name__)

CLOSED_KEY = f"{JOBS_DIR}/writers-closed.json"
FORMAT = 1
#: Attempts at adding to the record when another party wrote it between our read and our put.
_PUT_ATTEMPTS = 8

_DECODED: OrderedDict[str, tuple[bytes, Any]] = OrderedDict()


@dataclass(frozen=True)
class ClosedWriter:
    """One shard's writer, said closed (see the module docstring)."""

    shard_id: str
    epoch: int
    #: The writer's last write as storage showed it when it was said closed (seconds since the epoch).
    last_write: float
    recorded_at: float
    #: Who said so: ``user@host`` of the command, or ``RotatingShardWriter``.
    by: str

    def covers(self, epoch: int, last_write: float | None) -> bool:
        """Whether the record is about this writer as it is now: the same epoch, nothing written since."""
        return epoch == self.epoch and last_write is not None and last_write <= self.last_write

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_closed(store: Store) -> dict[str, ClosedWriter]:
    """Per shard, its writer said closed (empty when none is, or the record is unusable: logged).
    A record that cannot be read counts as none: the writers count as live, GC's safe side."""
    return load_cache(store, CLOSED_KEY, _decode, {}, memo=_DECODED)


class ClosedRecords:
    """The record, read once and only when asked (:func:`memwal.table.writer.writer_view` asks of
    a live writer only: a table with no live writer reads nothing more)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._found: dict[str, ClosedWriter] | None = None

    def of(self, shard_id: str) -> Callable[[], ClosedWriter | None]:
        """What the record says of ``shard_id``'s writer, read when first called."""
        def ask() -> ClosedWriter | None:
            if self._found is None:
                self._found = load_closed(self.store)
            return self._found.get(shard_id)
        return ask


def record_closed(store: Store, writers: list[ClosedWriter]) -> None:
    """Add ``writers`` to the record, replacing what it said of their shards. An atomic put that
    fails when another party wrote the record since we read it (then read again): two operators
    saying so of two shards at once both count."""
    for _ in range(_PUT_ATTEMPTS):
        etag: str | None
        try:
            data, etag = store.get_with_etag(CLOSED_KEY, max_bytes=CACHE_MAX_BYTES)
        except NotFoundError:
            data, etag = b"", None
        except TooLargeError:  # unusable, as load_closed finds it: replaced
            data, etag = b"", _etag(store)
        try:
            known = _decode(load_json(data, max_values=CACHE_MAX_VALUES)) if data else {}
        except (ValueError, TypeError, RecursionError):  # malformed: replaced, as load_closed ignores it anyway
            known = {}
        merged = {**known, **{w.shard_id: w for w in writers}}
        body = json.dumps({"format": FORMAT, "writers": {s: w.to_dict() for s, w in sorted(merged.items())}},
                          separators=(",", ":")).encode()
        try:
            if etag is None:
                store.put_if_absent(CLOSED_KEY, body)
            else:
                store.put_if_match(CLOSED_KEY, body, etag)
            return
        except PreconditionFailedError:
            continue
    raise MemWalError(f"{store.uri_for(CLOSED_KEY)}: written by another party {_PUT_ATTEMPTS} times while we "
                      "added to it; run again")


def closed_writer(shard_id: str, epoch: int, last_write: float, by: str) -> ClosedWriter:
    """A record of ``shard_id``'s writer at ``epoch``, whose last write was at ``last_write``, said closed now."""
    return ClosedWriter(shard_id, epoch, last_write, clocks.current()(), by)


def _etag(store: Store) -> str | None:
    info = store.head(CLOSED_KEY)
    return None if info is None else info.etag


def _time(value: Any) -> float | None:
    """A finite number of seconds, or None."""
    return float(value) if type(value) in (int, float) and math.isfinite(value) else None


def _decode(doc: Any) -> dict[str, ClosedWriter]:
    """The records of a parsed document (untrusted JSON: an entry that is not exactly a record is left out)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("writers"), dict):
        raise ValueError("not a record of closed writers")
    out = {}
    for shard, w in doc["writers"].items():
        if not (isinstance(shard, str) and isinstance(w, dict) and w.get("shard_id") == shard):
            continue
        epoch, last, at, by = w.get("epoch"), _time(w.get("last_write")), _time(w.get("recorded_at")), w.get("by")
        if type(epoch) is int and epoch >= 0 and last is not None and at is not None and isinstance(by, str):
            out[shard] = ClosedWriter(shard, epoch, last, at, "".join(c for c in by[:200] if c.isprintable()))
    return out


__all__ = ["CLOSED_KEY", "ClosedRecords", "ClosedWriter", "closed_writer", "load_closed", "record_closed"]
