"""What one shard's GC plan holds while it is built, and the questions both halves ask.

:mod:`memwal.gc.generations` plans a shard in two halves, what readers list and what storage
keeps; both record deletions and blocked generations here, name a folder to the proof
(:meth:`ShardBase.entry`: a rollup stands for the generations it replaced), ask the storage gates
of the spec, and read which merged generations are on storage for a proof to read back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from memwal.gc.gates import Gates
from memwal.gc.model import Blocked, Deletable, GateEvidence, GenerationDeletion
from memwal.gc.proven import Prover
from memwal.gc.retention import RETAINED_VERSION, HeldGeneration
from memwal.gc.versions import Holders, VersionProgress
from memwal.merge.cover import Entry
from memwal.rollup.plan import Entry as RollupEntry
from memwal.table.drain import merged_through
from memwal.table.listing import ShardListing
from memwal.table.shards import ShardState
from memwal.table.writer import WriterView


class ShardBase:
    """One shard's plan in the making (see the module docstring)."""

    def __init__(self, shard_id: str, state: ShardState, listed: ShardListing, gates: Gates,
                 writer: WriterView, writer_held: frozenset[int], prove: Prover) -> None:
        self.sid, self.state, self.listed, self.gates, self.writer = shard_id, state, listed, gates, writer
        self.writer_held, self.prove = writer_held, prove
        self.compacted = gates.latest.compacted_generation(shard_id)
        self.deletions: list[GenerationDeletion] = []
        self.blocked: list[Blocked] = []
        self.held: list[HeldGeneration] = []
        self._writer_mask: tuple[VersionProgress, np.ndarray] | None = None
        self.drain: list[int] = []
        #: Merged generations listed whose folder is gone (readers fail on them now): drained.
        self.gone: list[int] = []
        #: Merged entries that stay listed, in manifest order (what may be rolled up), each with
        #: whether it was merged since the live writer claimed its epoch, and whether it may be
        #: rolled up at all (one whose rows are unproven stays as it is: :meth:`kept_segments`).
        self.kept_listed: list[tuple[RollupEntry, bool, bool]] = []
        #: Generations at or below the merge progress whose WAL entries stay (unproven, pinned).
        self.kept_wal: set[int] = set()
        #: Older generations kept as the evidence that a newer one's rows were reverted since.
        self.evidence: dict[int, int] = {}
        self._present: _Present | None = None

    def _block(self, g: int, reasons: tuple[str, ...], then: tuple[str, ...] = (),
               then_versions_at: float | None = None) -> None:
        self.blocked.append(Blocked(self.sid, g, reasons[0], reasons, then=then, then_versions_at=then_versions_at))

    def deletable(self) -> Deletable:
        """The generations whose WAL entries may go: a WAL entry goes with its generation's
        folder (this run deletes it, or it is gone), never while the folder is kept (a tag, an
        index not caught up, a proof that failed): docs/concepts/gc.md."""
        merged = merged_through(self.compacted, self.state)
        listed = {fg.generation for fg in self.state.flushed}
        on_storage = set(self.listed.generation_dirs().values())
        going = {d.generation for d in self.deletions}
        staying = on_storage - going
        leaving = set(self.drain + self.gone)
        return Deletable(merged, frozenset((listed - leaving) | self.kept_wal | staying),
                         frozenset(g for g in leaving if g not in staying))

    def drained_paths(self) -> list[tuple[int, str]]:
        """What this run's drain takes out of the manifest, entry by entry (generation, path)."""
        leaving = set(self.drain + self.gone)
        return [(fg.generation, fg.path) for fg in self.state.flushed if fg.generation in leaving]

    def present(self) -> Mapping[int, str]:
        """Each merged generation on storage, by number: the folder the manifest lists, else the
        one folder of that number that is not a rollup (several: none, nothing can be read back).
        Found at the first question: telling a folder readable walks its files, a week's retention
        keeps tens of thousands, and a proof by receipts alone never asks (issue 82)."""
        if self._present is None:
            self._present = _Present(self._present_now)
        return self._present

    def _present_now(self) -> dict[int, str]:
        by_number: dict[int, list[str]] = {}
        for name, g in self.listed.generation_dirs().items():
            if self.listed.readable(name) and not self.listed.is_rollup(name):
                by_number.setdefault(g, []).append(name)
        out = {g: names[0] for g, names in by_number.items() if len(names) == 1}
        out.update({fg.generation: fg.path for fg in self.state.flushed
                    if self.listed.readable(fg.path) and not self.listed.is_rollup(fg.path)})
        return out

    def _entry(self, g: int, path: str) -> Entry:
        """The proof's entry for a folder: a rollup stands for the generations it replaced."""
        return Entry(g, path, self.prove.stands_from(self.sid, path, g) if self.listed.is_rollup(path) else None)

    # -- what readers list -------------------------------------------------------------

    def _storage_gates(self, gs: Sequence[int]) -> list[tuple[str, ...]]:
        """The gates of the spec that keep each merged generation's folder in ``gs`` (index
        catch-up, checkpoints, retained versions), the held ones recorded for the retention
        report. A retained version the expiry keeps only for a live writer does not count: the
        writer reads its base at that version, and of the generations only what it lists
        (:meth:`WriterView.may_list`), never a snapshot of that version."""
        out = []
        retained = f"{RETAINED_VERSION}:"
        for g, (reasons, holders) in zip(gs, self._folder_gates(gs), strict=True):
            if holders:
                # the holders' gate is the last of a held folder's (_folder_gates): no pass over each
                # folder's gates to find it (a week's retention holds tens of thousands of folders)
                others = reasons[:-1] if reasons[-1].startswith(retained) else \
                    tuple(r for r in reasons if not r.startswith(retained))
                self.held.append(HeldGeneration(self.sid, g, holders, others))
            out.append(reasons)
        return out

    def _folder_gates(self, gs: Sequence[int]) -> list[tuple[tuple[str, ...], Holders]]:
        """:meth:`_storage_gates` without recording the holders, each generation's gates with
        its holders. The gates of :func:`memwal.gc.gates.verdict_of` a folder faces (not the
        merge, not the grace period), asked of many generations at once: a whole GC asks them of
        every folder a week's retention keeps (issue 82), so the holders are counted with one
        binary search over the versions for all of them, and each holder described once."""
        gates = self.gates
        progress = gates.shard(self.sid)
        caught = [(name, gates.latest.index_catchup.get(name, {}).get(self.sid, 0)) for name in gates.indexes]
        pins = [c for c in gates.checkpoints if any(c.pins(self.sid, g) for g in gs)]
        mask = self._for_writer()
        numbers = np.asarray(gs, dtype=np.int64)
        above = numbers > progress.low  # at or below every version's progress: no version holds it
        ranked = progress.ranked(mask) if above.any() else None
        counts = np.zeros(len(numbers), dtype=np.intp) if ranked is None else \
            np.where(above, ranked.values.searchsorted(numbers, side="left"), 0)
        described: dict[int, str] = {}
        out = []
        for g, n in zip(gs, counts.tolist(), strict=True):
            reasons = [f"index-not-caught-up:{name}" for name, at in caught if g > at]
            reasons += [c.gate for c in pins if c.pins(self.sid, g)]
            if n and ranked is not None:
                i = int(ranked.oldest[n - 1])
                if i not in described:
                    described[i] = f"{RETAINED_VERSION}:{progress.versions[i].describe()}"
                reasons.append(described[i])
            out.append((tuple(reasons), Holders(progress, g, mask, count=n)))
        return out

    def then_gates(self, g: int) -> tuple[tuple[str, ...], float | None]:
        """The storage gates a merged generation kept listed will still face once it leaves the
        listing (retained versions hold folders, not the listing: they are not its blockers now,
        but its wait is not over before they pass), and when the newest retained version that
        holds it was committed, when only their age keeps them all (None: a tag, a branch or a
        checkpoint keeps one, or none holds it): version expiry frees it that long after."""
        [(reasons, holders)] = self._folder_gates([g])
        return reasons, holders.aged_since()

    def _for_writer(self) -> np.ndarray:
        """Which retained versions are kept only for a live writer's view (not by age or a tag),
        one bool each, worked out once per shard: one mask object, so that the holders of every
        generation are answered from one order of the versions
        (:meth:`memwal.gc.versions.ShardProgress.ranked`)."""
        progress = self.gates.progress
        if self._writer_mask is None or self._writer_mask[0] is not progress:
            self._writer_mask = (progress, progress.kept_for_writers(self.writer_held))
        return self._writer_mask[1]

    def _evidence(self, merged: int | None = None) -> GateEvidence:
        return GateEvidence(self.compacted if merged is None else merged, {}, self.gates.shard(self.sid).low,
                            None, self.gates.grace_seconds)


class _Present(Mapping[int, str]):
    """:meth:`ShardBase.present`, worked out when first asked."""

    def __init__(self, find: Callable[[], dict[int, str]]) -> None:
        self._find = find
        self._found: dict[int, str] | None = None

    @property
    def _map(self) -> dict[int, str]:
        if self._found is None:
            self._found = self._find()
        return self._found

    def __getitem__(self, g: int) -> str:
        return self._map[g]

    def __iter__(self) -> Iterator[int]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)


__all__ = ["ShardBase"]
