"""The run being recorded: the versions it commits, the properties its commits carry.

:func:`recorded` wraps one job run (``memwal.actions.run`` uses it for every action, whatever
the entry point): it writes the run's ``running`` record, makes the run current for the code
that commits (:func:`committed` names each version it commits; :func:`transaction_properties`
puts the run id on the commits Lance lets carry properties, so ``read_transaction(version)``
traces a version to its run), and when the run ends rewrites the record with its outcome,
figures and the lag it left, and records the OpenTelemetry metrics of the run.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.core import clock as clocks
from memwal.errors import CancelledError, LeaseLostError, MemWalError, first_line
from memwal.history import log as history_log
from memwal.history import receipts
from memwal.history.receipts import Receipt
from memwal.history.record import CANCELLED, FAILED, FENCED, RUNNING, RunRecord, figures, outcome_of
from memwal.observe import metrics

if TYPE_CHECKING:
    from memwal.table import Table

log = logging.getLogger(__name__)

#: Transaction property naming the run that made a commit (and one naming its job).
RUN_ID_PROPERTY, JOB_PROPERTY = "memwal.run_id", "memwal.job"


@dataclass
class RunContext:
    job: str
    run_id: str
    engine: str
    versions: list[int] = field(default_factory=list)
    #: Set by the caller when the run returns: its result document and its problems.
    doc: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("memwal_run", default=None)


def current() -> RunContext | None:
    return _current.get()


def committed(table: Table, version: int | None, *, applied: Mapping[str, tuple[int, int]] | None = None,
              data: Sequence[int] = (), kind: str | None = None, bind: bool = False) -> None:
    """memwal committed ``version`` to ``table``: its receipt is written
    (:mod:`memwal.history.receipts`; with ``applied``, the generations whose rows the commit, with
    the batch's earlier commits ``data``, put in the base: a ``merge`` receipt unless ``kind`` says
    otherwise; bound to the commit's transaction file then, or when ``bind`` asks), and the
    running job's record will name it."""
    if version is None:
        return
    ctx = _current.get()
    if ctx is not None:
        if version in ctx.versions:
            return  # named once already (an engine recorded it as it landed): its receipt is written
        ctx.versions.append(version)
    txn = None
    if applied or bind:
        try:
            txn = table.manifest(version).transaction_file or None
        except (MemWalError, OSError) as exc:  # the receipt without it proves nothing: GC reads back
            log.warning("version %d of %s: its transaction file not read for its receipt: %s", version, table.uri, exc)
    receipt = Receipt(version, kind or (receipts.MERGE if applied else receipts.COMMIT), dict(applied or {}),
                      tuple(data), txn, ctx.run_id if ctx is not None else None)
    receipts.write_receipt(table.store, receipt)


def transaction_properties() -> dict[str, str]:
    """Properties a ``Transaction`` commit of the running job carries (empty outside a run)."""
    ctx = _current.get()
    return {} if ctx is None else {RUN_ID_PROPERTY: ctx.run_id, JOB_PROPERTY: ctx.job}


@contextlib.contextmanager
def recorded(table: Table, job: str, run_id: str, engine: str, holder: str | None,
             lag: Callable[[Table], dict[str, list[float | int | None]]] | None = None,
             planned_seconds: float = 0.0) -> Iterator[RunContext]:
    """Record one run of ``job`` in the table's history (see the module docstring).

    ``lag`` reads the lag the run left (per shard [generations, rows, oldest age]); it is
    passed in because reading the table's state belongs to the layer above the history.
    ``planned_seconds``: what its plan took before the run began (the figure ``plan_seconds``:
    a whole GC's cost is mostly its plan, and a restarted follower spaces the next by it).
    """
    clock = clocks.current()
    ctx = RunContext(job, run_id, engine)
    record = RunRecord(job, run_id, engine, holder, RUNNING, started_at=clock())
    try:
        etag: str | None = history_log.begin(table.store, record)
    except Exception as exc:  # noqa: BLE001 - the history must never stop a job
        log.warning("could not record the start of %s run %s: %s", job, run_id, exc)
        etag = None
    token = _current.set(ctx)
    try:
        yield ctx
        doc = ctx.doc or {}
        record.outcome = outcome_of(job, doc, ctx.problems)
        record.figures = {**figures(job, doc), "plan_seconds": round(max(0.0, planned_seconds), 3)}
        record.error = "; ".join(ctx.problems) or None
    except LeaseLostError as exc:
        record.outcome, record.error = FENCED, first_line(exc)
        raise
    except CancelledError as exc:  # the figures of what it did before it stopped, if it got that far
        record.outcome, record.error = CANCELLED, first_line(exc)
        record.figures = figures(job, ctx.doc) if ctx.doc else {}
        raise
    except BaseException as exc:
        record.outcome, record.error = FAILED, first_line(exc)
        raise
    finally:
        _current.reset(token)
        record.finished_at = clock()
        record.versions = sorted(ctx.versions)
        try:
            record.lag = lag(table) if lag is not None else {}
        except Exception as exc:  # noqa: BLE001 - a broken shard must not hide the run's own end
            log.debug("no lag snapshot for %s run %s: %s", job, run_id, exc)
        history_log.finish(table.store, record, etag)
        metrics.record_run(job, record.outcome, engine, record.finished_at - record.started_at, ctx.doc or {})
