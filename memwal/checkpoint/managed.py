"""A checkpoint held by a reader for as long as it reads (SlateDB's managed checkpoints).

``with table.checkpoint(lifetime=600) as cp:`` creates a checkpoint, refreshes it in the
background while the block runs (a heartbeat, every third of its lifetime, so a long query
never sees it expire), reads at it (``cp.scan(...)``), and deletes it when the block ends.
If a refresh fails (the store unreachable, the checkpoint deleted by an operator), the
heartbeat keeps trying until the checkpoint would have expired; reads after that raise.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

from memwal.checkpoint.ops import create_checkpoint, delete_checkpoint, read_plan, refresh_checkpoint
from memwal.checkpoint.record import Checkpoint
from memwal.core import clock as clocks
from memwal.core.document import Document
from memwal.errors import MemWalError
from memwal.lease.heartbeat import Heartbeat

if TYPE_CHECKING:
    import pyarrow as pa

    from memwal.read import ReadPlan
    from memwal.read.keys import Keys
    from memwal.read.vector import NearestOptions, Vector
    from memwal.table import Table

log = logging.getLogger(__name__)


class ManagedCheckpoint(Document):
    """A checkpoint that refreshes itself while held and is deleted on exit."""

    def __init__(self, table: Table, *, lifetime: float, name: str | None = None, refresh: bool = True) -> None:
        self.table = table
        self.lifetime = lifetime
        self.name = name
        self.refresh = refresh
        self.checkpoint: Checkpoint | None = None
        self.problem: str | None = None
        self._heartbeat: Heartbeat | None = None

    # -- the checkpoint

    @property
    def id(self) -> str:
        return self._held().id

    @property
    def version(self) -> int:
        return self._held().version

    def to_dict(self) -> dict[str, Any]:
        return self._held().to_dict()

    def _held(self) -> Checkpoint:
        if self.checkpoint is None:
            raise MemWalError("the checkpoint is not held (use it in a with block)")
        if self.problem is not None:
            raise MemWalError(f"checkpoint {self.checkpoint.id} of {self.table.uri} is lost: {self.problem}")
        return self.checkpoint

    def read_plan(self) -> ReadPlan:
        return read_plan(self.table, self._held())

    def scan(self, *, columns: list[str] | None = None, filter: str | None = None,
             limit: int | None = None) -> pa.Table:
        """The rows a reader saw at the checkpoint's moment."""
        from memwal.read import lsm_scan

        return lsm_scan(self.table, columns=columns, filter=filter, limit=limit, plan=self.read_plan())

    def lookup(self, keys: Keys, *, columns: list[str] | None = None) -> pa.Table:
        """The rows of primary keys ``keys`` as a reader saw them at the checkpoint's moment."""
        from memwal.read import lookup

        return lookup(self.table, keys, columns=columns, plan=self.read_plan())

    def nearest(self, column: str, query: Vector, *, k: int = 10, **options: Unpack[NearestOptions]) -> pa.Table:
        """The ``k`` rows of the checkpoint's moment nearest to ``query`` (``memwal.read.nearest``)."""
        from memwal.read import nearest

        return nearest(self.table, column, query, k=k, plan=self.read_plan(), **options)

    # -- holding it

    def __enter__(self) -> ManagedCheckpoint:
        self.checkpoint = create_checkpoint(self.table, lifetime_seconds=self.lifetime, name=self.name)
        if self.refresh:
            self._heartbeat = Heartbeat(f"checkpoint-{self.checkpoint.id[:8]}", self._beat,
                                        self.checkpoint.created_at + self.lifetime / 3, clocks.current()).start()
        return self

    def _beat(self) -> float | None:
        assert self.checkpoint is not None
        now = clocks.current()()
        try:
            self.checkpoint = refresh_checkpoint(self.table, self.checkpoint.id, lifetime_seconds=self.lifetime)
        except MemWalError as exc:
            if now >= self.checkpoint.expires_at or exc.exit_code == 2:
                self.problem = str(exc)
                log.warning("checkpoint %s: %s", self.checkpoint.id, exc)
                return None
            log.warning("checkpoint %s: refresh failed, retrying: %s", self.checkpoint.id, exc)
            return now + min(self.lifetime / 3, max((self.checkpoint.expires_at - now) / 2, 0.0))
        return now + self.lifetime / 3

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self.checkpoint is not None:
            try:
                delete_checkpoint(self.table, self.checkpoint.id)
            except MemWalError as err:  # never mask the block's own exception
                log.warning("could not delete checkpoint %s: %s", self.checkpoint.id, err)
