"""What an action is, and the leases a run holds.

An :class:`Action` is a name, an options class, a pure ``plan``, an ``execute`` that runs
exactly that plan on an engine, the leases it takes and the verdicts that decide whether a
run is a failure. It is generic in its options, plan, result and engine (the action's
engine ``Protocol``), e.g. ``Action[MergeOptions, MergePlan, MergeResult, MergeEngine]``, so
its caller gets the action's own types. The actions are declared in :mod:`memwal.actions.registry`;
:mod:`memwal.actions.run` runs them.

The verdict is one function per action: the result's ``problems()`` method (a run), the
plan's (``plan_problems``, a dry run), and ``document_problems`` for a document that
arrives from another process (a spark-submit result file), each built on the same function.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from memwal.actions.engines import engine_for
from memwal.actions.options import JobOptions
from memwal.core.document import Document

if TYPE_CHECKING:
    from memwal.lease import Lease
    from memwal.table import Table


class Verdict(Protocol):
    """A result: its document, and what makes it a failure (exit code 1)."""

    def to_dict(self) -> dict[str, Any]: ...

    def problems(self) -> list[str]: ...


OptionsT = TypeVar("OptionsT", bound=JobOptions)
PlanT = TypeVar("PlanT", bound=Document)
ResultT = TypeVar("ResultT", bound=Verdict)
EngineT = TypeVar("EngineT")

#: A document's verdict: one line per thing that makes it a failure.
DocumentVerdict = Callable[[Mapping[str, Any]], list[str]]


class Leases(Protocol):
    """Takes an action's leases: ``(table, options, run_id=)`` -> the held leases."""

    def __call__(self, table: Table, options: JobOptions, *,
                 run_id: str | None = None) -> contextlib.AbstractContextManager[HeldLeases]: ...


def no_problems(_: object) -> list[str]:
    """The verdict of an action whose failures raise: nothing in a plan or result fails it."""
    return []


@dataclass(frozen=True)
class Action(Generic[OptionsT, PlanT, ResultT, EngineT]):
    """One maintenance action: what it takes, how it plans and executes, what it locks."""

    name: str
    help: str
    options: type[OptionsT]
    plan: Callable[[Table, OptionsT], PlanT]
    execute: Callable[[Table, PlanT, OptionsT, EngineT, Lease], ResultT]
    local: Callable[[], EngineT]  # the in-process engine (other engines plug in: memwal.actions.engines)
    leases: Leases
    #: The verdict of a result's (or a dry run's) document read back from another process.
    document_problems: DocumentVerdict = no_problems
    #: The verdict of a dry run, on its plan (a run's is its result's ``problems()``).
    plan_problems: Callable[[PlanT], list[str]] = no_problems
    #: What a dry run shows, when not the plan itself (gc shows the result it would give).
    preview: Callable[[Table, PlanT], Document] | None = None
    #: Whether a plan has anything to execute. Given, an engine that boots (a Spark session)
    #: starts after planning and only for a plan with work: a merge with nothing to merge
    #: boots no JVM. Without it the engine boots while the action plans (a long plan hides it).
    has_work: Callable[[PlanT], bool] | None = None

    def engine(self, name: str) -> EngineT:
        """The engine object by name: ``local``, or one an installed package plugs in."""
        engine: EngineT = engine_for(self.name, name, self.local)
        return engine


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


class HeldLeases(list["Lease"]):
    """The leases a job holds, its own kind first."""

    @property
    def primary(self) -> Lease:
        return self[0]

    def check(self) -> None:
        """LeaseLostError (exit 3) if any of them was lost."""
        for lease in self:
            lease.check()
