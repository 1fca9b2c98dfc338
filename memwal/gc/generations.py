"""The generations collector: which generations leave the shard manifest, which folders go, and
why the rest stay.

Planned from the latest table manifest (merge progress, catch-up), the retained versions left
after the planned expiry (gate c, :mod:`memwal.gc.versions`), the live checkpoints, each
shard's latest manifest, its writer as storage shows it (:mod:`memwal.table.writer`) and the
one listing of ``_mem_wal/`` (which folders are present, with their files: the run deletes
exactly those on an object store). A shard whose latest manifest is unknown keeps every
folder, each reported with the shard's problem.

A listed generation that every gate lets go is drained (:mod:`memwal.gc.drain`) unless the
shard's live writer still needs it; its folder goes in the same run only with no grace
period, else in a later run. A folder no longer listed at or below the shard's merge
progress goes once no reader within the grace period can hold a manifest listing it, unless a
live checkpoint pins it. Folders above the merge progress, and failed flush attempts of a
generation still listed, are the orphans collector's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from memwal.errors import UnsafePathError
from memwal.gc.drain import SafeVersions, ShardDrain, unlisted_safely
from memwal.gc.gates import DRAIN_GRACE, UNSAFE_PATH, WRITER_LIVE, Gates, only_grace
from memwal.gc.model import Blocked, BrokenShard, GateEvidence, GenerationDeletion, Retention
from memwal.gc.retention import HeldGeneration, retention_report
from memwal.table.drain import merged_through
from memwal.table.listing import MemWalListing, ShardListing
from memwal.table.paths import generation_key
from memwal.table.retained import RetainedVersion
from memwal.table.shards import FlushedGeneration, ShardManifests, ShardState
from memwal.table.writer import WriterView


@dataclass(frozen=True)
class GenerationsPlan:
    deletions: tuple[GenerationDeletion, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    broken: tuple[BrokenShard, ...] = ()
    retention: Retention | None = None
    #: Per shard, every generation whose WAL entries may go: drained by this plan, or no
    #: longer listed at or below the merge progress.
    deletable: Mapping[str, frozenset[int]] = field(default_factory=dict)
    #: What each shard's manifest loses in this run.
    drains: tuple[ShardDrain, ...] = ()
    #: The shard manifests the drains are planned from (the run writes the next version of each).
    states: Mapping[str, ShardState] = field(default_factory=dict, repr=False)
    writers: Mapping[str, WriterView] = field(default_factory=dict, repr=False)

    @property
    def time_will_free(self) -> bool:
        """Whether a later run with nothing else changed would free something (grace periods only)."""
        return any(only_grace(b.reasons) for b in self.blocked)


def plan_generations(shards: ShardManifests, listing: MemWalListing, gates: Gates,
                     writers: Mapping[str, WriterView], safe: SafeVersions,
                     writer_held: frozenset[int] = frozenset()) -> GenerationsPlan:
    """Every generation's verdict, per shard (see the module docstring); ``writer_held``: the
    retained versions the version expiry keeps only for live writers."""
    deletions: list[GenerationDeletion] = []
    blocked: list[Blocked] = []
    broken: list[BrokenShard] = []
    held: list[HeldGeneration] = []
    deletable: dict[str, frozenset[int]] = {}
    drains: list[ShardDrain] = []
    for sid, err in shards.broken.items():
        broken.append(BrokenShard(sid, err.reason, str(err)))
        listed = listing.shards.get(sid)
        for g in sorted(set(listed.generation_dirs().values()) if listed else ()):
            blocked.append(Blocked(sid, g, err.reason, (err.reason, str(err))))
    for sid, state in shards.states.items():
        shard = _Shard(sid, state, listing.shards[sid], gates, writers[sid], writer_held)
        shard.plan_listed()
        shard.plan_unlisted(safe)
        deletions += shard.deletions
        blocked += shard.blocked
        held += shard.held
        deletable[sid] = frozenset(shard.going)
        if shard.drain or shard.repairs:
            drains.append(ShardDrain(sid, state.version, tuple(sorted(shard.drain + shard.repairs)),
                                     tuple(shard.repairs)))
    return GenerationsPlan(tuple(deletions), tuple(blocked), tuple(broken), retention_report(held, gates),
                           deletable, tuple(drains), dict(shards.states), dict(writers))


class _Shard:
    """One shard's plan, built by :meth:`plan_listed` then :meth:`plan_unlisted`."""

    def __init__(self, shard_id: str, state: ShardState, listed: ShardListing, gates: Gates,
                 writer: WriterView, writer_held: frozenset[int]) -> None:
        self.sid, self.state, self.listed, self.gates, self.writer = shard_id, state, listed, gates, writer
        self.writer_held = writer_held
        self.compacted = gates.latest.compacted_generation(shard_id)
        self.deletions: list[GenerationDeletion] = []
        self.blocked: list[Blocked] = []
        self.held: list[HeldGeneration] = []
        self.drain: list[int] = []
        self.repairs: list[int] = []
        self.going: set[int] = set()

    def _block(self, g: int, reasons: tuple[str, ...]) -> None:
        self.blocked.append(Blocked(self.sid, g, reasons[0], reasons))

    def plan_listed(self) -> None:
        """The generations the manifest lists: drained (and their folders deleted) or kept."""
        for fg in self.state.flushed:
            try:
                key = generation_key(self.sid, fg.path)
            except UnsafePathError as exc:
                self._block(fg.generation, (UNSAFE_PATH, str(exc)))
                continue
            if fg.generation <= self.compacted and not self.listed.readable(fg.path):
                self._repair(fg, key)
                continue
            verdict = self.gates.verdict(self.sid, fg.generation)
            if verdict.reasons and self._for_writer(verdict.reasons, verdict.holders):
                self._block(fg.generation, (WRITER_LIVE, f"version {verdict.holders[0].version} is kept for the live "
                                                         "writer's view, and it has not merged this generation"))
                continue
            if verdict.reasons:
                self._block(fg.generation, tuple(verdict.reasons))
                if verdict.holders and fg.generation <= self.compacted:
                    self.held.append(HeldGeneration(self.sid, fg.generation, verdict.holders))
                continue
            merged_at = verdict.evidence.merged_at
            if self.writer.live and not self.writer.opened_after(merged_at, self.gates.grace_seconds):
                self._block(fg.generation, (WRITER_LIVE, self._writer_detail()))
                continue
            self.drain.append(fg.generation)
            self.going.add(fg.generation)
            if fg.path not in self.listed.generations:
                continue
            if self.gates.grace_seconds > 0:
                self._block(fg.generation, (DRAIN_GRACE,))
            elif self.writer.live:
                self._block(fg.generation, (WRITER_LIVE, f"{fg.path}: drained by this run, but the live writer "
                                                         "lists it in memory until its next flush"))
            else:
                self.deletions.append(GenerationDeletion(self.sid, fg.generation, fg.path, key, verdict.evidence,
                                                         self.listed.generations[fg.path]))

    def _for_writer(self, reasons: list[str], holders: list[RetainedVersion]) -> bool:
        """Whether only retained versions hold it, each kept for a live writer (not by age or a tag)."""
        return (len(reasons) == 1 and reasons[0].startswith("retained-version:") and bool(holders)
                and all(h.branch is None and h.version in self.writer_held for h in holders))

    def _repair(self, fg: FlushedGeneration, key: str) -> None:
        """A merged generation whose folder is gone or has no Lance manifest left: every
        reader fails on it now. Drained whatever the writer, and what is left of it goes."""
        self.repairs.append(fg.generation)
        self.going.add(fg.generation)
        if fg.path in self.listed.generations:
            self.deletions.append(GenerationDeletion(self.sid, fg.generation, fg.path, key, self._evidence(),
                                                     self.listed.generations[fg.path]))

    def plan_unlisted(self, safe: SafeVersions) -> None:
        """Folders the manifest no longer lists, at or below the merge progress."""
        merged = merged_through(self.compacted, self.state)
        numbers = {fg.generation for fg in self.state.flushed}
        self.going |= {g for g in range(1, merged + 1) if g not in numbers}
        for name, g in sorted(self.listed.generation_dirs().items(), key=lambda item: (item[1], item[0])):
            if g in numbers or g > merged:
                continue  # a failed attempt of a listed generation, or not merged: the orphans collector's
            try:
                key = generation_key(self.sid, name)
            except UnsafePathError as exc:
                self._block(g, (UNSAFE_PATH, str(exc)))
                continue
            pins = tuple(c.gate for c in self.gates.checkpoints if c.pins(self.sid, g))
            if pins:
                self._block(g, (*pins, name))
                self.going.discard(g)
            elif not unlisted_safely(safe, self.sid, name):
                self._block(g, (DRAIN_GRACE, name))
            elif self.writer.may_list(name):
                self._block(g, (WRITER_LIVE, f"{name}: drained, but the live writer lists it in memory until "
                                              "its next flush"))
            else:
                self.deletions.append(GenerationDeletion(self.sid, g, name, key, self._evidence(merged),
                                                         self.listed.generations[name], drained=True))

    def _evidence(self, merged: int | None = None) -> GateEvidence:
        return GateEvidence(self.compacted if merged is None else merged, {}, self.gates.shard(self.sid).low,
                            None, self.gates.grace_seconds)

    def _writer_detail(self) -> str:
        w = self.writer
        ago = "" if w.last_activity is None else f"{max(0.0, self.gates.now - w.last_activity):.0f}s ago"
        return (f"shard writer epoch {w.epoch} wrote {ago}; its view needs this merged generation listed: "
                "drained once the writer reopens or is quiet for the writer idle period")
