"""Running an action: validate, plan, and unless a dry run, take the leases and execute
exactly that plan, recorded in the table's history.

The Python API, the CLI, ``memwal backfill``, the Spark entry points and the Airflow
operators all call `run`, so none of them can drift, and whether a result is a
failure is decided in one place: the action's ``problems``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from memwal.actions import engines
from memwal.actions.action import Action, HeldLeases
from memwal.actions.options import JobOptions
from memwal.actions.policy import with_policy
from memwal.actions.registry import ACTIONS
from memwal.core import steps
from memwal.core.cycles import collector_paused
from memwal.core.document import Document
from memwal.errors import BadInputError, CancelledError, LeaseLostError, MemWalError, first_line
from memwal.observe import progress

if TYPE_CHECKING:
    from memwal.lease.cancel import Scope
    from memwal.table import Table

#: The type of a `JobResult`'s value: the action's plan (a dry run) or result.
V = TypeVar("V", bound=Document)


@dataclass(frozen=True)
class JobResult(Document, Generic[V]):
    """What a job method returns: its typed plan (a dry run) or result, and the verdict.

    Attributes:
        action: The job: ``"merge"``, ``"catchup"``, ``"compact"``, ``"snapshot"`` or ``"gc"``.
        dry_run: Whether this was a dry run (nothing written).
        value: The job's own object: for a dry run its plan (`MergePlan`, `CatchupPlan`,
            `CompactPlan`, `SnapshotPlan`; gc: the `GcResult` the run would give), else its result
            (`MergeResult`, `CatchupResult`, `CompactResult`, `SnapshotResult`, `GcResult`); each
            has ``to_dict()``, the CLI's document.
        run_id: The run's id in the table's history (``memwal history``); None for a dry run.
        problems: One line per thing that makes it a failure (the CLI's exit code 1): the result's
            ``problems()``, or for a dry run its plan's (a blocked shard, an unsafe path).
    """

    action: str
    dry_run: bool
    value: V
    run_id: str | None = None  # the run's id in the table's history (None for a dry run)
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Exactly the CLI's ``--json`` document (a run's names its ``run_id``: ``memwal history``)."""
        return self._document(self.value.to_dict())

    def summary_dict(self) -> dict[str, Any]:
        """The document as it travels (a cycle's outcome, the run history's figures): the value's
        ``summary_dict()`` where it has one (GC's names at most a hundred of what it kept, the
        rest counted), else :meth:`to_dict`."""
        summary = getattr(self.value, "summary_dict", None)
        return self._document(summary()) if callable(summary) else self.to_dict()

    def _document(self, doc: dict[str, Any]) -> dict[str, Any]:
        if self.run_id is not None:
            doc = {**doc, "run_id": self.run_id}
        return {"dry_run": True, **doc} if self.dry_run and "dry_run" not in doc else doc

    @property
    def ok(self) -> bool:
        """No problem: the CLI would exit 0."""
        return not self.problems


def action(name: str) -> Action[Any, Any, Any, Any]:
    if name not in ACTIONS:
        raise BadInputError(f"unknown job {name!r}: expected one of {', '.join(ACTIONS)}")
    return ACTIONS[name]


def new_run_id() -> str:
    """A run's id: on its leases (``memwal lease`` shows it) and in its history record."""
    return uuid.uuid4().hex[:16]


@collector_paused()
def run(name: str, table: Table, options: JobOptions, *, plan: Any = None) -> JobResult[Any]:
    """Plan, then (unless a dry run) take the leases and execute exactly that plan.

    ``plan``: the action's plan for ``table`` and ``options``, made by the caller just before
    (a follower plans the merge to learn whether a shard has work: it runs that plan, not a
    second one made a moment later).

    The engine starts what it needs (a Spark session boots in the background) once the
    table has opened, so bad input starts nothing; a dry run never starts an engine. An
    action that tells whether a plan has work (``Action.has_work``) starts it only after
    planning, for a plan with work; the others start it while they plan.

    The whole job runs with Python's cycle collector paused (:mod:`memwal.core.cycles`): a plan
    reads a table's state into objects, and at a table's age the collector's passes over them
    were some 30% of a whole GC.
    """
    act = action(name)
    options = with_policy(table, options)
    early = not options.dry_run and act.has_work is None
    if early:
        engines.prepare(options.engine)
    began = time.monotonic()
    plan = act.plan(table, options) if plan is None else plan
    planned_seconds = time.monotonic() - began
    steps.step(f"{name}.planned")
    if options.dry_run:
        shown = act.preview(table, plan) if act.preview else plan
        return JobResult(name, True, shown, problems=tuple(act.plan_problems(plan)))
    if not early and act.has_work is not None and act.has_work(plan):
        engines.prepare(options.engine)
    from memwal.history.run import recorded  # the store loads with the run, not with the option tables
    from memwal.inspect.status import lag_now  # lance too
    from memwal.lease import cancel

    progress.planned(name, plan)  # a display (the CLI on a terminal) shows what is coming
    engine = progress.engine(name, act.engine(options.engine))
    run_id = new_run_id()
    with act.leases(table, options, run_id=run_id) as leases:
        with recorded(table, name, run_id, getattr(engine, "name", options.engine), leases.primary.holder,
                      lag=lag_now, planned_seconds=planned_seconds) as ctx, \
                cancel.running(table.store.root, leases) as scope:
            steps.step(f"{name}.leased")  # holding its leases, its run recorded, nothing done yet
            try:
                value = act.execute(table, plan, options, engine, leases.primary)
            except CancelledError as exc:
                if not ctx.versions:
                    raise
                raise CancelledError(f"{exc} (before it stopped it committed {_versions(ctx.versions)})") from None
            except Exception as exc:
                stopped = _stopped(name, table, scope, leases, exc)
                if stopped is None:
                    raise
                raise stopped from exc
            result = JobResult(name, False, value, run_id, tuple(value.problems()))
            ctx.doc, ctx.problems = result.summary_dict(), list(result.problems)
            _done(leases, ctx.versions)
    return result


def _done(leases: HeldLeases, versions: list[int]) -> None:
    """The leases checked once more when the work is done, a safe point: a lost lease is
    exit 3; so is a cancel request that reached the job after its last safe point (its work
    stood: the error names what it committed)."""
    try:
        for lease in leases:
            lease.check(safe_to_stop=True)
    except CancelledError as exc:
        if not versions:
            raise
        raise CancelledError(f"{exc} (after its work was done: it committed {_versions(versions)})") from None


def _versions(versions: list[int]) -> str:
    return f"version{'s' * (len(versions) > 1)} {', '.join(map(str, sorted(versions)))}"


def _stopped(name: str, table: Table, scope: Scope, leases: HeldLeases, exc: Exception) -> MemWalError | None:
    """Why a failed run failed when others stopped it (None: they did not): an operator's
    cancel that stopped its engine work (a Spark job group cancelled: exit 3, ``cancelled``),
    or a lease lost meanwhile."""
    from memwal.lease.cancel import describe

    if isinstance(exc, LeaseLostError | CancelledError):
        return None
    if scope.stopped is not None:
        return CancelledError(f"{name} on {table.store.root}: {describe(scope.stopped)} (its running "
                              f"work was stopped: {first_line(exc)})")
    return _lost_lease(leases, exc)


def _lost_lease(leases: HeldLeases, exc: Exception) -> LeaseLostError | None:
    """The error a failed run reports when it lost its lease meanwhile (None: it did not, or
    ``exc`` says so already). A job taken over while it was frozen fails on whatever the new
    holder changed under it (a commit conflict, say): its cause is the lost lease, exit 3."""
    if isinstance(exc, LeaseLostError):
        return None
    try:
        leases.check()
    except LeaseLostError as lost:
        return LeaseLostError(f"{lost}; then it failed: {first_line(exc)}")
    except Exception:  # noqa: BLE001 - the lease could not be read: the failure itself is what to report
        return None
    return None


def run_action(name: str, table: str | Table, storage_options: dict[str, str] | None = None,
               **options: Any) -> dict[str, Any]:
    """Run one action by name with keyword options; the ``--json`` document.

    Options are validated before the table is opened: bad input leaves nothing written.
    """
    from memwal.table import open_table

    opts = action(name).options.from_kwargs(**options)
    t = open_table(table, storage_options) if isinstance(table, str) else table
    return run(name, t, opts).to_dict()
