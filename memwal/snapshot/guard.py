"""Guarded replacement of the ``__lance_mem_wal`` details, and its crash journal (hazard H1).

A refresh publishes by committing a replacement ``__lance_mem_wal`` entry
(``LanceOperation.CreateIndex``): the latest details with only the snapshot fields changed.
Lance accepts it even when commits landed after the version it read, and then *erases* what
they recorded (merge progress, index catch-up); Lance cannot be made to reject it
(docs/decisions/0011-h1-detect-and-repair.md). So :func:`commit_mem_wal_details` detects and repairs:

1. Read the latest version ``L`` right before committing; commit with ``read_version=L``: ``W``.
2. ``W == L + 1``: nothing can have been erased. Done.
3. Otherwise compare every slot (per shard merge progress, per index and shard catch-up, each
   configuration field) of ``W`` with ``W - 1`` (every interleaved commit's effect) and ``L``.
   A slot we did not mean to change must equal ``W - 1``'s; one we meant to change (a repair)
   combines with an interleaved raise by ``max`` and gives way to a decrease (a restore).
4. Wrong slots are repaired by another replacement from the latest details, checked the same
   way, until a commit has no wrong slot.

A journal (``_mem_wal/_jobs/snapshot/pending.json``) written before each commit and removed
after its check lets the next refresh finish a repair a crash interrupted. Between an erasing
commit and its repair the latest version shows lower progress: memwal-jobs' own mergers stay
out of that window (the refresh holds the merge lease); other writers rely on the repair. GC's
retained-version gate is only stricter while the erasing version is retained.
"""

from __future__ import annotations

import json
import logging
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import lance
from lance.dataset import Index, IndexFile

from memwal.core import steps
from memwal.errors import BadInputError, MemWalError, NotFoundError
from memwal.history import run as history
from memwal.pb import mem_wal_index_pb2
from memwal.snapshot.slots import (
    Fixes,
    RepairedSlot,
    analyse_round,
    apply_slots,
    desired_after,
    slots_of,
)
from memwal.snapshot.versions import TableVersions, mem_wal_entry
from memwal.table import Table
from memwal.table.manifest import TableManifest
from memwal.table.naming import JOBS_DIR, MEM_WAL_DETAILS_TYPE_URL, MEM_WAL_INDEX_NAME

if TYPE_CHECKING:
    from memwal.lease import Lease
    from memwal.store import Store

log = logging.getLogger(__name__)
Step = Callable[[str], None]


#: Written before each commit, removed once the commit is proven to have lost nothing.
JOURNAL_KEY = f"{JOBS_DIR}/snapshot/pending.json"


@dataclass
class GuardedCommit:
    """Outcome of :func:`commit_mem_wal_details`."""

    version: int
    read_version: int
    index_uuid: str
    attempts: int = 0
    repairs: int = 0
    interleaved_commits: int = 0
    repaired: list[RepairedSlot] = field(default_factory=list)
    recovered: bool = False


def _require_details(m: TableManifest, uri: str) -> mem_wal_index_pb2.MemWalIndexDetails:
    if m.mem_wal is None or mem_wal_entry(m) is None:
        raise BadInputError(f"{uri}: table version {m.version} has no MemWAL index")
    return m.mem_wal


def _commit_replacement(
    table: Table, latest: TableManifest, details: mem_wal_index_pb2.MemWalIndexDetails, index_uuid: str,
    files: list[IndexFile] | None
) -> int:
    old = mem_wal_entry(latest)
    if old is None:  # _require_details checked it on this same manifest
        raise BadInputError(f"{table.uri}: table version {latest.version} has no MemWAL index")
    removed = Index(
        uuid=old.uuid,
        name=MEM_WAL_INDEX_NAME,
        fields=[],
        dataset_version=old.dataset_version,
        fragment_ids=set(),  # type: ignore[arg-type]  # Lance takes a set here (Index's docstring); typed Bitmap
        index_version=0,
    )
    new = Index(
        uuid=index_uuid,
        name=MEM_WAL_INDEX_NAME,
        fields=[],
        dataset_version=latest.version,
        fragment_ids=set(),  # type: ignore[arg-type]  # as above
        index_version=0,
        files=files,
        index_details=(MEM_WAL_DETAILS_TYPE_URL, details.SerializeToString()),
    )
    op = lance.LanceOperation.CreateIndex(new_indices=[new], removed_indices=[removed])
    txn = lance.Transaction(latest.version, op, transaction_properties=history.transaction_properties())
    ds = lance.LanceDataset.commit(
        table.uri, txn, read_version=latest.version, storage_options=table.storage_options or None
    )
    history.committed(table, ds.version)
    return ds.version


def _find_commit(versions: TableVersions, read_version: int, index_uuid: str) -> int | None:
    """The version at which the entry ``index_uuid`` was committed (after ``read_version``), if any."""
    for v in sorted(k for k in versions.keys if k > read_version):
        e = mem_wal_entry(versions.at(v))
        if e is not None and e.uuid == index_uuid:
            return v
    return None


@dataclass(frozen=True)
class _Round:
    """One replacement commit of a refresh: the version it read, the index UUID it wrote."""

    read_version: int
    index_uuid: str


class _Journal:
    """``pending.json``: the rounds of a refresh whose commits are not yet checked for H1."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rounds: list[_Round] = []

    def load(self) -> list[_Round]:
        try:
            raw = self.store.get(JOURNAL_KEY)
        except NotFoundError:
            return []
        try:
            rounds = json.loads(raw)["rounds"]
            return [_Round(int(r["read_version"]), str(r["index_uuid"])) for r in rounds]
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a corrupt snapshot journal at %s", self.store.uri_for(JOURNAL_KEY))
            return []

    def add(self, read_version: int, index_uuid: str) -> None:
        self.rounds.append(_Round(read_version, index_uuid))
        self.store.put(JOURNAL_KEY, json.dumps({"rounds": [asdict(r) for r in self.rounds]}).encode())

    def clear(self) -> None:
        self.rounds = []
        self.store.delete_many([JOURNAL_KEY])


def _recover_fixes(table: Table, rounds: list[_Round]) -> Fixes | None:
    """Analyse the last committed round of an interrupted refresh; None when none committed."""
    versions = TableVersions(table.store)
    for r in reversed(rounds):
        try:
            w = _find_commit(versions, r.read_version, r.index_uuid)
            if w is None:
                continue
            read = slots_of(_require_details(versions.at(r.read_version), table.uri))
            wrote = slots_of(_require_details(versions.at(w), table.uri))
            before = slots_of(_require_details(versions.at(w - 1), table.uri))
        except (NotFoundError, BadInputError) as exc:
            log.warning("cannot check an interrupted snapshot commit (%s): its versions were cleaned up", exc)
            return None
        return analyse_round(read, wrote, before)
    return None


def commit_mem_wal_details(
    table: Table,
    update: Callable[[mem_wal_index_pb2.MemWalIndexDetails, str, bool], list[IndexFile] | None],
    *,
    index_uuid: str | None = None,
    lease: Lease | None = None,
    max_rounds: int = 12,
    on_step: Step | None = None,
) -> GuardedCommit:
    """Replace the ``__lance_mem_wal`` details, never losing what others committed meanwhile (H1).

    ``update(details, index_uuid, is_repair)`` sets our own fields on a copy of the latest
    details and may return the entry's ``files`` (or None). See the module docstring for
    the protocol; this returns once a commit of ours is proven to have lost nothing.
    """
    step = steps.scoped("snapshot", on_step)
    store = table.store
    journal = _Journal(store)
    outcome = GuardedCommit(version=0, read_version=0, index_uuid=index_uuid or "")
    fixes: Fixes = {}
    pending = journal.load()
    if pending:
        recovered = _recover_fixes(table, pending)
        if recovered:
            fixes = recovered
            outcome.recovered = True
            outcome.repaired += [RepairedSlot.of(s, c, w) for s, (c, w) in sorted(recovered.items())]
            log.warning("an interrupted snapshot refresh left %d wrong slots: repairing them", len(recovered))
    first_uuid = index_uuid or str(uuidlib.uuid4())
    versions = TableVersions(store)
    for attempt in range(1, max_rounds + 1):
        latest = versions.latest(outcome.version)
        base = _require_details(latest, table.uri)
        read = slots_of(base)
        details = mem_wal_index_pb2.MemWalIndexDetails()
        details.CopyFrom(base)
        is_repair = bool(fixes)
        if fixes:
            apply_slots(details, desired_after(fixes, read))
        round_uuid = first_uuid if attempt == 1 else str(uuidlib.uuid4())
        files = update(details, round_uuid, attempt > 1)
        if lease and attempt == 1:
            # Only our first commit needs the lease. Every later round repairs what that
            # commit erased (values others committed, restored by their maximum), which
            # must happen even if we stalled past the lease meanwhile: stopping here would
            # leave the progress erased until the next refresh. Before it nothing is committed:
            # an operator's cancel stops the refresh here, unless a snapshot file was just written.
            lease.check(safe_to_stop=files is None)
        journal.add(latest.version, round_uuid)
        step("before-commit")
        version = _commit_replacement(table, latest, details, round_uuid, files)
        outcome.attempts = attempt
        outcome.version = version
        outcome.index_uuid = round_uuid
        if attempt == 1:
            outcome.read_version = latest.version
        if is_repair:
            outcome.repairs += 1
        step("after-commit")
        if version == latest.version + 1:
            fixes = {}
        else:
            outcome.interleaved_commits += version - latest.version - 1
            wrote = slots_of(_require_details(versions.at(version), table.uri))
            before = slots_of(_require_details(versions.at(version - 1), table.uri))
            fixes = analyse_round(read, wrote, before)
        if not fixes:
            journal.clear()
            return outcome
        outcome.repaired += [RepairedSlot.of(s, c, w) for s, (c, w) in sorted(fixes.items())]
        log.warning(
            "snapshot commit %d lost %d values written by %d interleaved commit(s) (hazard H1): repairing",
            version,
            len(fixes),
            version - latest.version - 1,
        )
        step("before-repair")
    raise MemWalError(
        f"{table.uri}: the MemWAL index details could not be committed without losing concurrent progress "
        f"after {max_rounds} rounds; the journal {store.uri_for(JOURNAL_KEY)} makes the next refresh repair it"
    )
