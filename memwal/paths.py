"""Invariant 5 (DESIGN.md section 3): a path read from a manifest is data, not trust.

Every generation path a shard manifest names is resolved against the shard directory and
must stay strictly inside ``<table>/_mem_wal/<shard_id>/``; anything else is refused, so a
corrupt or malicious manifest can never make a job read, merge or delete outside the shard.
"""

from __future__ import annotations

import posixpath

from memwal.errors import MemWalError
from memwal.naming import MEM_WAL_DIR, is_shard_dir_name, shard_dir


class UnsafePathError(MemWalError):
    """A manifest named a path outside its shard directory."""

    def __init__(self, shard_id: str, path: str, why: str) -> None:
        super().__init__(f"shard {shard_id}: refusing path {path!r}: {why}")
        self.shard_id = shard_id
        self.path = path


def generation_key(shard_id: str, path: str) -> str:
    """The store key of a generation directory named in ``shard_id``'s manifest.

    Refuses absolute paths, URIs, backslashes, empty names and anything that resolves to
    the shard directory itself or outside it.
    """
    if not is_shard_dir_name(shard_id):
        raise UnsafePathError(shard_id, path, "the shard id is not a UUID")
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
