"""The generations collector: which flushed generations every gate lets go, and why the rest stay.

Planned from the latest table manifest (merge progress, catch-up), the retained versions left
after the planned expiry (gate c, :mod:`memwal.gc.versions`), the live checkpoints, each
shard's latest manifest and the one listing of ``_mem_wal/`` (which folders are present, with
their files: the run deletes exactly those on an object store). A shard whose latest manifest
is unknown keeps every folder, each reported with the shard's problem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from memwal.checkpoint import Checkpoint
from memwal.errors import UnsafePathError
from memwal.gc.gates import GRACE_PERIOD, UNSAFE_PATH, HeldGeneration, Verdict, retention_report, verdict_of
from memwal.gc.model import Blocked, BrokenShard, GenerationDeletion, Retention
from memwal.gc.versions import ShardProgress, VersionProgress
from memwal.table.listing import MemWalListing
from memwal.table.manifest import TableManifest
from memwal.table.paths import generation_key
from memwal.table.retained import RetainedVersion
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


class Gates:
    """The gates of a table at one moment, per shard (each shard's retained progress read once)."""

    def __init__(self, latest: TableManifest, indexes: Iterable[str], versions: Iterable[RetainedVersion],
                 checkpoints: Iterable[Checkpoint], now: float, grace_seconds: float) -> None:
        self.latest, self.indexes, self.now, self.grace_seconds = latest, list(indexes), now, grace_seconds
        self.checkpoints = tuple(checkpoints)
        self.progress = VersionProgress(list(versions))
        self._shards: dict[str, ShardProgress] = {}

    def shard(self, shard_id: str) -> ShardProgress:
        if shard_id not in self._shards:
            self._shards[shard_id] = self.progress.shard(shard_id)
        return self._shards[shard_id]

    def verdict(self, shard_id: str, g: int) -> Verdict:
        return verdict_of(shard_id, g, compacted=self.latest.compacted_generation(shard_id),
                          catchup=self.latest.index_catchup, indexes=self.indexes, progress=self.shard(shard_id),
                          now=self.now, grace_seconds=self.grace_seconds, checkpoints=self.checkpoints)


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
                blocked.append(Blocked(sid, fg.generation, verdict.reasons[0], tuple(verdict.reasons)))
                if verdict.holders and fg.generation <= compacted:
                    held.append(HeldGeneration(fg.generation, verdict.holders, gates.shard(sid), verdict.reasons))
                continue
            going.add(fg.generation)
            if fg.path in listed.generations:
                deletions.append(GenerationDeletion(sid, fg.generation, fg.path, key, verdict.evidence,
                                                    listed.generations[fg.path]))
        deletable[sid] = frozenset(going)
    return GenerationsPlan(tuple(deletions), tuple(blocked), tuple(broken),
                           retention_report(held, gates.now, gates.grace_seconds), deletable)
