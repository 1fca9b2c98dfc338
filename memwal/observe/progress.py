"""Progress of a running job, for whoever displays it (the CLI's progress bars on a terminal).

A display subscribes with :func:`listening`; with no listener every call here is one list check,
so jobs run by the API, Spark or Airflow pay nothing. What a listener hears:

- ``planned(job, plan)``: the plan the job is about to execute (``memwal.actions.run``);
- ``shard_done(job, shard_id, generations=, wal_entries=)``: GC finished deleting one shard's
  generations, or its WAL entries (the local engine deletes shard by shard while a display
  listens, see :class:`ShardByShard`; the Spark engine deletes in one distributed pass);
- the job's named steps (``merge.before-read``, ``gc.before-delete``...): through
  :func:`memwal.core.steps.hooked`, which the display installs itself.

A merge commits every shard of its batch in one commit (its progress marker covers them all),
so its shards complete together; a display shows their batch and the phase the merge is in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar, runtime_checkable

_TableIn = TypeVar("_TableIn", contravariant=True)
_LeaseIn = TypeVar("_LeaseIn", contravariant=True)
_Table = TypeVar("_Table")
_Lease = TypeVar("_Lease")
_Outcome = TypeVar("_Outcome")
_Engine = TypeVar("_Engine")


class Listener(Protocol):
    def planned(self, job: str, plan: object) -> None: ...

    def shard_done(self, job: str, shard_id: str, *, generations: int = 0, wal_entries: int = 0) -> None: ...


_listeners: list[Listener] = []


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def planned(job: str, plan: object) -> None:
    for listener in list(_listeners):
        listener.planned(job, plan)


def shard_done(job: str, shard_id: str, *, generations: int = 0, wal_entries: int = 0) -> None:
    for listener in list(_listeners):
        listener.shard_done(job, shard_id, generations=generations, wal_entries=wal_entries)


@runtime_checkable
class Deleter(Protocol[_TableIn, _LeaseIn, _Outcome]):
    """What GC asks of its engine (``memwal.gc.delete.LocalGcEngine``, the Spark one): typed by
    the table, lease and per-prefix outcome the engine works with."""

    @property
    def name(self) -> str: ...

    def delete_prefixes(self, table: _TableIn, prefixes: list[str], lease: _LeaseIn, /) -> list[_Outcome]: ...

    def delete_keys(self, table: _TableIn, keys: list[str], lease: _LeaseIn, /) -> list[str]: ...


def engine(job: str, inner: _Engine) -> _Engine | ShardByShard[object, object, object]:
    """The engine a job runs on: ``inner``, or for GC with a listener, :class:`ShardByShard`."""
    if not _listeners or job != "gc" or not isinstance(inner, Deleter):
        return inner
    return ShardByShard(inner)


def shard_of(key: str) -> str | None:
    """The shard a key of ``_mem_wal/<shard>/...`` belongs to (None for our own folders)."""
    parts = key.split("/")
    if len(parts) > 2 and parts[0] == "_mem_wal" and not parts[1].startswith("_"):
        return parts[1]
    return None


def _by_shard(keys: list[str]) -> dict[str | None, list[int]]:
    groups: dict[str | None, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(shard_of(key), []).append(i)
    return groups


class ShardByShard(Generic[_Table, _Lease, _Outcome]):
    """A GC engine that deletes one shard at a time and says so after each.

    Each call to the engine it wraps is the same call GC makes (same checks, same batches, a
    lease check before each batch), for one shard's keys instead of all of them, so a batch
    never spans two shards. The Spark engine is left whole (one distributed pass per kind of
    object), and its shards are reported when the pass ends.
    """

    def __init__(self, inner: Deleter[_Table, _Lease, _Outcome]) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def delete_prefixes(self, table: _Table, prefixes: list[str], lease: _Lease) -> list[_Outcome]:
        groups = _by_shard(prefixes)
        if self.name != "local":
            out = self.inner.delete_prefixes(table, prefixes, lease)
            for shard, idx in groups.items():
                if shard is not None:
                    shard_done("gc", shard, generations=len(idx))
            return out
        results: dict[int, _Outcome] = {}
        for shard, idx in groups.items():
            for i, outcome in zip(idx, self.inner.delete_prefixes(table, [prefixes[i] for i in idx], lease),
                                  strict=True):
                results[i] = outcome
            if shard is not None:
                shard_done("gc", shard, generations=len(idx))
        return [results[i] for i in range(len(prefixes))]

    def delete_keys(self, table: _Table, keys: list[str], lease: _Lease) -> list[str]:
        groups = _by_shard(keys)
        if self.name != "local":
            all_refused = self.inner.delete_keys(table, keys, lease)
            for shard, idx in groups.items():
                if shard is not None:
                    shard_done("gc", shard, wal_entries=len(idx))
            return all_refused
        refused: list[str] = []
        for shard, idx in groups.items():
            refused += list(self.inner.delete_keys(table, [keys[i] for i in idx], lease) or [])
            if shard is not None:
                shard_done("gc", shard, wal_entries=len(idx))
        return refused
