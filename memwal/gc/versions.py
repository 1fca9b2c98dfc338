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

Who holds g is never listed (issue 82): with one merge a version, generation g has about g
holders, so a list of them per generation is generations times versions, in memory and in
time (1.9 GiB for a GC plan at 13,415 versions). What the gates and the report ask of the
holders is a count, the oldest one, whether only their age keeps them all and the newest
one's commit time, and per version how many held generations it holds; each is answered
from the shard's progress sorted once (:class:`Ranked`): the holders of g are a prefix of
that order, so a count is a binary search and the rest are prefix minima and maxima.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from memwal.table.retained import RetainedVersion, changes

#: Left-out masks a shard keeps a ranking for (the plan asks with one, the live writers' own:
#: more would each cost a sort over the versions, and are not asked).
_RANKINGS_KEPT = 4


def by_age_only(v: RetainedVersion) -> bool:
    """Whether only its age keeps ``v`` from Lance's cleanup: a main-line version with no tag
    that starts no branch (version expiry may take it)."""
    return not v.tags and not v.child_branches and v.branch is None


class Ranked:
    """One shard's retained versions (less those a mask leaves out) ordered by progress, once.

    The holders of g are the first ``count(g)`` of that order, so each question about them is
    one binary search and one read of an array built here: the oldest holder is a prefix
    minimum of positions, the newest holder's commit time a prefix maximum of times, and
    whether a tag, a branch or a checkpoint keeps one of them a comparison with the least
    progress of the versions kept by more than their age. Four arrays over the versions per
    shard and mask, whatever the number of generations asked about."""

    __slots__ = ("values", "at", "oldest", "newest", "least_pinned")

    def __init__(self, values: np.ndarray, by_age: np.ndarray, stamps: np.ndarray, left_out: np.ndarray | None) -> None:
        kept = np.arange(len(values), dtype=np.intp) if left_out is None else np.flatnonzero(~left_out)
        kept_values = values[kept]
        order = np.argsort(kept_values, kind="stable")
        #: progress of the kept versions, ascending
        self.values: np.ndarray = kept_values[order]
        #: their positions among the retained versions, in that order
        self.at: np.ndarray = kept[order]
        #: the smallest position among the first i + 1 (the oldest holder)
        self.oldest: np.ndarray = np.minimum.accumulate(self.at) if len(kept) else self.at
        #: the latest commit time among the first i + 1 (the newest holder's)
        self.newest: np.ndarray = np.maximum.accumulate(stamps[self.at]) if len(kept) else stamps[:0]
        pinned = kept_values[~by_age[kept]]
        #: the least progress of a kept version that more than its age keeps (None: there is none)
        self.least_pinned: int | None = int(pinned.min()) if len(pinned) else None

    def count(self, g: int) -> int:
        """How many kept versions had not merged ``g``."""
        return int(self.values.searchsorted(g, side="left"))

    def aged_since(self, gs: np.ndarray) -> np.ndarray:
        """Per generation of ``gs``: when its newest holder was committed, where only their age
        keeps every holder (version expiry frees it that long after); NaN where none holds it or a
        tag, a branch or a checkpoint keeps one. One binary search for them all."""
        n = self.values.searchsorted(gs, side="left")
        held = n > 0
        if self.least_pinned is not None:
            held &= gs <= self.least_pinned
        out = np.full(len(gs), np.nan)
        out[held] = self.newest[n[held] - 1]
        return out


class Holders:
    """The retained versions that had not merged one generation (less those a mask leaves
    out), never listed: a table that keeps a week of versions and of generations asks this of
    every folder at every GC run, and a list of versions per folder would cost what the
    folders times the versions do (a follower's GC runs every few seconds; issue 82). Every
    answer comes from the shard's :class:`Ranked` order, built at the first question that
    needs it."""

    __slots__ = ("progress", "generation", "left_out", "_count")

    def __init__(self, progress: ShardProgress, generation: int, left_out: np.ndarray | None = None, *,
                 count: int | None = None) -> None:
        self.progress, self.generation, self.left_out = progress, generation, left_out
        #: how many hold it, asked several times per generation (a gate, its report); given by a
        #: caller that counted many generations at once (:meth:`ShardProgress.ranked`'s order)
        self._count: int | None = count

    @property
    def versions(self) -> list[RetainedVersion]:
        """Every retained version (the holders are some of them)."""
        return self.progress.versions

    def ranked(self) -> Ranked | None:
        """The shard's order, or None when no version holds the generation (then nothing is built)."""
        if self.generation <= self.progress.low:
            return None
        return self.progress.ranked(self.left_out)

    def __len__(self) -> int:
        if self._count is None:
            r = self.ranked()
            self._count = 0 if r is None else r.count(self.generation)
        return self._count

    def __bool__(self) -> bool:
        return len(self) > 0

    @property
    def first(self) -> RetainedVersion:
        """The oldest holder, in the retained versions' order (IndexError when none holds it)."""
        n = len(self)
        r = self.ranked()
        if r is None or n == 0:
            raise IndexError("no retained version holds this generation")
        return self.versions[int(r.oldest[n - 1])]

    def aged_since(self) -> float | None:
        """When the newest holder was committed, when only their age keeps every holder (None:
        none holds the generation, or a tag, a branch or a checkpoint keeps one): version expiry
        frees the generation that long after."""
        r = self.ranked()
        since = np.nan if r is None else float(r.aged_since(np.array([self.generation], dtype=np.int64))[0])
        return None if np.isnan(since) else since

    def without(self, left_out: np.ndarray) -> Holders:
        """These holders less the versions ``left_out`` marks (bool, one per retained version).
        Nothing is computed here: pass one mask object for every generation of a shard, and its
        order is built once (a new mask is a new sort over the versions)."""
        mask = left_out if self.left_out is None else self.left_out | left_out
        return Holders(self.progress, self.generation, mask)


@dataclass(frozen=True)
class ShardProgress:
    """Every retained version's merge progress for one shard, in the retained versions' order."""

    versions: list[RetainedVersion]
    values: np.ndarray  # int64, one per version
    main: np.ndarray  # bool: the version is on the main line (not a branch)
    low: int  # smallest progress of any version (0 without versions)
    main_high: np.ndarray  # running maximum of main-line progress (-1 before the first)
    by_age: np.ndarray  # bool: only its age keeps the version (:func:`by_age_only`)
    stamps: np.ndarray  # float: its commit time
    _rankings: dict[int, tuple[np.ndarray | None, Ranked]] = field(default_factory=dict, compare=False, repr=False)

    def holders(self, g: int) -> Holders:
        """The versions that had not merged generation ``g`` (nothing is computed until asked)."""
        return Holders(self, g)

    def ranked(self, left_out: np.ndarray | None = None) -> Ranked:
        """The kept versions in progress order (see :class:`Ranked`), built once per mask object:
        the plan asks every generation of a shard with the same one (read-only: a mask changed
        after its first use would be answered from the order built before)."""
        key = 0 if left_out is None else id(left_out)
        hit = self._rankings.get(key)
        if hit is not None and hit[0] is left_out:
            return hit[1]
        if left_out is not None and len(left_out) != len(self.versions):
            raise ValueError(f"a mask of {len(left_out)} for {len(self.versions)} retained versions")
        if left_out is not None and not left_out.any():  # leaves none out: the same order as none
            r = self.ranked(None)
        else:
            r = Ranked(self.values, self.by_age, self.stamps, left_out)
        if len(self._rankings) >= _RANKINGS_KEPT:
            self._rankings.pop(next(k for k in self._rankings if k != 0), None)
        self._rankings[key] = (left_out, r)  # the mask is kept with it: its id is not reused meanwhile
        return r

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


class VersionProgress:
    """The retained versions' progress, ready to be read per shard (:class:`ShardProgress`).

    Built from the last one built (:data:`_BUILT`) when these versions start with all of its (a
    table object grows its main line by what was committed since:
    :class:`memwal.table.retained.MainLine`): a follower's listing pass, every few seconds, then
    reads the versions committed since its last, not a week of them (issue 82). What it keeps per
    version are arrays, grown by a copy of memory; what is read from each version object (its
    progress map, its kind, its commit time) is read once, by the build that first saw it."""

    def __init__(self, versions: list[RetainedVersion]) -> None:
        #: the versions this was built over, as they were (a caller's list may change after): the
        #: positions every array and every :class:`ShardProgress` of this build refer to
        self.versions = list(versions)
        self._changes = changes()
        prior = _grown_from(self.versions, self._changes)
        new = self.versions[len(prior.versions) if prior else 0:]
        #: the distinct progress maps (versions of one index section share one), and each one's
        #: place among them by the map's id; the places are shared with the builds grown from this
        #: one, so a place is trusted only where it names the same map (:meth:`_place`)
        self._maps: list[dict[str, int]] = list(prior._maps) if prior else []
        self._where: dict[int, int] = prior._where if prior else {}

        def grown(name: str, values: Iterable[object], dtype: type) -> np.ndarray:
            return _grown(getattr(prior, name) if prior else None, np.fromiter(values, dtype=dtype, count=len(new)))

        self._group = grown("_group", (self._place(v.compacted) for v in new), np.intp)
        self._main = grown("_main", (v.branch is None for v in new), bool)
        self._by_age = grown("_by_age", (by_age_only(v) for v in new), bool)
        self._stamps = grown("_stamps", (v.timestamp for v in new), float)
        self._numbers = grown("_numbers", (v.version for v in new), np.int64)
        self._tagged = grown("_tagged", (bool(v.tags) for v in new), bool)
        #: per shard, each distinct map's progress for it (grown with the maps when a shard is read)
        self._per_map: dict[str, np.ndarray] = dict(prior._per_map) if prior else {}
        _BUILT.append(self)
        del _BUILT[:-_BUILT_KEPT]

    def _place(self, m: dict[str, int]) -> int:
        j = self._where.get(id(m))
        if j is None or j >= len(self._maps) or self._maps[j] is not m:
            j = self._where[id(m)] = len(self._maps)
            self._maps.append(m)
        return j

    def shard(self, shard_id: str) -> ShardProgress:
        per_map = self._per_map.get(shard_id)
        have = 0 if per_map is None else len(per_map)
        if per_map is None or have < len(self._maps):
            more = np.fromiter((m.get(shard_id, 0) for m in self._maps[have:]), dtype=np.int64,
                               count=len(self._maps) - have)
            per_map = self._per_map[shard_id] = _grown(per_map, more)
        values = per_map[self._group]
        main_high = np.maximum.accumulate(np.where(self._main, values, -1)) if len(values) else values
        return ShardProgress(self.versions, values, self._main, int(values.min()) if len(values) else 0, main_high,
                             self._by_age, self._stamps)

    def kept_for_writers(self, writer_held: frozenset[int] | set[int]) -> np.ndarray:
        """Which versions the version expiry keeps only for a live writer's view (main line,
        untagged, named in ``writer_held``), one bool each: such a version holds no folder (the
        writer reads its base at that version, and of the generations only what it lists)."""
        held = np.fromiter(writer_held, dtype=np.int64, count=len(writer_held))
        mask: np.ndarray = self._main & ~self._tagged & np.isin(self._numbers, held)
        return mask

    def numbered(self, numbers: set[int]) -> list[RetainedVersion]:
        """The versions whose number is one of ``numbers`` (on any branch), in order: found in an
        array, not by a pass over a week of version objects."""
        wanted = np.fromiter(numbers, dtype=np.int64, count=len(numbers))
        return [self.versions[i] for i in np.flatnonzero(np.isin(self._numbers, wanted))]


def _grown(before: np.ndarray | None, more: np.ndarray) -> np.ndarray:
    """``before`` and then ``more``, a new array (arrays built before are never changed)."""
    if before is None or not len(before):
        return more
    return np.concatenate([before, more]) if len(more) else before


#: The version progress built last, for the next to start from: a few per table (a plan builds
#: one, and one without the versions its expiry removes), for a fleet's follower a few tables.
_BUILT: list[VersionProgress] = []
_BUILT_KEPT = 8


def _grown_from(versions: list[RetainedVersion], changed: int) -> VersionProgress | None:
    """The progress built before over the longest prefix of ``versions`` (equal versions, as
    compared by a list: the same objects, none changed in place since:
    :func:`memwal.table.retained.changes`). The longest are compared first, and the first equal
    one is taken: most often the last built, one comparison of pointers."""
    for p in sorted(_BUILT, key=lambda b: len(b.versions), reverse=True):  # a copy: another thread may add
        n = len(p.versions)
        if p._changes == changed and 0 < n <= len(versions) and versions[:n] == p.versions:
            return p
    return None
