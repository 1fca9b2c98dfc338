"""GC's proof that rows about to leave every reader's view are in the base table, and the repair.

GC asks it before a drain takes merged generations out of the shard manifest, and before it
deletes a folder that only someone else's drain says is merged (docs/decisions/0054-rollups.md).
The rule is :mod:`memwal.merge.proof`'s, the one `memwal verify` checks; here it runs on the
table version the plan read. A generation that cannot be read proves nothing.

Reading every drained generation back costs what the merge's own read cost, and a drain of a
long backlog is what GC does at scale (issue 49's budget: 0.02 requests a deleted object). So a
drain of generations whose recorded progress the table's history vouches for is not read back:
the first retained version that recorded it wrote rows in the same commit (a marked merge, not
a marker alone, which a driverless claim, forgeable, stands behind: issue 56), and every version
since either recorded progress of its own (another marked merge), carries a memwal run's
properties, or changed no row (an index, a compaction, a configuration). Anything else since, a
commit by another compactor (lance-context's ``cleanup_wal()``), a user's write, a version the
expiry removed or a transaction pylance cannot read, and the rows are read back.

When listed merged generations fail it, readers still read them right (a listed generation wins
over the base), but the base is stale: another compactor merged older rows over ours (lance-
context's ``cleanup_wal()`` re-merges what is still listed, issue 54), or a forged claim recorded
a merge that wrote nothing (issue 56). The *repair* writes into the base exactly the rows every
reader reads now, the failing keys' newest listed versions, in commits bound to the plan's read
version with no retry of their own: a commit since then that touched those rows makes Lance
refuse them (the drain then waits), and committed after a lost lease they change no read (H5).
A table with merge operators is never repaired (its base values fold; the generations' are not
what the base should hold): its generations stay listed, named ``progress-unproven``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import lance
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from memwal.errors import MemWalError, first_line
from memwal.history import run as history
from memwal.history.run import RUN_ID_PROPERTY
from memwal.merge.intents import DATA_PROPERTY
from memwal.merge.join import join_builder
from memwal.merge.ops import table_ops
from memwal.merge.proof import prove
from memwal.merge.read import GEN, TOMBSTONE
from memwal.merge.refs import generation_refs
from memwal.pb import transaction_pb2
from memwal.table import Table
from memwal.table.retained import RetainedVersion
from memwal.table.schema import primary_key, primary_key_of

_READ_ERRORS = (MemWalError, OSError, ValueError, RuntimeError, pa.ArrowException)


@dataclass(frozen=True)
class ProofFailure:
    """Why the rows are not proven, and (when the base may be repaired) the rows to write."""

    detail: str
    repair: pa.Table | None = None

    @property
    def keys(self) -> int:
        return 0 if self.repair is None else self.repair.num_rows


#: Operations (Lance's transaction oneof) that change no row's values.
_NO_ROW_CHANGE = frozenset({"create_index", "rewrite", "reserve_fragments", "project", "update_config",
                            "update_mem_wal_state", "clone", "update_bases"})

#: Versions the history check reads at most (each a transaction file); more and the rows are read back.
MAX_VOUCHING_VERSIONS = 64

#: A transaction file larger than this is not read (storage is untrusted input): unknown.
TRANSACTION_MAX_BYTES = 64 << 20


class BaseProof:
    """:data:`memwal.gc.generations.Prover` over one table version and its retained history."""

    def __init__(self, table: Table, version: int, versions: Sequence[RetainedVersion] = ()) -> None:
        self.table, self.version = table, version
        self.main = sorted((v for v in versions if v.branch is None and v.version <= version), key=lambda v: v.version)
        self._ready = False
        self._kinds: dict[int, str | None] = {}

    def _open(self) -> None:
        if not self._ready:  # opened only when some shard has something to prove
            self.ds = self.table.dataset(self.version)
            self.pk = primary_key(self.ds.lance_schema)
            self.folding = list(table_ops(self.ds).folding_columns())
            self._ready = True

    def vouched(self, shard_id: str, low: int, high: int) -> bool:
        """Whether the retained history vouches that the base holds what merged generations
        ``low`` to ``high`` (see the module docstring): the versions from the last change of
        the shard's progress before the one that recorded ``low`` up to the latest are all
        retained and known; none carries a driverless data claim (forgeable: issue 56 H4); every
        commit that recorded progress up to ``high`` wrote rows; every later one recorded
        progress, is a memwal run's, or changed no row."""
        progress = [v.compacted.get(shard_id, 0) for v in self.main]
        first = next((i for i, p in enumerate(progress) if p >= low), None)
        if first is None or first == 0 or progress[first - 1] >= low:
            return False  # the commit that recorded it is not retained with the version before it
        start = first - 1
        while start > 0 and progress[start - 1] == progress[first - 1]:
            start -= 1
        window = self.main[start:]
        if len(window) > MAX_VOUCHING_VERSIONS or window[-1].version != self.version or any(
                b.version - a.version != 1 for a, b in zip(window, window[1:], strict=False)):
            return False  # a version between them is gone (what it did is unknown), or too many to read
        for i in range(start + 1, len(self.main)):
            kind = self._kind(self.main[i].version)
            moved = progress[i] != progress[i - 1]
            if kind in (None, "claim"):
                return False
            if i < first:
                continue  # before the merge: whatever the base held, the merge read it
            if moved and progress[i - 1] < high:
                if kind != "rows":
                    return False  # recorded without its rows (a marker alone): read them back
            elif not (kind in ("none", "ours") or (moved and kind in ("rows", "marker"))):
                return False
        return True

    def _kind(self, version: int) -> str | None:
        """What a commit did, from its transaction file (Lance's; read, never trusted further
        than this): ``claim`` (a driverless data commit, which claims generations' data), ``ours``
        (another memwal run's commit), ``none`` (no row changed), ``rows``, ``marker`` (an Update
        that moved no row: a progress marker alone), or None (unknown)."""
        if version not in self._kinds:
            self._kinds[version] = self._read_kind(version)
        return self._kinds[version]

    def _read_kind(self, version: int) -> str | None:
        try:
            name = self.table.manifest(version).transaction_file
            if not name or "/" in name or name.startswith("."):
                return None
            txn = transaction_pb2.Transaction.FromString(
                self.table.store.get(f"_transactions/{name}", max_bytes=TRANSACTION_MAX_BYTES))
        except (MemWalError, OSError, DecodeError):
            return None
        if DATA_PROPERTY in txn.transaction_properties:
            return "claim"
        if txn.transaction_properties.get(RUN_ID_PROPERTY):
            return "ours"
        op = txn.WhichOneof("operation")
        if op in _NO_ROW_CHANGE:
            return "none"
        if op == "update":
            u = txn.update
            return "rows" if (u.new_fragments or u.updated_fragments or u.removed_fragment_ids) else "marker"
        return "rows" if op is not None else None

    def __call__(self, shard_id: str, proving: Sequence[tuple[int, str]],
                 superseding: Sequence[tuple[int, str]]) -> ProofFailure | None:
        if proving and self.vouched(shard_id, min(g for g, _ in proving), max(g for g, _ in proving)):
            return None
        self._open()
        try:
            refs = generation_refs(self.table, self.ds, shard_id, proving)
            later = generation_refs(self.table, self.ds, shard_id, superseding)
            unproven = prove(self.ds, shard_id, refs, pk=self.pk, folding=self.folding, superseding=later,
                             storage_options=self.table.storage_options)
        except _READ_ERRORS as exc:
            return ProofFailure(f"its rows cannot be read: {first_line(exc, self.table.uri)}")
        if unproven is None:
            return None
        return ProofFailure(unproven.detail, None if self.folding else unproven.rows)


@dataclass(frozen=True)
class Repair:
    """Rows of one shard to write into the base before its drain (see the module docstring)."""

    shard_id: str
    rows: pa.Table

    def to_dict(self) -> dict[str, object]:
        return {"shard_id": self.shard_id, "keys": self.rows.num_rows}


def apply_repair(table: Table, read_version: int, repair: Repair) -> int:
    """Commit the repair's upserts, then its deletes, each bound to ``read_version`` (the deletes
    to the upserts' own version, when nothing came between); the commits made. Raises Lance's
    conflict when a commit since ``read_version`` touched those rows."""
    pk = primary_key_of(table)
    tomb = repair.rows.column(TOMBSTONE).fill_null(False)
    upserts = repair.rows.filter(pc.invert(tomb)).drop_columns([GEN, TOMBSTONE])
    deletes = repair.rows.filter(tomb).select(pk)
    commits, bound = 0, read_version
    for data, delete in ((upserts, False), (deletes, True)):
        if not data.num_rows:
            continue
        ds = table.dataset(bound)
        builder = join_builder(ds, pk, data.num_rows)
        if delete:
            txn, _stats = builder.when_matched_delete().execute_uncommitted(data)
        else:
            txn, _stats = builder.when_matched_update_all().when_not_matched_insert_all().execute_uncommitted(
                data.cast(ds.schema))
        txn.transaction_properties = {**(txn.transaction_properties or {}), **history.transaction_properties()}
        done = lance.LanceDataset.commit(ds.uri, txn, read_version=bound,
                                         storage_options=table.storage_options or None)
        history.committed(done.version)
        bound = done.version if done.version == bound + 1 else bound
        commits += 1
    return commits


__all__ = ["BaseProof", "ProofFailure", "Repair", "apply_repair"]
