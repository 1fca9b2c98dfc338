"""Whether an operator's cancel took effect: a job asked to stop (:mod:`memwal.lease.cancel`)
is still running while the same holder holds its lease, and once it ended its run's history
record says how (``cancelled``: the request took effect; ``ok``, ``failed``...: it ended
otherwise first). It reads the history, so it lives above the leases, not in them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memwal.core import clock as clocks
from memwal.core.retry import while_busy
from memwal.errors import MemWalError
from memwal.history.log import read_runs
from memwal.lease.cancel import Asked
from memwal.lease.record import LeaseRecord, lease_key
from memwal.store import Store

#: States of a job asked to stop: still running, or ended (then its history record's outcome).
RUNNING, ENDED = "running", "ended"


def progress(store: Store, asked: Sequence[Asked], *, now: float | None = None) -> list[dict[str, Any]]:
    """Where each asked job is: ``running`` (its lease still held by the same holder), or
    ``ended`` with the outcome and error its run recorded in the table's history
    (``cancelled``: the request took effect; ``ok``, ``failed``...: it ended otherwise first)."""
    at = clocks.current()() if now is None else now
    out = []
    for a in asked:
        doc: dict[str, Any] = a.to_dict()
        try:
            rec: LeaseRecord | None = LeaseRecord.from_json(store.get(lease_key(a.kind)))
        except (MemWalError, OSError):
            rec = None
        if rec is not None and rec.holder == a.holder and rec.token == a.token and rec.live(at):
            doc["state"] = RUNNING
        else:
            doc.update(state=ENDED, **_recorded(store, a))
        out.append(doc)
    return out


def _recorded(store: Store, a: Asked) -> dict[str, Any]:
    """The outcome and error of the asked job's run in the table's history (None: not found)."""
    if a.run_id is not None:
        try:
            for record in read_runs(store, job=a.kind, since=a.acquired_at - 60.0, detail=False):
                if record.run_id == a.run_id:
                    return {"outcome": record.outcome, "error": record.error, "versions": record.versions}
        except (MemWalError, OSError):
            pass
    return {"outcome": None, "error": None, "versions": []}


class _StillRunning(Exception):
    pass


def wait_stopped(store: Store, asked: Sequence[Asked], timeout_seconds: float, *,
                 poll_seconds: float = 1.0) -> list[dict[str, Any]]:
    """:func:`progress` once every asked job ended, or when ``timeout_seconds`` of the
    process's clock have passed (then some are still ``running``)."""
    def ended() -> list[dict[str, Any]]:
        states = progress(store, asked)
        if any(s["state"] == RUNNING for s in states):
            raise _StillRunning()
        return states

    try:
        return while_busy(ended, busy=lambda exc: isinstance(exc, _StillRunning), timeout_seconds=timeout_seconds,
                          poll_seconds=poll_seconds)
    except _StillRunning:
        return progress(store, asked)


__all__ = ["ENDED", "RUNNING", "progress", "wait_stopped"]
