"""The shard-manifest versions collector: old versions no reader can hold any more.

A writer writes a shard-manifest version at every flush and claim, a compactor at every drain
and rollup: beside a writer that never stops and a follower, some 50 a minute a shard (~150 beside
LanceDB's), 72,000 a day. Nothing else removes them, and every listing of ``_mem_wal/`` (GC's,
``memwal status``'s, the fleet's probe) pages through them all. Upstream keeps versions allocated
by compare-and-swap without gaps (lance#8640) and says old ones may be pruned (lance#9953): the
latest is found from the names that remain.

A version goes when all of these hold: it is older than the newest version older than the grace
period (a reader that listed the shard within the grace period may hold that one or a newer; GC's
own drains are judged against it: :func:`memwal.gc.drain.unlisted_safely`); it is not the live
writer's claim (the first version of its epoch, which tells when its view was opened: the binary
search of :func:`memwal.table.writer._claimed_at` finds it among what is left); and the shard
keeps at least :data:`KEEP` versions above it (what GC walks back over to tell a writer's version
from a compactor's). The versions between a live writer's claim and those go too: a writer that
never reopens wrote some 50 a minute, all kept while it lived (4,011 after 3,000 flushes, listed
by every merge plan and listing pass: issue 82), so one gap stays after the claim, below the
newest :data:`KEEP`, where readers allow gaps (:data:`memwal.table.shards.WHOLE_NEWEST`; a probe
from a hint looks past one: :func:`memwal.table.shards.ended_at_gap`). While the deletes run
(several at once) a listing may show other gaps among the versions going, never among the newest
:data:`KEEP`, the only ones a reader requires whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memwal.table.naming import manifest_key
from memwal.table.shards import WHOLE_NEWEST
from memwal.table.writer import ManifestHistory, WriterView

#: Newest shard-manifest versions always kept: those a reader requires without a gap.
KEEP = WHOLE_NEWEST


@dataclass(frozen=True)
class ManifestPruning:
    """Per shard, the old versions that go (their keys)."""

    keys: tuple[str, ...] = ()
    per_shard: Mapping[str, int] | None = None

    def to_dict(self) -> dict[str, object]:
        return {"versions": len(self.keys), "per_shard": dict(self.per_shard or {})}


def plan_manifest_pruning(histories: Mapping[str, ManifestHistory], writers: Mapping[str, WriterView],
                          now: float, grace_seconds: float) -> ManifestPruning:
    """The versions that may go (see the module docstring)."""
    keys: list[str] = []
    per_shard: dict[str, int] = {}
    for sid, history in sorted(histories.items()):
        versions = sorted(v for v in history.versions if v <= history.latest.version)
        if len(versions) <= KEEP:
            continue
        held = history.newest_before(now - grace_seconds)
        if held is None:
            continue
        floor = min(held, versions[-KEEP])
        claim: int | None = None
        w = writers.get(sid)
        if w is not None and w.live:
            if w.claimed_at is None:
                continue  # when it opened is unknown: nothing of its epoch may go
            claim = min((v for v in versions if history.mtime(v) >= w.claimed_at), default=None)
            if claim is None:
                continue
        going = [v for v in versions if v < floor and v != claim]
        if going:
            keys += [manifest_key(sid, v) for v in going]
            per_shard[sid] = len(going)
    return ManifestPruning(tuple(keys), per_shard)


__all__ = ["KEEP", "ManifestPruning", "plan_manifest_pruning"]
