"""A table's debt: which jobs it needs, why, and one figure to rank tables by.

Each job's term, from the table's facts (:mod:`memwal.fleet.probe`):

- merge: per shard, unmerged generations + unmerged MiB / 64 + minutes since the oldest
  unmerged generation was flushed / 10;
- catchup: per maintained index, merged generations it has not caught up with (summed over
  shards) + 10 x the share of live rows it does not cover;
- compact: fragments above the threshold / 8 + 10 x the share of rows deleted;
- gc: merged, caught-up generations still on storage / 8 + their MiB / 256, counting only
  those flushed longer ago than GC's grace period and version expiry, and merged longer ago
  than the grace period when the fleet saw the merge (none can go sooner); or, when none can
  go yet, merged generations still listed / 8 (GC rolls them up or drains them at once); GC
  also follows every merge, as the catch-up does;
- snapshot: 1 + minutes since the published snapshot / 10, once a writer flushed after it.

A job is planned when its threshold (:class:`memwal.fleet.policy.Thresholds`) is passed; a
merge brings the catch-up of the maintained indexes along (the merge creates its work). The
table's **debt** is the sum, over the planned jobs only, of each term times its weight: an
idle table has debt 0 and no jobs. Every planned job has its reason, naming the figure and
the threshold it passed. A job owed but not yet possible, because only time will free it (a
GC inside the reader grace period or version expiry, or one that just waited), is ``waiting``
instead, with the moment it is due and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memwal.core.defaults import DEFAULT_WRITER_IDLE_SECONDS
from memwal.fleet.facts import TableFacts
from memwal.fleet.policy import TablePolicy

MIB = 1 << 20


@dataclass(frozen=True)
class TableState:
    """The figures a plan shows for a table (its ``state`` document)."""

    version: int
    shards: int
    unmerged_generations: int
    unmerged_rows: int
    unmerged_bytes: int
    oldest_unmerged_age_seconds: float | None
    index_behind: dict[str, int]
    unindexed_fraction: dict[str, float]
    fragments: int
    deleted_fraction: float
    collectable_generations: int
    collectable_bytes: int
    snapshot_age_seconds: float | None
    snapshot_stale: bool
    leases_held: tuple[str, ...] = ()
    #: The most unmerged generations of any one shard.
    max_shard_generations: int = 0
    #: The most generations any one shard lists, merged or not (at least its unmerged ones):
    #: what every list-reading client opens on each read, the service level's figure.
    max_shard_listed: int = 0
    #: Shards with unmerged generations and no write for GC's ``writer_idle_seconds``: no live
    #: writer, nobody but the fleet will drain them.
    orphaned_shards: int = 0
    #: Seconds since any shard of the table was last written (None: no shard).
    writer_idle_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Debt:
    debt: float
    jobs: tuple[str, ...]
    reasons: tuple[str, ...]
    state: TableState
    terms: dict[str, float] = field(default_factory=dict)
    #: Jobs owed that only time will free: job -> (when it is due, why it waits).
    waiting: dict[str, tuple[float, str]] = field(default_factory=dict)


def state_of(facts: TableFacts, now: float, writer_idle_seconds: float = DEFAULT_WRITER_IDLE_SECONDS) -> TableState:
    shards = facts.shards
    oldest = min((t for s in shards for _, t in s.unmerged.values()), default=None)
    flushed = max((s.last_flush for s in shards if s.last_flush is not None), default=None)
    total_rows = facts.live_rows + facts.deleted_rows
    behind: dict[str, int] = {}
    for s in shards:
        for name, n in s.index_behind.items():
            behind[name] = behind.get(name, 0) + n
    written = [s.last_write for s in shards if s.last_write is not None]
    orphaned = sum(1 for s in shards if s.unmerged and s.last_write is not None
                   and now - s.last_write >= writer_idle_seconds)
    return TableState(
        version=facts.version,
        shards=len(shards),
        unmerged_generations=sum(len(s.unmerged) for s in shards),
        unmerged_rows=sum(s.unmerged_rows for s in shards),
        unmerged_bytes=sum(b for s in shards for b, _ in s.unmerged.values()),
        oldest_unmerged_age_seconds=None if oldest is None else round(max(0.0, now - oldest), 1),
        index_behind=behind,
        unindexed_fraction=dict(facts.unindexed_fraction),
        fragments=facts.fragments,
        deleted_fraction=round(facts.deleted_rows / total_rows, 4) if total_rows else 0.0,
        collectable_generations=sum(s.collectable for s in shards),
        collectable_bytes=sum(s.collectable_bytes for s in shards),
        snapshot_age_seconds=None if facts.snapshot_at is None else round(max(0.0, now - facts.snapshot_at), 1),
        snapshot_stale=flushed is not None and (facts.snapshot_at is None or flushed > facts.snapshot_at),
        max_shard_generations=max((len(s.unmerged) for s in shards), default=0),
        max_shard_listed=max((max(s.listed, len(s.unmerged)) for s in shards), default=0),
        orphaned_shards=orphaned,
        writer_idle_seconds=round(max(0.0, now - max(written)), 1) if written else None,
    )


def writer_idle_of(policy: TablePolicy) -> float:
    """After how long without a write a shard's writer counts as gone: GC's setting."""
    return _gc_settings(policy)[2]


def _gc_settings(policy: TablePolicy) -> tuple[float, float, float]:
    """GC's settings the fleet plans with: how old a merged generation must at least be before
    GC can take it, the reader grace period, and when a writer counts as gone. A version that
    had not merged it keeps it until version expiry takes that version (``expire_versions``),
    and readers get the grace period after the merge; both run from after its flush, and the
    grace period from the merge commit too."""
    from memwal.actions.options import GcOptions

    o = GcOptions.from_kwargs(**dict(policy.options.get("gc", {})))
    retention = max(o.grace_seconds, o.expire_versions or 0.0) if o.expire_versions is not None else o.grace_seconds
    return retention, o.grace_seconds, o.writer_idle_seconds


def debt_of(facts: TableFacts, policy: TablePolicy, now: float, *,
            backoff: Mapping[str, float] | None = None, last_gc: Mapping[str, Any] | None = None) -> Debt:
    """The table's debt (see the module docstring). ``backoff``: job -> the time before which
    it is not planned again (a GC that waits for time); ``last_gc``: what its last GC said kept
    its merged generations (GC's own ``wait``: :mod:`memwal.gc.wait`): a waiting GC's reason
    names those gates, as GC does, and when each passes."""
    from memwal.core.waits import describe
    th, w = policy.thresholds, policy.weights
    retention, grace, writer_idle = _gc_settings(policy)
    st = state_of(facts, now, writer_idle)
    terms: dict[str, float] = {}
    reasons: list[str] = []
    shards = facts.shards

    merge_shards = [s for s in shards if len(s.unmerged) >= th.merge_generations and s.unmerged]
    if th.merge_age_seconds > 0:
        merge_shards += [s for s in shards if s not in merge_shards and s.unmerged
                         and now - min(t for _, t in s.unmerged.values()) >= th.merge_age_seconds]
    if merge_shards:
        terms["merge"] = sum(len(s.unmerged) + sum(b for b, _ in s.unmerged.values()) / (64 * MIB)
                             + max(0.0, now - min(t for _, t in s.unmerged.values())) / 600 for s in merge_shards)
        reasons.append(f"merge: {st.unmerged_generations} unmerged generations in {len(merge_shards)} shards "
                       f"({st.unmerged_rows:,} rows, oldest {st.oldest_unmerged_age_seconds:.0f} s; threshold "
                       f"{th.merge_generations} generations" + (f" or {th.merge_age_seconds:.0f} s" if
                                                                th.merge_age_seconds else "") + ")")
    lagging = {i: n for i, n in st.index_behind.items() if n >= th.catchup_generations}
    uncovered = {i: f for i, f in st.unindexed_fraction.items() if f > th.catchup_unindexed_fraction}
    if lagging or uncovered:
        terms["catchup"] = sum(lagging.values()) + 10 * sum(uncovered.values())
        reasons.append("catchup: " + ", ".join(
            [f"{i} {n} generations behind" for i, n in sorted(lagging.items())]
            + [f"{i} misses {f:.0%} of the rows" for i, f in sorted(uncovered.items())]))
    elif merge_shards and facts.maintained_indexes:
        reasons.append("catchup: follows the merge")
    if st.fragments >= th.compact_fragments or st.deleted_fraction > th.compact_deleted_fraction:
        terms["compact"] = max(0, st.fragments - th.compact_fragments) / 8 + 10 * st.deleted_fraction
        reasons.append(f"compact: {st.fragments} fragments, {st.deleted_fraction:.0%} of rows deleted (threshold "
                       f"{th.compact_fragments} fragments or {th.compact_deleted_fraction:.0%})")
    waiting: dict[str, tuple[float, str]] = {}
    due = {s.shard_id: max(s.collectable_since + retention, facts_merged_at(facts, s.shard_id) + grace)
           for s in shards if s.collectable_since is not None and s.collectable}
    ripe = [s for s in shards if s.shard_id in due and now >= due[s.shard_id]]
    ripe_generations = sum(s.collectable for s in ripe)
    retry = (backoff or {}).get("gc", 0.0)
    if ripe_generations >= max(1, th.gc_generations) and now >= retry:
        ripe_bytes = sum(s.collectable_bytes for s in ripe)
        terms["gc"] = ripe_generations / 8 + ripe_bytes / (256 * MIB)
        reasons.append(f"gc: {ripe_generations} merged, caught-up generations on storage ({ripe_bytes / MIB:.1f} "
                       f"MiB), flushed more than {retention:.0f} s ago (the grace period and version expiry)")
    elif sum(s.collectable for s in shards) >= max(1, th.gc_generations) and due:
        pending = sum(s.collectable for s in shards if s.shard_id in due)
        said = describe(last_gc)
        if ripe_generations and now < retry:
            waiting["gc"] = (retry, f"gc: {pending} merged generations on storage; "
                                    f"{said or 'the last GC kept them'}; tried again {_fmt(retry)}")
        elif said:  # GC's own gates and their times, never the plan's estimate beside them (issue 64)
            again = max(min((t for t in due.values() if t > now), default=now), retry)
            waiting["gc"] = (again, f"gc: {pending} merged generations on storage; {said}; tried again {_fmt(again)}")
        else:  # no GC has judged them yet: the plan's estimate, said as one
            waiting["gc"] = (min((t for t in due.values() if t > now), default=now),
                             f"gc: {pending} merged generations; no GC has judged them yet: the plan expects the "
                             f"reader grace period ({grace:.0f} s after the merge) and version expiry "
                             f"({retention:.0f} s after the flush) to keep them (memwal gc --dry-run names every "
                             "gate and when it passes)")
    # Merged generations still listed cost every reader a dataset each: GC rolls them up or
    # drains them at once, with no grace period to wait for (docs/decisions/0054-rollups.md).
    # So GC follows every merge, and a backlog of them (more than a rollup leaves) is GC's work
    # even when its deletions wait.
    relief = sum(s.listed_merged for s in shards if s.listed_merged >= 2)
    if "gc" not in terms and (merge_shards or (relief and now >= retry)):
        terms["gc"] = relief / 8
        waiting.pop("gc", None)
        reasons.append("gc: follows the merge (it rolls up or drains what readers still list)" if merge_shards
                       else f"gc: {relief} merged generations still listed (every reader opens them): "
                            "rolled up or drained")
    age = st.snapshot_age_seconds
    if st.snapshot_stale and (age is None or age >= th.snapshot_age_seconds):
        terms["snapshot"] = 1 + (age or 0.0) / 600
        reasons.append("snapshot: a writer flushed after the published snapshot" +
                       (f" ({age:.0f} s old)" if age is not None else " (none published)"))
    jobs = set(terms)
    if merge_shards and facts.maintained_indexes:
        jobs.add("catchup")
    debt = round(sum(getattr(w, job) * term for job, term in terms.items()), 2)
    order = ("merge", "catchup", "compact", "gc", "snapshot")  # the cycle's order
    return Debt(debt, tuple(j for j in order if j in jobs), tuple(reasons), st, terms, waiting)


def _fmt(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def facts_merged_at(facts: TableFacts, shard_id: str) -> float:
    """When the fleet saw the shard's merge progress move to its value (0: not seen)."""
    return facts.merged_at.get(shard_id, 0.0)


__all__ = ["Debt", "TableState", "debt_of", "state_of"]
