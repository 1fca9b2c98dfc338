"""What no manifest lists (orphans) and what a symbolic link could redirect: planned, never followed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memwal.errors import MemWalError
from memwal.gc.delete import under
from memwal.gc.gates import (
    UNSAFE_PATH,
    Blocked,
)
from memwal.gc.model import GcPlan, Orphan
from memwal.store import Store
from memwal.table.naming import STAGING_DIR, parse_generation_dir, shard_dir
from memwal.table.paths import shard_of_key
from memwal.table.shards import (
    UNREADABLE,
    ShardState,
    list_manifest_versions,
    read_shard_manifest,
)

if TYPE_CHECKING:
    pass



def _newest_mtime(store: Store, prefix: str) -> float | None:
    times = [o.mtime for o in store.list(prefix)]
    return max(times) if times else None


def plan_generation_orphans(store: Store, state: ShardState, dirs: dict[str, int],
                             gates: Callable[[int], tuple[list[str], dict]], now: float, min_age: float,
                             plan: GcPlan) -> None:
    """Generation directories no manifest version ever listed (e.g. a failed flush's retry).

    A directory whose generation is above the shard's merged generation is never one: it
    may hold the only copy of rows a manifest we cannot see (or a writer mid-flush) lists,
    so it is kept and reported (``orphan-not-merged``), whatever the manifests say. The
    other gates apply too (``orphan-<gate>``): "unlisted" is only as true as the manifests
    we read, and a reader may hold a listing that named the directory.
    """
    shard_id = state.shard_id
    unlisted = set(dirs) - {s.path for s in state.manifest.sstables}
    if unlisted:  # the usual case is none: only then are older manifest versions read
        try:
            for v in list_manifest_versions(store, shard_id):
                if v < state.version:
                    unlisted -= {s.path for s in read_shard_manifest(store, shard_id, v).manifest.sstables}
        except MemWalError as exc:  # an older version we cannot read may list any of them
            for name in sorted(unlisted):
                plan.blocked.append(Blocked(shard_id, dirs[name], UNREADABLE, [UNREADABLE, f"{name}: {exc}"]))
            return
    for name in sorted(unlisted):
        reasons = [f"orphan-{r}" for r in gates(dirs[name])[0]]
        if reasons:
            plan.blocked.append(Blocked(shard_id, dirs[name], reasons[0], [*reasons, name]))
            continue
        key = f"{shard_dir(shard_id)}/{name}"
        newest = _newest_mtime(store, f"{key}/")
        if newest is not None and now - newest >= min_age:
            plan.orphans.append(Orphan("generation", shard_id, name, key, now - newest))


def plan_staging_orphans(store: Store, now: float, min_age: float, plan: GcPlan) -> None:
    """Staging left by a crashed Spark merge (a finished merge removes its own)."""
    for name in store.list_dirs(f"{STAGING_DIR}/"):
        key = f"{STAGING_DIR}/{name}"
        newest = _newest_mtime(store, f"{key}/")
        if newest is not None and now - newest >= min_age:
            plan.orphans.append(Orphan("staging", None, name, key, now - newest))


def plan_unsafe_links(plan: GcPlan, links: list[str]) -> None:
    """Report every symbolic link under ``_mem_wal/`` (``links``, as listed by the plan's survey)
    as ``unsafe-path`` and keep what it could redirect.

    Links are never followed (the store skips them in listings), but a deletion planned
    next to one is held too: a link at or inside a generation directory holds that
    generation and its WAL entries; anywhere else in a shard (the shard directory itself,
    ``wal/``, ``manifest/``) every deletion in the shard; under ``_staging/`` that staging
    directory; ``_mem_wal`` itself everything.
    """
    for link in links:
        scope, shard_id, generation = _link_scope(link)
        plan.blocked.append(Blocked(shard_id, generation, UNSAFE_PATH, [UNSAFE_PATH, _link_detail(link)]))
        held = {(g.shard_id, g.generation) for g in plan.generations if under(g.key, scope)}
        if generation:  # the linked directory is not listed as one, but its WAL entries may be planned
            held.add((shard_id, generation))
        plan.generations = [g for g in plan.generations if (g.shard_id, g.generation) not in held]
        plan.wal_entries = [w for w in plan.wal_entries
                            if not under(w.key, scope) and (w.shard_id, w.generation) not in held]
        plan.orphans = [o for o in plan.orphans if not under(o.key, scope) and not under(scope, o.key)]


def _link_scope(link: str) -> tuple[str, str | None, int]:
    """(key prefix whose deletions a link holds, its shard or None, its generation or 0)."""
    parts = link.split("/")
    shard_id = shard_of_key(link + "/x")  # the link may be the shard directory itself
    if shard_id is None:
        depth = 3 if len(parts) > 2 and f"{parts[0]}/{parts[1]}" == STAGING_DIR else 2
        return "/".join(parts[:depth]), None, 0
    generation = parse_generation_dir(parts[2]) if len(parts) > 2 else None
    if generation is None:
        return shard_dir(shard_id), shard_id, 0
    return "/".join(parts[:3]), shard_id, generation


def _link_detail(key: str) -> str:
    """The explanation carried in a blocked entry's ``reasons`` for a link found in the table."""
    return f"{key}: symbolic link, never followed"
