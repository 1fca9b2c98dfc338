"""Each shard's writer as GC judges it, and the operator's word that one was closed (``memwal writers``).

GC keeps what a live writer's view needs (``writer-live``) until the writer reopens or has been
quiet for the writer idle period, because a closed writer looks like a quiet one on storage
(:mod:`memwal.table.writer`). :func:`say_closed` records that a shard's writer, as it is now, was
closed (:mod:`memwal.table.writers_closed`), so that GC drains what it kept once its other gates pass.
"""

from __future__ import annotations

import getpass
import socket

from memwal.core import clock as clocks
from memwal.core.defaults import DEFAULT_WRITER_IDLE_SECONDS
from memwal.errors import BadInputError
from memwal.table import Table
from memwal.table.listing import list_mem_wal
from memwal.table.shards import read_listed_manifests
from memwal.table.writer import WriterView, shard_writers
from memwal.table.writers_closed import ClosedWriter, closed_writer, record_closed


def writer_views(table: Table, *, idle_seconds: float = DEFAULT_WRITER_IDLE_SECONDS) -> dict[str, WriterView]:
    """Per shard, its writer as GC's plan sees it with ``idle_seconds`` (the same listing, walk and record)."""
    now = clocks.current()()
    listing = list_mem_wal(table.store, lazy=True)
    shards = read_listed_manifests(table.store, listing)
    _, writers = shard_writers(table.store, listing, shards.states, now=now, idle_seconds=idle_seconds)
    return dict(sorted(writers.items()))


def closing(table: Table, shard_ids: list[str]) -> list[ClosedWriter]:
    """The records :func:`say_closed` would write (nothing written). BadInputError, naming the
    shard, for a shard the table does not have or that no writer ever wrote."""
    views = writer_views(table)
    by = f"{_user()}@{socket.gethostname()}"
    out = []
    for sid in dict.fromkeys(shard_ids):
        view = views.get(sid)
        if view is None:
            known = ", ".join(views) or "none"
            raise BadInputError(f"{table.uri}: no shard {sid!r} (its shards: {known})")
        if view.last_activity is None:
            raise BadInputError(f"{table.uri}: shard {sid}: no write of a writer is on storage: nothing to say closed")
        out.append(closed_writer(sid, view.epoch, view.last_activity, by))
    return out


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in this process's environment
        return "unknown"


def say_closed(table: Table, records: list[ClosedWriter]) -> None:
    """Record ``records`` (from :func:`closing`) with the table."""
    record_closed(table.store, records)


__all__ = ["closing", "say_closed", "writer_views"]
