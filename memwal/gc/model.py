"""What a GC plan is made of: the deletions it will make, and every item it keeps with why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from memwal.core.document import Document
from memwal.gc.gates import Blocked

if TYPE_CHECKING:
    from memwal.table.retained import RetainedVersion


@dataclass
class GenerationDeletion:
    shard_id: str
    generation: int
    path: str
    key: str
    gates: dict
    #: Its files as listed when planned (the dry run's figures; the run lists again as it deletes).
    objects: int = 0
    bytes: int = 0


@dataclass
class WalDeletion:
    shard_id: str
    position: int
    generation: int | None  # None for a fence sentinel
    key: str
    size: int


@dataclass
class KeptWal:
    """A WAL entry GC keeps although nothing blocks its generation (or it has none)."""

    shard_id: str
    position: int
    generation: int | None  # None for a fence sentinel
    reason: str  # WAL_NEEDED_FOR_REPLAY or FENCE_SENTINEL


@dataclass
class Orphan:
    kind: str  # "generation" or "staging"
    shard_id: str | None
    path: str
    key: str
    age_seconds: float


@dataclass
class GcPlan(Document):
    table: str
    read_version: int
    planned_at: float
    grace_seconds: float
    generations: list[GenerationDeletion] = field(default_factory=list)
    wal_entries: list[WalDeletion] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    retained_versions: int = 0
    broken_shards: list[dict] = field(default_factory=list)
    kept_wal_entries: list[KeptWal] = field(default_factory=list)
    retention: dict | None = None
    time_will_free: bool = False
    #: Live checkpoints (id, version, expires_at) and the expired ones this run removes.
    checkpoints: list[dict] = field(default_factory=list)
    expired_checkpoints: list[str] = field(default_factory=list)
    #: Run-history records older than the retention: this run deletes exactly these.
    history_keys: list[str] = field(default_factory=list)
    #: The planned version expiry: Lance's cleanup removes the untagged versions committed
    #: before ``expire_before`` (a timestamp, so the run removes what the plan counted), and
    #: the gates above were computed as if ``expiring`` were gone already.
    expire_before: float | None = None
    expiring: list[int] = field(default_factory=list)
    older_than_seconds: float | None = None
    #: Every retained version the plan read (before its expiry), for the run to remember
    #: (:func:`memwal.table.retained.remember_retained`); not part of the document.
    versions: list[RetainedVersion] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "grace_seconds": self.grace_seconds,
            "retained_versions": self.retained_versions,
            # of which manifests read (the others' progress came from the last run's digest)
            "retained_manifests_read": sum(not v.remembered for v in self.versions),
            "would_delete": [
                {"shard_id": g.shard_id, "generation": g.generation, "path": g.path, "gates": g.gates}
                for g in self.generations
            ],
            "would_delete_wal_entries": [asdict(w) for w in self.wal_entries],
            "blocked": [blocked_json(b) for b in self.blocked],
            "orphans": [asdict(o) for o in self.orphans],
            "broken_shards": self.broken_shards,
            "kept_wal_entries": [asdict(k) for k in self.kept_wal_entries],
            "retention": self.retention,
            "time_will_free": self.time_will_free,
            "checkpoints": self.checkpoints,
            "expired_checkpoints": self.expired_checkpoints,
            "history_records_to_prune": len(self.history_keys),
            "versions_to_expire": self.expiring,
        }


def blocked_json(b: Blocked) -> dict:
    d = {"shard_id": b.shard_id, "generation": b.generation, "reason": b.reason}
    if len(b.reasons) > 1:
        d["reasons"] = b.reasons
    if b.wal_position is not None:
        d["wal_position"] = b.wal_position
    return d
