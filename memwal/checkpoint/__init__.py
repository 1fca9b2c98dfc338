"""Reader checkpoints: pin the LSM view of one moment until it expires or is deleted.

A long reader creates a checkpoint, reads exactly that view (``memwal scan --checkpoint``,
``memwal.read`` with its plan) however long it takes, and deletes it; GC never deletes a
generation a live checkpoint pins nor expires its base version (gate (f), docs/architecture.md), and
removes expired ones.

- :mod:`memwal.checkpoint.record`: the record and its validation;
- :mod:`memwal.checkpoint.ops`: create / list / refresh / delete, the read plan;
- :mod:`memwal.checkpoint.handshake`: creation against a concurrent GC run;
- :mod:`memwal.checkpoint.managed`: the self-refreshing context manager of the Python API.
"""

from memwal.checkpoint.managed import ManagedCheckpoint
from memwal.checkpoint.ops import (
    CheckpointRecords,
    UnreadableCheckpoint,
    checkpoint_or_error,
    create_checkpoint,
    delete_checkpoint,
    get_checkpoint,
    list_checkpoints,
    live_checkpoints,
    missing_from_view,
    read_checkpoints,
    read_plan,
    refresh_checkpoint,
    remove_checkpoints,
)
from memwal.checkpoint.record import TAG_PREFIX, Checkpoint, lifetime

__all__ = [
    "TAG_PREFIX", "Checkpoint", "CheckpointRecords", "ManagedCheckpoint", "UnreadableCheckpoint",
    "checkpoint_or_error", "create_checkpoint", "delete_checkpoint", "get_checkpoint", "lifetime",
    "list_checkpoints", "live_checkpoints", "missing_from_view", "read_checkpoints", "read_plan",
    "refresh_checkpoint", "remove_checkpoints",
]
