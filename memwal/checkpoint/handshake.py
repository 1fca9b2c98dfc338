"""The handshake between a checkpoint being created and a GC run deleting.

A checkpoint must never be created over something a GC run is deleting at that moment. Both
sides write, then read what the other wrote (Dekker's handshake, over the table's store,
which orders a write before a later read):

* a GC run writes the marker ``_mem_wal/_jobs/gc-run.json`` (``running``, its run id) before
  it expires a version or deletes a generation, *then* reads the checkpoint records, and
  keeps whatever a live one pins; it writes ``done`` when it has finished deleting;
* a checkpoint writes its record (and its Lance tag), *then* reads the marker. If a run is
  deleting, that run may have read the records before ours existed: the checkpoint waits for
  it to finish, then checks that its base version and every generation it lists are still
  there (and is created again on a newer view if not).

So of any GC run and any checkpoint, either the run sees the checkpoint and keeps what it
pins, or the checkpoint sees the run and verifies after it. A run whose process died (its
``gc`` lease is no longer live) is not waited for. A GC process frozen mid-batch past its
lease TTL (SIGSTOP) can finish that batch when it wakes, and Lance's ``cleanup_old_versions``
reads tags once when it starts: a checkpoint created during such a freeze is only as safe as
the reader grace period (``--grace-seconds``), which keeps any generation merged since.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from memwal.core import clock as clocks
from memwal.core import steps
from memwal.core.retry import while_busy
from memwal.errors import ConflictError, NotFoundError
from memwal.store import Store
from memwal.table.naming import JOBS_DIR

log = logging.getLogger(__name__)

MARKER_KEY = f"{JOBS_DIR}/gc-run.json"
RUNNING, DONE = "running", "done"
#: How often a checkpoint being created looks whether the GC run it waits for is done.
POLL_SECONDS = 0.2


def gc_started(store: Store, run_id: str) -> None:
    """A GC run is about to delete: say so before reading the checkpoints once more."""
    store.put(MARKER_KEY, json.dumps({"run_id": run_id, "state": RUNNING, "at": clocks.current()()}).encode())


def gc_finished(store: Store, run_id: str) -> None:
    """The run deleted all it will: checkpoints need not wait for it any more."""
    current = read_marker(store)
    if current is not None and current.run_id not in (run_id, None):
        return  # a newer run owns the marker now
    store.put(MARKER_KEY, json.dumps({"run_id": run_id, "state": DONE, "at": clocks.current()()}).encode())


@dataclass(frozen=True)
class GcMarker:
    """What the marker says: the run that wrote it (None: unknown) and its state."""

    run_id: str | None
    state: str | None


def read_marker(store: Store) -> GcMarker | None:
    try:
        doc = json.loads(store.get(MARKER_KEY))
    except NotFoundError:
        return None
    except ValueError:
        return GcMarker(None, RUNNING)  # unreadable: assume a run, let the lease decide
    if not isinstance(doc, dict):
        return None
    run_id, state = doc.get("run_id"), doc.get("state")
    return GcMarker(run_id if isinstance(run_id, str) else None, state if isinstance(state, str) else None)


def _gc_alive(store: Store, run_id: str | None) -> bool:
    """Whether the run that wrote the marker still holds the ``gc`` lease."""
    from memwal.lease import LIVE, describe_lease

    info = describe_lease(store, "gc", now=clocks.current()())
    return info is not None and info.state == LIVE and (run_id is None or info.run_id in (run_id, None))


class _GcDeleting(Exception):
    """A GC run is deleting (internal: what :func:`wait_for_gc` waits out)."""

    def __init__(self, run_id: str | None) -> None:
        super().__init__(run_id)
        self.run_id = run_id


def wait_for_gc(store: Store, *, timeout_seconds: float) -> bool:
    """Wait until no GC run is deleting (True if one was waited for); ConflictError past the timeout."""
    waited = []

    def no_gc_deleting() -> None:
        marker = read_marker(store)
        if marker is not None and marker.state == RUNNING and _gc_alive(store, marker.run_id):
            raise _GcDeleting(marker.run_id)

    def say_why(exc: BaseException) -> None:
        steps.step("checkpoint.waiting-for-gc")
        log.info("a GC run (%s) is deleting: the checkpoint waits for it, then checks its view", exc)
        waited.append(True)

    try:
        while_busy(no_gc_deleting, busy=lambda exc: isinstance(exc, _GcDeleting), timeout_seconds=timeout_seconds,
                   poll_seconds=POLL_SECONDS, on_first_wait=say_why)
    except _GcDeleting as exc:
        raise ConflictError(f"{store.root}: a GC run ({exc.run_id}) is still deleting after "
                            f"{timeout_seconds:.0f}s; create the checkpoint again later") from None
    return bool(waited)


class ViewLostError(ConflictError):
    """Something a checkpoint being created lists was deleted meanwhile: it is created again."""
