"""A rollup's marker: the file in its folder that says what it stands for.

Written by :mod:`memwal.rollup.write` beside the rollup's Lance files (readers ignore it: they
open ``_versions/``, the key index and the bloom filter). It names the entries the rollup
replaced and ``low``, the lowest generation whose rows it holds (through rollups of rollups), so
GC's proof asks a receipt for every generation from ``low`` to the rollup's own number
(:mod:`memwal.merge.cover`). A marker without ``low`` (written before it was kept) or unreadable
stands for every generation from 1: the rollup is then read back, never taken on a receipt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from memwal.core.json_doc import JsonDocError, load_json, mapping_of
from memwal.errors import MemWalError, NotFoundError
from memwal.store import Store
from memwal.table.naming import ROLLUP_MARKER, shard_dir

#: A marker larger than this is not read (storage is untrusted input).
MAX_BYTES = 1 << 20


def marker_bytes(replaces: Sequence[tuple[int, str]], low: int) -> bytes:
    return json.dumps({"replaces": [[g, p] for g, p in replaces], "low": low}).encode()


def stands_from(store: Store, shard_id: str, path: str, generation: int) -> int:
    """The lowest generation whose rows the folder ``path`` holds: its own number for a
    generation, its marker's ``low`` for a rollup (1 when the marker cannot tell)."""
    key = f"{shard_dir(shard_id)}/{path}/{ROLLUP_MARKER}"
    try:
        data = store.get(key, max_bytes=MAX_BYTES)
    except NotFoundError:
        return generation  # not a rollup
    except (MemWalError, OSError):
        return 1
    try:
        low = mapping_of(load_json(data, max_values=100_000)).get("low")
    except JsonDocError:
        return 1
    return low if isinstance(low, int) and not isinstance(low, bool) and 1 <= low <= generation else 1


__all__ = ["MAX_BYTES", "marker_bytes", "stands_from"]
