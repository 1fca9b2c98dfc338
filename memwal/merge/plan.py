"""Plan a merge: per shard, the generations above its merge progress, ascending, no gap.

Lance checks only that recorded progress grows; it does not check gaps (docs/architecture.md,
pylance facts), so skipping a generation would silently lose its rows. The plan therefore
stops a shard at the first generation that is missing from its manifest or from storage,
and says why; other shards still merge. A shard's progress is the MemWAL index's, or what a
drain by another compactor shows when that is higher (lance-context's ``cleanup_wal()``
records its progress only so: :func:`memwal.table.drain.merged_through`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from memwal.core import steps
from memwal.core.pool import parallel_map
from memwal.core.retry import after_conflict
from memwal.errors import BadInputError, MemWalError, StateMovedError, UnsafePathError
from memwal.merge import intents
from memwal.merge.applied import applied_data
from memwal.merge.inputs import OPEN_THREADS, check_generations, links_by_generation
from memwal.merge.model import BlockedShard, GenerationRef, MergePlan, ShardMergePlan
from memwal.merge.operands import wal_keys_by_generation
from memwal.merge.ops import MergeOps, table_merge_ops
from memwal.merge.unique import check_unique_keys
from memwal.table import Table
from memwal.table.drain import merged_through
from memwal.table.generations import generation_check
from memwal.table.manifest import TableManifest
from memwal.table.naming import MEM_WAL_DIR, is_shard_dir_name, shard_dir
from memwal.table.schema import primary_key_of
from memwal.table.shards import (
    FlushedGeneration,
    ShardState,
    generation_links,
    read_shard_manifests,
)

#: Above this many generations, a shard's links are found by one walk of its directory.
WALK_SHARD_ABOVE = 16


def _candidates(state: ShardState, compacted: int, max_generations: int | None
                ) -> tuple[list[tuple[FlushedGeneration, str]], BlockedShard | None]:
    """The gap-free run of listed generations above ``compacted`` with safe keys (no I/O),
    and what stopped it early, if anything."""
    listed = {g.generation: g for g in state.flushed}
    out: list[tuple[FlushedGeneration, str]] = []
    g = compacted + 1
    while g in listed or g < state.current_generation:
        if max_generations is not None and len(out) >= max_generations:
            break
        fg = listed.get(g)
        if fg is None:
            if g >= state.current_generation:
                break
            return out, BlockedShard(state.shard_id, g, "gap: generation is not in the shard manifest")
        try:
            out.append((fg, state.generation_key(fg)))
        except UnsafePathError as exc:
            return out, BlockedShard(state.shard_id, g, f"unsafe-path: {exc}")
        g += 1
    return out, None


def plan_shard(
    table: Table,
    state: ShardState,
    compacted: int,
    *,
    max_generations: int | None,
    stop_at: BlockedShard | None = None,
) -> tuple[list[GenerationRef], BlockedShard | None]:
    """The shard's next generations, stopping at the first one that is not in the manifest,
    has an unsafe path, holds a symbolic link, cannot be opened or has a damaged file
    (:func:`memwal.table.generations.generation_damage`), or at ``stop_at`` (a generation a
    merge of this run failed to read).

    The checks are the same for one generation or ten thousand; their I/O is batched: one
    walk of the shard directory for links (past a few generations), then the link-free
    generations are opened and their fragments validated by Lance on a thread pool (the
    session caches the open for the schema checks and the reads), verdicts in order.
    """
    candidates, stop = _candidates(state, compacted, max_generations)
    if stop_at is not None:
        candidates = [c for c in candidates if c[0].generation <= stop_at.generation]
    store = table.store
    keys = [key for _, key in candidates]
    if len(keys) > WALK_SHARD_ABOVE:
        links = links_by_generation(store, f"{shard_dir(state.shard_id)}/", keys)
    else:
        links = {key: generation_links(store, key) for key in keys}
    linked = next((i for i, key in enumerate(keys) if links[key]), None)
    if linked is not None:
        # Lance follows links when it opens a dataset: nothing at or past a link is opened.
        fg, key = candidates[linked]
        unsafe = f"unsafe-path: {', '.join(links[key])}: symbolic link, never followed"
        candidates, stop = candidates[:linked], BlockedShard(state.shard_id, fg.generation, unsafe)
    uris = [store.uri_for(key) for _, key in candidates]
    checks = parallel_map(lambda item: generation_check(store, item[0], item[1], table.storage_options),
                          [(key, uri) for (_, key), uri in zip(candidates, uris, strict=True)], OPEN_THREADS)
    refs: list[GenerationRef] = []
    for (fg, key), uri, check in zip(candidates, uris, checks, strict=True):
        if stop_at is not None and fg.generation >= stop_at.generation:
            return refs, stop_at
        if check.damage is not None:
            return refs, BlockedShard(state.shard_id, fg.generation, check.damage)
        # the manifest's figures where it has them, else the generation's own (never 0 for unknown)
        refs.append(GenerationRef(state.shard_id, fg.generation, fg.path, key, uri,
                                  fg.physical_rows or check.rows or 0, fg.in_memory_bytes or check.bytes or 0))
    return refs, stop


#: Reasons a shard stops that a concurrent merge (and a GC collecting what it merged) can
#: cause while we plan: checked against the latest progress before they are reported.
_RACY = ("missing:", "unreadable:", "operands-missing:")


def plan_merge(
    table: Table,
    *,
    shards: list[str] | None = None,
    max_generations: int | None = None,
    max_rows: int | None = None,
    max_bytes: int | None = None,
    manifest: TableManifest | None = None,
    stop_at: dict[str, BlockedShard] | None = None,
    check_keys: bool = True,
) -> MergePlan:
    """Pure: reads manifests, returns what a merge would do. Nothing is written.

    ``stop_at`` stops shards at generations an earlier attempt of this run could not read. A base
    that holds a key the batch writes twice is refused (:mod:`memwal.merge.unique`, exit 2);
    ``check_keys=False`` leaves that check, which reads the base's key column, to the merge
    itself (a follower asks only whether there is work, every time a shard moves).
    What moved while we read (a generation merged and collected by others, a table version
    expired) is read again (memwal.core.retry), never reported as missing or bad input.
    """

    def attempt(n: int) -> MergePlan:
        return _plan_merge_once(table, shards=shards, max_generations=max_generations, max_rows=max_rows,
                                max_bytes=max_bytes, manifest=manifest if n == 1 else None, stop_at=stop_at or {})

    plan = after_conflict(attempt, what=f"{table.uri}: merge plan")
    if check_keys:
        check_unique_keys(table, plan)
    return plan


def _progress_moved(table: Table, manifest: TableManifest, shard_ids: set[str]) -> bool:
    latest = table.manifest()
    return any(latest.compacted_generation(s) != manifest.compacted_generation(s) for s in shard_ids)


def _plan_merge_once(
    table: Table,
    *,
    shards: list[str] | None,
    max_generations: int | None,
    max_rows: int | None,
    max_bytes: int | None,
    manifest: TableManifest | None,
    stop_at: dict[str, BlockedShard],
) -> MergePlan:
    manifest = manifest or table.require_mem_wal()
    found = read_shard_manifests(table.store)
    steps.step("merge.after-shard-manifests")
    states = found.states
    if shards:
        unknown = sorted(set(shards) - set(states) - set(found.broken))
        if unknown:
            raise BadInputError(f"{table.uri}: no such shard: {', '.join(unknown)}")
    blocked_shards: list[BlockedShard] = []
    for shard_id, link in _linked_shards(table).items():
        # Listings skip links, so such a shard would silently look empty: say it is stopped.
        if not shards or shard_id in shards:
            blocked_shards.append(BlockedShard(shard_id, manifest.compacted_generation(shard_id) + 1,
                                               f"unsafe-path: {link} is a symbolic link (never followed)"))
    for shard_id, err in found.broken.items():
        # Its latest manifest is unknown, so is what to merge next: stop it, merge the others.
        if not shards or shard_id in shards:
            nxt = manifest.compacted_generation(shard_id) + 1
            blocked_shards.append(BlockedShard(shard_id, nxt, f"{err.reason}: {err.detail}"))
    unfinished = intents.read_intents(table.store)
    floor = intents.floors(unfinished, manifest)
    per_shard: list[tuple[str, int, list[GenerationRef]]] = []
    for shard_id, state in states.items():
        if shards and shard_id not in shards:
            continue
        compacted = manifest.compacted_generation(shard_id)
        budget = None if shard_id in floor else max_generations
        # what another compactor drained from the manifest is merged (memwal.table.drain)
        refs, blocked = plan_shard(table, state, merged_through(compacted, state), max_generations=budget,
                                   stop_at=stop_at.get(shard_id))
        if blocked:
            blocked_shards.append(blocked)
        per_shard.append((shard_id, compacted, refs))
    # Budgets: take generations round-robin across shards (oldest first in each shard) so a
    # huge backlog in one shard cannot starve the others. A shard stops at its first
    # generation that does not fit, so every batch stays gap-free; the first generation of
    # a run is always taken so that a single oversized generation still makes progress.
    taken: dict[str, list[GenerationRef]] = {sid: [] for sid, _, _ in per_shard}
    rows = size = 0
    for depth in range(max((len(refs) for _, _, refs in per_shard), default=0)):
        for sid, _, refs in per_shard:
            if depth >= len(refs) or len(taken[sid]) != depth:
                continue
            ref = refs[depth]
            first = rows == 0 and size == 0
            if not first and max_rows is not None and rows + ref.rows > max_rows:
                continue
            if not first and max_bytes is not None and size + ref.bytes > max_bytes:
                continue
            taken[sid].append(ref)
            rows += ref.rows
            size += ref.bytes
    for sid, compacted, refs in per_shard:
        if sid in floor:
            # An unfinished merge may have committed up to floor[sid]: merging less than
            # that could let its marker land above ours (see memwal.merge.intents).
            needed = [r for r in refs if r.generation <= floor[sid]]
            if not needed or needed[-1].generation < floor[sid]:
                taken[sid] = []
                blocked_shards.append(BlockedShard(
                    sid, compacted + 1, f"pending-merge-intent: an unfinished merge reaches generation {floor[sid]}, "
                    "which this shard's generations do not reach"))
            elif len(taken[sid]) < len(needed):
                taken[sid] = needed
    plan = MergePlan(table=table.uri, read_version=manifest.version, primary_key=tuple(primary_key_of(table)),
                     shards=tuple(ShardMergePlan(sid, compacted, tuple(taken[sid]))
                                  for sid, compacted, _ in per_shard if taken[sid]),
                     blocked=tuple(blocked_shards), merge_ops=table_merge_ops(table, manifest.version).to_dict())
    plan = _take_applied(table, manifest, unfinished, plan)
    if MergeOps(plan.merge_ops).active:
        plan = attach_operands(table, plan, {sid: st.manifest.replay_after_wal_entry_position
                                             for sid, st in states.items()})
    racy = {b.shard_id for b in plan.blocked if b.reason.startswith(_RACY)}
    if racy and _progress_moved(table, manifest, racy):
        raise StateMovedError(f"{table.uri}: shards {', '.join(sorted(racy))} were merged while planning")
    # Bad input must fail here, before a merge writes anything (not even its lease).
    try:
        plan = check_generations(plan, table.dataset(plan.read_version), table.storage_options)
    except BadInputError:
        raise
    except MemWalError as exc:  # a planned generation vanished: collected after a concurrent merge?
        if _progress_moved(table, manifest, set(plan.shard_ids)):
            raise StateMovedError(f"{table.uri}: merged while planning ({exc})") from exc
        raise
    return plan


def _take_applied(table: Table, manifest: TableManifest, unfinished: list[intents.Intent],
                  plan: MergePlan) -> MergePlan:
    """Mark the generations whose data an unfinished driverless merge already committed
    (memwal.merge.applied): they need only the marker. A folding plan stops a shard whose
    data may or may not be in the base (folding it twice would be wrong); last write wins
    merges such data again, which changes nothing."""
    found = applied_data(table, manifest, unfinished, set(plan.shard_ids))
    folds = MergeOps(plan.merge_ops).active
    shards: list[ShardMergePlan] = []
    blocked = list(plan.blocked)
    for s in plan.shards:
        if folds and s.shard_id in found.unknown:
            blocked.append(BlockedShard(
                s.shard_id, s.compacted_generation + 1, "merge-intent-unknown: an unfinished merge's data commit "
                "cannot be told from the table's versions (expired or restored), and folding twice would be wrong"))
        else:
            shards.append(replace(s, applied_generation=min(found.generation.get(s.shard_id, 0), s.to_generation)))
    return replace(plan, shards=tuple(shards), blocked=tuple(blocked), applied=tuple(found.commits))


def _linked_shards(table: Table) -> dict[str, str]:
    """Shard directories that are symbolic links (shard id -> key); UnsafePathError if
    ``_mem_wal/`` itself is one. One listing of ``_mem_wal/``, not a walk."""
    found: dict[str, str] = {}
    for link in table.store.list_links(f"{MEM_WAL_DIR}/", recursive=False):
        parts = link.split("/")
        if len(parts) < 2:
            raise UnsafePathError(None, link, f"{table.store.uri_for(link)} is a symbolic link (never followed)")
        if is_shard_dir_name(parts[1]):
            found[parts[1]] = link
    return found


def attach_operands(table: Table, plan: MergePlan, flushed_through: Mapping[str, int]) -> MergePlan:
    """The plan with each planned generation pointed at its WAL entries (tables with merge operators);
    ``flushed_through``: each shard's newest WAL position a flushed generation holds, as the shard
    manifest the plan read names it (where the entries are looked for: :func:`wal_keys_by_generation`).

    A shard stops at its first generation without WAL entries: folding it from the
    flushed rows alone would drop the operands the MemTable collapsed.
    """
    kept: list[ShardMergePlan] = []
    blocked = list(plan.blocked)
    for s in plan.shards:
        wal = wal_keys_by_generation(table.store, s.shard_id,
                                     {g.generation for g in s.generations if g.generation > s.applied_generation},
                                     flushed_through=flushed_through.get(s.shard_id))
        refs = []
        for ref in s.generations:
            if ref.generation <= s.applied_generation:  # its data is in the base: no operand is read
                refs.append(ref)
                continue
            if not wal[ref.generation]:
                blocked.append(BlockedShard(s.shard_id, ref.generation,
                                            "operands-missing: no WAL entry of this generation is left, "
                                            "and its merge operators need every operand"))
                break
            refs.append(replace(ref, table_uri=table.uri, wal_keys=wal[ref.generation]))
        if refs:
            kept.append(ShardMergePlan(s.shard_id, s.compacted_generation, tuple(refs), s.applied_generation))
    return replace(plan, shards=tuple(kept), blocked=tuple(blocked))
