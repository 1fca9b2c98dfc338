"""Create, list, refresh and delete checkpoints; the read plan of one.

Every write is conditional: a record is created with ``put_if_absent`` and refreshed by
compare-and-swap on the ETag it was read with, so two refreshes never lose one another and a
checkpoint works on every store the table lives on. Creation follows the handshake of
:mod:`memwal.checkpoint.handshake` so that no GC run deletes what it pins.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memwal.checkpoint.handshake import ViewLostError, wait_for_gc
from memwal.checkpoint.record import (
    CHECKPOINT_PREFIX,
    RECORD_MAX_BYTES,
    Checkpoint,
    PinnedShard,
    checkpoint_id,
    checkpoint_name,
    lifetime,
    record_key,
    tag_name,
)
from memwal.core import clock as clocks
from memwal.core import steps
from memwal.core.retry import after_conflict
from memwal.errors import BadInputError, MemWalError, NotFoundError
from memwal.table import Table
from memwal.table.manifest import list_versions
from memwal.table.paths import generation_key
from memwal.table.shards import generation_readable, read_shard_manifests

if TYPE_CHECKING:
    from memwal.read import ReadPlan

log = logging.getLogger(__name__)

#: Times a checkpoint is created again when a GC run took something of its view meanwhile.
CREATE_ATTEMPTS = 5
#: How long creation waits for a GC run that is deleting right now.
GC_WAIT_SECONDS = 600.0


@dataclass(frozen=True)
class UnreadableCheckpoint:
    """A file among the checkpoint records that is no checkpoint: what it is, and why."""

    uri: str
    reason: str


@dataclass(frozen=True)
class CheckpointRecords:
    """The table's checkpoint records as read: the valid ones, oldest first, and the others."""

    checkpoints: list[Checkpoint]
    unreadable: list[UnreadableCheckpoint]


def read_checkpoints(table: Table, now: float | None = None) -> CheckpointRecords:
    """Every checkpoint record of the table (live and expired), each read size-capped and
    checked: one that is corrupt, too large, or not named by its own id is skipped with a
    warning and listed in ``unreadable``, never fatal (storage is untrusted input; a GC or a
    status must go on). Skipping one cannot free what a real checkpoint pins: ours are written
    whole (``put_if_absent``) by :func:`create_checkpoint`, and only ever read back valid."""
    now = clocks.current()() if now is None else now
    out, bad = [], []
    for obj in table.store.list(CHECKPOINT_PREFIX, recursive=False):
        name = obj.key.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        uri = table.store.uri_for(obj.key)
        try:
            out.append(Checkpoint.loads(table.store.get(obj.key, max_bytes=RECORD_MAX_BYTES), where=uri,
                                        cid=name.removesuffix(".json"), now=now))
        except NotFoundError:
            continue  # deleted since the listing
        except BadInputError as exc:
            log.warning("skipping %s", exc)
            bad.append(UnreadableCheckpoint(uri, str(exc)))
    return CheckpointRecords(sorted(out, key=lambda c: (c.created_at, c.id)), bad)


def list_checkpoints(table: Table, now: float | None = None) -> list[Checkpoint]:
    """Every readable checkpoint of the table (live and expired), oldest first."""
    return read_checkpoints(table, now).checkpoints


def live_checkpoints(table: Table, now: float | None = None) -> list[Checkpoint]:
    now = clocks.current()() if now is None else now
    return [c for c in list_checkpoints(table, now) if c.live(now)]


def get_checkpoint(table: Table, cid: str) -> Checkpoint:
    """One checkpoint by id; an unknown id, or a record that is not a checkpoint, is bad input
    naming it (exit 2)."""
    cid = checkpoint_id(cid)
    key = record_key(cid)
    try:
        data = table.store.get(key, max_bytes=RECORD_MAX_BYTES)
    except NotFoundError:
        raise BadInputError(f"{table.uri}: no checkpoint {cid} (see memwal checkpoint list)") from None
    return Checkpoint.loads(data, where=table.store.uri_for(key), cid=cid, now=clocks.current()())


def _view(table: Table) -> tuple[int, dict[str, PinnedShard]]:
    """The latest base version and, per shard, the generations readers see with it."""
    manifest = table.require_mem_wal()
    found = read_shard_manifests(table.store)
    if found.broken:
        err = next(iter(found.broken.values()))
        raise MemWalError(f"{table.uri}: cannot take a checkpoint: {err}")
    shards = {}
    for sid, state in sorted(found.states.items()):
        merged = manifest.compacted_generation(sid)
        gens: list[tuple[int, str]] = []
        for fg in state.flushed:
            if fg.generation > merged:
                generation_key(sid, fg.path)  # an unsafe path is refused before it is pinned
                gens.append((fg.generation, fg.path))
        shards[sid] = PinnedShard(state.current_generation, state.manifest.shard_spec_id, gens)
    return manifest.version, shards


def missing_from_view(table: Table, ckpt: Checkpoint) -> str | None:
    """What of a checkpoint's view is gone (None when all of it is there, or when its record
    is of a newer format: what it names is not known here)."""
    if ckpt.newer_format is not None:
        return None
    if ckpt.version not in list_versions(table.store):
        return f"base version {ckpt.version}"
    for sid, shard in ckpt.shards.items():
        for g, path in shard.generations:
            if not generation_readable(table.store, generation_key(sid, path)):
                return f"shard {sid} generation {g}"
    return None


def create_checkpoint(table: Table, *, lifetime_seconds: float | timedelta, name: str | None = None) -> Checkpoint:
    """Pin the LSM view of now for ``lifetime_seconds`` (see the module docstrings)."""
    seconds = lifetime(lifetime_seconds)
    name = checkpoint_name(name)

    def attempt(_n: int) -> Checkpoint:
        version, shards = _view(table)
        steps.step("checkpoint.after-view")
        now = clocks.current()()
        cid = uuid.uuid4().hex
        ckpt = Checkpoint(cid, name, version, now, now + seconds, shards, tag_name(cid))
        table.store.put_if_absent(record_key(cid), ckpt.dumps())
        try:
            try:
                table.dataset().tags.create(ckpt.tag, version)
            except ValueError as exc:  # the version was expired between our read and the tag
                raise ViewLostError(f"base version {version} went before it was tagged: {exc}") from exc
            steps.step("checkpoint.before-marker-read")
            wait_for_gc(table.store, timeout_seconds=GC_WAIT_SECONDS)
            gone = missing_from_view(table, ckpt)
            if gone is not None:
                raise ViewLostError(f"{gone} was collected while the checkpoint was taken")
        except BaseException:
            _remove(table, ckpt.id)
            raise
        log.info("checkpoint %s of %s: version %d, %d generations pinned until %s", cid, table.uri, version,
                 sum(len(s.generations) for s in shards.values()),
                 datetime.fromtimestamp(ckpt.expires_at, UTC).isoformat(timespec="seconds"))
        return ckpt

    return after_conflict(attempt, what=f"{table.uri}: checkpoint", attempts=CREATE_ATTEMPTS)


def refresh_checkpoint(table: Table, cid: str, *, lifetime_seconds: float | timedelta) -> Checkpoint:
    """Extend a live checkpoint to now + ``lifetime_seconds`` (compare-and-swap on its record).

    An expired checkpoint is not revived: GC may already have freed what it pinned.
    """
    seconds = lifetime(lifetime_seconds)
    cid = checkpoint_id(cid)
    key = record_key(cid)

    def attempt(_n: int) -> Checkpoint:
        try:
            data, etag = table.store.get_with_etag(key, max_bytes=RECORD_MAX_BYTES)
        except NotFoundError:
            raise BadInputError(f"{table.uri}: no checkpoint {cid} (see memwal checkpoint list)") from None
        now = clocks.current()()
        where = table.store.uri_for(key)
        ckpt = Checkpoint.loads(data, where=where, cid=cid, now=now).understood(where)
        if not ckpt.live(now):
            raise BadInputError(f"{table.uri}: checkpoint {cid} expired at {ckpt.expires_at:.0f} and may have lost "
                                "what it pinned: create a new one")
        ckpt.expires_at = max(ckpt.expires_at, now + seconds)
        table.store.put_if_match(key, ckpt.dumps(), etag)  # a concurrent refresh: read again
        return ckpt

    return after_conflict(attempt, what=f"{table.uri}: refresh of checkpoint {cid}", attempts=8,
                          base_seconds=0.01, max_seconds=0.2)


def delete_checkpoint(table: Table, cid: str) -> Checkpoint | None:
    """Release a checkpoint: its tag, then its record (an unknown id is bad input). A record
    that is not a valid checkpoint (corrupt, or not named by its own id) is removed too, by
    its file's id: that is how an operator clears one. Returns the checkpoint, None for such
    a record."""
    cid = checkpoint_id(cid)
    try:
        ckpt: Checkpoint | None = get_checkpoint(table, cid)
    except BadInputError as exc:
        if not table.store.exists(record_key(cid)):
            raise
        log.warning("removing a checkpoint record that is no checkpoint: %s", exc)
        ckpt = None
    _remove(table, cid)
    log.info("deleted checkpoint %s of %s", cid, table.uri)
    return ckpt


def _remove(table: Table, cid: str) -> None:
    """Tag first, record last: a record without its tag still pins its generations, while a
    tag without a record would keep a version nobody knows about. The tag is always the one
    named by the id (never one a record names: a record from storage could name a user's tag)."""
    tag = tag_name(cid)
    try:
        table.dataset().tags.delete(tag)
    except ValueError as exc:
        if "not found" not in str(exc).lower() and "does not exist" not in str(exc).lower():
            raise MemWalError(f"{table.uri}: cannot delete tag {tag}: {exc}") from exc
    table.store.delete_many([record_key(cid)])


def remove_checkpoints(table: Table, ckpts: list[Checkpoint]) -> list[str]:
    """Remove checkpoints (GC removes the expired ones); returns their ids."""
    for ckpt in ckpts:
        _remove(table, ckpt.id)
    return [c.id for c in ckpts]


def read_plan(table: Table, ckpt: Checkpoint) -> ReadPlan:
    """The reader's plan of a checkpoint: its base version and exactly the generations it listed."""
    from memwal.read import ReadPlan

    plan = ReadPlan(table=table.uri, version=ckpt.version, source=f"checkpoint:{ckpt.id}",
                    snapshot_ts_millis=int(ckpt.created_at * 1000), snapshots=[])
    for sid, shard in sorted(ckpt.shards.items()):
        plan.read_shard(sid, shard.current_generation, shard.spec_id, shard.generations)
        plan.shards.append({"shard_id": sid, "source": plan.source, "manifest_version": None,
                            "generations": shard.numbers, "pruned": False})
    return plan


def checkpoint_or_error(table: Table, cid: str, now: float | None = None) -> Checkpoint:
    """A live checkpoint to read at (an expired one is bad input: its data may be gone; so is
    one whose base version is gone, which only a cleanup outside memwal-jobs can do)."""
    ckpt = get_checkpoint(table, cid).understood(table.store.uri_for(record_key(cid)))
    now = clocks.current()() if now is None else now
    if not ckpt.live(now):
        raise BadInputError(f"{table.uri}: checkpoint {ckpt.id} expired; its view may be gone")
    if ckpt.version not in list_versions(table.store):
        raise BadInputError(f"{table.uri}: checkpoint {ckpt.id} pins version {ckpt.version}, which is gone (expired "
                            "by a cleanup that did not honour it): its view cannot be read; delete it")
    return ckpt


__all__ = [
    "CheckpointRecords", "UnreadableCheckpoint", "checkpoint_or_error", "create_checkpoint", "delete_checkpoint",
    "get_checkpoint", "list_checkpoints", "live_checkpoints", "missing_from_view", "read_checkpoints", "read_plan",
    "refresh_checkpoint", "remove_checkpoints",
]
