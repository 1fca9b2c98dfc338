"""What LanceDB reads of a MemWAL table, read the way LanceDB reads it (``memwal verify``).

LanceDB 0.40 (Lance 13 inside) reads as upstream's spec asks readers to ("Reader
Expectations"): the base table at its version and, from each shard manifest, only the
generations above a mark taken from that version's MemWAL index. For a scan or a filter the
mark is the merged generation (``compacted_sstables``); for a full-text or vector search it is
the lower of that and the index's caught-up generation (``index_catchup``), since rows merged
but not yet indexed are searched in their generation. Observed with lancedb 0.40.0: after a
merge with no catch-up, a merged generation's folder deleted while still listed, LanceDB's
scans and filters (a BTree-indexed one too) read every row while its full-text and vector
searches fail on the missing folder; after a catch-up they open it no more, and a generation
no longer listed is never opened. pylance 14 reads exactly that set with
``LsmScanner.from_snapshots``, so the check runs here, with no LanceDB installed.

The generations these reads open are a subset of what pylance's ``lsm_scanner()`` and
lance-context read (every listed generation), so the check tells which of LanceDB's reads a
finding breaks. And as a search re-reads merged generations on top of the base table, it can
see other rows than a scan: observed, a row LanceDB's ``delete()`` removed from the base table
after the merge is found again by its full-text search until the index catches up. So each
search's rows are counted against the scans'.
"""

from __future__ import annotations

from dataclasses import dataclass

from lance.mem_wal import LsmScanner

from memwal.read.plan import ReadPlan
from memwal.table import Table
from memwal.table.manifest import TableManifest, maintained_indexes
from memwal.table.shards import ShardState

CHECK = "lancedb-view-readable"


@dataclass(frozen=True)
class LanceDBRead:
    """One kind of LanceDB read and the generations it opens, per shard."""

    what: str
    generations: tuple[tuple[str, tuple[int, ...]], ...]


def searched_by_index(type_url: str) -> bool:
    """Whether LanceDB searches through an index of this kind with the index's own mark:
    vector and full-text (inverted) indexes; scalar ones serve filters, which read as scans."""
    return type_url.endswith(("VectorIndexDetails", "InvertedIndexDetails"))


def lancedb_reads(manifest: TableManifest, states: dict[str, ShardState]) -> list[LanceDBRead]:
    """The distinct generation sets LanceDB's reads open at ``manifest``'s version: scans and
    filters first, then each set that searches through some maintained index open (reads
    that open the same generations are named together)."""
    searched = {i.name for i in manifest.user_indices() if searched_by_index(i.type_url)}
    marks: dict[str, dict[str, int]] = {"scans and filters": dict(manifest.compacted)}
    for name in maintained_indexes(manifest):
        if name in searched:
            caught_up = manifest.index_catchup.get(name, {})
            marks[f"searches of index {name}"] = {sid: min(manifest.compacted_generation(sid), caught_up.get(sid, 0))
                                                  for sid in states}
    by_set: dict[tuple[tuple[str, tuple[int, ...]], ...], list[str]] = {}
    for what, mark in marks.items():
        gens = tuple((sid, tuple(g.generation for g in states[sid].flushed if g.generation > mark.get(sid, 0)))
                     for sid in sorted(states))
        by_set.setdefault(gens, []).append(what)
    return [LanceDBRead(", ".join(names), gens) for gens, names in by_set.items()]


def read_as_lancedb(table: Table, manifest: TableManifest, states: dict[str, ShardState], read: LanceDBRead,
                    columns: list[str]) -> int:
    """The rows ``read`` gives (``columns`` only), read as LanceDB reads them: the base table
    at ``manifest``'s version and the listed generations ``read`` opens, last write wins."""
    plan = ReadPlan(table=table.uri, version=manifest.version, source="manifests", snapshot_ts_millis=0, snapshots=[])
    for sid, gens in read.generations:
        state = states[sid]
        plan.read_shard(sid, state.current_generation, state.manifest.shard_spec_id,
                        [(g.generation, g.path) for g in state.flushed if g.generation in gens])
    scanner = LsmScanner.from_snapshots(table.dataset(manifest.version), plan.snapshots)
    return int(scanner.project(columns).to_table().num_rows)
