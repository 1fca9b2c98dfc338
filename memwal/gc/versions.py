"""Gate (c)'s view of the retained versions: each version's merge progress, per shard, as arrays.

Gate (c) asks two questions of every generation g of a shard: which retained versions had
not merged it (progress < g: they hold it), and when the oldest main-line version that had
merged it was committed (the grace period runs from there). Every retained version counts,
in order, whatever its neighbours say: a ``restore`` commits an older manifest again, so
progress is not monotone across versions, and no answer may assume it is.

Asked naively, that is a pass over every version per shard and per generation (what that
cost: docs/decisions/0015-retained-progress-once.md). Here the per-version work is done
once: versions whose manifests share one decoded index section
(:func:`memwal.table.manifest.decode_table_manifest`) share one progress map, so a shard's
progress over all versions costs one lookup per *distinct* map plus one array gather; then
"no version holds g" is a comparison with the minimum, and the oldest main-line version
that merged g is a binary search in the running maximum of main-line progress (the first
version whose progress reaches g is the first where that maximum does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from memwal.table.retained import RetainedVersion


class Holders:
    """The retained versions that had not merged one generation, in order, kept as their
    positions among the retained versions: a table that keeps a week of versions and of
    generations asks this of every folder at every GC run, and a list of versions per folder
    would cost what the folders times the versions do (a follower's GC runs every few seconds).
    The versions are made only for who iterates them."""

    __slots__ = ("versions", "positions")

    def __init__(self, versions: list[RetainedVersion], positions: np.ndarray) -> None:
        self.versions = versions
        self.positions = positions  # intp, ascending

    def __bool__(self) -> bool:
        return len(self.positions) > 0

    def __len__(self) -> int:
        return len(self.positions)

    def __iter__(self) -> Iterator[RetainedVersion]:
        return (self.versions[i] for i in self.positions)

    @property
    def first(self) -> RetainedVersion:
        return self.versions[int(self.positions[0])]

    def without(self, left_out: np.ndarray) -> Holders:
        """These holders less the versions ``left_out`` marks (bool, one per retained version)."""
        return Holders(self.versions, self.positions[~left_out[self.positions]])


@dataclass(frozen=True)
class ShardProgress:
    """Every retained version's merge progress for one shard, in the retained versions' order."""

    versions: list[RetainedVersion]
    values: np.ndarray  # int64, one per version
    main: np.ndarray  # bool: the version is on the main line (not a branch)
    low: int  # smallest progress of any version (0 without versions)
    main_high: np.ndarray  # running maximum of main-line progress (-1 before the first)

    def holders(self, g: int) -> Holders:
        """The versions that had not merged generation ``g``, in order."""
        if g <= self.low:
            return Holders(self.versions, _NONE)
        return Holders(self.versions, np.flatnonzero(self.values < g))

    def first_merged(self, g: int, keep: Callable[[RetainedVersion], bool] | None = None) -> RetainedVersion | None:
        """The oldest main-line version that had merged ``g`` (among those ``keep`` accepts)."""
        start = int(np.searchsorted(self.main_high, g, side="left"))
        if start >= len(self.versions):
            return None
        if keep is None:
            return self.versions[start]
        for i in np.flatnonzero(self.main[start:] & (self.values[start:] >= g)):
            v = self.versions[start + i]
            if keep(v):
                return v
        return None


_NONE = np.empty(0, dtype=np.intp)


class VersionProgress:
    """The retained versions' progress, ready to be read per shard (:class:`ShardProgress`)."""

    def __init__(self, versions: list[RetainedVersion]) -> None:
        self.versions = versions
        maps: dict[int, int] = {}  # id of a shared progress dict -> its index in self._maps
        self._maps: list[dict[str, int]] = []
        group = np.empty(len(versions), dtype=np.intp)
        for i, v in enumerate(versions):
            m = v.compacted
            j = maps.get(id(m))
            if j is None:
                j = maps[id(m)] = len(self._maps)
                self._maps.append(m)
            group[i] = j
        self._group = group
        self._main = np.fromiter((v.branch is None for v in versions), dtype=bool, count=len(versions))

    def shard(self, shard_id: str) -> ShardProgress:
        per_map = np.fromiter((m.get(shard_id, 0) for m in self._maps), dtype=np.int64, count=len(self._maps))
        values = per_map[self._group]
        main_high = np.maximum.accumulate(np.where(self._main, values, -1)) if len(values) else values
        return ShardProgress(self.versions, values, self._main, int(values.min()) if len(values) else 0, main_high)
