"""A GC plan: what each collector would do, read once, before anything is written (the dry run).

:func:`plan_gc` reads the latest table manifest, one listing of ``_mem_wal/`` and each shard's
latest manifest (and its writer as storage shows it: :mod:`memwal.table.writer`), the retained
versions (the digest saves most manifest reads) and the checkpoints, then asks each collector:
version expiry first (the other gates count without the versions it removes, and it keeps what
live writers may hold), generations (the drains out of the shard manifests, then the folders:
:mod:`memwal.gc.drain`), their WAL entries, orphans, run history; a symbolic link met on the
way holds whatever it could redirect, drains included. It writes nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from memwal.checkpoint import Checkpoint
from memwal.checkpoint.expiry import CheckpointSweep, sweep_checkpoints
from memwal.core import clock as clocks
from memwal.core.defaults import DEFAULT_GRACE_SECONDS, DEFAULT_ORPHAN_AGE_SECONDS, DEFAULT_WRITER_IDLE_SECONDS
from memwal.core.document import Document
from memwal.core.retry import after_conflict
from memwal.errors import BadInputError, ConflictError, MemWalError, NotFoundError, StateMovedError
from memwal.gc.drain import DoneDrain, SafeVersions, ShardDrain
from memwal.gc.expiry import VersionExpiry, plan_version_expiry
from memwal.gc.gates import PROGRESS_UNPROVEN, Gates
from memwal.gc.generations import GenerationsPlan, plan_generations
from memwal.gc.manifests import ManifestPruning, plan_manifest_pruning
from memwal.gc.model import (
    Blocked,
    BrokenShard,
    Deletable,
    DeletedGeneration,
    Duration,
    GenerationDeletion,
    Json,
    KeptWal,
    LiveCheckpoint,
    Orphan,
    Retention,
    WalDeletion,
    seconds,
)
from memwal.gc.orphans import hold_linked, plan_shard_orphans, plan_staging_orphans
from memwal.gc.proven import GcProof
from memwal.gc.receipts import plan_receipt_pruning
from memwal.gc.result import GcResult
from memwal.gc.wait import gc_wait
from memwal.gc.wal import plan_shard_wal
from memwal.history.prune import HistoryPruning, plan_history_pruning
from memwal.history.receipts import Receipt, ReceiptListing, list_receipts
from memwal.history.run import current as current_run
from memwal.rollup.plan import RollupPlan
from memwal.store import Store
from memwal.table import Table
from memwal.table.listing import MemWalListing, list_mem_wal, read_by_name_now
from memwal.table.manifest import maintained_indexes
from memwal.table.naming import JOBS_DIR, MEM_WAL_INDEX_NAME, shard_dir
from memwal.table.paths import shard_of_key
from memwal.table.progress_digest import ProgressDigest, load_digest
from memwal.table.retained import RetainedVersion, retained_versions, vouch
from memwal.table.shards import ShardManifests, read_listed_manifests, read_shard_manifests
from memwal.table.wal_digest import Header, WalDigest, load_wal_digest
from memwal.table.writer import StatOnUse, WriterView, shard_writers

log = logging.getLogger(__name__)

#: Plans retried when a listed object vanished before it was read (a concurrent GC).
PLAN_ATTEMPTS = 5


@dataclass(frozen=True)
class GcPlan(Document):
    """Every collector's plan, and what the run needs to remember afterwards."""

    table: str
    read_version: int
    planned_at: float
    grace_seconds: float
    generation_plan: GenerationsPlan
    wal_deletions: tuple[WalDeletion, ...] = ()
    kept_wal_entries: tuple[KeptWal, ...] = ()
    orphans: tuple[Orphan, ...] = ()
    #: Kept by an orphan gate, a symbolic link, or (after the run's re-check) a changed gate.
    other_blocked: tuple[Blocked, ...] = ()
    version_expiry: VersionExpiry | None = None
    checkpoint_sweep: CheckpointSweep = field(default_factory=CheckpointSweep)
    history: HistoryPruning = field(default_factory=HistoryPruning)
    #: Every retained version read (before the expiry), for the run to remember
    #: (:func:`memwal.table.retained.remember_retained`); not part of the document.
    versions: tuple[RetainedVersion, ...] = field(default=(), repr=False)
    #: What the WAL entries' headers said (read or remembered), and the digest they came from.
    wal_headers: Mapping[str, Header] = field(default_factory=dict, repr=False)
    wal_digest: WalDigest = field(default_factory=WalDigest, repr=False)
    #: The retained-progress digest as the plan read it.
    progress_digest: ProgressDigest = field(default_factory=ProgressDigest, repr=False)
    #: What the proof read back and found in the base: receipts the run records (memwal.history.receipts).
    proofs: tuple[Receipt, ...] = ()
    #: Receipts no proof needs any more (their versions expired, their generations gone).
    receipts_pruning: tuple[str, ...] = ()
    #: Shard-manifest versions no reader can hold any more (memwal.gc.manifests).
    manifest_pruning: ManifestPruning = field(default_factory=ManifestPruning)
    #: The version expiry and writer idle period the gates were judged with (the wait's times).
    expire_versions: float | None = None
    writer_idle_seconds: float = DEFAULT_WRITER_IDLE_SECONDS
    #: A listing pass (:func:`plan_gc`'s ``listed_only``): it rolls up and heals, and deletes nothing.
    listed_only: bool = False

    def wait_of(self, result: GcResult, at: float) -> GcResult:
        """``result`` with its ``wait``: what kept its generations, and when each combination of
        gates passes, judged with this plan's options (:func:`memwal.gc.wait.gc_wait`)."""
        return replace(result, wait=gc_wait(result.to_dict(), at=at, options=self))

    @property
    def generations(self) -> tuple[GenerationDeletion, ...]:
        return self.generation_plan.deletions

    @property
    def drains(self) -> tuple[ShardDrain, ...]:
        return self.generation_plan.drains

    @property
    def rollups(self) -> tuple[RollupPlan, ...]:
        return self.generation_plan.rollups

    @property
    def writers(self) -> tuple[WriterView, ...]:
        return tuple(self.generation_plan.writers[s] for s in sorted(self.generation_plan.writers))

    @property
    def wal_entries(self) -> tuple[WalDeletion, ...]:
        return self.wal_deletions

    @property
    def blocked(self) -> tuple[Blocked, ...]:
        return self.generation_plan.blocked + self.other_blocked

    @property
    def broken_shards(self) -> tuple[BrokenShard, ...]:
        return self.generation_plan.broken

    @property
    def retention(self) -> Retention | None:
        return self.generation_plan.retention

    @property
    def time_will_free(self) -> bool:
        return self.generation_plan.time_will_free

    @property
    def heal_at(self) -> float | None:
        return self.generation_plan.heal_at

    @property
    def retained_versions(self) -> int:
        return len(self.versions)

    @property
    def checkpoints(self) -> tuple[LiveCheckpoint, ...]:
        return tuple(LiveCheckpoint(c.id, c.name, c.version, c.expires_at) for c in self.checkpoint_sweep.live)

    def to_dict(self) -> Json:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "grace_seconds": self.grace_seconds,
            "retained_versions": self.retained_versions,
            # of which manifests read (the others' progress came from the last run's digest)
            "retained_manifests_read": sum(not v.remembered for v in self.versions),
            "would_delete": [{"shard_id": g.shard_id, "generation": g.generation, "path": g.path,
                              "gates": g.gates.to_dict()} for g in self.generations],
            "would_delete_wal_entries": [w.to_dict() for w in self.wal_deletions],
            "would_drain": [d.to_dict() for d in self.drains],
            "would_roll_up": [r.to_dict() for r in self.rollups],
            "would_record_proofs": [r.to_dict() for r in self.proofs],
            "receipts_to_prune": len(self.receipts_pruning),
            "manifest_versions_to_prune": self.manifest_pruning.to_dict(),
            "writers": [w.to_dict() for w in self.writers],
            "blocked": [b.to_dict() for b in self.blocked],
            "orphans": [o.to_dict() for o in self.orphans],
            "broken_shards": [b.to_dict() for b in self.broken_shards],
            "kept_wal_entries": [k.to_dict() for k in self.kept_wal_entries],
            "retention": None if self.retention is None else self.retention.to_dict(),
            "time_will_free": self.time_will_free,
            "heal_at": self.heal_at,
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "expired_checkpoints": list(self.checkpoint_sweep.expired_ids),
            "history_records_to_prune": len(self.history.keys),
            "versions_to_expire": [] if self.version_expiry is None else list(self.version_expiry.planned),
        }

    def result(self, *, dry_run: bool, engine: str = "local") -> GcResult:
        """A result carrying the plan's explanations (blocked, kept, retention), nothing deleted yet."""
        return GcResult(table=self.table, dry_run=dry_run, engine=engine, blocked=self.blocked, orphans=self.orphans,
                        broken_shards=self.broken_shards, kept_wal_entries=self.kept_wal_entries,
                        retention=self.retention, time_will_free=self.time_will_free, heal_at=self.heal_at,
                        checkpoints=self.checkpoints, writers=self.writers, listed_only=self.listed_only)

    def preview(self) -> GcResult:
        """The result a run of this plan would give, with nothing deleted: the dry run's document,
        its wait judged when the plan was made."""
        return self.wait_of(replace(
            self.result(dry_run=True),
            deleted=tuple(DeletedGeneration(g.shard_id, g.generation, g.path, g.objects, g.bytes, g.gates)
                          for g in self.generations),
            drained=tuple(DoneDrain(d.shard_id, d.from_version + 1, d.generations, d.repairs) for d in self.drains),
            rolled_up=self.rollups,
            proofs_recorded=len(self.proofs),
            receipts_pruned=len(self.receipts_pruning),
            manifest_versions_pruned=len(self.manifest_pruning.keys),
            wal_entries_deleted=len(self.wal_deletions),
            objects_deleted=sum(g.objects for g in self.generations) + len(self.wal_deletions),
            bytes_freed=sum(g.bytes for g in self.generations) + sum(w.size for w in self.wal_deletions),
            expired_versions=None if self.version_expiry is None else self.version_expiry.preview(),
            checkpoints_removed=self.checkpoint_sweep.expired_ids,
            history_pruned=len(self.history.keys)), self.planned_at)


def plan_gc(
    table: Table,
    *,
    grace_seconds: Duration = DEFAULT_GRACE_SECONDS,
    orphan_age_seconds: Duration = DEFAULT_ORPHAN_AGE_SECONDS,
    history_retention_seconds: Duration | None = None,
    expire_versions_seconds: Duration | None = None,
    writer_idle_seconds: Duration = DEFAULT_WRITER_IDLE_SECONDS,
    now: float | None = None,
    listed_only: bool = False,
) -> GcPlan:
    """Pure: what each collector may do and, for everything kept, which gate keeps it.

    Durations are seconds or ``timedelta``. With ``expire_versions_seconds`` the version
    expiry is a step of the plan: the versions it removes are named (less those a live
    shard writer may have opened: :mod:`memwal.table.writer`), and every gate is computed
    without them, so the dry run lists exactly what the run deletes.

    ``listed_only``: a listing pass, for a follower after each merge. It walks only the folders
    the shard manifests list (a table that keeps a week of merged generations has thousands a
    whole run walks), rolls up and heals what stays listed exactly as a whole run, and plans
    nothing else: no drain (:data:`memwal.gc.gates.LISTED_ONLY`), no deletion, no version expiry,
    no pruning; but for the repair every run makes at once, a listed merged generation whose folder
    is gone or has no Lance manifest left (every reader fails on it): drained, and what is left of
    it deleted after the run looks again under its lease.
    """
    now = clocks.current()() if now is None else now
    grace = seconds(grace_seconds)
    latest = table.require_mem_wal()
    indexes = [i for i in maintained_indexes(latest) if i != MEM_WAL_INDEX_NAME]
    store = table.store
    if listed_only:
        listing, shards = _listed_folders(store)
        expire_versions_seconds = history_retention_seconds = None
    else:
        listing = list_mem_wal(store, lazy=True)  # a folder's files walked when the plan asks for them
        shards = read_listed_manifests(store, listing)
    histories, writers = shard_writers(store, listing, shards.states, now=now,
                                       idle_seconds=seconds(writer_idle_seconds))
    # a listing pass of a table object that read every retained version before reads only what was
    # committed since, from the manifests (the digest is a whole run's; its bytes grow with the age)
    progress_digest = ProgressDigest() if listed_only and table.main_line is not None else load_digest(table.store)
    versions = retained_versions(table, known=progress_digest)
    sweep = sweep_checkpoints(table, now)
    _warn_lost_views(table, versions, sweep.live)
    receipts = ReceiptListing() if listed_only else list_receipts(store)
    expire = None if expire_versions_seconds is None else seconds(expire_versions_seconds)

    def judge() -> tuple[VersionExpiry | None, list[RetainedVersion], list[RetainedVersion], Gates, GcProof,
                         GenerationsPlan]:
        expiry: VersionExpiry | None = None
        gone: list[RetainedVersion] = []
        left = versions
        if expire is not None:
            expiry, gone = plan_version_expiry(versions, latest.version, expire, sweep.live, now,
                                               writer_pins=[(w.claimed_at - grace, w.claimed_at)
                                                            if w.claimed_at is not None else None
                                                            for w in writers.values() if w.live])
            going = {id(v) for v in gone}
            left = [v for v in versions if id(v) not in going]
        gates = Gates(latest, indexes, left, sweep.live, now, grace)
        proof = GcProof(table, latest.version, versions, receipts)
        generations = plan_generations(shards, listing, gates, writers, SafeVersions(histories, now, grace),
                                       frozenset(expiry.held_for_writers) if expiry is not None else frozenset(),
                                       prove=proof, listed_only=listed_only)
        return expiry, list(gone), left, gates, proof, generations

    expiry, gone, left, gates, proof, generations = judge()
    if vouch(table, versions, _deciding(versions, gone, generations, gates)):
        expiry, gone, left, gates, proof, generations = judge()  # from the manifests: the digest lied
    digest = WalDigest() if listed_only else load_wal_digest(store)
    wal: list[WalDeletion] = []
    kept: list[KeptWal] = []
    orphans: list[Orphan] = []
    blocked: list[Blocked] = []
    headers: dict[str, Header] = {}
    for sid, state in ({} if listed_only else shards.states).items():
        w = plan_shard_wal(store, state, listing.shards[sid], generations.deletable.get(sid, Deletable()),
                           None if expiry is None else expiry.expire_before, digest)
        wal += w.deletions
        kept += w.kept
        headers.update(w.headers)
        o = plan_shard_orphans(store, state, listing.shards[sid], partial(gates.verdict, sid), now,
                               seconds(orphan_age_seconds), latest.compacted_generation(sid))
        orphans += o.orphans
        blocked += o.blocked
    if not listed_only:
        orphans += plan_staging_orphans(listing, now, seconds(orphan_age_seconds))
    # a listing pass deletes and prunes nothing under _jobs/ (run history, receipts: thousands of
    # files a follower's table keeps), so no link there can redirect what it does
    links = sorted(set(listing.links_met()) | set(() if listed_only else store.list_links(f"{JOBS_DIR}/")))
    held = hold_linked(links, generations.deletions, tuple(wal), tuple(orphans))
    # a link in a shard's folder may stand where the drain's new manifest version goes: no drain there
    linked = {shard_of_key(link + "/x") for link in links}
    generations = replace(generations, drains=tuple(d for d in generations.drains if d.shard_id not in linked),
                          rollups=tuple(r for r in generations.rollups if r.shard_id not in linked))
    history = HistoryPruning()
    if history_retention_seconds is not None:
        me = current_run()
        history = plan_history_pruning(store, now - seconds(history_retention_seconds),
                                       keep_run=None if me is None else me.run_id)
    pruning = () if listed_only else plan_receipt_pruning(proof.receipt, receipts, left, listing, generations)
    manifests = ManifestPruning() if listed_only else plan_manifest_pruning(histories, writers, now, grace)
    if listed_only:  # the checkpoints' gates hold, their records stay: removing expired ones is the whole run's
        sweep = CheckpointSweep(live=sweep.live)
    return GcPlan(table.uri, latest.version, now, grace, replace(generations, deletions=held.generations),
                  held.wal, tuple(kept), held.orphans, tuple(blocked) + held.blocked, expiry, sweep, history,
                  tuple(versions), headers, digest, progress_digest, tuple(proof.proven), pruning, manifests,
                  expire_versions=None if expire_versions_seconds is None else seconds(expire_versions_seconds),
                  writer_idle_seconds=seconds(writer_idle_seconds), listed_only=listed_only)


#: The version number a ``retained-version:`` reason starts with (:meth:`RetainedVersion.describe`).
_LEADING_NUMBER = re.compile(r"\d+")


def _deciding(versions: list[RetainedVersion], gone: list[RetainedVersion],
              generations: GenerationsPlan, gates: Gates) -> list[RetainedVersion]:
    """The retained versions whose progress (or commit time) decides a verdict of this plan, for
    :func:`memwal.table.retained.vouch` to confirm where it is the digest's claim (issue 83): a
    claim may save a read, never free, alarm or name a holder. Each version named as what holds a
    folder back; each version the expiry removes (its commit time decides); and when the plan frees
    a folder or a listing entry, or alarms (``progress-unproven``: the covering version the proof
    judged at comes from the claims), every one, since any of them could hold it. A plan that only
    keeps things, as most of a follower's do, checks its few named holders."""
    if generations.deletions or generations.drains or any(
            PROGRESS_UNPROVEN in b.reasons or b.reason == PROGRESS_UNPROVEN for b in generations.blocked):
        return versions
    asked = {r for b in generations.blocked for r in (b.reason, *b.reasons) if r.startswith("retained-version:")}
    # each claim described only when some version is named: a listing pass names none, and a week
    # of versions described at every pass grew with the table's age (issue 82)
    numbers = {int(m.group()) for r in asked if (m := _LEADING_NUMBER.match(r, len("retained-version:")))}
    named = {f"retained-version:{v.describe()}": v for v in gates.progress.numbered(numbers) if not v.vouched}
    held = {id(v): v for r in asked if (v := named.get(r)) is not None}
    return [*gone, *held.values()]


def _listed_folders(store: Store) -> tuple[MemWalListing, ShardManifests]:
    """A listing pass's reads: each shard's latest manifest, then a listing of ``_mem_wal/`` that
    walks only the folders those manifests list (on a disk by name; an object store's one listing
    by generation number: a failed flush attempt or a rollup under a listed number comes too),
    leaving out every WAL and the merge staging (on a disk, a link in place of a shard's
    ``manifest/`` folder, where the pass writes, is looked for).
    The plan judges those manifests, read before the walk, so every folder they list was walked
    (one missing is missing: gone, or never written). On a disk the walk leaves the manifest
    versions out: the listing holds the names the manifests' reads found, each stat-ed when the
    plan asks for it (:class:`memwal.table.writer.StatOnUse`). An object store read by name
    (:func:`memwal.table.listing.read_by_name_now`) reads the manifests from its walk of their
    versions, made before it walks the folders they list: each shard's versions are not listed
    twice a pass, nor the shards' names (issue 82)."""
    read: list[ShardManifests] = []
    numbers: dict[str, set[int]] = {}

    def named(found: ShardManifests) -> dict[str, list[str]]:
        """The folders ``found``'s manifests list, by shard (the manifests kept, for the plan)."""
        read.append(found)
        numbers.update({sid: {fg.generation for fg in state.flushed} for sid, state in found.states.items()})
        return {sid: [fg.path for fg in state.flushed] for sid, state in found.states.items()}

    def chosen(sid: str, g: int) -> bool:
        return g in numbers.get(sid, ())

    listing = None
    if read_by_name_now(store):
        # a shard with folders and no manifest version, which a listing of its versions alone cannot
        # tell from no shard, is named broken by the whole GC (and a status read whole), not here
        listing = list_mem_wal(store, wal=False, staging=False, generations=chosen,
                               named=lambda versions: named(read_listed_manifests(store, versions)))
        if not read:  # not read by name after all (the memory of a long _mem_wal/ ran out meanwhile)
            listing = None
    if listing is None:
        # on a disk the listed folders are walked by name: the names of a shard's folders (a week of
        # them kept by the retention) are not listed at every pass (issue 82)
        paths = named(read_shard_manifests(store))
        listing = list_mem_wal(store, wal=False, staging=False, manifests=not store.has_directories,
                               generations=chosen, named=paths)
        if store.has_directories:
            versions = read[-1].versions
            kept = {sid: replace(shard, manifests=StatOnUse(store, sid, versions.get(sid, ())))
                    for sid, shard in listing.shards.items()}
            # where this pass writes a shard's next manifest version: a link in that folder's place holds it
            linked = [link for sid in kept for link in store.list_links(f"{shard_dir(sid)}/manifest/",
                                                                         recursive=False)]
            listing = replace(listing, shards=kept, links=tuple(sorted({*listing.links, *linked})))
    found = read[-1]
    states = {sid: state for sid, state in found.states.items() if sid in listing.shards}
    return listing, ShardManifests(states, dict(found.broken))


def _warn_lost_views(table: Table, versions: Iterable[RetainedVersion], live: Iterable[Checkpoint]) -> None:
    """Say which live checkpoint lost its base version (expired by hand, or before this
    fix without its tag): its view cannot be read any more. GC goes on, and still keeps the
    generations the record lists (gate f is as strict as ever)."""
    asked = [c for c in live if c.newer_format is None]
    if not asked:  # most tables have no checkpoint: no pass over a week of versions (issue 82)
        return
    main = {v.version for v in versions if v.branch is None}
    for c in asked:
        if c.version not in main:
            log.warning("%s: checkpoint %s pins table version %d, which is gone: its view can no longer be "
                        "read (delete it with memwal checkpoint delete); gc goes on", table.uri, c.id, c.version)


def check_audit_destination(store: Store) -> None:
    """Refuse, before anything is written, an audit folder that cannot hold the record.

    The record is written after the deletions; finding out only then would leave a run
    that deleted data without its record.
    """
    for key in (JOBS_DIR, f"{JOBS_DIR}/audit"):
        if store.head(key) is not None:
            raise BadInputError(f"{store.uri_for(key)} is a file, not a folder: the GC audit record cannot go there")


def plan_gc_settled(table: Table, *, grace_seconds: Duration = DEFAULT_GRACE_SECONDS,
                    orphan_age_seconds: Duration = DEFAULT_ORPHAN_AGE_SECONDS,
                    history_retention_seconds: Duration | None = None,
                    expire_versions_seconds: Duration | None = None,
                    writer_idle_seconds: Duration = DEFAULT_WRITER_IDLE_SECONDS, now: float | None = None,
                    listed_only: bool = False) -> GcPlan:
    """:func:`plan_gc`, planned again when a listed object vanished before it was read.

    A concurrent GC deletes WAL entries and generations between our listing and our read:
    that is a lost race, not bad input, so we list again (what it deleted is then absent).
    """
    def attempt(_n: int) -> GcPlan:
        try:
            # one listing of _versions/ per attempt (a retry lists again); a listing pass grows the
            # versions its table object knew by those committed since (memwal.table.versions_cursor)
            with table.reading(grown=listed_only and _n == 1):
                return plan_gc(table, grace_seconds=grace_seconds, orphan_age_seconds=orphan_age_seconds,
                               history_retention_seconds=history_retention_seconds,
                               expire_versions_seconds=expire_versions_seconds,
                               writer_idle_seconds=writer_idle_seconds, now=now, listed_only=listed_only)
        except NotFoundError as exc:
            raise StateMovedError(f"{exc} vanished while planning") from exc

    try:
        return after_conflict(attempt, what=f"gc {table.uri}: planning", attempts=PLAN_ATTEMPTS)
    except ConflictError as exc:
        raise MemWalError(f"{table.uri}: objects kept vanishing while GC planned (a concurrent GC?): "
                          f"{exc.__cause__ or exc}") from exc


def prepare_gc(table: Table, *, audit: bool = False, grace_seconds: Duration = DEFAULT_GRACE_SECONDS,
               orphan_age_seconds: Duration = DEFAULT_ORPHAN_AGE_SECONDS,
               history_retention_seconds: Duration | None = None,
               expire_versions_seconds: Duration | None = None,
               writer_idle_seconds: Duration = DEFAULT_WRITER_IDLE_SECONDS, listed_only: bool = False) -> GcPlan:
    """Everything a GC run reads, checked before its first write (lease, expiry, drain, deletion, audit)."""
    if audit:
        check_audit_destination(table.store)
    return plan_gc_settled(table, grace_seconds=grace_seconds, orphan_age_seconds=orphan_age_seconds,
                           history_retention_seconds=history_retention_seconds,
                           expire_versions_seconds=expire_versions_seconds, writer_idle_seconds=writer_idle_seconds,
                           listed_only=listed_only)
