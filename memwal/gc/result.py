"""What a GC run did (or, for a dry run, would do): the document of ``memwal gc --json``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memwal.core.document import Document
from memwal.gc.drain import DoneDrain
from memwal.gc.gates import UNSAFE_PATH, is_gate
from memwal.gc.model import (
    Blocked,
    BrokenShard,
    DeletedGeneration,
    ExpiredVersions,
    Json,
    KeptWal,
    LiveCheckpoint,
    Orphan,
    Retention,
)
from memwal.rollup.plan import RollupPlan
from memwal.rollup.write import WrittenRollup
from memwal.table.writer import WriterView


@dataclass(frozen=True)
class GcResult(Document):
    """What a GC did, or would do for a dry run (``memwal gc --json``).

    Attributes:
        table: The table's URI.
        dry_run: Whether nothing was deleted (the result a run would give).
        deleted: The generations deleted: shard, generation, path.
        wal_entries_deleted: WAL entries deleted.
        bytes_freed: Bytes deleted.
        objects_deleted: Objects (files) deleted.
        blocked: Each generation kept, with the gates that keep it.
        orphans: Unlisted directories found (``orphans=True``).
        orphans_deleted: Of those, how many were removed.
        expired_versions: What the version expiry removed and kept (None: not asked).
        audit_key: Where the audit record went (``audit=True``).
        engine: ``"local"`` or ``"spark"``.
        broken_shards: Shards whose manifests could not be read (nothing of them deleted).
        kept_wal_entries: WAL entries kept on purpose (replay, fence sentinels).
        retention: Which retained versions block, and what would free them.
        time_will_free: Whether a later run with nothing else changed would free something.
        heal_at: When a listed generation with no key index, too recently flushed to be rewritten
            by this run, may be (Unix time; None: none waits): a follower runs GC again then.
        checkpoints: Live checkpoints honoured.
        checkpoints_removed: Expired checkpoints removed (or that would be).
        history_pruned: Run-history records pruned.
        drained: Generations taken out of the shard manifests (or that would be).
        writers: Each shard's writer as the plan saw it (a live writer keeps what its view needs).
        rolled_up: Runs of listed merged generations replaced by one rollup each (or that would be).
        proofs_recorded: Read-back proofs recorded as receipts (no later run reads them again).
        receipts_pruned: Receipts no proof needs any more, deleted.
        manifest_versions_pruned: Old shard-manifest versions no reader can hold any more, deleted.
        wait: What kept the blocked generations, per combination of gates (``grace-period then
            retained-version:3``: what keeps one now, then what its folder faces once it leaves
            the listing), and when each passes or what frees it; the options they were judged
            with (None: nothing kept). What ``memwal gc``, the history, the cycle and the fleet show.
        listed_only: A listing pass (``--listed-only``): it rolled up and healed, drained and deleted nothing.
    """

    table: str
    dry_run: bool
    deleted: tuple[DeletedGeneration, ...] = ()
    wal_entries_deleted: int = 0
    bytes_freed: int = 0
    objects_deleted: int = 0
    blocked: tuple[Blocked, ...] = ()
    orphans: tuple[Orphan, ...] = ()
    orphans_deleted: int = 0
    expired_versions: ExpiredVersions | None = None
    audit_key: str | None = None
    engine: str = "local"
    broken_shards: tuple[BrokenShard, ...] = ()
    #: WAL entries kept on purpose (replay, fence sentinels): not blocked generations.
    kept_wal_entries: tuple[KeptWal, ...] = ()
    #: Which retained versions block, and what would free them (None when none blocks).
    retention: Retention | None = None
    #: Whether a later run with nothing else changed would free something (grace period only).
    time_will_free: bool = False
    #: When a generation with no key index this run left may be rewritten with one (Unix time).
    heal_at: float | None = None
    #: Live checkpoints the run honoured, and the expired ones it removed (or would remove).
    checkpoints: tuple[LiveCheckpoint, ...] = ()
    checkpoints_removed: tuple[str, ...] = ()
    #: Run-history records older than the retention that the run deleted (or would delete).
    history_pruned: int = 0
    #: Generations taken out of shard manifests (or, for a dry run, that would be).
    drained: tuple[DoneDrain, ...] = ()
    #: Each shard's writer as the plan saw it (live writers keep what their view needs).
    writers: tuple[WriterView, ...] = ()
    #: Runs of listed merged generations replaced by one rollup each (or, for a dry run, that would be).
    rolled_up: tuple[WrittenRollup | RollupPlan, ...] = ()
    #: Read-back proofs recorded as receipts (memwal.history.receipts), and receipts pruned.
    proofs_recorded: int = 0
    receipts_pruned: int = 0
    #: Old shard-manifest versions deleted (memwal.gc.manifests).
    manifest_versions_pruned: int = 0
    #: What kept the blocked generations, per combination of gates, and when each passes
    #: (:func:`memwal.gc.wait.gc_wait`; None: nothing kept). What every view of it shows.
    wait: Mapping[str, Any] | None = None
    listed_only: bool = False

    def to_dict(self) -> Json:
        return self._document([b.to_dict() for b in self.blocked])

    def summary_dict(self) -> Json:
        """The document as it travels (a cycle's outcome, a follower's, an Airflow XCom, the run
        history's figures): :meth:`to_dict` with ``blocked`` naming at most :data:`SHOWN_BLOCKED`
        generations (unsafe paths first), all of them counted in ``blocked_total``, by reason in
        ``blocked_by_reason`` and by every gate that keeps one in ``blocked_gates``. A week's
        retention keeps some 350,000 generations beside a busy writer: each run's document listed
        them all, several times over, into every view and XCom (issue 82). ``memwal gc --json``
        keeps :meth:`to_dict`, every one named."""
        unsafe = [b for b in self.blocked if b.reason == UNSAFE_PATH]
        shown = (unsafe + [b for b in self.blocked[:SHOWN_BLOCKED] if b.reason != UNSAFE_PATH])[:SHOWN_BLOCKED]
        return {**self._document([b.to_dict() for b in shown]), **blocked_counts(self.blocked)}

    def _document(self, blocked: list[Json]) -> Json:
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "deleted": [d.to_dict() for d in self.deleted],
            "wal_entries_deleted": self.wal_entries_deleted,
            "bytes_freed": self.bytes_freed,
            "objects_deleted": self.objects_deleted,
            "blocked": blocked,
            "orphans": [o.to_dict() for o in self.orphans],
            "orphans_deleted": self.orphans_deleted,
            "expired_versions": None if self.expired_versions is None else self.expired_versions.to_dict(),
            "audit_key": self.audit_key,
            "engine": self.engine,
            "broken_shards": [b.to_dict() for b in self.broken_shards],
            "kept_wal_entries": [k.to_dict() for k in self.kept_wal_entries],
            "retention": None if self.retention is None else self.retention.to_dict(),
            "time_will_free": self.time_will_free,
            "heal_at": self.heal_at,
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "checkpoints_removed": list(self.checkpoints_removed),
            "history_pruned": self.history_pruned,
            "drained": [d.to_dict() for d in self.drained],
            "writers": [w.to_dict() for w in self.writers],
            "rolled_up": [r.to_dict() for r in self.rolled_up],
            "proofs_recorded": self.proofs_recorded,
            "receipts_pruned": self.receipts_pruned,
            "manifest_versions_pruned": self.manifest_versions_pruned,
            "wait": None if self.wait is None else dict(self.wait),
            "listed_only": self.listed_only,
        }

    def problems(self) -> list[str]:
        """One line per thing that makes this run a failure (exit 1): a broken shard (left
        whole; the other shards were collected), a link planted in the table or a manifest
        path leaving its shard (nothing was deleted through it; it needs an operator)."""
        return problems_of(self.broken_shards, self.blocked)


#: Blocked generations a travelling GC document names (:meth:`GcResult.summary_dict`); the rest are counted.
SHOWN_BLOCKED = 100


def blocked_counts(blocked: Iterable[Blocked]) -> Json:
    """``blocked_total``, ``blocked_by_reason`` (the first gate's code) and ``blocked_gates`` (every
    gate's code that keeps one, counted once per generation) of the generations a run kept."""
    total = 0
    by_reason: Counter[str] = Counter()
    gates: Counter[str] = Counter()
    for b in blocked:
        total += 1
        by_reason[b.reason.split(":", 1)[0]] += 1
        gates.update({r.split(":", 1)[0] for r in b.reasons or (b.reason,) if is_gate(r)})
    return {"blocked_total": total, "blocked_by_reason": dict(sorted(by_reason.items())),
            "blocked_gates": dict(sorted(gates.items()))}


def problems_of(broken: Iterable[BrokenShard], blocked: Iterable[Blocked]) -> list[str]:
    out = [f"{b.detail} (nothing in it was collected)" for b in broken]
    unsafe = [", ".join(b.reasons[1:]) or f"shard {b.shard_id} generation {b.generation}"
              for b in blocked if b.reason == UNSAFE_PATH]
    if unsafe:
        out.append(f"unsafe paths refused, nothing deleted through them: {'; '.join(unsafe)}")
    return out


def problems_in(doc: Mapping[str, Any]) -> list[str]:
    """:meth:`GcResult.problems` of a result's document (what ``memwal backfill`` keeps)."""
    broken = [BrokenShard(b["shard_id"], b["reason"], b["detail"]) for b in doc.get("broken_shards", [])]
    blocked = [Blocked(b["shard_id"], b["generation"], b["reason"], tuple(b.get("reasons", [b["reason"]])))
               for b in doc.get("blocked", [])]
    return problems_of(broken, blocked)
