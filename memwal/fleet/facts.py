"""What the fleet knows of a table, as plain data: it is cached, saved and shared
(:mod:`memwal.fleet.cache`), and made by the probe (:mod:`memwal.fleet.probe`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ShardFacts:
    """One shard, as its listing and the table manifest tell it."""

    shard_id: str
    merged: int
    #: Generation number -> (bytes on storage, oldest file time) of every generation folder
    #: above the merged one, and the rows of those the shard manifest lists.
    unmerged: dict[int, tuple[int, float]]
    unmerged_rows: int
    #: Generation folders at or below every index's catch-up (GC may take them), their bytes
    #: (on a disk, estimated from a sample of their folders: :func:`memwal.fleet.probe.probe`),
    #: and the oldest one's flush time (none can go before it is older than GC's retention).
    collectable: int
    collectable_bytes: int
    collectable_since: float | None
    #: Generations merged but not yet indexed, per maintained index.
    index_behind: dict[str, int]
    #: When its newest manifest was written (a writer's last flush).
    last_flush: float | None
    #: When anything of the shard was last written (a flush, a WAL entry, a manifest): how long
    #: ago its writer was last seen at work.
    last_write: float | None = None
    #: Generations the latest shard manifest lists, merged or not: what every list-reading
    #: client (pylance's LsmScanner, lance-context) opens on each read (issue 54).
    listed: int = 0
    #: Of those, the merged ones: a GC rolls them up into one or drains them (issue 54).
    listed_merged: int = 0


@dataclass(frozen=True)
class TableFacts:
    """What the fleet knows of one table (see the module docstring)."""

    uri: str
    version: int
    mem_wal: bool
    maintained_indexes: tuple[str, ...]
    shards: tuple[ShardFacts, ...]
    fragments: int
    live_rows: int
    deleted_rows: int
    unindexed_fraction: dict[str, float]
    snapshot_at: float | None
    fingerprint: str
    problems: tuple[str, ...] = ()
    #: Requests this probe sent (listings and reads), for the fleet's request budget.
    requests: int = field(default=0, compare=False)
    #: Per shard, when the fleet saw its merge progress move (:attr:`ManifestFacts.merged_at`).
    merged_at: dict[str, float] = field(default_factory=dict)
    #: On an object store, a table whose ``_mem_wal/`` is longer than a few pages: when its folders
    #: were last counted from a listing of them all (the probes since carry the counts forward:
    #: :func:`memwal.fleet.probe.probe`); None: every probe lists it whole.
    listed_at: float | None = None


@dataclass(frozen=True)
class ManifestFacts:
    """What the fleet takes from one table manifest (plain data: it is cached, and saved)."""

    tag: str  # the manifest's key and ETag
    version: int
    mem_wal: bool
    indexes: tuple[str, ...]
    compacted: dict[str, int]
    catchup: dict[str, dict[str, int]]
    snapshot_at: float | None
    fragments: int
    live_rows: int
    deleted_rows: int
    unindexed_fraction: dict[str, float]
    #: Per shard, when its merge progress was first seen at its value (the manifest's commit
    #: time when it moved since the cached manifest; absent: not known). GC's reader grace
    #: runs from the merge commit: before it is over, a GC only waits.
    merged_at: dict[str, float] = field(default_factory=dict)


__all__ = ["ManifestFacts", "ShardFacts", "TableFacts"]
