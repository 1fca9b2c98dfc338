"""Which runs of listed merged generations become one rollup: size-tiered, newest first.

What a listed generation costs a reader is mostly its open (its Lance manifest, primary-key index
and bloom filter), not its rows (docs/decisions/0054-rollups.md), so the count is what to bound.
Rewriting a run costs its rows, and a writer that never reopens keeps every row merged since it
opened listed; so the runs are tiered: walking from the newest entry back, an entry joins the
newer ones when it is at most a ratio times their size. Entries then grow by more than the ratio
going back, and a shard lists at most about ``log(total / smallest) / log(ratio + 1) + 1`` merged
entries, while a row is rewritten each time the entries newer than its own reach a ``1 / ratio``
of it.

The size is the rows' decoded size, the writer's own figure in the shard manifest
(``in_memory_bytes``; memwal's rollups record it too), compared at :data:`DECODED_RATIO`, when
every entry compared has it; else the bytes the one listing of ``_mem_wal/`` found under each
folder, at :data:`RATIO` (Lance 9 writers leave the figure out). Bytes on disk do not measure rows
for small flushes: a pylance 14 folder's bloom filter and key index are some 39 KB however few its
rows (a flush of 50 rows of two integers: 38.9 KB; a rollup of 3,600: 115 KB), so tiered by bytes
a rollup took in every new flush, and each listing pass rewrote every row merged since the writer
opened, its cost growing with the writer's age (issue 82). Tiered by decoded size at a ratio of 4
a pass rewrote a tenth of the rows, but a shard listed one tier more (issue 62's median of 3
listed became 4); at 32 a shard lists no more than by bytes (fewer: four entries in 9% of the
samples beside pylance, against 20%), and a pass rewrites a third to two thirds of the rows it
did (docs/benchmarks/keeping-up.md, "Rollups tiered by rows, at 32").

A rollup is written from memory, by a writer whose MemTable holds every row of it, so a run never
grows past :data:`MAX_DECODED_BYTES` of *decoded* rows: the writer's own figure, never the bytes
on disk, which Lance compresses some 600x on repetitive rows (issue 61: a run of 0.16 MB folders
decoded to 50 MB each took GC past 1.5 GB). An entry without the figure counts
:data:`UNKNOWN_FACTOR` times its bytes, and the rollup's write stops at the same bound as it reads
(:mod:`memwal.rollup.write`). The figure is read from storage: a false one changes which runs are
rolled up and when, never what a rollup holds (its rows are read and bounded again as they are).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: An older entry joins the newer run when it holds at most this many times their bytes on disk
#: (an entry compared without the writer's decoded figure).
RATIO = 4
#: An older entry joins the newer run when its rows decode to at most this many times theirs.
DECODED_RATIO = 32

#: A run holds at most this many decoded bytes (its rows are held in memory to be written).
MAX_DECODED_BYTES = 128 << 20
#: Decoded bytes counted per byte on disk for an entry whose writer left no figure.
UNKNOWN_FACTOR = 8


@dataclass(frozen=True)
class Entry:
    """A listed merged generation (a flushed one, or a rollup) as the plan sees it."""

    generation: int
    path: str
    bytes: int
    #: Its rows' decoded size as its writer counted it (the shard manifest's ``in_memory_bytes``).
    decoded: int | None = None

    @property
    def memory(self) -> int:
        """What its rows cost in memory: the writer's figure, else an estimate from its bytes."""
        return self.decoded if self.decoded is not None else UNKNOWN_FACTOR * self.bytes


@dataclass(frozen=True)
class RollupPlan:
    """One run of consecutive listed entries of a shard that one rollup replaces."""

    shard_id: str
    entries: tuple[Entry, ...]
    #: A run of one listed generation with no key index, rewritten with one (:func:`plan_heals`).
    heal: bool = False

    @property
    def generation(self) -> int:
        """The number the rollup is listed under: the run's highest (it stands after the run's rows)."""
        return self.entries[-1].generation

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    def to_dict(self) -> dict[str, object]:
        return {"shard_id": self.shard_id, "generation": self.generation,
                "replaces": [{"generation": e.generation, "path": e.path} for e in self.entries],
                "bytes": self.bytes, "heal": self.heal}


def plan_rollups(shard_id: str, entries: Sequence[Entry], *, ratio: float = RATIO,
                 decoded_ratio: float = DECODED_RATIO, max_decoded: int = MAX_DECODED_BYTES) -> list[RollupPlan]:
    """The runs of ``entries`` (a shard's listed merged generations that stay listed, ascending,
    consecutive in the manifest) to roll up, oldest first; runs of one entry are left alone."""
    runs: list[list[Entry]] = []
    for e in reversed(entries):
        if runs and _joins(e, runs[-1], ratio, decoded_ratio) and \
                e.memory + sum(x.memory for x in runs[-1]) <= max_decoded:
            runs[-1].insert(0, e)
        else:
            runs.append([e])
    return [RollupPlan(shard_id, tuple(run)) for run in reversed(runs) if len(run) > 1]


def _joins(e: Entry, newer: list[Entry], ratio: float, decoded_ratio: float) -> bool:
    """Whether ``e`` joins the newer run: by decoded sizes where the writer counted each, else by bytes."""
    if e.decoded is not None and all(x.decoded is not None for x in newer):
        return e.decoded <= decoded_ratio * sum(x.decoded or 0 for x in newer)
    return e.bytes <= ratio * _size(newer)


def plan_heals(shard_id: str, unindexed: Sequence[Entry], planned: Sequence[RollupPlan]) -> list[RollupPlan]:
    """A rollup of one entry for each listed generation with no key index that no planned run
    replaces: the same rows, written again by the writer, with their key index. Every list reader
    fails while such a generation is listed (lance#9035), merged or not; its replacement keeps
    every view the same (the rows, under the same number) and opens."""
    covered = {(e.generation, e.path) for r in planned for e in r.entries}
    return [RollupPlan(shard_id, (e,), heal=True) for e in unindexed if (e.generation, e.path) not in covered]


def _size(run: list[Entry]) -> int:
    return sum(e.bytes for e in run)


__all__ = ["DECODED_RATIO", "MAX_DECODED_BYTES", "RATIO", "UNKNOWN_FACTOR", "Entry", "RollupPlan", "plan_heals",
           "plan_rollups"]
