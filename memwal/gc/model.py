"""What GC plans and reports, item by item: frozen values whose ``to_dict()`` is the JSON of
``memwal gc --json`` (DESIGN 5), key for key.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any

from memwal.store import ObjectInfo

#: A JSON document (what ``to_dict`` returns): its values are of every JSON type.
Json = dict[str, Any]

#: A duration: seconds, or a ``timedelta``.
Duration = float | timedelta


def seconds(d: Duration) -> float:
    """A duration in seconds (finite and not negative: options were checked; this is belt and braces)."""
    value = d.total_seconds() if isinstance(d, timedelta) else float(d)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"a duration must be finite and not negative, not {d!r}")
    return value


@dataclass(frozen=True)
class GateEvidence:
    """The values the gates compared for a generation that may go (``deleted[].gates``)."""

    merged_generation: int
    index_catchup: Mapping[str, int]
    oldest_retained_progress: int
    merged_at: float | None
    grace_seconds: float

    def to_dict(self) -> Json:
        return {"merged_generation": self.merged_generation, "index_catchup": dict(self.index_catchup),
                "oldest_retained_progress": self.oldest_retained_progress, "merged_at": self.merged_at,
                "grace_seconds": self.grace_seconds}


@dataclass(frozen=True)
class Blocked:
    """Something kept, with every gate that keeps it: ``reasons`` holds the gates, then their
    details (a broken shard's message, a link's path, an orphan's name); ``reason`` the first gate."""

    shard_id: str | None
    generation: int
    reason: str
    reasons: tuple[str, ...] = ()
    wal_position: int | None = None
    #: For a merged generation kept listed (the grace period, a live writer): the gates its folder
    #: will still face once it leaves the listing (retained versions, checkpoints, an index), and
    #: when the newest retained version holding it by age alone was committed (its expiry's start).
    then: tuple[str, ...] = ()
    then_versions_at: float | None = None

    def to_dict(self) -> Json:
        d: Json = {"shard_id": self.shard_id, "generation": self.generation, "reason": self.reason}
        if len(self.reasons) > 1:
            d["reasons"] = list(self.reasons)
        if self.wal_position is not None:
            d["wal_position"] = self.wal_position
        if self.then:
            d["then"] = list(self.then)
            d["then_versions_at"] = self.then_versions_at
        return d


@dataclass(frozen=True)
class Deletable:
    """Per shard, the generations whose WAL entries may go: every one at or below ``through``
    (merged, and no longer listed) but ``kept``, and those this plan drains. A rule, not a set:
    ``through`` comes from storage and is never turned into a range."""

    through: int = 0
    kept: frozenset[int] = frozenset()
    drained: frozenset[int] = frozenset()

    def __contains__(self, g: object) -> bool:
        return isinstance(g, int) and (g in self.drained or (0 < g <= self.through and g not in self.kept))

    def __bool__(self) -> bool:
        return bool(self.drained) or self.through > len({g for g in self.kept if 0 < g <= self.through})

    @cached_property
    def _kept_sorted(self) -> list[int]:
        """``kept`` less the drained, in order: counted by bisection, once per WAL entry (a table
        that keeps a week of generations keeps a week of WAL entries and of kept numbers)."""
        return sorted(k for k in self.kept if k not in self.drained)

    @cached_property
    def top(self) -> int:
        """The highest deletable generation (0: none). No WAL entry placed above it can go: a
        week of entries kept with their folders is passed by one comparison each, not counted
        (issue 82). Found by stepping down from ``through`` past the kept numbers, so a forged
        ``through`` costs at most one step per kept number."""
        g, kept = self.through, self._kept_sorted
        i = bisect_right(kept, g) - 1
        while g > 0 and i >= 0 and kept[i] == g:
            g, i = g - 1, i - 1
        return max(g, 0, *self.drained)

    def count_in(self, numbers: Numbers, lo: int, hi: int) -> int:
        """How many of ``numbers`` in ``[lo, hi]`` are deletable, counted without a range."""
        a, b = numbers.span(lo, hi)
        n = max(0, min(b, self.through) - max(a, 1) + 1) if a <= b else 0
        kept = self._kept_sorted
        n -= max(0, bisect_right(kept, min(b, self.through)) - bisect_left(kept, a))
        n += sum(1 for d in self.drained if a <= d <= b and d > self.through)  # the run counted the rest
        return n + sum(1 for e in numbers.outside(lo, hi) if e in self)


@dataclass(frozen=True)
class Numbers:
    """A shard's flushed generations: every one below ``below`` (its ``current_generation``),
    plus the listed ones (normally below it too). A rule, not a list: ``below`` comes from
    storage, and a forged 2**62 must not size anything in memory (issue 56)."""

    below: int
    listed: frozenset[int] = frozenset()

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """The run ``1 .. below - 1`` clipped to ``[lo, hi]`` (empty when first > last)."""
        return max(lo, 1), min(hi, self.below - 1)

    def outside(self, lo: int, hi: int) -> list[int]:
        """Listed generations in ``[lo, hi]`` beyond the run."""
        return sorted(g for g in self.listed if lo <= g <= hi and not 1 <= g < self.below)

    def count(self, lo: int, hi: int) -> int:
        a, b = self.span(lo, hi)
        return max(0, b - a + 1) + len(self.outside(lo, hi))

    def first_last(self, lo: int, hi: int) -> tuple[int, int] | None:
        """The lowest and highest flushed generation in ``[lo, hi]`` (None: none)."""
        a, b = self.span(lo, hi)
        ends = [*([a, b] if a <= b else []), *self.outside(lo, hi)]
        return (min(ends), max(ends)) if ends else None

    @property
    def top(self) -> int:
        return max([self.below - 1, *self.listed, 0])


@dataclass(frozen=True)
class GenerationDeletion:
    """A generation the plan deletes: its folder and its files as the plan listed them."""

    shard_id: str
    generation: int
    path: str
    key: str
    gates: GateEvidence
    listed: tuple[ObjectInfo, ...] = ()
    #: No longer listed by the shard manifest (drained by an earlier run or another compactor):
    #: the merge gates were passed when it left; only checkpoints and links hold it now.
    drained: bool = False

    @property
    def objects(self) -> int:
        return len(self.listed)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.listed)


@dataclass(frozen=True)
class WalDeletion:
    """A WAL entry the plan deletes. ``generations`` is the span of generations it may belong to
    (one when its header was read; several when the manifests and the listing place it among
    entries of those, every one of them deletable); None for a fence sentinel."""

    shard_id: str
    position: int
    key: str
    size: int
    generations: tuple[int, int] | None

    @property
    def generation(self) -> int | None:
        span = self.generations
        return span[0] if span is not None and span[0] == span[1] else None

    def may_belong_to(self, generation: int) -> bool:
        """Whether it may be an entry of ``generation`` (a fence sentinel belongs to none)."""
        return self.generations is not None and self.generations[0] <= generation <= self.generations[1]

    def to_dict(self) -> Json:
        return {"shard_id": self.shard_id, "position": self.position, "generation": self.generation,
                "key": self.key, "size": self.size}


@dataclass(frozen=True)
class KeptWal:
    """A WAL entry GC keeps although nothing blocks its generation (or it has none)."""

    shard_id: str
    position: int
    generation: int | None  # None for a fence sentinel
    reason: str  # WAL_NEEDED_FOR_REPLAY, FENCE_SENTINEL or WAL_GENERATION_UNKNOWN

    def to_dict(self) -> Json:
        return {"shard_id": self.shard_id, "position": self.position, "generation": self.generation,
                "reason": self.reason}


@dataclass(frozen=True)
class Orphan:
    kind: str  # "generation" or "staging"
    shard_id: str | None
    path: str
    key: str
    age_seconds: float
    listed: tuple[ObjectInfo, ...] = field(default=(), compare=False)

    def to_dict(self) -> Json:
        return {"kind": self.kind, "shard_id": self.shard_id, "path": self.path, "key": self.key,
                "age_seconds": self.age_seconds}


@dataclass(frozen=True)
class BrokenShard:
    """A shard whose latest manifest cannot be established: everything in it is kept."""

    shard_id: str
    reason: str
    detail: str

    def to_dict(self) -> Json:
        return {"shard_id": self.shard_id, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class LiveCheckpoint:
    """A live reader checkpoint the run honours."""

    id: str
    name: str | None
    version: int
    expires_at: float

    def to_dict(self) -> Json:
        return {"id": self.id, "name": self.name, "version": self.version, "expires_at": self.expires_at}


@dataclass(frozen=True)
class BlockingVersion:
    """A retained version that holds merged generations back, and what keeps that version."""

    version: int
    branch: str | None
    tag: str | None
    starts_branch: str | None
    held_by: str | None  # "checkpoint", "tag", "branch", or None: only its age
    age_seconds: float
    generations_held: int

    def to_dict(self) -> Json:
        return {"version": self.version, "branch": self.branch, "tag": self.tag, "starts_branch": self.starts_branch,
                "held_by": self.held_by, "age_seconds": self.age_seconds, "generations_held": self.generations_held}


@dataclass(frozen=True)
class Retention:
    """Which retained versions block, and what would free them (``retention``): at most a hundred
    named (:func:`memwal.gc.retention.retention_report` says which), every one counted."""

    blocking_versions: tuple[BlockingVersion, ...]
    hint: str
    #: How many versions block, by what keeps each: ``age`` (only its age), ``tag``, ``branch``, ``checkpoint``.
    blocking_by_holder: Mapping[str, int] = field(default_factory=dict)
    #: The age of the youngest version only its age keeps (None: none): version expiry frees the
    #: generations these hold once it passes ``--expire-versions``.
    youngest_by_age_seconds: float | None = None

    @property
    def blocking_total(self) -> int:
        return sum(self.blocking_by_holder.values())

    def to_dict(self) -> Json:
        return {"blocking_versions": [v.to_dict() for v in self.blocking_versions],
                "blocking_total": self.blocking_total, "blocking_by_holder": dict(self.blocking_by_holder),
                "youngest_by_age_seconds": self.youngest_by_age_seconds, "hint": self.hint}


@dataclass(frozen=True)
class DeletedGeneration:
    shard_id: str
    generation: int
    path: str
    objects: int
    bytes: int
    gates: GateEvidence

    def to_dict(self) -> Json:
        return {"shard_id": self.shard_id, "generation": self.generation, "path": self.path,
                "objects": self.objects, "bytes": self.bytes, "gates": self.gates.to_dict()}


@dataclass(frozen=True)
class ExpiredVersions:
    """The version expiry: planned (a dry run) or done (with Lance's figures)."""

    expire_before: float
    planned: tuple[int, ...]
    bytes_removed: int | None = None
    old_versions: int | None = None
    snapshot_file_kept: tuple[str, ...] = ()
    #: Versions kept because a live shard writer may hold one of them open.
    held_for_writers: tuple[int, ...] = ()

    def to_dict(self) -> Json:
        if self.old_versions is None:
            return {"expire_before": self.expire_before, "planned": list(self.planned),
                    "held_for_writers": list(self.held_for_writers)}
        return {"expire_before": self.expire_before, "bytes_removed": self.bytes_removed,
                "old_versions": self.old_versions, "snapshot_file_kept": list(self.snapshot_file_kept),
                "planned": list(self.planned), "held_for_writers": list(self.held_for_writers)}
