"""`memwal verify`'s proof that merged data is in the base table (check ``merged-data-in-base``).

Merge progress (``compacted_sstables``) only *says* a generation is merged; whoever can commit
to the table can make it say so with no row written (a forged data commit, issue 47; a marked
``merge_insert`` of one unchanged row, issue 61). While a merged generation is still on storage,
it is judged by GC's own rule (:mod:`memwal.merge.cover`): a receipt of memwal's own that names it
at its proof point, or its rows read back against the base *at the version whose mark first
covers it*. What the table's owner wrote on the base after that (a delete, an update) is the
truth, not a failure. What fails:

* a generation whose covering version does not hold its rows (a claim with no rows behind it,
  or a compactor that merged older rows over newer ones: issue 54), named with its first key;
* a generation another compactor's drain says is merged, above the recorded progress, whose
  rows the base at the verified version lacks (a drain is a claim too: issue 56).

A listed rollup stands for the generations it replaced. A key held by two shards counts as
proven when either shard's version matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memwal.history.receipts import list_receipts
from memwal.merge.cover import READ_ERRORS, Cover, Entry
from memwal.merge.model import GenerationRef
from memwal.merge.ops import table_merge_ops
from memwal.merge.proof import prove
from memwal.merge.refs import generation_refs
from memwal.rollup.marker import stands_from
from memwal.table import Table
from memwal.table.drain import merged_through
from memwal.table.manifest import TableManifest
from memwal.table.naming import shard_dir
from memwal.table.retained import retained_versions
from memwal.table.schema import primary_key_of
from memwal.table.shards import ShardState, generation_links, generation_readable, list_generation_dirs

CHECK = "merged-data-in-base"


@dataclass(frozen=True)
class Unproven:
    """A shard's first merged generation whose rows the base table is not shown to hold."""

    shard_id: str
    detail: str


def _on_storage(table: Table, shard_id: str, state: ShardState | None, merged: int) -> dict[int, str]:
    """Each merged generation of the shard on storage that a proof can read: the folder the
    manifest lists for it, else the one folder of that number (a link left out)."""
    listed = {} if state is None else {g.generation: g.path for g in state.flushed}
    by_number: dict[int, list[str]] = {}
    for folder, g in list_generation_dirs(table.store, shard_id).items():
        if g <= merged:
            by_number.setdefault(g, []).append(folder)
    out: dict[int, str] = {}
    for g, names in by_number.items():
        mine = listed.get(g)
        name: str | None = mine if mine in names else (names[0] if len(names) == 1 else None)
        if name is None:
            continue
        key = f"{shard_dir(shard_id)}/{name}"
        if generation_readable(table.store, key) and not generation_links(table.store, key):
            out[g] = name
    return out


def unproven_merges(table: Table, manifest: TableManifest, states: dict[str, ShardState]) -> list[Unproven]:
    """Per shard, the first merged generation the base table is not shown to hold (empty: all proven)."""
    ds = table.dataset(manifest.version)
    pk = primary_key_of(table, ds)
    if not pk:
        return []
    folding = list(table_merge_ops(table, manifest.version).folding_columns())

    def refs(shard_id: str, entries: Sequence[tuple[int, str]]) -> list[GenerationRef]:
        return generation_refs(table, ds, shard_id, entries)

    versions = [v for v in retained_versions(table) if v.version <= manifest.version]
    cover = Cover(table, versions, list_receipts(table.store), refs, pk=pk, folding=folding)
    out = []
    for sid in sorted(set(manifest.compacted) | set(states)):
        state = states.get(sid)
        compacted = manifest.compacted_generation(sid)
        merged = merged_through(compacted, state)
        present = _on_storage(table, sid, state, merged)
        listed = {g.path for g in state.flushed} if state is not None else set()
        entries = [Entry(g, p, stands_from(table.store, sid, p, g) if p in listed else None)
                   for g, p in sorted(present.items()) if g <= compacted]
        judged = cover.judge(sid, entries, present)
        failed = sorted((e for e, j in judged.items() if not j.proven), key=lambda e: e.generation)
        if failed:
            out.append(Unproven(sid, f"merged generation {failed[0].generation}: {judged[failed[0]].detail}"))
            continue
        inferred = [(g, p) for g, p in sorted(present.items()) if g > compacted]
        if inferred:
            try:
                unproven = prove(ds, sid, refs(sid, inferred), pk=pk, folding=folding,
                                 storage_options=table.storage_options)
            except READ_ERRORS as exc:
                out.append(Unproven(sid, f"generations {inferred[0][0]}-{inferred[-1][0]}, merged by another "
                                         f"compactor's drain, cannot be read back: {exc}"))
                continue
            if unproven is not None:
                out.append(Unproven(sid, f"merged by another compactor's drain only: {unproven.detail}"))
    return out


__all__ = ["CHECK", "Unproven", "unproven_merges"]
