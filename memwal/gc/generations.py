"""The generations collector: what leaves each shard manifest, what is rolled up, which folders go,
and why the rest stay.

Planned from the latest table manifest (merge progress, catch-up), the retained versions left
after the planned expiry (gate c, :mod:`memwal.gc.versions`), the live checkpoints, each
shard's latest manifest, its writer as storage shows it (:mod:`memwal.table.writer`) and the
one listing of ``_mem_wal/`` (which folders are present, with their files: the run deletes
exactly those on an object store). A shard whose latest manifest is unknown keeps every
folder, each reported with the shard's problem.

Two questions, two sets of gates (docs/decisions/0054-rollups.md):

* **What readers list.** A listed merged generation is drained (:mod:`memwal.gc.drain`) once no
  view that reads the manifest needs it: its merge is older than the grace period (a reader that
  opened the base before the merge has listed the manifest since), the shard's writer is gone or
  opened after that merge (its base holds the rows), and the base is *proven* to hold its rows
  (:mod:`memwal.merge.proof`: progress is a claim, rows are evidence). Drains take a prefix of the
  listing: a reader reads base + every listed generation, so a listed generation older than a
  drained one would win over the drained one's newer rows in the base. What stays listed is
  rolled up (:mod:`memwal.rollup`): consecutive merged entries replaced by one, size-tiered, so a
  writer that never stops keeps a few entries listed, not every generation since it opened.
  Index catch-up, retained versions and checkpoints do not hold a listing: none of them reads the
  shard manifest (time travel reads the MemWAL index of its version, a checkpoint its record).
* **What storage keeps.** A folder goes once nothing can read it: every gate of the spec (merged,
  every maintained index caught up, every retained version merged it, no live checkpoint pins
  it), no manifest a reader may hold lists it (the newest version older than the grace period
  does not: :func:`memwal.gc.drain.unlisted_safely`), and the shard's live writer no longer lists
  it in memory. A folder above the *recorded* progress, whose progress only a drain by someone
  else shows, goes only once the base is proven to hold its rows; until then it is kept and named
  (``progress-unproven``).

Folders above the merge progress, and failed flush attempts of a generation still listed above
it, are the orphans collector's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

import pyarrow as pa

from memwal.errors import UnsafePathError
from memwal.gc.drain import SafeVersions, ShardDrain, unlisted_safely
from memwal.gc.gates import (
    DRAIN_GRACE,
    DRAIN_ORDER,
    GRACE_PERIOD,
    NOT_MERGED,
    PROGRESS_UNPROVEN,
    UNSAFE_PATH,
    WRITER_LIVE,
    Gates,
    Verdict,
    only_grace,
)
from memwal.gc.model import Blocked, BrokenShard, Deletable, GateEvidence, GenerationDeletion, Retention
from memwal.gc.proven import ProofFailure, Repair
from memwal.gc.retention import HeldGeneration, retention_report
from memwal.rollup.plan import Entry, RollupPlan, plan_rollups
from memwal.table.drain import merged_through
from memwal.table.listing import MemWalListing, ShardListing
from memwal.table.paths import generation_key
from memwal.table.retained import RetainedVersion
from memwal.table.shards import FlushedGeneration, ShardManifests, ShardState
from memwal.table.writer import WriterView

#: Told a shard, the (generation, path) entries whose rows must be in the base, and the entries
#: that supersede them (newer, still read): None when proven, else why not (and the repair).
Prover = Callable[[str, Sequence[tuple[int, str]], Sequence[tuple[int, str]]], "ProofFailure | None"]


@dataclass(frozen=True)
class GenerationsPlan:
    deletions: tuple[GenerationDeletion, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    broken: tuple[BrokenShard, ...] = ()
    retention: Retention | None = None
    #: Per shard, the generations whose WAL entries may go.
    deletable: Mapping[str, Deletable] = field(default_factory=dict)
    #: What each shard's manifest loses in this run.
    drains: tuple[ShardDrain, ...] = ()
    #: The runs of listed merged generations each replaced by one rollup in this run.
    rollups: tuple[RollupPlan, ...] = ()
    #: Rows written into the base before a drain whose proof failed (memwal.gc.proven): its drain
    #: happens only once they are committed.
    repairs: tuple[Repair, ...] = ()
    #: The shard manifests the drains are planned from (the run writes the next version of each).
    states: Mapping[str, ShardState] = field(default_factory=dict, repr=False)
    writers: Mapping[str, WriterView] = field(default_factory=dict, repr=False)

    @property
    def time_will_free(self) -> bool:
        """Whether a later run with nothing else changed would free something (grace periods only)."""
        return any(only_grace(b.reasons) for b in self.blocked)


def plan_generations(shards: ShardManifests, listing: MemWalListing, gates: Gates,
                     writers: Mapping[str, WriterView], safe: SafeVersions,
                     writer_held: frozenset[int], prove: Prover) -> GenerationsPlan:
    """Every generation's verdict, per shard (see the module docstring); ``writer_held``: the
    retained versions the version expiry keeps only for live writers; ``prove``: the proof that
    the base holds rows that leave every reader's view (no default: progress is a claim)."""
    deletions: list[GenerationDeletion] = []
    blocked: list[Blocked] = []
    broken: list[BrokenShard] = []
    held: list[HeldGeneration] = []
    deletable: dict[str, Deletable] = {}
    drains: list[ShardDrain] = []
    rollups: list[RollupPlan] = []
    repairs: list[Repair] = []
    for sid, err in shards.broken.items():
        broken.append(BrokenShard(sid, err.reason, str(err)))
        listed = listing.shards.get(sid)
        for g in sorted(set(listed.generation_dirs().values()) if listed else ()):
            blocked.append(Blocked(sid, g, err.reason, (err.reason, str(err))))
    for sid, state in shards.states.items():
        shard = _Shard(sid, state, listing.shards[sid], gates, writers[sid], writer_held, prove)
        shard.plan_listed()
        shard.plan_unlisted(safe)
        deletions += shard.deletions
        blocked += shard.blocked
        held += shard.held
        deletable[sid] = shard.deletable()
        if shard.drain or shard.repairs:
            drains.append(ShardDrain(sid, state.version, tuple(sorted(shard.drain + shard.repairs)),
                                     tuple(shard.repairs)))
        for segment in shard.kept_segments():
            rollups += plan_rollups(sid, segment)
        if shard.repair is not None:
            repairs.append(Repair(sid, shard.repair))
    return GenerationsPlan(tuple(deletions), tuple(blocked), tuple(broken), retention_report(held, gates),
                           deletable, tuple(drains), tuple(rollups), tuple(repairs), dict(shards.states),
                           dict(writers))


class _Shard:
    """One shard's plan, built by :meth:`plan_listed` then :meth:`plan_unlisted`."""

    def __init__(self, shard_id: str, state: ShardState, listed: ShardListing, gates: Gates,
                 writer: WriterView, writer_held: frozenset[int], prove: Prover) -> None:
        self.sid, self.state, self.listed, self.gates, self.writer = shard_id, state, listed, gates, writer
        self.writer_held, self.prove = writer_held, prove
        self.compacted = gates.latest.compacted_generation(shard_id)
        self.deletions: list[GenerationDeletion] = []
        self.blocked: list[Blocked] = []
        self.held: list[HeldGeneration] = []
        self.drain: list[int] = []
        self.repairs: list[int] = []
        #: Merged entries that stay listed, in manifest order (what may be rolled up), each with
        #: whether it was merged since the live writer claimed its epoch (:meth:`kept_segments`).
        self.kept_listed: list[tuple[Entry, bool]] = []
        #: Generations at or below the merge progress whose WAL entries stay (unproven, pinned).
        self.kept_wal: set[int] = set()
        #: Rows the base needs before this shard's drain (its proof failed, repairably).
        self.repair: pa.Table | None = None

    def _block(self, g: int, reasons: tuple[str, ...]) -> None:
        self.blocked.append(Blocked(self.sid, g, reasons[0], reasons))

    def deletable(self) -> Deletable:
        merged = merged_through(self.compacted, self.state)
        listed = {fg.generation for fg in self.state.flushed}
        return Deletable(merged, frozenset(listed - set(self.drain) - set(self.repairs)) | frozenset(self.kept_wal),
                         frozenset(self.drain + self.repairs))

    # -- what readers list -------------------------------------------------------------

    def plan_listed(self) -> None:
        """The generations the manifest lists: the drain prefix (its folders deleted now or
        later), then what stays listed (rolled up when merged), each with why it stays."""
        candidates: list[tuple[FlushedGeneration, str, Verdict]] = []
        stays: list[tuple[FlushedGeneration, tuple[str, ...], Verdict]] = []
        first_kept: int | None = None
        for fg in self.state.flushed:
            try:
                key = generation_key(self.sid, fg.path)
            except UnsafePathError as exc:
                self._block(fg.generation, (UNSAFE_PATH, str(exc)))
                first_kept = fg.generation if first_kept is None else first_kept
                continue
            if fg.generation <= self.compacted and not self.listed.readable(fg.path):
                self._repair(fg, key)
                continue
            verdict = self.gates.verdict(self.sid, fg.generation)
            why = self._listing_needed(fg, verdict)
            if first_kept is None and not why:
                candidates.append((fg, key, verdict))
                continue
            if not why:
                why = (DRAIN_ORDER, f"generation {first_kept} stays listed, and a reader would read it over "
                                    "this one's newer rows in the base table")
            first_kept = fg.generation if first_kept is None else first_kept
            stays.append((fg, why, verdict))
        if candidates and not self.repairs:
            # (a merged generation gone from storage leaves the base the only copy of its rows:
            # nothing can be proven, and readers fail on it now, so its drain is the repair)
            unproven = self.prove(self.sid, [(fg.generation, fg.path) for fg, _, _ in candidates],
                                  [(fg.generation, fg.path) for fg, _, _ in stays])
            if unproven is not None and unproven.repair is not None and self._complete():
                self.repair = unproven.repair  # the drain waits for it (memwal.gc.run)
            elif unproven is not None:
                stays = [(fg, (PROGRESS_UNPROVEN, unproven.detail), verdict) for fg, _, verdict in candidates] + stays
                candidates = []
        for fg, key, verdict in candidates:
            self._drained(fg, key, verdict)
        for fg, why, verdict in stays:
            self._block(fg.generation, why)
            if fg.generation <= self.compacted:
                self.kept_listed.append((Entry(fg.generation, fg.path, self.listed.bytes_under(fg.path)),
                                         self.writer.live and self.writer.claimed_before(verdict.evidence.merged_at)))

    def kept_segments(self) -> list[list[Entry]]:
        """The merged entries that stay listed, split where the live writer claimed its epoch.
        A rollup is listed under its newest merge and leaves the listing once a writer opened
        the grace period after that merge; one that went on taking each new merge in would
        never leave it, however often the writer is replaced (the remedy docs/clients.md gives).
        Split there, what was merged before the live writer opened stays in rollups of its own
        and leaves the listing at the next writer's open."""
        return [[entry for entry, _ in run] for _, run in groupby(self.kept_listed, key=lambda kept: kept[1])]

    def _complete(self) -> bool:
        """Whether the manifest lists every generation from its lowest to the last flushed: only
        then is a key's newest listed version its newest version, what a repair may write."""
        listed = [fg.generation for fg in self.state.flushed]
        return bool(listed) and listed == list(range(listed[0], listed[0] + len(listed))) \
            and listed[-1] == self.state.current_generation - 1

    def _listing_needed(self, fg: FlushedGeneration, verdict: Verdict) -> tuple[str, ...]:
        """Why a reader still needs ``fg`` listed (empty: it may be drained)."""
        if fg.generation > self.compacted:
            return tuple(verdict.reasons) or (NOT_MERGED,)
        if GRACE_PERIOD in verdict.reasons:
            return (GRACE_PERIOD,)
        if self.writer.live and not self.writer.opened_after(verdict.evidence.merged_at, self.gates.grace_seconds):
            return (WRITER_LIVE, self._writer_detail())
        return ()

    def _drained(self, fg: FlushedGeneration, key: str, verdict: Verdict) -> None:
        """``fg`` leaves the manifest in this run; its folder goes now only if every storage
        gate lets it, no grace period is asked for and no live writer lists it in memory."""
        self.drain.append(fg.generation)
        if fg.path not in self.listed.generations:
            return
        reasons = self._storage_gates(fg.generation, verdict)
        if reasons:
            self._block(fg.generation, reasons)
        elif self.gates.grace_seconds > 0:
            self._block(fg.generation, (DRAIN_GRACE,))
        elif self.writer.live:
            self._block(fg.generation, (WRITER_LIVE, f"{fg.path}: drained by this run, but the live writer "
                                                     "lists it in memory until its next flush"))
        else:
            self.deletions.append(GenerationDeletion(self.sid, fg.generation, fg.path, key, verdict.evidence,
                                                     self.listed.generations[fg.path]))

    def _storage_gates(self, g: int, verdict: Verdict) -> tuple[str, ...]:
        """The gates of the spec that keep a merged generation's folder (index catch-up, retained
        versions, checkpoints). A retained version the expiry keeps only for a live writer does
        not count: the writer reads its base at that version, and of the generations only what
        it lists (:meth:`WriterView.may_list`), never a snapshot of that version."""
        reasons = [r for r in verdict.reasons if r not in (GRACE_PERIOD, NOT_MERGED)
                   and not r.startswith("retained-version:")]
        holders = [h for h in verdict.holders if not self._for_writer(h)]
        if holders:
            reasons.append(f"retained-version:{holders[0].describe()}")
            self.held.append(HeldGeneration(self.sid, g, holders))
        return tuple(reasons)

    def _for_writer(self, holder: RetainedVersion) -> bool:
        """Whether a retained version is kept only for a live writer's view (not by age or a tag)."""
        return holder.branch is None and holder.version in self.writer_held and not holder.tags

    def _repair(self, fg: FlushedGeneration, key: str) -> None:
        """A merged generation whose folder is gone or has no Lance manifest left: every
        reader fails on it now. Drained whatever the writer, and what is left of it goes."""
        self.repairs.append(fg.generation)
        if fg.path in self.listed.generations:
            self.deletions.append(GenerationDeletion(self.sid, fg.generation, fg.path, key, self._evidence(),
                                                     self.listed.generations[fg.path]))

    # -- what storage keeps ------------------------------------------------------------

    def plan_unlisted(self, safe: SafeVersions) -> None:
        """Folders the manifest no longer lists, at or below the merge progress: drained (by us
        or another compactor), replaced by a rollup, or a failed flush attempt of a generation
        merged since."""
        merged = merged_through(self.compacted, self.state)
        paths = {fg.path for fg in self.state.flushed}
        rolled = {fg.generation for fg in self.state.flushed if self.listed.is_rollup(fg.path)}
        numbers = {fg.generation for fg in self.state.flushed}
        inferred: list[tuple[int, str, str]] = []
        for name, g in sorted(self.listed.generation_dirs().items(), key=lambda item: (item[1], item[0])):
            if name in paths or g > merged or (g in numbers and g not in rolled):
                continue  # listed; not merged; a failed flush attempt of a listed generation: the orphans collector's
            try:
                key = generation_key(self.sid, name)
            except UnsafePathError as exc:
                self._block(g, (UNSAFE_PATH, str(exc)))
                self.kept_wal.add(g)
                continue
            if g <= self.compacted:
                reasons = self._storage_gates(g, self.gates.verdict(self.sid, g))
            else:  # merged by someone else, as a drain shows: no recorded progress or catch-up to judge
                reasons = tuple(c.gate for c in self.gates.checkpoints if c.pins(self.sid, g))
            if g > self.compacted:
                self.kept_wal.add(g)  # its WAL entries are evidence too, until its rows are proven
            if reasons:
                self._block(g, (*reasons, name))
                if any(r.startswith("checkpoint:") for r in reasons):
                    self.kept_wal.add(g)
            elif not unlisted_safely(safe, self.sid, name):
                self._block(g, (DRAIN_GRACE, name))
            elif self.writer.may_list(name):
                self._block(g, (WRITER_LIVE, f"{name}: no longer listed, but the live writer lists it in memory "
                                              "until its next flush"))
            elif g > self.compacted:
                inferred.append((g, name, key))
            else:
                self._delete_unlisted(g, name, key, merged)
        if inferred:
            self._prove_inferred(inferred, merged)

    def _prove_inferred(self, folders: list[tuple[int, str, str]], merged: int) -> None:
        """Folders above the recorded progress go only once the base holds their rows (issue 56:
        a drain anyone can write is a claim); the newer folders another compactor merged, and
        every listed generation, supersede them."""
        going = {name for _, name, _ in folders}
        newer = [(g, name) for name, g in self.listed.generation_dirs().items()
                 if name not in going and self.compacted < g <= merged and g > min(f[0] for f in folders)]
        listed = [(fg.generation, fg.path) for fg in self.state.flushed]
        unproven = self.prove(self.sid, [(g, name) for g, name, _ in folders], sorted(newer) + listed)
        for g, name, key in folders:
            if unproven is None:
                self._delete_unlisted(g, name, key, merged)
                self.kept_wal.discard(g)
            else:
                self._block(g, (PROGRESS_UNPROVEN, f"{name}: merged by a drain only, and {unproven.detail}"))

    def _delete_unlisted(self, g: int, name: str, key: str, merged: int) -> None:
        self.deletions.append(GenerationDeletion(self.sid, g, name, key, self._evidence(merged),
                                                 self.listed.generations[name], drained=True))

    def _evidence(self, merged: int | None = None) -> GateEvidence:
        return GateEvidence(self.compacted if merged is None else merged, {}, self.gates.shard(self.sid).low,
                            None, self.gates.grace_seconds)

    def _writer_detail(self) -> str:
        w = self.writer
        ago = "" if w.last_activity is None else f"{max(0.0, self.gates.now - w.last_activity):.0f}s ago"
        return (f"shard writer epoch {w.epoch} wrote {ago}; its view needs this merged generation listed: "
                "kept listed (rolled up) until the writer reopens or is quiet for the writer idle period")


__all__ = ["GenerationsPlan", "Prover", "plan_generations"]
