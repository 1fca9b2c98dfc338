"""Running a repair the operator confirmed: write the generations' rows, or accept the base.

Two outcomes for each unproven generation (:mod:`memwal.repair.plan`), both recorded as a
receipt (:mod:`memwal.history.receipts`) so GC may then drain and collect it:

* ``apply``: the rows the plan shows are written into the base (upserts, then deletes), in
  commits bound to the version the plan read, with no retry: a commit since then that touched
  those rows makes Lance refuse them, and nothing of the repair is recorded. The receipt
  (``repair``) names the generations, bound to the last commit's transaction file.
* ``accept``: nothing is written; the receipt (``accept``) says the base at the version the plan
  read is the truth for those generations (the owner changed those keys before the mark covered
  them, for example).

Both run under the table's merge lease (memwal's own merges wait), and plan again under it: the
plan's id must be the one the operator confirmed (exit 2 and nothing written otherwise: the
table moved, or the wrong plan was confirmed). The lease is not a fence (H5): what makes an
apply harmless once its author lost the lease is the binding to the plan's read version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lance
import pyarrow.compute as pc

from memwal.core.document import Document
from memwal.errors import BadInputError
from memwal.history import run as history
from memwal.history.receipts import ACCEPT, REPAIR, Receipt, write_receipt
from memwal.merge.join import join_builder
from memwal.merge.read import TOMBSTONE
from memwal.repair.plan import RepairPlan, ShardRepair, plan_repair
from memwal.table import Table
from memwal.table.schema import primary_key_of

APPLY, ACCEPTED = "apply", "accept"


@dataclass(frozen=True)
class RepairResult(Document):
    """What a confirmed repair did: per shard, the keys written (apply) or accepted, and the versions."""

    table: str
    how: str
    plan_id: str
    shards: tuple[dict[str, Any], ...] = ()
    versions: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "how": self.how, "plan_id": self.plan_id, "shards": list(self.shards),
                "versions": list(self.versions)}

    def problems(self) -> list[str]:
        return []


def check_confirmed(plan: RepairPlan, confirm: str) -> None:
    """Exit 2 (nothing written) unless ``confirm`` is this plan's id."""
    if not plan.shards:
        raise BadInputError(f"{plan.table}: nothing to repair (every merged generation is proven)")
    if confirm != plan.plan_id:
        raise BadInputError(f"{plan.table}: the repair plan is {plan.plan_id}, not {confirm!r}: the table changed "
                            "since the dry run, or another plan was confirmed; run memwal repair --dry-run again")


def run_repair(table: Table, how: str, confirm: str, *, shard: str | None = None,
               by: str | None = None) -> RepairResult:
    """Plan again and, when it is the confirmed plan, ``apply`` or ``accept`` it (the module
    docstring). The caller holds the merge lease."""
    plan = plan_repair(table, shard=shard)
    check_confirmed(plan, confirm)
    versions: list[int] = []
    done = []
    for s in plan.shards:
        low, high = s.span
        if how == APPLY:
            written = _apply(table, plan.read_version, s)
            versions += written
            history.committed(table, written[-1], applied={s.shard_id: (low, high)}, kind=REPAIR)
        else:
            manifest = table.manifest(plan.read_version)
            write_receipt(table.store, Receipt(plan.read_version, ACCEPT, {s.shard_id: (low, high)},
                                               transaction_file=manifest.transaction_file or None, by=by))
        done.append({"shard_id": s.shard_id, "generations": [g for g, _ in s.generations], "keys": s.key_count})
    return RepairResult(table.uri, how, plan.plan_id, tuple(done), tuple(versions))


def _apply(table: Table, read_version: int, s: ShardRepair) -> list[int]:
    """Commit the shard's upserts, then its deletes, each bound to ``read_version`` (the deletes
    to the upserts' own version when nothing came between); the versions committed."""
    pk = primary_key_of(table)
    tomb = s.rows.column(TOMBSTONE).fill_null(False)
    upserts = s.rows.filter(pc.invert(tomb)).drop_columns(["__gen", TOMBSTONE])
    deletes = s.rows.filter(tomb).select(pk)
    versions: list[int] = []
    bound = read_version
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
        done = lance.LanceDataset.commit(ds.uri, txn, read_version=bound, storage_options=table.storage_options or None)
        versions.append(int(done.version))
        # the deletes bind to the upserts' version only when nothing came between
        bound = int(done.version) if done.version == bound + 1 else bound
    if not versions:
        raise BadInputError(f"{table.uri}: shard {s.shard_id}: the repair has no row to write")
    for v in versions[:-1]:
        history.committed(table, v)
    return versions


__all__ = ["ACCEPTED", "APPLY", "RepairResult", "check_confirmed", "run_repair"]

