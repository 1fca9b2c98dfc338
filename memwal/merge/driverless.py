"""The driverless commit: rows an engine's executors already wrote into the base table,
committed by the driver as metadata only (last-write-wins batches).

An engine hands over :class:`TableChanges`: new fragments in the base table's own data folder,
the base fragments' new metadata (one deletion file per fragment masking every base row of a key
the batch re-puts or deletes; the id alone when no row is left) and counts per shard.
:func:`commit_table_changes` is the one commit step, two commits (one when pylance exposes
upstream Lance's ``commit_preassigned_rows``): a **data commit**, a ``LanceOperation.Update``
bound to the plan's read version carrying the run id and the intent's id and data ranges
(:func:`memwal.merge.intents.data_properties`); then a **marker commit**, an empty-source marked
``merge_insert`` (progress only). Why: docs/decisions/0014-driverless-merge.md.

* **A lost race, never a lost row.** Lance rejects the bound data commit (retryable, re-planned)
  when a commit since its read version rewrote, deleted from or compacted a fragment it changes.
* **A stale merger's data commit is harmless (H5).** Lance would still rebase its new rows over
  a newer merge that inserted the same keys (observed: the keys then live twice), so it also
  names the *fence fragment* (the lowest fragment id at the read version), and every merge that
  may race an unfinished driverless merge names it in its first commit (:func:`claim_fence`):
  whichever commits second is rejected. Fragment ids only grow, so the fence is stable.
* **Between the commits** the generations stay unmerged (readers see each key's newest value, GC
  keeps them); the next plan finds the data commit (:mod:`memwal.merge.applied`), commits the marker.
* **No uncommitted file is left** when the data commit loses or is never tried
  (:meth:`TableChanges.discard`); after a kill, ``gc --expire-versions`` (Lance's
  ``cleanup_old_versions``) removes unreferenced files past its unverified window.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import lance
from lance.fragment import FragmentMetadata

from memwal.core import steps
from memwal.core.retry import is_conflict
from memwal.errors import MemWalError, StateMovedError
from memwal.history import run as history
from memwal.merge import intents
from memwal.merge.changes import empty_keys
from memwal.merge.guard import applied_ranges, before_commit, earlier, markers
from memwal.merge.join import join_builder
from memwal.merge.model import MergePlan
from memwal.observe import progress
from memwal.table import Table

if TYPE_CHECKING:
    from memwal.lease import Lease

log = logging.getLogger(__name__)

#: Files an engine writes into the base table, by store key: data files and deletion files.
_WRITTEN = re.compile(r"^(data/[0-9A-Za-z_-]+\.lance|_deletions/\d+-\d+-\d+\.(arrow|bin))$")


def deletion_file_key(fragment: FragmentMetadata) -> str:
    """The store key of a fragment's deletion file (Lance: ``_deletions/<id>-<version>-<n>.<ext>``)."""
    d = fragment.deletion_file
    if d is None:
        raise ValueError(f"fragment {fragment.id} has no deletion file")
    return f"_deletions/{fragment.id}-{d.read_version}-{d.id}.{'arrow' if d.file_type == 'array' else 'bin'}"


def data_file_keys(fragment: FragmentMetadata) -> list[str]:
    return [f"data/{f.path}" for f in fragment.files]


@dataclass
class TableChanges:
    """What an engine wrote into the base table for one batch, not yet committed."""

    new_fragments: list[FragmentMetadata]
    updated_fragments: list[FragmentMetadata]
    removed_fragment_ids: list[int]
    rows_upserted: Counter[str] = field(default_factory=Counter)
    rows_deleted: Counter[str] = field(default_factory=Counter)
    #: Store keys of every file written (``data/...``, ``_deletions/...``).
    written: list[str] = field(default_factory=list)
    #: Committed, or possibly committed (a commit that failed on the way): never removed then.
    settled: bool = False

    def discard(self, table: Table) -> None:
        """Remove the written files; only for changes that will never be committed. A key of
        another shape, or one the table's latest version names, is refused, never removed."""
        remove_uncommitted(table, self.written)
        self.written = []

    def close(self, table: Table) -> None:
        """After the commit step: what was never committed is removed; safe to call twice."""
        if not self.settled and self.written:
            try:
                self.discard(table)
            except MemWalError as exc:  # Lance's cleanup collects unreferenced files later
                log.warning("merge %s: files left uncommitted: %s", table.uri, exc)


def named_files(ds: lance.LanceDataset) -> set[str]:
    """The data and deletion files ``ds``'s fragments name, as store keys."""
    out: set[str] = set()
    for f in ds.get_fragments():
        meta = f.metadata
        out.update(data_file_keys(meta))
        if meta.deletion_file is not None:
            out.add(deletion_file_key(meta))
    return out


def remove_uncommitted(table: Table, keys: list[str]) -> None:
    """Remove files a merge wrote into the table and never committed. ``keys`` may come from
    storage (a task's receipt): only data and deletion file names are accepted, and none the
    table's latest version names (that would be a reader's data) is ever removed."""
    odd = sorted(k for k in keys if not _WRITTEN.match(k))
    if odd:
        raise MemWalError(f"{table.uri}: refusing to remove unexpected keys {odd[:3]}")
    if not keys:
        return
    live = named_files(table.dataset()) & set(keys)
    if live:
        log.warning("merge %s: %d files listed as uncommitted are in the table; kept: %s", table.uri, len(live),
                    sorted(live)[:3])
    table.store.delete_many(sorted(set(keys) - live))


def fence_fragment(ds: lance.LanceDataset) -> FragmentMetadata | None:
    """The fragment every racing merge names in its first commit: the lowest id (None: the
    table has no fragment, and a commit that removed the fence conflicts with older ones)."""
    fragments = ds.get_fragments()
    return min(fragments, key=lambda f: f.fragment_id).metadata if fragments else None


def with_fence(ds: lance.LanceDataset, updated: list[FragmentMetadata],
               removed: list[int]) -> list[FragmentMetadata]:
    """``updated`` naming the fence fragment too (unchanged, as of ``ds``) unless the commit
    already changes or removes it."""
    fence = fence_fragment(ds)
    if fence is None or fence.id in {f.id for f in updated} | set(removed):
        return updated
    return [*updated, fence]


def data_commit(table: Table, plan: MergePlan, changes: TableChanges, intent: str) -> int:
    """Commit 1: the fragments, bound to the plan's read version, with the fence; returns the version."""
    ds = table.dataset(plan.read_version)
    updated = with_fence(ds, list(changes.updated_fragments), changes.removed_fragment_ids)
    op = lance.LanceOperation.Update(removed_fragment_ids=sorted(changes.removed_fragment_ids),
                                     updated_fragments=updated, new_fragments=changes.new_fragments)
    data = {s.shard_id: (s.from_generation, s.to_generation) for s in plan.data_plan().shards}
    props = {**history.transaction_properties(), **intents.data_properties(intent, data)}
    done = lance.LanceDataset.commit(table.uri, lance.Transaction(plan.read_version, op, transaction_properties=props),
                                     read_version=plan.read_version, storage_options=table.storage_options or None)
    history.committed(table, done.version, bind=True)  # a later marker-only merge trusts its receipt, not its claim
    return int(done.version)


def marker_commit(table: Table, plan: MergePlan, data: tuple[int, ...] = ()) -> int:
    """Commit 2: the progress marker alone, through an empty-source marked ``merge_insert``
    (``execute()``: the uncommitted path drops the marker, H2). Lance rejects it when another
    merger recorded progress at or above ours. Its receipt names the generations the batch's
    data commit ``data`` applied."""
    ds = table.dataset()
    join_builder(ds, list(plan.primary_key), 0).when_matched_delete().mark_sstables_as_compacted(
        markers(plan)).execute(empty_keys(ds.schema, list(plan.primary_key)))
    version = int(table.dataset().version)
    history.committed(table, version, applied=applied_ranges(plan, table), data=earlier(plan, data))
    return version


def claim_fence(table: Table, plan: MergePlan) -> int | None:
    """Name the fence fragment, unchanged, in a commit of its own bound to the plan's read
    version (for a batch with no bound commit of its own to name it in): an unfinished
    driverless merge's data commit, bound to an older version, is then rejected. None when
    the table has no fragment (nothing to name, and nothing older can commit)."""
    ds = table.dataset(plan.read_version)
    fence = fence_fragment(ds)
    if fence is None:
        return None
    txn = lance.Transaction(plan.read_version, lance.LanceOperation.Update(updated_fragments=[fence]),
                            transaction_properties=history.transaction_properties())
    done = lance.LanceDataset.commit(table.uri, txn, read_version=plan.read_version,
                                     storage_options=table.storage_options or None)
    history.committed(table, done.version)
    return int(done.version)


def commit_table_changes(table: Table, plan: MergePlan, changes: TableChanges, *, lease: Lease | None,
                         on_step: Callable[[str], None] | None = None) -> tuple[int, int]:
    """The data commit then the marker commit (see the module docstring). Returns (version, commits).

    The intent is written before the lease check that precedes the data commit. An unfinished
    merge that commits with the driver may land its marked pass between our two commits over
    rows we committed: then we do not commit driverless at all (a lost race: the run re-plans
    on the driver path). What was written and not committed is removed when the data commit
    is refused or never attempted; once it may have landed, the intent stays for the next plan.
    """
    step = progress.phased("merge", steps.scoped("merge", on_step))
    store = table.store
    intent = intents.write_intent(store, {s.shard_id: s.to_generation for s in plan.shards}, plan.read_version,
                                  lease.holder if lease else "no-lease", commit_path=intents.DRIVERLESS)
    attempted = False
    try:
        others = intents.others_pending(store, intent, table.manifest(), set(plan.shard_ids))
        if any(i.commit_path == intents.DRIVER for i in others):
            raise StateMovedError(f"{table.uri}: an unfinished merge commits with the driver on these shards; "
                                  "this batch re-plans on the driver path")
        before_commit(table, plan, lease, step, "before-data-commit")
        attempted = True
        data_version = data_commit(table, plan, changes, intent)
    except BaseException as exc:
        if not attempted or is_conflict(exc):  # refused or never sent: nothing of ours is in the table
            _abandon(table, changes, intent)
        else:
            changes.settled = True
        raise
    changes.settled = True
    step("after-data-commit")
    before_commit(table, plan, lease, step, "before-marked-commit")
    version = marker_commit(table, plan, (data_version,))
    intents.finish(store, intent, table.manifest())
    step("after-marked-commit")
    return version, 2


def _abandon(table: Table, changes: TableChanges, intent: str) -> None:
    """Remove what a batch that committed nothing wrote: its files, then its intent."""
    try:
        changes.discard(table)
        table.store.delete_many([intent])
    except MemWalError as exc:  # the batch's own error matters more; later merges prune the intent
        log.warning("merge %s: could not remove what an uncommitted batch wrote: %s", table.uri, exc)
