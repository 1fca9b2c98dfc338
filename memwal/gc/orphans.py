"""The orphans collector, and what a symbolic link could redirect: planned, never followed.

An orphan is a generation folder no manifest version ever listed (a failed flush's retry of a
generation still listed, or one above the merge progress) or the staging a crashed Spark merge
left (folders at or below the merge progress that are no longer listed are drained ones:
:mod:`memwal.gc.drain`). Both are found in the one listing of ``_mem_wal/``,
with their files and times; they go only with ``--orphans`` and past ``--orphan-age-seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memwal.errors import MemWalError
from memwal.gc.delete import under
from memwal.gc.gates import UNSAFE_PATH, Verdict
from memwal.gc.model import Blocked, GenerationDeletion, Orphan, WalDeletion
from memwal.store import ObjectInfo, Store
from memwal.table.drain import merged_through
from memwal.table.listing import MemWalListing, ShardListing
from memwal.table.naming import STAGING_DIR, parse_generation_dir, shard_dir
from memwal.table.paths import shard_of_key
from memwal.table.shards import UNREADABLE, ShardState, decode_shard_manifest


@dataclass(frozen=True)
class OrphanPlan:
    orphans: tuple[Orphan, ...] = ()
    blocked: tuple[Blocked, ...] = ()


def _newest(objects: Iterable[ObjectInfo]) -> float | None:
    times = [o.mtime for o in objects]
    return max(times) if times else None


def plan_shard_orphans(store: Store, state: ShardState, listed: ShardListing, gates: Callable[[int], Verdict],
                       now: float, min_age: float, compacted: int) -> OrphanPlan:
    """Generation folders no manifest version ever listed (e.g. a failed flush's retry).

    A folder whose generation is above the shard's merged generation is never one: it may
    hold the only copy of rows a manifest we cannot see (or a writer mid-flush) lists, so it
    is kept and reported (``orphan-not-merged``), whatever the manifests say. The other gates
    apply too (``orphan-<gate>``): "unlisted" is only as true as the manifests we read, and a
    reader may hold a listing that named the folder.
    """
    shard_id = state.shard_id
    dirs = listed.generation_dirs()
    numbers = {s.generation for s in state.manifest.sstables if not listed.is_rollup(s.path)}
    merged = merged_through(compacted, state)
    # Unlisted folders of unlisted generations at or below the merge progress were drained
    # (or are failed attempts of drained ones), and those a listed rollup replaced: the
    # generations collector's (memwal.gc.drain, memwal.rollup).
    unlisted = {name for name in set(dirs) - {s.path for s in state.manifest.sstables}
                if dirs[name] in numbers or dirs[name] > merged}
    blocked: list[Blocked] = []
    if unlisted:  # the usual case is none: only then are older manifest versions read
        older = [(v, o) for v, o in listed.manifests.items() if v < state.version]
        try:
            for (v, o), data in zip(older, store.get_many([o.key for _, o in older]), strict=True):
                if data is None:
                    raise store.not_found(o.key)
                manifest = decode_shard_manifest(data, shard_id=shard_id, version=v, where=store.uri_for(o.key))
                unlisted -= {s.path for s in manifest.manifest.sstables}
        except MemWalError as exc:  # an older version we cannot read may list any of them
            return OrphanPlan((), tuple(Blocked(shard_id, dirs[name], UNREADABLE, (UNREADABLE, f"{name}: {exc}"))
                                        for name in sorted(unlisted)))
    orphans: list[Orphan] = []
    for name in sorted(unlisted):
        reasons = [f"orphan-{r}" for r in gates(dirs[name]).reasons]
        if reasons:
            blocked.append(Blocked(shard_id, dirs[name], reasons[0], (*reasons, name)))
            continue
        objects = listed.generations[name]
        newest = _newest(objects)
        if newest is not None and now - newest >= min_age:
            orphans.append(Orphan("generation", shard_id, name, f"{shard_dir(shard_id)}/{name}", now - newest, objects))
    return OrphanPlan(tuple(orphans), tuple(blocked))


def plan_staging_orphans(listing: MemWalListing, now: float, min_age: float) -> tuple[Orphan, ...]:
    """Staging left by a crashed Spark merge (a finished merge removes its own)."""
    out = []
    for name, objects in listing.staging.items():
        newest = _newest(objects)
        if newest is not None and now - newest >= min_age:
            out.append(Orphan("staging", None, name, f"{STAGING_DIR}/{name}", now - newest, objects))
    return tuple(out)


@dataclass(frozen=True)
class Held:
    """What is left to delete once every link holds what it could redirect."""

    generations: tuple[GenerationDeletion, ...]
    wal: tuple[WalDeletion, ...]
    orphans: tuple[Orphan, ...]
    blocked: tuple[Blocked, ...]


def hold_linked(links: Iterable[str], generations: tuple[GenerationDeletion, ...], wal: tuple[WalDeletion, ...],
                orphans: tuple[Orphan, ...]) -> Held:
    """Report every symbolic link under ``_mem_wal/`` as ``unsafe-path`` and keep what it could redirect.

    Links are never followed (the listing skips them), but a deletion planned next to one is
    held too: a link at or inside a generation folder holds that generation and its WAL
    entries; anywhere else in a shard (the shard folder itself, ``wal/``, ``manifest/``)
    every deletion in the shard; under ``_staging/`` that staging folder; ``_mem_wal`` itself
    everything.
    """
    blocked: list[Blocked] = []
    for link in links:
        scope, shard_id, generation = _link_scope(link)
        detail = f"{link}: symbolic link, never followed"
        blocked.append(Blocked(shard_id, generation, UNSAFE_PATH, (UNSAFE_PATH, detail)))
        held = {(g.shard_id, g.generation) for g in generations if under(g.key, scope)}
        if generation and shard_id is not None:  # the linked folder is not listed, but its WAL entries may be planned
            held.add((shard_id, generation))
        generations = tuple(g for g in generations if (g.shard_id, g.generation) not in held)
        wal = tuple(w for w in wal if not under(w.key, scope)
                    and not any(s == w.shard_id and w.may_belong_to(g) for s, g in held))
        orphans = tuple(o for o in orphans if not under(o.key, scope) and not under(scope, o.key))
    return Held(generations, wal, orphans, tuple(blocked))


def _link_scope(link: str) -> tuple[str, str | None, int]:
    """(key prefix whose deletions a link holds, its shard or None, its generation or 0)."""
    parts = link.split("/")
    shard_id = shard_of_key(link + "/x")  # the link may be the shard folder itself
    if shard_id is None:
        depth = 3 if len(parts) > 2 and f"{parts[0]}/{parts[1]}" == STAGING_DIR else 2
        return "/".join(parts[:depth]), None, 0
    generation = parse_generation_dir(parts[2]) if len(parts) > 2 else None
    if generation is None:
        return shard_dir(shard_id), shard_id, 0
    return "/".join(parts[:3]), shard_id, generation


__all__ = ["Held", "OrphanPlan", "hold_linked", "plan_shard_orphans", "plan_staging_orphans"]
