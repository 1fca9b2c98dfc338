"""The checkpoints collector: GC's view of the reader checkpoints, and the removal of expired ones.

GC reads the checkpoints twice: when it plans (the live ones are gate (f), the expired ones are
what the run will remove) and once more right after writing its marker (the handshake of
:mod:`memwal.checkpoint.handshake`: a checkpoint created meanwhile is read there and kept).
The run removes the checkpoints its plan named that are still expired at that second read,
tag first, record last (:func:`memwal.checkpoint.ops.remove_checkpoints`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memwal.checkpoint.ops import list_checkpoints, remove_checkpoints
from memwal.checkpoint.record import Checkpoint
from memwal.table import Table


@dataclass(frozen=True)
class CheckpointSweep:
    """The table's checkpoints at one moment: live (they pin) and expired (to remove)."""

    live: tuple[Checkpoint, ...] = ()
    expired: tuple[Checkpoint, ...] = ()

    @property
    def expired_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.expired)

    def remove(self, table: Table, planned: Iterable[str]) -> tuple[str, ...]:
        """Remove the expired checkpoints among ``planned`` (ids a plan named); their ids."""
        wanted = set(planned)
        return tuple(remove_checkpoints(table, [c for c in self.expired if c.id in wanted]))


def sweep_checkpoints(table: Table, now: float) -> CheckpointSweep:
    """Every checkpoint of the table, live or expired at ``now`` (one listing)."""
    found = list_checkpoints(table)
    return CheckpointSweep(tuple(c for c in found if c.live(now)), tuple(c for c in found if not c.live(now)))


__all__ = ["CheckpointSweep", "sweep_checkpoints"]
