"""Guarded replacement of the ``__lance_mem_wal`` details, and its crash journal (hazard H1).

A refresh publishes by committing a replacement ``__lance_mem_wal`` entry through
``LanceOperation.CreateIndex`` whose details are the latest committed details with only
the snapshot fields changed.
Lance accepts that replacement even when commits landed between the version it was based
on (``read_version``) and the version it gets, and the replacement then *erases* whatever
those commits recorded in the details (``compacted_sstables`` from merges,
``index_catchup`` from index commits). Observed with pylance 14.0.2, also with
``max_retries=0`` (the conflict check rebases our transaction before the first attempt)
and with the entry claiming every fragment. ``LanceOperation.Rewrite`` of the entry
(``rewritten_indices``), which could have been a compare-and-swap on the entry's UUID
(Lance gives it a new UUID on every update), is refused ("did not store fragment bitmap")
while the entry exists and is a silent no-op once it was replaced. So Lance cannot be made
to reject the stale replacement. Mergers and index commits, for their part, apply their
progress onto the latest details and keep the snapshot fields (observed). The protocol
here, :func:`commit_mem_wal_details`, is therefore *detect and repair*:

1. Read the latest version ``L`` and its details right before committing (the slow shard
   reads happen earlier, in the plan), commit with ``read_version=L``: version ``W``.
2. ``W == L + 1``: nothing can have been erased (our base was our predecessor). Done.
3. Otherwise compare, slot by slot (per shard merge progress, per index and shard
   catch-up, and each configuration field), what ``W`` holds with what ``W - 1`` held (the
   cumulative effect of every interleaved commit) and what we read at ``L``. A slot we did
   not mean to change must equal ``W - 1``'s value; a slot we meant to change (a repair)
   combines with an interleaved change by ``max`` for progress (both are raises) or gives
   way to a decrease (a restore or a withdrawn catch-up is someone's decision).
4. Any slot that is wrong is repaired by another replacement built from the now latest
   details: a slot nobody touched since ``W`` gets the correct value, a slot raised since
   gets ``max(correct, latest)``, a slot lowered since keeps the latest value. That commit
   is checked the same way; the loop ends when a commit had no wrong slot.

A journal (``_mem_wal/_jobs/snapshot/pending.json``, written under the snapshot lease
before each commit and removed after the check) makes a crash between an erasing commit and
its repair harmless: the next refresh finds the journal, analyses the last committed round
the same way and repairs before doing anything else.

The residual window: between an erasing commit and its repair (milliseconds, or until the
next refresh after a crash) the latest version shows lower progress, and a merger that
planned *and* committed inside it would merge again the generations the erasure hid.
memwal-jobs closes it for its own mergers: the snapshot action holds the merge lease for
the duration of the refresh (``memwal.actions.snapshot_action``), so no memwal merge runs
concurrently. Writers outside memwal-jobs (a hand-written merge loop) are covered only by
the detect-and-repair above.
While the erasing version is retained, GC's retained-version gate is stricter, never
looser. tests/test_snapshot.py's race test reports how often repairs were needed.
"""

from __future__ import annotations

import json
import logging
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lance
from lance.dataset import Index

from memwal.core import steps
from memwal.errors import BadInputError, MemWalError, NotFoundError
from memwal.history import run as history
from memwal.pb import mem_wal_index_pb2, shard_manifest_pb2
from memwal.snapshot.versions import TableVersions, mem_wal_entry
from memwal.table import Table
from memwal.table.manifest import TableManifest
from memwal.table.naming import JOBS_DIR, MEM_WAL_DETAILS_TYPE_URL, MEM_WAL_INDEX_NAME, shard_uuid_bytes, shard_uuid_str

if TYPE_CHECKING:
    from memwal.lease import Lease
    from memwal.store import Store

log = logging.getLogger(__name__)

#: Written before each commit, removed once the commit is proven to have lost nothing.
JOURNAL_KEY = f"{JOBS_DIR}/snapshot/pending.json"
#: Details fields other than the snapshot and progress fields, compared as opaque values.
CONFIG_FIELDS = ("sharding_specs", "maintained_indexes", "writer_config_defaults", "maintain_all_indexes")

Step = Callable[[str], None]

Slot = tuple[str, ...]


def _config_bytes(d: mem_wal_index_pb2.MemWalIndexDetails, name: str) -> bytes:
    """One field of the details as canonical bytes (a message holding only that field)."""
    part = mem_wal_index_pb2.MemWalIndexDetails()
    part.CopyFrom(d)
    for other in part.DESCRIPTOR.fields_by_name:
        if other != name:
            part.ClearField(other)
    return part.SerializeToString(deterministic=True)


def slots_of(d: mem_wal_index_pb2.MemWalIndexDetails) -> dict[Slot, Any]:
    """Every value a replacement must not lose: progress per shard and index, and configuration."""
    out: dict[Slot, Any] = {}
    for c in d.compacted_sstables:
        out[("compacted", shard_uuid_str(c.shard_id.uuid))] = c.generation
    for p in d.index_catchup:
        for c in p.caught_up_generations:
            out[("catchup", p.index_name, shard_uuid_str(c.shard_id.uuid))] = c.generation
    for name in CONFIG_FIELDS:
        out[("config", name)] = _config_bytes(d, name)
    return out


def _monotone(slot: Slot) -> bool:
    return slot[0] in ("compacted", "catchup")


def _gt(a: Any, b: Any) -> bool:
    return (a if a is not None else -1) > (b if b is not None else -1)


def _max(a: Any, b: Any) -> Any:
    return a if _gt(a, b) else b


def describe_slot(slot: Slot) -> dict[str, Any]:
    if slot[0] == "compacted":
        return {"kind": "compacted", "shard_id": slot[1]}
    if slot[0] == "catchup":
        return {"kind": "index_catchup", "index": slot[1], "shard_id": slot[2]}
    return {"kind": "config", "field": slot[1]}


def analyse_round(
    read: dict[Slot, Any], wrote: dict[Slot, Any], before: dict[Slot, Any]
) -> dict[Slot, tuple[Any, Any]]:
    """Slots our commit got wrong: ``slot -> (correct value, value our commit holds)``.

    ``read``: the details at our read version; ``wrote``: what our commit holds;
    ``before``: the version just before ours (every interleaved commit's cumulative effect).
    """
    fixes: dict[Slot, tuple[Any, Any]] = {}
    for slot in set(read) | set(wrote) | set(before):
        r, c, b = read.get(slot), wrote.get(slot), before.get(slot)
        if c == r:  # we did not mean to change it: the interleaved value stands
            correct = b
        elif b == r:  # we meant to change it and nobody else did
            correct = c
        elif _monotone(slot) and _gt(b, r):  # both raised it
            correct = _max(b, c)
        else:  # an interleaved decrease (restore, withdrawn catch-up) or reconfiguration wins
            correct = b
        if correct != c:
            fixes[slot] = (correct, c)
    return fixes


def desired_after(fixes: dict[Slot, tuple[Any, Any]], latest: dict[Slot, Any]) -> dict[Slot, Any]:
    """Values the repair commit must carry, given what commits after ours did to each slot."""
    out = dict(latest)
    for slot, (correct, ours) in fixes.items():
        now = latest.get(slot)
        if now == ours:  # untouched since our commit
            out[slot] = correct
        elif _monotone(slot) and _gt(now, ours):  # raised since (built on our wrong value)
            out[slot] = _max(correct, now)
        # else: lowered or reconfigured since: that later decision stands
    return out


def _uuid_msg(shard_id: str) -> shard_manifest_pb2.UUID:
    return shard_manifest_pb2.UUID(uuid=shard_uuid_bytes(shard_id))


def _entries(existing, want: dict[str, int]) -> list:
    """Per-shard generation entries: the existing shards that stay, in their order, with
    their wanted values, then the new shards, sorted (entries of dropped shards go)."""
    want = dict(want)
    out = []
    for c in existing:
        sid = shard_uuid_str(c.shard_id.uuid)
        if sid in want:
            out.append(mem_wal_index_pb2.CompactedSsTable(shard_id=c.shard_id, generation=want.pop(sid)))
    new = sorted(want.items())
    return out + [mem_wal_index_pb2.CompactedSsTable(shard_id=_uuid_msg(s), generation=g) for s, g in new]


def apply_slots(d: mem_wal_index_pb2.MemWalIndexDetails, values: dict[Slot, Any]) -> None:
    """Make ``d`` carry ``values`` for every slot, keeping entry order where it can."""
    current = slots_of(d)
    if all(current.get(s) == v for s, v in values.items()) and all(s in values for s in current):
        return
    # Merge progress.
    kept = _entries(d.compacted_sstables, {s[1]: v for s, v in values.items() if s[0] == "compacted" and v is not None})
    del d.compacted_sstables[:]
    d.compacted_sstables.extend(kept)
    # Index catch-up.
    by_index: dict[str, dict[str, int]] = {}
    for s, v in values.items():
        if s[0] == "catchup" and v is not None:
            by_index.setdefault(s[1], {})[s[2]] = v
    progress = []
    for p in d.index_catchup:
        if p.index_name not in by_index:
            continue
        gens = _entries(p.caught_up_generations, by_index.pop(p.index_name))
        progress.append(mem_wal_index_pb2.IndexCatchupProgress(index_name=p.index_name, caught_up_generations=gens))
    for name, w in sorted(by_index.items()):
        gens = [mem_wal_index_pb2.CompactedSsTable(shard_id=_uuid_msg(s), generation=g) for s, g in sorted(w.items())]
        progress.append(mem_wal_index_pb2.IndexCatchupProgress(index_name=name, caught_up_generations=gens))
    del d.index_catchup[:]
    d.index_catchup.extend(progress)
    # Configuration.
    for name in CONFIG_FIELDS:
        v = values.get(("config", name), b"")
        if _config_bytes(d, name) != v:
            d.ClearField(name)
            d.MergeFromString(v)


@dataclass
class GuardedCommit:
    """Outcome of :func:`commit_mem_wal_details`."""

    version: int
    read_version: int
    index_uuid: str
    attempts: int = 0
    repairs: int = 0
    interleaved_commits: int = 0
    repaired: list[dict] = field(default_factory=list)
    recovered: bool = False


def _require_details(m: TableManifest, uri: str) -> mem_wal_index_pb2.MemWalIndexDetails:
    if m.mem_wal is None or mem_wal_entry(m) is None:
        raise BadInputError(f"{uri}: table version {m.version} has no MemWAL index")
    return m.mem_wal


def _commit_replacement(
    table: Table, latest: TableManifest, details: mem_wal_index_pb2.MemWalIndexDetails, index_uuid: str, files
) -> int:
    old = mem_wal_entry(latest)
    removed = Index(
        uuid=old.uuid,
        name=MEM_WAL_INDEX_NAME,
        fields=[],
        dataset_version=old.dataset_version,
        fragment_ids=set(),
        index_version=0,
    )
    new = Index(
        uuid=index_uuid,
        name=MEM_WAL_INDEX_NAME,
        fields=[],
        dataset_version=latest.version,
        fragment_ids=set(),
        index_version=0,
        files=files,
        index_details=(MEM_WAL_DETAILS_TYPE_URL, details.SerializeToString()),
    )
    op = lance.LanceOperation.CreateIndex(new_indices=[new], removed_indices=[removed])
    txn = lance.Transaction(latest.version, op, transaction_properties=history.transaction_properties())
    ds = lance.LanceDataset.commit(
        table.uri, txn, read_version=latest.version, storage_options=table.storage_options or None
    )
    history.committed(ds.version)
    return ds.version


def _find_commit(versions: TableVersions, read_version: int, index_uuid: str) -> int | None:
    """The version at which the entry ``index_uuid`` was committed (after ``read_version``), if any."""
    for v in sorted(k for k in versions.keys if k > read_version):
        e = mem_wal_entry(versions.at(v))
        if e is not None and e.uuid == index_uuid:
            return v
    return None


class _Journal:
    """``pending.json``: the rounds of a refresh whose commits are not yet checked for H1."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rounds: list[dict[str, Any]] = []

    def load(self) -> list[dict[str, Any]]:
        try:
            raw = self.store.get(JOURNAL_KEY)
        except NotFoundError:
            return []
        try:
            rounds = json.loads(raw)["rounds"]
            return [{"read_version": int(r["read_version"]), "index_uuid": str(r["index_uuid"])} for r in rounds]
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a corrupt snapshot journal at %s", self.store.uri_for(JOURNAL_KEY))
            return []

    def add(self, read_version: int, index_uuid: str) -> None:
        self.rounds.append({"read_version": read_version, "index_uuid": index_uuid})
        self.store.put(JOURNAL_KEY, json.dumps({"rounds": self.rounds}).encode())

    def clear(self) -> None:
        self.rounds = []
        self.store.delete_many([JOURNAL_KEY])


def _recover_fixes(table: Table, rounds: list[dict[str, Any]]) -> dict[Slot, tuple[Any, Any]] | None:
    """Analyse the last committed round of an interrupted refresh; None when none committed."""
    versions = TableVersions(table.store)
    for r in reversed(rounds):
        try:
            w = _find_commit(versions, r["read_version"], r["index_uuid"])
            if w is None:
                continue
            read = slots_of(_require_details(versions.at(r["read_version"]), table.uri))
            wrote = slots_of(_require_details(versions.at(w), table.uri))
            before = slots_of(_require_details(versions.at(w - 1), table.uri))
        except (NotFoundError, BadInputError) as exc:
            log.warning("cannot check an interrupted snapshot commit (%s): its versions were cleaned up", exc)
            return None
        return analyse_round(read, wrote, before)
    return None


def commit_mem_wal_details(
    table: Table,
    update: Callable[[mem_wal_index_pb2.MemWalIndexDetails, str, bool], Any],
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
    fixes: dict[Slot, tuple[Any, Any]] = {}
    pending = journal.load()
    if pending:
        recovered = _recover_fixes(table, pending)
        if recovered:
            fixes = recovered
            outcome.recovered = True
            outcome.repaired += [{**describe_slot(s), "to": c, "from": w} for s, (c, w) in sorted(recovered.items())]
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
            # leave the progress erased until the next refresh.
            lease.check()
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
        outcome.repaired += [{**describe_slot(s), "to": c, "from": w} for s, (c, w) in sorted(fixes.items())]
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
