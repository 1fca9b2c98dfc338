"""Reader helper: shard snapshots for pylance's LSM readers, listing only unmerged generations.

Listing only generations above the merge progress means a pylance reader never opens a
generation that GC may collect (``LsmScanner`` fails, it does not skip, when a listed
generation is missing: hazard H6, docs/architecture.md).

Where shard state comes from (``source``):
* ``"manifests"``: every shard's latest manifest (authoritative). A shard whose latest manifest
  is unknown (a gap in its versions, an unreadable latest version) fails the read, naming the
  shard: an older state would silently miss its newest rows.
* ``"index"``: the snapshot ``memwal snapshot`` published in the MemWAL index, one read for all
  shards. pylance's reader does not skip a missing generation and a shard flushed after the
  snapshot would be invisible, so by default (``check_fresh=True``) a shard is read from its
  manifest when the snapshot is older than it, lists a missing generation above the merge
  progress, or lacks the shard (one listing of ``_mem_wal/``, per shard a HEAD of the version
  after the snapshot's and, when that is missing, one ``GAP_LOOK`` versions on: GC's pruning may
  have left a gap there, :func:`memwal.table.shards.probe_shard_manifest`; a listing per listed
  generation). No snapshot (or an unreadable one): every shard from its manifest.

Shard pruning with a ``filter`` (:mod:`memwal.read.pruning`) skips a shard only when its field
values are known to be outside what the filter allows, and only on fields computed from
primary-key columns alone, which every version of a key shares (on a non-key column an update
could move a key out of the filter, and leaving it out would resurrect the old base row). As
pylance 14's ``ShardWriter`` records no ``shard_field_entries``, the values are inferred by
routing the keys of the generations the reader would open, only when the filter constrains a
prunable field.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import lance
import pyarrow as pa
from lance.mem_wal import ShardSnapshot

from memwal.core.document import Document
from memwal.core.pool import parallel_map
from memwal.errors import BadInputError
from memwal.read.pruning import allowed_shard_values, filter_literals, routed_values, shard_matches, source_columns
from memwal.snapshot.format import SnapshotUnavailableError
from memwal.snapshot.locate import read_snapshot
from memwal.store import LocalStore
from memwal.table import Table
from memwal.table.manifest import TableManifest
from memwal.table.naming import manifest_key, version_hint_key
from memwal.table.paths import generation_key
from memwal.table.schema import primary_key
from memwal.table.sharding import (
    ShardingFieldDict,
    ShardingSpecDict,
    ShardValue,
    field_names_from_lance_schema,
    shard_field_value_from_bytes,
    spec_to_dict,
)
from memwal.table.shards import (
    GAP_LOOK,
    MAX_GENERATION,
    ShardState,
    ended_at_gap,
    generation_readable,
    list_shard_ids,
    reader_shard_manifest,
)

if TYPE_CHECKING:
    from lance.schema import LanceSchema

log = logging.getLogger(__name__)

SOURCES = ("index", "manifests")
_THREADS = 16


class ShardListing(TypedDict):
    """One shard of a read plan, as its document lists it."""

    shard_id: str
    source: str  # index, manifests or checkpoint:<id>
    manifest_version: int | None
    generations: list[int]  # the generations the read lists
    pruned: bool  # left out by the filter


class Fallback(TypedDict):
    """A shard (None: every shard) read from its manifest instead of the snapshot, and why."""

    shard_id: str | None
    reason: str


@dataclass
class ShardView:
    """What a reader needs of one shard, whichever source it came from."""

    shard_id: str
    version: int
    shard_spec_id: int
    current_generation: int
    flushed: list[tuple[int, str]]
    fields: dict[str, ShardValue]
    source: str


@dataclass
class ReadPlan(Document):
    """Shard snapshots for a read, and how they were obtained."""

    table: str
    version: int
    source: str
    snapshot_ts_millis: int
    snapshots: list[ShardSnapshot]
    shards: list[ShardListing] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    #: (shard_id, generation, path) of every generation the snapshots list, in order.
    generations: list[tuple[str, int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "source": self.source,
            "snapshot_ts_millis": self.snapshot_ts_millis,
            "shards": self.shards,
            "fallbacks": self.fallbacks,
            "pruned": self.pruned,
        }

    def read_shard(self, shard_id: str, current_generation: int, spec_id: int,
                   generations: Iterable[tuple[int, str]]) -> None:
        """Add the snapshot of one shard reading ``generations`` ((generation, path), ascending)."""
        snapshot = ShardSnapshot(shard_id).with_current_generation(current_generation)
        if spec_id:
            snapshot = snapshot.with_spec_id(spec_id)
        for g, p in generations:
            generation_key(shard_id, p)  # refuse unsafe paths before a reader opens them (invariant 5)
            snapshot = snapshot.with_sstable(g, p)
            self.generations.append((shard_id, g, p))
        self.snapshots.append(snapshot)


def _threads(table: Table) -> int:
    """Threads for per-shard reads: object stores are latency bound, a local disk is not."""
    return 1 if isinstance(table.store, LocalStore) else _THREADS


def _view_from_state(state: ShardState, specs: dict[int, ShardingSpecDict]) -> ShardView:
    values: dict[str, ShardValue] = {}
    spec = specs.get(state.manifest.shard_spec_id)
    types = {f["field_id"]: f["result_type"] for f in spec["fields"]} if spec else {}
    for fid, raw in state.field_entries().items():
        if fid not in types:
            continue
        try:
            values[fid] = shard_field_value_from_bytes(types[fid], raw)
        except BadInputError:
            continue  # unknown encoding: the value stays unknown (never pruned on)
    return ShardView(
        shard_id=state.shard_id,
        version=state.version,
        shard_spec_id=state.manifest.shard_spec_id,
        current_generation=state.current_generation,
        flushed=[(g.generation, g.path) for g in state.flushed],
        fields=values,
        source="manifests",
    )


def _unmerged(view: ShardView, manifest: TableManifest, include_merged: bool) -> list[tuple[int, str]]:
    compacted = manifest.compacted_generation(view.shard_id)
    return [(g, p) for g, p in sorted(view.flushed) if include_merged or g > compacted]


def _stale_reason(table: Table, view: ShardView, manifest: TableManifest, include_merged: bool) -> str | None:
    for g, p in _unmerged(view, manifest, include_merged):
        if not generation_readable(table.store, generation_key(view.shard_id, p)):
            return f"generation {g} ({p}) listed by the snapshot is missing"
    if not 0 < view.version <= MAX_GENERATION:  # as a garbage hint: no version a shard manifest has
        return f"the snapshot's shard manifest version {view.version} is not one a shard has"
    if table.store.exists(manifest_key(view.shard_id, view.version + 1)):
        return f"shard manifest has a version newer than the snapshot's {view.version}"
    # the snapshot's next version may be missing because GC pruned it (a gap), not because none was
    # written: one look past it, as a probe from a hint looks past the end of its chain
    # (:func:`memwal.table.shards.probe_shard_manifest`, where the rule and its reach are argued)
    if ended_at_gap(table.store, view.shard_id, view.version):
        return (f"shard manifest has a version newer than the snapshot's {view.version} "
                f"(version {view.version + GAP_LOOK}, past a gap GC's pruning left)")
    return None


#: Why a shard is read from its manifest when its version hint is newer than the published snapshot.
HINT_NEWER = "its version hint is newer than the snapshot"


def _moved_since_snapshot(table: Table, manifest: TableManifest, shard_ids: list[str]) -> bool:
    """Whether every shard's version hint was written after the published snapshot, on a disk:
    the snapshot is then stale for every shard, and each is read from its manifest without
    decoding it. A follower snapshots on a cadence of its own and merges every flush, so between
    two snapshots a shard flushes many times; decoding the snapshot was some 4 ms of a new
    process's 22-27 ms read (fresh processes, interleaved, a pylance-followed table at minute 3).
    The hint's time is the store's clock and the snapshot's the job's: a skew between the two only
    decides which path reads, and both give the same rows. On an object store the check would be
    a request a shard, where the snapshot saves them: not made there."""
    ts = manifest.mem_wal.snapshot_ts_millis if manifest.mem_wal is not None else 0
    if ts <= 0 or not shard_ids or not isinstance(table.store, LocalStore):
        return False
    for sid in shard_ids:
        info = table.store.head(version_hint_key(sid))
        if info is None or info.mtime * 1000 <= ts:
            return False
    return True


def _from_manifests(table: Table, shard_ids: list[str], specs: dict[int, ShardingSpecDict]) -> dict[str, ShardView]:
    states = parallel_map(lambda sid: reader_shard_manifest(table.store, sid), shard_ids, _threads(table))
    return {s.shard_id: _view_from_state(s, specs) for s in states if s is not None}


def _prunable_fields(spec: ShardingSpecDict, field_names: dict[int, str], pk: set[str]) -> list[ShardingFieldDict]:
    """Fields whose value depends on primary-key columns only (see the module docstring)."""
    out = []
    for f in spec["fields"]:
        names = source_columns(f, field_names)
        if names and all(n in pk for n in names):
            out.append(f)
    return out


def _inferred_values(
    table: Table, view: ShardView, gens: list[tuple[int, str]], spec: ShardingSpecDict, lance_schema: LanceSchema,
    columns: list[str]
) -> dict[str, set[ShardValue]] | None:
    """Every shard field value Lance routes the rows in ``gens`` to; None when unknown."""

    def batches() -> Iterable[pa.RecordBatch]:
        for _g, path in gens:
            uri = table.store.uri_for(generation_key(view.shard_id, path))
            yield from lance.dataset(uri, storage_options=table.storage_options or None).to_batches(columns=columns)

    try:
        values = routed_values(batches(), spec, lance_schema)
    except (OSError, ValueError, RuntimeError) as exc:
        log.info("shard %s: cannot infer its shard values (%s): not pruned", view.shard_id, exc)
        return None
    if values is None:
        log.info("shard %s: Lance gives no shard value to some of its rows: not pruned", view.shard_id)
    return values


class _Pruner:
    def __init__(self, table: Table, manifest: TableManifest, filter: str) -> None:
        self.table = table
        self.by_spec: dict[int, tuple[ShardingSpecDict, dict[str, set[ShardValue]], list[str]]] = {}
        literals = filter_literals(filter)
        if not literals or manifest.mem_wal is None:
            return
        ds = table.dataset(manifest.version)
        self.lance_schema = ds.lance_schema
        field_names = field_names_from_lance_schema(self.lance_schema)
        pk = set(primary_key(self.lance_schema))
        for raw in manifest.mem_wal.sharding_specs:
            spec = spec_to_dict(raw)
            fields = _prunable_fields(spec, field_names, pk)
            allowed = allowed_shard_values({"spec_id": spec["spec_id"], "fields": fields}, self.lance_schema, literals)
            if allowed:
                narrow: ShardingSpecDict = {"spec_id": spec["spec_id"],
                                            "fields": [f for f in fields if f["field_id"] in allowed]}
                columns = sorted({c for f in narrow["fields"] for c in source_columns(f, field_names) or []})
                self.by_spec[spec["spec_id"]] = (narrow, allowed, columns)

    def keep(self, view: ShardView, gens: list[tuple[int, str]]) -> bool:
        """False only when no row of the shard's generations can match the filter."""
        entry = self.by_spec.get(view.shard_spec_id) if view.shard_spec_id else None
        if entry is None:
            return True
        spec, allowed, columns = entry
        if all(fid in view.fields for fid in allowed):
            return shard_matches(view.fields, allowed)
        if not gens:
            return True  # nothing to read either way; keep the shard in the listing
        inferred = _inferred_values(self.table, view, gens, spec, self.lance_schema, columns)
        if inferred is None:
            return True
        return all(inferred[fid] & allowed[fid] for fid in allowed)


def plan_read(
    table: Table,
    *,
    source: str = "index",
    filter: str | None = None,
    manifest: TableManifest | None = None,
    include_merged: bool = False,
    check_fresh: bool = True,
) -> ReadPlan:
    """Shard snapshots for a read at ``manifest``'s table version (latest when None)."""
    if source not in SOURCES:
        raise BadInputError(f"unknown source {source!r}: expected index or manifests")
    manifest = manifest or table.require_mem_wal()
    specs = {s.spec_id: spec_to_dict(s) for s in (manifest.mem_wal.sharding_specs if manifest.mem_wal else [])}
    views: dict[str, ShardView] = {}
    fallbacks: list[Fallback] = []
    ts = 0
    to_read: list[str] = []
    # the shards on storage, listed once: what a fresh check compares the snapshot with
    on_storage = list_shard_ids(table.store) if source == "index" and check_fresh else []
    if on_storage and _moved_since_snapshot(table, manifest, on_storage):
        fallbacks += [{"shard_id": sid, "reason": HINT_NEWER} for sid in on_storage]
        to_read = on_storage
    elif source == "index":
        snap = None
        try:
            snap = read_snapshot(table, manifest)
            if snap is None:
                fallbacks.append({"shard_id": None, "reason": "no shard snapshot published"})
        except SnapshotUnavailableError as exc:
            fallbacks.append({"shard_id": None, "reason": f"shard snapshot unreadable: {exc}"})
        if snap is None:
            to_read = list_shard_ids(table.store)
        else:
            ts = snap.snapshot_ts_millis
            for r in snap.rows:
                views[r.shard_id] = ShardView(
                    r.shard_id,
                    r.version,
                    r.shard_spec_id,
                    r.current_generation,
                    list(r.flushed_generations),
                    dict(r.fields),
                    "index",
                )
            if check_fresh:
                listed = set(on_storage)
                for sid in sorted(set(views) - listed):
                    del views[sid]  # its directory is gone: nothing of it can be read
                reasons = parallel_map(lambda v: (v.shard_id, _stale_reason(table, v, manifest, include_merged)),
                                       list(views.values()), _threads(table))
                for sid, reason in reasons:
                    if reason:
                        fallbacks.append({"shard_id": sid, "reason": reason})
                        to_read.append(sid)
                        del views[sid]
                for sid in sorted(listed - set(views) - set(to_read)):
                    fallbacks.append({"shard_id": sid, "reason": "shard not in the snapshot"})
                    to_read.append(sid)
    else:
        to_read = list_shard_ids(table.store)
    views.update(_from_manifests(table, sorted(to_read), specs))

    pruner = _Pruner(table, manifest, filter) if filter else None
    listing = {sid: _unmerged(v, manifest, include_merged) for sid, v in views.items()}
    keep = {sid: True for sid in views}
    if pruner is not None and pruner.by_spec:
        flags = parallel_map(lambda sid: (sid, pruner.keep(views[sid], listing[sid])), sorted(views), _threads(table))
        keep.update(dict(flags))
    plan = ReadPlan(table=table.uri, version=manifest.version, source=source, snapshot_ts_millis=ts, snapshots=[])
    plan.fallbacks = fallbacks
    for sid in sorted(views):
        v = views[sid]
        gens = listing[sid]
        plan.shards.append(
            {
                "shard_id": sid,
                "source": v.source,
                "manifest_version": v.version,
                "generations": [g for g, _ in gens],
                "pruned": not keep[sid],
            }
        )
        if not keep[sid]:
            plan.pruned.append(sid)
            continue
        plan.read_shard(sid, v.current_generation, v.shard_spec_id, gens)
    return plan


def shard_snapshots(
    table: Table,
    *,
    source: str = "index",
    filter: str | None = None,
    manifest: TableManifest | None = None,
    include_merged: bool = False,
    check_fresh: bool = True,
) -> list[ShardSnapshot]:
    """One ``ShardSnapshot`` per shard (pruned by ``filter``), listing generations above the merge progress."""
    return plan_read(
        table,
        source=source,
        filter=filter,
        manifest=manifest,
        include_merged=include_merged,
        check_fresh=check_fresh,
    ).snapshots
