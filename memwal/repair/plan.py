"""What ``memwal repair`` would do: each merged generation whose rows are unproven, key by key.

GC never writes rows into the base (issue 61): a merged generation whose covering version does
not hold its rows (:mod:`memwal.merge.cover`) stays listed and on storage, named
``progress-unproven``. Only an operator can tell a claim with no rows behind it (a marker
committed by hand, a drain someone wrote) from a base the owner changed before the mark
covered it. The plan shows, for each such generation, every key the base does not hold as the
generation wrote it: the generation's value, the base's value now, and the commit that made the
base's value (the first retained version since the covering one holding it). Keys a newer
generation also writes are left out (readers read that one; the base is its business).

The plan has an id: a digest of what it would write and why (the shards, generations, keys and
both values), never of the table version, so commits that change none of it do not change it.
An operator confirms that id; the run plans again under the merge lease and goes only when the
id is the same (:mod:`memwal.repair.execute`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from memwal.core.document import Document
from memwal.history.receipts import list_receipts
from memwal.merge.cover import Cover, Entry, Judgement
from memwal.merge.model import GenerationRef
from memwal.merge.newest import OpenGenerations, newest_versions
from memwal.merge.ops import table_ops
from memwal.merge.read import TOMBSTONE, conform
from memwal.merge.refs import generation_refs
from memwal.rollup.marker import stands_from
from memwal.table import Table
from memwal.table.listing import list_mem_wal
from memwal.table.retained import RetainedVersion, retained_versions
from memwal.table.schema import primary_key
from memwal.table.shards import read_listed_manifests

#: Keys shown per shard with their values and the commit that made the base's (all are written).
MAX_SHOWN = 20
#: Versions looked up per shown key to find the commit that made the base's value.
MAX_LOOKUPS = 12


@dataclass(frozen=True)
class KeyRepair:
    """One key: what its generation wrote, what the base holds now, and since when."""

    key: Any
    generation: int
    generation_value: dict[str, Any] | None  # None: the generation deleted it
    base_value: dict[str, Any] | None  # None: the base does not hold it
    changed_by: int | None = None  # the version whose commit made the base's value (None: unknown)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "generation": self.generation, "generation_value": self.generation_value,
                "base_value": self.base_value, "changed_by": self.changed_by}


@dataclass(frozen=True)
class ShardRepair:
    """One shard's unproven generations and the keys a repair would write."""

    shard_id: str
    generations: tuple[tuple[int, str], ...]
    why: str
    key_count: int
    keys: tuple[KeyRepair, ...]
    #: The rows a repair writes (the base's columns; ``_tombstone`` for a delete): not in the document.
    rows: pa.Table = field(repr=False, compare=False, default_factory=pa.table)
    #: What the base holds now for those keys (part of the plan's id, not of the document).
    base: tuple[tuple[Any, Any], ...] = field(repr=False, compare=False, default=())

    @property
    def span(self) -> tuple[int, int]:
        return min(g for g, _ in self.generations), max(g for g, _ in self.generations)

    def to_dict(self) -> dict[str, Any]:
        return {"shard_id": self.shard_id, "generations": [{"generation": g, "path": p} for g, p in self.generations],
                "why": self.why, "keys": self.key_count, "shown": [k.to_dict() for k in self.keys]}


@dataclass(frozen=True)
class RepairPlan(Document):
    """Every shard's repair (``memwal repair --dry-run``) and the id an operator confirms."""

    table: str
    read_version: int
    shards: tuple[ShardRepair, ...] = ()
    plan_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "read_version": self.read_version, "plan_id": self.plan_id,
                "shards": [s.to_dict() for s in self.shards]}

    def problems(self) -> list[str]:
        return []


def plan_repair(table: Table, *, shard: str | None = None) -> RepairPlan:
    """The repair of every unproven merged generation (of ``shard`` only, when given)."""
    latest = table.require_mem_wal()
    ds = table.dataset(latest.version)
    pk = primary_key(ds.lance_schema)
    folding = list(table_ops(ds).folding_columns())

    def refs(sid: str, entries: Sequence[tuple[int, str]]) -> list[GenerationRef]:
        return generation_refs(table, ds, sid, entries)

    versions = [v for v in retained_versions(table) if v.version <= latest.version]
    cover = Cover(table, versions, list_receipts(table.store), refs, pk=pk, folding=folding)
    listing = list_mem_wal(table.store, wal=False, staging=False)
    states = read_listed_manifests(table.store, listing).states
    out = []
    for sid, state in sorted(states.items()):
        if shard is not None and sid != shard:
            continue
        listed = listing.shards[sid]
        compacted = latest.compacted_generation(sid)
        present: dict[int, str] = {}
        for name, g in listed.generation_dirs().items():
            if listed.readable(name) and not listed.is_rollup(name):
                present.setdefault(g, name)
        present.update({fg.generation: fg.path for fg in state.flushed if listed.readable(fg.path)})
        entries = [Entry(g, p, stands_from(table.store, sid, p, g) if listed.is_rollup(p) else None)
                   for g, p in sorted(present.items()) if g <= compacted]
        judged = cover.judge(sid, entries, present, [(fg.generation, fg.path) for fg in state.flushed])
        failed = {e: j for e, j in judged.items() if not j.proven and j.failing is not None}
        if failed:
            out.append(_shard_repair(table, ds, sid, failed, present, refs, pk, versions))
    return _with_id(RepairPlan(table.uri, latest.version, tuple(out)))


def _shard_repair(table: Table, ds: lance.LanceDataset, sid: str, failed: Mapping[Entry, Judgement],
                  present: Mapping[int, str], refs: Any, pk: list[str],
                  versions: Sequence[RetainedVersion]) -> ShardRepair:
    failing = pa.concat_tables([j.failing for j in failed.values() if j.failing is not None])
    # a key a newer generation on storage also writes is that generation's: left out
    all_refs = refs(sid, sorted(present.items()))
    gens = OpenGenerations(all_refs, pk, table.storage_options)
    newest = newest_versions(gens, range(len(all_refs)), ())
    joined = failing.select([*pk, "__gen"]).join(newest.select([*pk, "__gen"]), pk, join_type="inner",
                                                  right_suffix="__newest")
    keep = joined.filter(pc.equal(joined.column("__gen"), joined.column("__gen__newest")))
    schema = ds.schema
    rows = _generation_rows(gens, newest, keep.select(pk), pk, schema)
    base = _base_rows(ds, keep.select(pk), pk)
    shown = tuple(_key_repair(table, ds, row, base, pk, versions) for row in rows.slice(0, MAX_SHOWN).to_pylist())
    why = "; ".join(sorted({j.detail for j in failed.values()}))
    return ShardRepair(sid, tuple(sorted((e.generation, e.path) for e in failed)), why, rows.num_rows, shown, rows,
                       tuple(sorted(base.items(), key=lambda kv: str(kv[0]))))


def _generation_rows(gens: OpenGenerations, newest: pa.Table, keys: pa.Table, pk: list[str],
                     schema: pa.Schema) -> pa.Table:
    """Each key's newest row as its generation wrote it: the base's columns, ``__gen`` and ``_tombstone``."""
    mine = newest.join(keys, pk, join_type="inner") if keys.num_rows else newest.slice(0, 0)
    parts = []
    for slot in sorted(set(mine.column("__slot").to_pylist())):
        at = mine.filter(pc.equal(mine.column("__slot"), slot))
        t = gens.rows(int(slot), at.column("__off").to_numpy(), schema)
        parts.append(t.append_column("__gen", at.column("__gen")).append_column(TOMBSTONE, at.column(TOMBSTONE)))
    if not parts:
        return conform(schema.empty_table(), schema, "").append_column(
            "__gen", pa.array([], pa.int64())).append_column(TOMBSTONE, pa.array([], pa.bool_()))
    return pa.concat_tables(parts).sort_by([(k, "ascending") for k in pk])


def _base_rows(ds: lance.LanceDataset, keys: pa.Table, pk: list[str]) -> dict[Any, dict[str, Any]]:
    if not keys.num_rows:
        return {}
    if len(pk) == 1:
        t = ds.to_table(filter=pc.field(pk[0]).isin(keys.column(0).combine_chunks()))
    else:
        t = ds.to_table().join(keys, pk, join_type="left semi")
    return {_key(r, pk): r for r in t.to_pylist()}


def _key(row: Mapping[str, Any], pk: list[str]) -> Any:
    return row[pk[0]] if len(pk) == 1 else tuple(row[k] for k in pk)


def _key_repair(table: Table, ds: lance.LanceDataset, row: dict[str, Any], base: Mapping[Any, dict[str, Any]],
                pk: list[str], versions: Sequence[RetainedVersion]) -> KeyRepair:
    key = _key(row, pk)
    deleted = bool(row.pop(TOMBSTONE))
    generation = int(row.pop("__gen"))
    now = base.get(key)
    return KeyRepair(key, generation, None if deleted else row, now,
                     None if now is None else _changed_by(table, pk, key, now, versions))


def _changed_by(table: Table, pk: list[str], key: Any, now: Mapping[str, Any],
                versions: Sequence[RetainedVersion]) -> int | None:
    """The earliest retained version from which the base holds ``now`` for ``key`` to the latest
    (a binary search over the main line, at most :data:`MAX_LOOKUPS` reads): the commit that made it."""
    main = sorted(v.version for v in versions if v.branch is None)
    if len(pk) != 1 or not main:
        return None
    lo, hi = 0, len(main) - 1
    for _ in range(MAX_LOOKUPS):
        if lo >= hi:
            break
        mid = (lo + hi) // 2
        rows = table.dataset(main[mid]).to_table(filter=pc.field(pk[0]) == key).to_pylist()
        if rows and rows[0] == now:
            hi = mid
        else:
            lo = mid + 1
    return main[lo] if lo == hi else None


def _with_id(plan: RepairPlan) -> RepairPlan:
    doc = [{"shard": s.shard_id, "generations": s.generations, "rows": s.rows.to_pylist(), "base": s.base}
           for s in plan.shards]
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return RepairPlan(plan.table, plan.read_version, plan.shards, digest if plan.shards else "")


__all__ = ["MAX_SHOWN", "KeyRepair", "RepairPlan", "ShardRepair", "plan_repair"]
