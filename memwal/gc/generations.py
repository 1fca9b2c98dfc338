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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby

from memwal.errors import UnsafePathError
from memwal.gc.drain import SafeVersions, ShardDrain, unlisted_safely
from memwal.gc.gates import (
    DRAIN_GRACE,
    DRAIN_ORDER,
    GRACE_PERIOD,
    LISTED_ONLY,
    NOT_MERGED,
    PROGRESS_UNPROVEN,
    UNSAFE_PATH,
    WRITER_LIVE,
    Gates,
    Verdict,
    only_grace,
)
from memwal.gc.model import Blocked, BrokenShard, Deletable, GenerationDeletion, Retention
from memwal.gc.proven import Prover
from memwal.gc.retention import HeldGeneration, retention_report
from memwal.gc.shard_base import ShardBase
from memwal.rollup.plan import Entry as RollupEntry
from memwal.rollup.plan import RollupPlan, plan_heals, plan_rollups
from memwal.table.drain import merged_through
from memwal.table.listing import MemWalListing
from memwal.table.paths import generation_key
from memwal.table.shards import FlushedGeneration, ShardManifests, ShardState
from memwal.table.writer import WriterView


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
    #: The shard manifests the drains are planned from (the run writes the next version of each).
    states: Mapping[str, ShardState] = field(default_factory=dict, repr=False)
    writers: Mapping[str, WriterView] = field(default_factory=dict, repr=False)
    #: When the next listed generation with no key index, flushed too recently to be rewritten
    #: now, may be (a Unix time; None: none waits): a follower runs GC again then.
    heal_at: float | None = None

    @property
    def time_will_free(self) -> bool:
        """Whether a later run with nothing else changed would free something (grace periods only)."""
        return any(only_grace(b.reasons) for b in self.blocked)


def plan_generations(shards: ShardManifests, listing: MemWalListing, gates: Gates,
                     writers: Mapping[str, WriterView], safe: SafeVersions,
                     writer_held: frozenset[int], prove: Prover, *, listed_only: bool = False) -> GenerationsPlan:
    """Every generation's verdict, per shard (see the module docstring); ``writer_held``: the
    retained versions the version expiry keeps only for live writers; ``prove``: the proof that
    the base holds rows that leave every reader's view (no default: progress is a claim).

    ``listed_only``: ``listing`` holds the listed generations' folders only (a listing pass):
    what stays listed is rolled up and healed as in a whole run, nothing is drained (a drain is
    proven, and a proof reads every folder its version covers: :data:`LISTED_ONLY`) and no folder
    is judged for deletion."""
    deletions: list[GenerationDeletion] = []
    blocked: list[Blocked] = []
    broken: list[BrokenShard] = []
    held: list[HeldGeneration] = []
    deletable: dict[str, Deletable] = {}
    drains: list[ShardDrain] = []
    rollups: list[RollupPlan] = []
    heal_at: list[float] = []
    for sid, err in shards.broken.items():
        broken.append(BrokenShard(sid, err.reason, str(err)))
        listed = listing.shards.get(sid)
        for g in sorted(set(listed.generation_dirs().values()) if listed else ()):
            blocked.append(Blocked(sid, g, err.reason, (err.reason, str(err))))
    for sid, state in shards.states.items():
        shard = _Shard(sid, state, listing.shards[sid], gates, writers[sid], writer_held, prove)
        shard.plan_listed(listed_only=listed_only)
        if not listed_only:
            shard.plan_unlisted(safe)
        deletions += shard.deletions
        blocked += shard.blocked
        held += shard.held
        deletable[sid] = shard.deletable()
        if shard.drain or shard.gone:
            drains.append(ShardDrain(sid, state.version, tuple(sorted(shard.drain + shard.gone)),
                                     tuple(shard.gone), tuple(shard.drained_paths())))
        mine = [r for segment in shard.kept_segments() for r in plan_rollups(sid, segment)]
        unindexed, pending = shard.unindexed()
        rollups += mine + plan_heals(sid, unindexed, mine)
        heal_at += pending
    return GenerationsPlan(tuple(deletions), tuple(blocked), tuple(broken), retention_report(held, gates),
                           deletable, tuple(drains), tuple(rollups), dict(shards.states),
                           dict(writers), min(heal_at, default=None))


#: Seconds after its flush before a listed generation with no key index is rewritten with one.
#: A flush writes the key index after the generation's Lance manifest, or never (lance#9035):
#: measured 1-13 ms after it (median 5 ms, 149 of 150 flushes of pylance 14's writer; the other
#: never), so two seconds leave a busy machine's flush 150 times that and every list reader, which
#: fails while such a generation is listed, waits seconds, not minutes. Rewriting one that was
#: about to get its index costs a rewrite of one small generation, never a row.
HEAL_AFTER = 2.0


class _Shard(ShardBase):
    """One shard's plan, built by :meth:`plan_listed` then :meth:`plan_unlisted`."""

    def plan_listed(self, *, listed_only: bool = False) -> None:
        """The generations the manifest lists: the drain prefix, proven (its folders deleted now
        or later), then what stays listed (rolled up when merged), each with why it stays.
        ``listed_only``: the drain prefix stays as it is (neither drained nor rolled up)."""
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
                self._gone(fg, key)
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
        unproven: set[int] = set()
        as_is: set[int] = set()  # left to a whole run: neither drained nor rolled up
        if listed_only and candidates:
            why = (LISTED_ONLY, "every gate lets it leave the listing; a listing pass drains nothing (a drain is "
                                "proven by reading back every folder its version covers): the next whole GC run does")
            stays = [*((fg, why, verdict) for fg, _, verdict in candidates), *stays]
            as_is = {fg.generation for fg, _, _ in candidates}
            candidates = []
        if candidates:
            entries = [self._entry(fg.generation, fg.path) for fg, _, _ in candidates]
            judged = self.prove.judge(self.sid, entries, self.present(),
                                      [(fg.generation, fg.path) for fg, _, _ in stays])
            verdicts = [judged.get(e) for e in entries]
            cut = next((i for i, j in enumerate(verdicts) if j is None or not j.proven), None)
            if cut is not None:
                first = candidates[cut][0].generation
                kept: list[tuple[FlushedGeneration, tuple[str, ...], Verdict]] = []
                for (fg, _key, verdict), j in zip(candidates[cut:], verdicts[cut:], strict=True):
                    if j is not None and j.proven:
                        kept.append((fg, (DRAIN_ORDER, f"generation {first} stays listed (its rows are unproven), "
                                                       "and a reader would read it over this one's newer rows in "
                                                       "the base table"), verdict))
                        continue
                    unproven.add(fg.generation)
                    for g in (j.evidence if j is not None else ()):
                        self.evidence.setdefault(g, fg.generation)
                    kept.append((fg, (PROGRESS_UNPROVEN, j.detail if j is not None else "not judged"), verdict))
                stays = [*kept, *stays]
                candidates = candidates[:cut]
        for fg, key, verdict in candidates:
            self._drained(fg, key, verdict)
        for fg, why, verdict in stays:
            if fg.generation <= self.compacted and why[0] in (GRACE_PERIOD, WRITER_LIVE):
                self._block(fg.generation, why, *self.then_gates(fg.generation))  # the wait past the listing too
            else:
                self._block(fg.generation, why)
            if fg.generation <= self.compacted:
                self.kept_listed.append((RollupEntry(fg.generation, fg.path, self.listed.bytes_under(fg.path),
                                                     fg.in_memory_bytes),
                                         self.writer.live and self.writer.claimed_before(verdict.evidence.merged_at),
                                         fg.generation not in unproven | as_is))
        self.kept_wal |= unproven

    def unindexed(self) -> tuple[list[RollupEntry], list[float]]:
        """Listed generations that stay listed with no key index, flushed at least
        :data:`HEAL_AFTER` seconds ago (a flush may still be writing it): each is rewritten with
        one; and when each younger one may be (a run then heals it)."""
        leaving = set(self.drain + self.gone)
        out: list[RollupEntry] = []
        pending: list[float] = []
        for fg in self.state.flushed:
            flushed = self.listed.flushed_at(fg.path)
            if fg.generation in leaving or flushed is None or self.listed.key_indexed(fg.path):
                continue
            if self.gates.now - flushed >= HEAL_AFTER:
                out.append(RollupEntry(fg.generation, fg.path, self.listed.bytes_under(fg.path), fg.in_memory_bytes))
            else:
                pending.append(flushed + HEAL_AFTER)
        return out, pending

    def kept_segments(self) -> list[list[RollupEntry]]:
        """The merged entries that stay listed, in runs that may be rolled up: split where the
        live writer claimed its epoch, and at every entry whose rows are unproven (it stays as it
        is, for ``memwal repair`` to read). A rollup is listed under its newest merge and leaves
        the listing once a writer opened the grace period after that merge; one that went on
        taking each new merge in would never leave it, however often the writer is replaced (the
        remedy docs/clients.md gives). Split there, what was merged before the live writer opened
        stays in rollups of its own and leaves the listing at the next writer's open.

        Not split while the live writer has one flush merged since it opened: a client that opens
        a writer for each write (LanceDB claims an epoch at every ``add``) has exactly that, and
        kept its one flush apart from the rollup before it, one entry more listed at every moment
        (the listing median 4 beside LanceDB, 3 beside pylance: docs/decisions/0062, section 11).
        One small flush does not take in a large rollup before it (the tiers), so what a replaced
        writer left still leaves at the next open; only a last tier of at most :data:`memwal.rollup.plan.RATIO` times
        that flush goes with the new writer's rows."""
        kept = self.kept_listed
        after = [entry for entry, after_claim, _ in kept if after_claim]
        if len(after) == 1 and not self.listed.is_rollup(after[0].path):
            kept = [(entry, False, rollable) for entry, _, rollable in kept]
        runs = groupby(kept, key=lambda kept: (kept[1], kept[2]))
        return [[entry for entry, _, _ in run] for (_, rollable), run in runs if rollable]

    def _listing_needed(self, fg: FlushedGeneration, verdict: Verdict) -> tuple[str, ...]:
        """Why a reader still needs ``fg`` listed (empty: it may be drained)."""
        if fg.generation > self.compacted:
            return tuple(verdict.reasons) or (NOT_MERGED,)
        # every gate that holds the listing now, so that what is said of it holds after the first passes
        waits: tuple[str, ...] = (GRACE_PERIOD,) if GRACE_PERIOD in verdict.reasons else ()
        if self.writer.live and not self.writer.opened_after(verdict.evidence.merged_at, self.gates.grace_seconds):
            return (*waits, WRITER_LIVE, self._writer_detail())
        return waits

    def _drained(self, fg: FlushedGeneration, key: str, verdict: Verdict) -> None:
        """``fg`` leaves the manifest in this run; its folder goes now only if every storage
        gate lets it, no grace period is asked for and no live writer lists it in memory."""
        self.drain.append(fg.generation)
        if fg.path not in self.listed.generations:
            return
        [reasons] = self._storage_gates([fg.generation])
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

    def _gone(self, fg: FlushedGeneration, key: str) -> None:
        """A merged generation whose folder is gone or has no Lance manifest left: every
        reader fails on it now. Drained whatever the writer, and what is left of it goes (the
        run looks again under its lease first: a folder a concurrent rollup was still copying)."""
        self.gone.append(fg.generation)
        if fg.path in self.listed.generations:
            self.deletions.append(GenerationDeletion(self.sid, fg.generation, fg.path, key, self._evidence(),
                                                     self.listed.generations[fg.path]))

    # -- what storage keeps ------------------------------------------------------------

    def plan_unlisted(self, safe: SafeVersions) -> None:
        """Folders the manifest no longer lists, at or below the merge progress: drained (by us
        or another compactor), replaced by a rollup, or a failed flush attempt of a generation
        merged since. Each goes only once its rows are proven in the base (a drain is a claim)."""
        merged = merged_through(self.compacted, self.state)
        paths = {fg.path for fg in self.state.flushed}
        rolled = {fg.generation for fg in self.state.flushed if self.listed.is_rollup(fg.path)}
        numbers = {fg.generation for fg in self.state.flushed}
        inferred: list[tuple[int, str, str]] = []
        going: list[tuple[int, str, str]] = []
        folders: list[tuple[int, str, str]] = []
        for name, g in sorted(self.listed.generation_dirs().items(), key=lambda item: (item[1], item[0])):
            if name in paths or g > merged or (g in numbers and g not in rolled):
                continue  # listed; not merged; a failed flush attempt of a listed generation: the orphans collector's
            try:
                folders.append((g, name, generation_key(self.sid, name)))
            except UnsafePathError as exc:
                self._block(g, (UNSAFE_PATH, str(exc)))
                self.kept_wal.add(g)
        # the folders a recorded merge covers, their gates asked at once (a week keeps thousands)
        judged = iter(self._storage_gates([g for g, _, _ in folders if g <= self.compacted]))
        for g, name, key in folders:
            if g <= self.compacted:
                reasons = next(judged)
            else:  # merged by someone else, as a drain shows: no recorded progress or catch-up to judge
                reasons = tuple(c.gate for c in self.gates.checkpoints if c.pins(self.sid, g))
            if g > self.compacted:
                self.kept_wal.add(g)  # its WAL entries are evidence too, until its rows are proven
            if reasons:
                self._block(g, (*reasons, name))
                if self.gates.checkpoints and any(r.startswith("checkpoint:") for r in reasons):
                    self.kept_wal.add(g)
            elif g in self.evidence:
                self._block(g, (PROGRESS_UNPROVEN, f"{name}: the evidence that generation {self.evidence[g]}'s rows "
                                                   "were reverted in the base since its merge (memwal repair)"))
                self.kept_wal.add(g)
            elif not unlisted_safely(safe, self.sid, name):
                self._block(g, (DRAIN_GRACE, name))
            elif self.writer.may_list(name):
                self._block(g, (WRITER_LIVE, f"{name}: no longer listed, but the live writer lists it in memory "
                                              "until its next flush"))
            elif g > self.compacted:
                inferred.append((g, name, key))
            else:
                going.append((g, name, key))
        if going:
            self._prove_unlisted(going, merged)
        if inferred:
            self._prove_inferred(inferred, merged)

    def _prove_unlisted(self, folders: list[tuple[int, str, str]], merged: int) -> None:
        """Folders at or below the recorded progress go once their rows are proven at their proof
        point: whoever drained them (a drain is a claim: issue 61, someone's drain of generations
        never merged, then a merge recorded progress above them)."""
        entries = {(g, name): self._entry(g, name) for g, name, _ in folders}
        judged = self.prove.judge(self.sid, list(entries.values()), self.present())
        for g, name, key in folders:
            j = judged.get(entries[(g, name)])
            if j is not None and j.proven:
                self._delete_unlisted(g, name, key, merged)
            else:
                self._block(g, (PROGRESS_UNPROVEN, f"{name}: {j.detail if j is not None else 'not judged'}"))
                self.kept_wal.add(g)

    def _prove_inferred(self, folders: list[tuple[int, str, str]], merged: int) -> None:
        """Folders above the recorded progress go only once the base holds their rows (issue 56:
        a drain anyone can write is a claim); the newer folders another compactor merged, and
        every listed generation, supersede them."""
        going = {name for _, name, _ in folders}
        newer = [(g, name) for name, g in self.listed.generation_dirs().items()
                 if name not in going and self.compacted < g <= merged and g > min(f[0] for f in folders)]
        listed = [(fg.generation, fg.path) for fg in self.state.flushed]
        why = self.prove.latest(self.sid, [(g, name) for g, name, _ in folders], sorted(newer) + listed)
        for g, name, key in folders:
            if why is None:
                self._delete_unlisted(g, name, key, merged)
                self.kept_wal.discard(g)
            else:
                self._block(g, (PROGRESS_UNPROVEN, f"{name}: merged by a drain only, and {why}"))

    def _delete_unlisted(self, g: int, name: str, key: str, merged: int) -> None:
        self.deletions.append(GenerationDeletion(self.sid, g, name, key, self._evidence(merged),
                                                 self.listed.generations[name], drained=True))

    def _writer_detail(self) -> str:
        w = self.writer
        ago = "" if w.last_activity is None else f"{max(0.0, self.gates.now - w.last_activity):.0f}s ago"
        until = "" if w.quiet_at is None else f" (by {_clock(w.quiet_at)} if it writes nothing more)"
        return (f"shard writer epoch {w.epoch} wrote {ago}; its view needs this merged generation listed: "
                f"kept listed (rolled up) until the writer reopens or is quiet for --writer-idle-seconds{until}; "
                "a closed writer leaves no trace a quiet one does not: say so with memwal writers TABLE --closed "
                "SHARD, or set --writer-idle-seconds to the longest a writer of this table stays open without "
                "writing")


def _clock(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


__all__ = ["GenerationsPlan", "plan_generations"]
