"""Invariant 5 (docs/architecture.md): a path read from a manifest is data, not trust.

Every generation path a shard manifest names is resolved against the shard directory and
must stay strictly inside ``<table>/_mem_wal/<shard_id>/``; anything else is refused, so a
corrupt or malicious manifest can never make a job read, merge or delete outside the shard.
"""

from __future__ import annotations

import posixpath

from memwal.errors import UnsafePathError
from memwal.table.naming import MEM_WAL_DIR, is_shard_dir_name, parse_generation_dir, shard_dir


def shard_of_key(key: str) -> str | None:
    """The shard a store key lies in (``_mem_wal/<shard>/...``), or None."""
    parts = key.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == MEM_WAL_DIR and is_shard_dir_name(parts[1]) else None


#: Our own folders under ``_mem_wal/`` whose contents GC may delete (crashed-merge staging, job records).
DELETABLE_OWN_DIRS = ("_staging", "_jobs")


def check_deletable(key: str) -> str:
    """Refuse to delete anything but our own objects; returns ``key``.

    GC deletes only under a shard directory (``_mem_wal/<shard-uuid>/``) or our own
    ``_mem_wal/_staging/`` and ``_mem_wal/_jobs/``: never the base table's files, never the
    folders themselves, whatever a plan, a listing or a manifest says.
    """
    parts = key.split("/")
    ok = (
        len(parts) >= 3
        and parts[0] == MEM_WAL_DIR
        and (is_shard_dir_name(parts[1]) or parts[1] in DELETABLE_OWN_DIRS)
        and all(p not in ("", ".", "..") for p in parts)
    )
    if not ok:
        raise UnsafePathError(
            shard_of_key(key), key,
            f"deletions are allowed only under {MEM_WAL_DIR}/<shard-uuid>/, "
            + ", ".join(f"{MEM_WAL_DIR}/{d}/" for d in DELETABLE_OWN_DIRS),
        )
    return key


def generation_key(shard_id: str, path: str) -> str:
    """The store key of a generation directory named in ``shard_id``'s manifest.

    Refuses absolute paths, URIs, backslashes, empty names and anything that resolves to
    the shard directory itself or outside it.
    """
    if not is_shard_dir_name(shard_id):
        raise UnsafePathError(shard_id, path, "the shard id is not a UUID")
    if parse_generation_dir(path) is not None:  # one name of hex, "_gen_" and digits: inside as it stands
        return f"{shard_dir(shard_id)}/{path}"
    if not path or "\x00" in path:
        raise UnsafePathError(shard_id, path, "empty path")
    if "://" in path or path.startswith("/") or "\\" in path:
        raise UnsafePathError(shard_id, path, "absolute paths and URIs are not allowed")
    base = shard_dir(shard_id)
    resolved = posixpath.normpath(posixpath.join(base, path))
    if not resolved.startswith(base + "/"):
        raise UnsafePathError(shard_id, path, f"resolves outside {base}/")
    if resolved.split("/")[:2] != [MEM_WAL_DIR, shard_id]:
        raise UnsafePathError(shard_id, path, f"resolves outside {base}/")
    return resolved
