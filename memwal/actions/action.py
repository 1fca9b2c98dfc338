"""What an action is, and the leases a run holds.

An :class:`Action` is a name, an options class, a pure ``plan``, an ``execute`` that runs
exactly that plan, the leases it takes and the one function (``problems``) that decides
whether its result is a failure. The actions themselves are declared in
:mod:`memwal.actions.registry`; :mod:`memwal.actions.run` runs them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memwal.actions.engines import engine_for
from memwal.actions.options import JobOptions

if TYPE_CHECKING:
    from memwal.table import Table


@dataclass(frozen=True)
class Action:
    """One maintenance action: what it takes, how it plans and executes, what it locks."""

    name: str
    help: str
    options: type[JobOptions]
    plan: Callable[[Table, Any], Any]  # (table, options) -> plan (a Document)
    execute: Callable[[Table, Any, Any, Any, Any], Any]  # (table, plan, options, engine, lease) -> result
    local: Callable[[], Any]  # the in-process engine (other engines plug in: memwal.actions.engines)
    leases: Callable[..., contextlib.AbstractContextManager]  # (table, options, run_id=) -> held leases
    problems: Callable[[dict], list[str]]  # the one place deciding that a result is a failure
    #: What a dry run shows, when not the plan itself (gc shows the result it would give).
    preview: Callable[[Table, Any], Any] | None = None
    #: Whether a plan has anything to execute. Given, an engine that boots (a Spark session)
    #: starts after planning and only for a plan with work: a merge with nothing to merge
    #: boots no JVM. Without it the engine boots while the action plans (a long plan hides it).
    has_work: Callable[[Any], bool] | None = None

    def engine(self, name: str) -> Any:
        """The engine object by name: ``local``, or one an installed package plugs in."""
        return engine_for(self.name, name, self.local)


def lease_set(table: Table, options: JobOptions, *kinds: str, wait_for: tuple[str, ...] = (),
              run_id: str | None = None) -> contextlib.AbstractContextManager[HeldLeases]:
    """Take the leases ``kinds`` in order (each ``wait_for`` kind waiting up to the options'
    ``lease_wait`` for a live holder to finish), after checking every one of them first: a
    corrupt lease object or a folder in a lease's place fails the action here (exit 2) with
    nothing written.

    Each lease is renewed by its heartbeat while the job runs. The held leases come as a
    :class:`HeldLeases`: the run checks them all once more when the job is done, so a job
    that lost a lease on the way (taken over while it was frozen, or the store unreachable
    past the TTL) ends with LeaseLostError, exit 3, even if its last step needed no check.
    """
    from memwal.lease import Lease

    leases = [Lease(table.store, kind, ttl_seconds=options.lease_ttl, run_id=run_id) for kind in kinds]
    for lease in leases:
        lease.inspect()

    @contextlib.contextmanager
    def held() -> Iterator[HeldLeases]:
        with contextlib.ExitStack() as stack:
            for lease in leases:
                if lease.kind in wait_for:
                    lease.acquire_waiting(getattr(options, "lease_wait", 0.0))
                stack.enter_context(lease)
            yield HeldLeases(leases)

    return held()


class HeldLeases(list):
    """The leases a job holds, its own kind first."""

    @property
    def primary(self) -> Any:
        return self[0]

    def check(self) -> None:
        """LeaseLostError (exit 3) if any of them was lost."""
        for lease in self:
            lease.check()
