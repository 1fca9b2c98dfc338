"""Progress of a running job, for whoever displays it (the CLI's progress bars on a terminal).

A display subscribes with :func:`listening`; with no listener every call here is one list check,
so jobs run by the API, Spark or Airflow pay nothing. What a listener hears:

- ``planned(job, plan)``: the plan the job is about to execute (``memwal.actions.run``);
- ``shard_done(job, shard_id, generations=, wal_entries=)``: a batch of GC's deletions
  finished that many of a shard's generations, or WAL entries (GC tells it after each batch,
  whoever listens: a display never changes how GC batches its deletes);
- ``phase(job, name)``: the job reached one of its named steps (``before-read`` of ``merge``,
  ``after-delete`` of ``gc``...). A job tells it beside the step itself (:func:`phased` makes
  both one call), so a display never installs a test hook (:func:`memwal.core.steps.hooked`).

A merge commits every shard of its batch in one commit (its progress marker covers them all),
so its shards complete together; a display shows their batch and the phase the merge is in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

_Engine = TypeVar("_Engine")


class Listener(Protocol):
    def planned(self, job: str, plan: object) -> None: ...

    def shard_done(self, job: str, shard_id: str, *, generations: int = 0, wal_entries: int = 0) -> None: ...

    def phase(self, job: str, name: str) -> None: ...


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


def phase(job: str, name: str) -> None:
    for listener in list(_listeners):
        listener.phase(job, name)


def phased(job: str, step: Callable[[str], None]) -> Callable[[str], None]:
    """``step`` (a job's named steps, :func:`memwal.core.steps.scoped`), each also told as
    ``phase(job, name)`` once the step lets the job go on."""

    def step_and_phase(name: str) -> None:
        step(name)
        phase(job, name)

    return step_and_phase


def engine(job: str, inner: _Engine) -> _Engine:
    """The engine a job runs on: ``inner`` (a display listens; it never wraps or reshapes it)."""
    return inner
