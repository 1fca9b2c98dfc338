"""Every operand of a generation, for tables with merge operators, read from its WAL entries.

pylance 14's MemTable keeps one version per key: a flushed generation holds only the newest
row of each key written during that generation (observed: puts of 10, 11 and 12 to one key
flush as 12). Last write wins does not mind; a ``sum`` column does, because the 10 and the
11 are operands too. The shard's WAL keeps every put and delete in write order, each entry
naming its generation in its schema metadata, so a folding merge or read takes the
generation's rows from there: its WAL entries in position order, rows in file order.

That is only right if the WAL entries are all there. Reduced last-write-wins, they must
give exactly the generation's rows (same keys, same tombstones); otherwise the generation
is refused rather than folded from a partial history (:class:`OperandsIncompleteError`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from memwal.core import steps
from memwal.errors import MemWalError, NotFoundError
from memwal.merge.keys import key_codes, small_codes
from memwal.store import Store, open_store
from memwal.table.shards import UNLABELLED, WalEntryMeta, list_wal_entries, read_wal_entry_metas

TOMBSTONE = "_tombstone"


class OperandsIncompleteError(MemWalError):
    """A generation's WAL entries are missing or do not reproduce it: folding it would lose operands."""


#: WAL entries whose headers are read at once, from the newest back (a ranged GET each, together).
HEADERS_AT_ONCE = 64


def wal_keys_by_generation(store: Store, shard_id: str, generations: set[int]) -> dict[int, tuple[str, ...]]:
    """Store keys of the WAL entries of each wanted generation, in position order.

    The headers are read from the newest entry back, :data:`HEADERS_AT_ONCE` at a time, until
    one names a generation below every wanted one: a writer appends its entries in position order
    and a MemTable's before the next one's (the spec: "Writer must flush WAL entries in sequential
    order"; GC places entries by the same rule, :mod:`memwal.gc.wal`), so no older entry belongs to
    a wanted generation. The default retention keeps a week of entries beside a busy writer, and
    every folding merge read each one's header. Headers read out of that order (a generation lower
    than one before it) have every header of the shard read, as before; so do entries that name
    no generation (Lance 9 writers), which never end the walk.

    An entry listed and gone before it was read was collected by a concurrent GC, which
    only collects entries of merged generations: it is not one of ours, or our plan is
    stale (a missing operand then stops the shard, and the merge re-reads the progress).
    """
    out: dict[int, list[str]] = {g: [] for g in generations}
    entries = list_wal_entries(store, shard_id)
    steps.step("operands.after-wal-listing")
    lowest = min(generations, default=0)
    metas: list[WalEntryMeta | None] = []
    end = len(entries)
    while end > 0 and generations:
        start = max(0, end - HEADERS_AT_ONCE)
        metas[:0] = read_wal_entry_metas(store, shard_id, [e.position for e in entries[start:end]])
        end = start
        named = [m.generation for m in metas if m is not None and m.generation not in (None, UNLABELLED)]
        if named != sorted(named):  # not in the order the spec promises: every header, as before
            metas[:0] = read_wal_entry_metas(store, shard_id, [e.position for e in entries[:end]])
            end = 0
        elif named and named[0] < lowest:
            break
    for entry, meta in zip(entries[end:], metas, strict=True):
        if meta is not None and meta.generation in out:
            out[meta.generation].append(entry.key)
    return {g: tuple(keys) for g, keys in out.items()}


def fetch_operands(table_uri: str, storage_options: dict[str, str] | None, wal_keys: tuple[str, ...]) -> list[bytes]:
    """The bytes of a generation's WAL entries, in position order (:func:`decode_operands`
    makes them rows). Apart because fetching waits on storage and releases the GIL, so a
    thread pool hides an object store's latency, while decoding is mostly Python."""
    store = open_store(table_uri, storage_options)
    try:
        return [store.get(key) for key in wal_keys]
    except NotFoundError as exc:  # collected since the plan listed it: the generation was merged meanwhile
        raise OperandsIncompleteError(f"a WAL entry of the generation vanished: {exc}") from exc


def decode_operands(entries: list[bytes], rename: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table:
    """The rows of WAL entries (Arrow IPC streams) in order, with a ``_rowaddr`` giving
    that order; ``rename`` names each entry's columns before they are put together
    (entries written before a rename carry the old names)."""
    tables = [pa.ipc.open_stream(pa.py_buffer(entry)).read_all() for entry in entries]
    if rename is not None:
        tables = [rename(t) for t in tables]
    rows = pa.concat_tables([t.replace_schema_metadata(None) for t in tables], promote_options="permissive")
    return rows.append_column("_rowaddr", pa.array(np.arange(rows.num_rows, dtype=np.uint64)))


def check_complete(operands: pa.Table, flushed: pa.Table, primary_key: list[str], where: str, *,
                   generation: str | None = None) -> None:
    """Refuse operands that do not reduce (last write wins) to the flushed generation.

    With ``generation`` (a column of both tables), several generations are checked at
    once: each (generation, key) must reduce to its flushed row.
    """
    if not _reproduces(operands, flushed, primary_key, generation):
        raise OperandsIncompleteError(
            f"{where}: its WAL entries do not reproduce it, so the operands of its merge operators are incomplete; "
            "it cannot be folded (merge with no operators, or restore the WAL entries)"
        )


def _reproduces(operands: pa.Table, flushed: pa.Table, primary_key: list[str], generation: str | None) -> bool:
    """Whether each generation has at least as many operands as flushed rows, each
    (generation, key)'s last row has the same tombstone in both tables, and both have
    the same (generation, key)s.

    Each (generation, key) becomes one integer (:func:`~memwal.merge.keys.small_codes`).
    A flushed generation holds one row per key, so the flushed rows are a hash index that
    each operand is looked up in once; the operands then pass when they hit every flushed
    row and the last hit of each has its tombstone (which also gives the counts); why not
    as Arrow tables: docs/decisions/0024-operand-check-by-lookup.md.
    """
    n = operands.num_rows
    try:
        keys = pa.concat_tables([operands.select(primary_key),
                                 flushed.select(primary_key).cast(operands.select(primary_key).schema)])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # types that cannot agree
        return False
    if generation is None:
        gen, gens_seen = np.zeros(keys.num_rows, dtype=np.int64), 1
    else:
        gens = np.r_[operands.column(generation).to_numpy(), flushed.column(generation).to_numpy()]
        gen, gens_seen = small_codes(gens, 1)
        if gens_seen > len(gens):  # numbers far apart: numbered densely instead
            gen, uniques = pd.factorize(gens)
            gen, gens_seen = gen.astype(np.int64), max(1, len(uniques))
    key, span = small_codes(key_codes(keys, primary_key), 3 * gens_seen)
    row = gen * span + key
    state = _tombstone_states(pa.concat_arrays([operands.column(TOMBSTONE).combine_chunks(),
                                                flushed.column(TOMBSTONE).combine_chunks()]))
    flushed_rows = pd.Index(row[n:])
    if flushed_rows.is_unique:
        at = flushed_rows.get_indexer(row[:n])
        if np.any(at < 0):
            return False  # an operand of a (generation, key) that was not flushed
        last = np.full(len(flushed_rows), -1, dtype=np.int64)
        np.maximum.at(last, at, np.arange(n, dtype=np.int64))
        return bool(np.all(last >= 0) and np.array_equal(state[:n][last], state[n:]))
    # A flushed (generation, key) twice: not what a writer flushes, so the general check.
    if np.any(np.bincount(gen[:n], minlength=gens_seen) < np.bincount(gen[n:], minlength=gens_seen)):
        return False

    def newest(rows: np.ndarray, states: np.ndarray) -> np.ndarray:
        last = ~pd.Series(rows).duplicated(keep="last").to_numpy()
        return np.sort(rows[last] * 3 + states[last])

    return np.array_equal(newest(row[:n], state[:n]), newest(row[n:], state[n:]))


def _tombstone_states(tomb: pa.Array) -> np.ndarray:
    """0, 1 or 2 for a false, true or null tombstone (a null is not a false: the check
    compares values)."""
    state: np.ndarray = tomb.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64)
    if tomb.null_count:
        state[tomb.is_null().to_numpy(zero_copy_only=False)] = 2
    return state
