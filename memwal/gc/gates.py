"""The gates a generation must pass to be deleted: each gate's code, and one generation's verdict.

What would free the generations retained versions hold is :mod:`memwal.gc.retention`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from memwal.checkpoint import Checkpoint
from memwal.gc.model import GateEvidence
from memwal.gc.versions import Holders, ShardProgress, VersionProgress
from memwal.table.manifest import TableManifest
from memwal.table.retained import RetainedVersion
from memwal.table.shards import GAP, MISSING, UNREADABLE

#: Reason of whatever a symbolic link in the table (or a manifest path leaving its shard) holds.
UNSAFE_PATH = "unsafe-path"


#: Why a WAL entry is kept although its generation goes (see the module docstring, gate e).
WAL_NEEDED_FOR_REPLAY = "wal-needed-for-replay"


FENCE_SENTINEL = "fence-sentinel"


#: A WAL entry whose header names no generation (Lance 9), placed among generations not all deletable.
WAL_GENERATION_UNKNOWN = "wal-generation-unknown"


GRACE_PERIOD = "grace-period"


NOT_MERGED = "not-merged"


#: A merged generation kept listed (and on storage) for the shard's live writer (memwal.gc.drain).
WRITER_LIVE = "writer-live"


#: Merged rows the base table is not shown to hold at their proof point (memwal.merge.cover), or put
#: back to older writes since by another compactor: listed, they stay listed; their folders and WAL
#: entries stay on storage, for ``memwal repair``.
PROGRESS_UNPROVEN = "progress-unproven"


#: A merged generation kept listed because an older listed one stays: drains take a prefix of
#: the listing (a reader reads every listed generation over the base, the older one included).
DRAIN_ORDER = "drain-order"


#: A rollup that could not be written (unreadable, gone, or past its decoded bound): its run stays listed.
ROLLUP_FAILED = "rollup-failed"


#: Drained from the shard manifest (by this run, or earlier, or by another compactor) less
#: than the grace period ago: a reader may still hold a manifest that lists it.
DRAIN_GRACE = "drain-grace-period"


#: A merged generation every gate lets leave the listing, met by a listing pass (``memwal gc
#: --listed-only``, a follower's pass after each merge): it walks the listed folders only, so it
#: cannot prove rows (a proof reads every folder its version covers) and drains nothing; the next
#: whole GC run proves and drains it.
LISTED_ONLY = "listed-only"


#: Gates named by a code alone, and gates named by a code and what they name (``checkpoint:<id>``,
#: ``retained-version:<version (tag ...)>``): what a blocked item's ``reasons`` hold before
#: its details (a broken shard's message, a link's path, an orphan's name).
GATE_CODES = frozenset({NOT_MERGED, GRACE_PERIOD, UNSAFE_PATH, GAP, UNREADABLE, MISSING, WRITER_LIVE, DRAIN_GRACE,
                        PROGRESS_UNPROVEN, ROLLUP_FAILED, DRAIN_ORDER, LISTED_ONLY})
GATE_PREFIXES = ("index-not-caught-up:", "checkpoint:", "retained-version:", "orphan-", "changed-since-plan:")


def is_gate(reason: str) -> bool:
    """Whether a ``reasons`` entry names a gate (else it is a detail of one)."""
    return reason in GATE_CODES or reason.startswith(GATE_PREFIXES)


def only_grace(reasons: Iterable[str]) -> bool:
    """Whether time alone frees what these gates hold: a grace period, after a merge or a drain."""
    return [r for r in reasons if is_gate(r)] in ([GRACE_PERIOD], [DRAIN_GRACE])


class Verdict(NamedTuple):
    """What the gates say about one generation."""

    reasons: list[str]  # every gate that blocks it (empty when deletable)
    evidence: GateEvidence  # the values the gates compared
    holders: Holders  # retained versions that still need it (gate c)


def verdict_of(
    shard_id: str,
    g: int,
    *,
    compacted: int,
    catchup: Mapping[str, Mapping[str, int]],
    indexes: list[str],
    progress: ShardProgress,
    now: float,
    grace_seconds: float,
    checkpoints: Iterable[Checkpoint] = (),
) -> Verdict:
    """Every gate that blocks generation g, and the evidence.

    ``progress`` is every retained version's merge progress for the shard, read once per
    shard rather than once per generation (:mod:`memwal.gc.versions`).
    """
    reasons: list[str] = []
    if g > compacted:
        reasons.append(NOT_MERGED)
    caught: dict[str, int] = {}
    for name in indexes:
        caught[name] = catchup.get(name, {}).get(shard_id, 0)
        if g > caught[name]:
            reasons.append(f"index-not-caught-up:{name}")
    reasons += [c.gate for c in checkpoints if c.pins(shard_id, g)]
    holders = progress.holders(g)
    if holders:
        reasons.append(f"retained-version:{holders.first.describe()}")
    # the first retained main-line version that merged g: when readers stopped needing it
    first = progress.first_merged(g)
    merged_at = None if first is None else first.timestamp
    if (merged_at is None or now - merged_at < grace_seconds) and NOT_MERGED not in reasons:
        reasons.append(GRACE_PERIOD)
    return Verdict(reasons, GateEvidence(compacted, caught, progress.low, merged_at, grace_seconds), holders)


class Gates:
    """The gates of a table at one moment, per shard (each shard's retained progress read once)."""

    def __init__(self, latest: TableManifest, indexes: Iterable[str], versions: Iterable[RetainedVersion],
                 checkpoints: Iterable[Checkpoint], now: float, grace_seconds: float) -> None:
        self.latest, self.indexes, self.now, self.grace_seconds = latest, list(indexes), now, grace_seconds
        self.versions = list(versions)
        self.checkpoints = tuple(checkpoints)
        self.progress = VersionProgress(self.versions)
        self._shards: dict[str, ShardProgress] = {}

    def shard(self, shard_id: str) -> ShardProgress:
        if shard_id not in self._shards:
            self._shards[shard_id] = self.progress.shard(shard_id)
        return self._shards[shard_id]

    def verdict(self, shard_id: str, g: int) -> Verdict:
        return verdict_of(shard_id, g, compacted=self.latest.compacted_generation(shard_id),
                          catchup=self.latest.index_catchup, indexes=self.indexes, progress=self.shard(shard_id),
                          now=self.now, grace_seconds=self.grace_seconds, checkpoints=self.checkpoints)

    def without(self, gone: Iterable[RetainedVersion]) -> Gates:
        """The same gates with the versions ``gone`` expired."""
        going = {id(v) for v in gone}
        return Gates(self.latest, self.indexes, [v for v in self.versions if id(v) not in going],
                     self.checkpoints, self.now, self.grace_seconds)
