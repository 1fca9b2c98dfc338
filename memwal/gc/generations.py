"""The generations collector: which flushed generations every gate lets go, and why the rest stay.

Planned from the latest table manifest (merge progress, catch-up), the retained versions left
after the planned expiry (gate c, :mod:`memwal.gc.versions`), the live checkpoints, each
shard's latest manifest and the one listing of ``_mem_wal/`` (which folders are present, with
their files: the run deletes exactly those on an object store). A shard whose latest manifest
is unknown keeps every folder, each reported with the shard's problem. A merged generation whose
folder is gone was collected already: nothing holds it, so it is never reported blocked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from memwal.errors import UnsafePathError
from memwal.gc.gates import GRACE_PERIOD, UNSAFE_PATH, Gates
from memwal.gc.model import Blocked, BrokenShard, GenerationDeletion, Retention
from memwal.gc.retention import HeldGeneration, retention_report
from memwal.table.listing import MemWalListing
from memwal.table.paths import generation_key
from memwal.table.shards import ShardManifests


@dataclass(frozen=True)
class GenerationsPlan:
    deletions: tuple[GenerationDeletion, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    broken: tuple[BrokenShard, ...] = ()
    retention: Retention | None = None
    #: Per shard, every flushed generation the gates let go (their WAL entries and orphans may follow).
    deletable: Mapping[str, frozenset[int]] = field(default_factory=dict)

    @property
    def time_will_free(self) -> bool:
        """Whether a later run with nothing else changed would free something (grace period only)."""
        return any(b.reasons == (GRACE_PERIOD,) for b in self.blocked)


def plan_generations(shards: ShardManifests, listing: MemWalListing, gates: Gates) -> GenerationsPlan:
    """Every flushed generation's verdict, per shard; a present folder of a deletable one goes."""
    deletions: list[GenerationDeletion] = []
    blocked: list[Blocked] = []
    broken: list[BrokenShard] = []
    held: list[HeldGeneration] = []
    deletable: dict[str, frozenset[int]] = {}
    for sid, err in shards.broken.items():
        broken.append(BrokenShard(sid, err.reason, str(err)))
        listed = listing.shards.get(sid)
        for g in sorted(set(listed.generation_dirs().values()) if listed else ()):
            blocked.append(Blocked(sid, g, err.reason, (err.reason, str(err))))
    for sid, state in shards.states.items():
        listed = listing.shards[sid]
        compacted = gates.latest.compacted_generation(sid)
        going: set[int] = set()
        for fg in state.flushed:
            try:
                key = generation_key(sid, fg.path)
            except UnsafePathError as exc:
                blocked.append(Blocked(sid, fg.generation, UNSAFE_PATH, (UNSAFE_PATH, str(exc))))
                continue
            verdict = gates.verdict(sid, fg.generation)
            if verdict.reasons:
                if fg.generation <= compacted and fg.path not in listed.generations:
                    continue  # merged and its folder gone: collected already, nothing holds it
                blocked.append(Blocked(sid, fg.generation, verdict.reasons[0], tuple(verdict.reasons)))
                if verdict.holders and fg.generation <= compacted:
                    held.append(HeldGeneration(sid, fg.generation, verdict.holders))
                continue
            going.add(fg.generation)
            if fg.path in listed.generations:
                deletions.append(GenerationDeletion(sid, fg.generation, fg.path, key, verdict.evidence,
                                                    listed.generations[fg.path]))
        deletable[sid] = frozenset(going)
    return GenerationsPlan(tuple(deletions), tuple(blocked), tuple(broken),
                           retention_report(held, gates), deletable)
