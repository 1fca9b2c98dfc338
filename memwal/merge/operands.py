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

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from memwal.core import steps
from memwal.errors import MemWalError, NotFoundError
from memwal.merge.keys import key_codes, small_codes
from memwal.store import Store, open_store
from memwal.table.naming import wal_key
from memwal.table.shards import (
    UNLABELLED,
    ShardManifestError,
    WalEntryMeta,
    list_wal_entries,
    read_wal_entry_metas,
    reader_shard_manifest,
)

TOMBSTONE = "_tombstone"


class OperandsIncompleteError(MemWalError):
    """A generation's WAL entries are missing or do not reproduce it: folding it would lose operands."""


#: WAL entries whose headers are read at once, from the newest back (a ranged GET each, together):
#: :data:`HEADERS_FIRST` first, then twice as many each time, up to :data:`HEADERS_AT_ONCE`.
HEADERS_AT_ONCE = 64
#: A flush's generation holds an entry or a few: the first batch mostly ends the walk.
HEADERS_FIRST = 8
#: WAL positions believed (a manifest read from storage may name any u64).
MAX_POSITION = 1 << 48


def wal_keys_by_generation(store: Store, shard_id: str, generations: set[int], *,
                           flushed_through: int | None = None) -> dict[int, tuple[str, ...]]:
    """Store keys of the WAL entries of each wanted generation, in position order.

    The headers are read from the newest entry back, in batches (:func:`_walk_back`), until
    one names a generation below every wanted one: a writer appends its entries in position order
    and a MemTable's before the next one's (the spec: "Writer must flush WAL entries in sequential
    order"; GC places entries by the same rule, :mod:`memwal.gc.wal`), so no older entry belongs to
    a wanted generation. The default retention keeps a week of entries beside a busy writer, and
    every folding merge read each one's header. Headers read out of that order (a generation lower
    than one before it) have every header of the shard read, as before; so do entries that name
    no generation (Lance 9 writers), which never end the walk.

    Where the walk starts: the newest entry a flushed generation holds, by name
    (:func:`_by_position`; ``flushed_through``: that position as the shard manifest the caller
    planned from names it, else the latest manifest is read), else the newest the listing of
    ``wal/`` shows.

    An entry listed and gone before it was read was collected by a concurrent GC, which
    only collects entries of merged generations: it is not one of ours, or our plan is
    stale (a missing operand then stops the shard, and the merge re-reads the progress).
    """
    if not generations:
        return {}
    by_position = _by_position(store, shard_id, generations, flushed_through)
    if by_position is not None:
        return by_position
    entries = list_wal_entries(store, shard_id)
    steps.step("operands.after-wal-listing")
    metas = _walk_back(store, shard_id, [e.position for e in entries], min(generations), strict=False)
    assert metas is not None  # only a strict walk gives up
    listed = entries[len(entries) - len(metas):]
    return _by_generation(((e.key, m) for e, m in zip(listed, metas, strict=True)), generations)


def _by_position(store: Store, shard_id: str, generations: set[int],
                 flushed_through: int | None) -> dict[int, tuple[str, ...]] | None:
    """:func:`wal_keys_by_generation` without a listing of ``wal/``: names are bit-reversed
    positions, so no listing starts at the newest, and a week of entries kept was a request a
    thousand (a scan of each name on a disk) at every folding merge (issue 82). A writer numbers
    its entries without gaps and records in its manifest the newest one a flushed generation holds
    (``replay_after_wal_entry_position``, P: what comes after it is replayed into its MemTable).
    So the walk reads P + 1, which must be missing or name a generation above every wanted one
    (:func:`_above_wanted`; else P is not what it says: a manifest forged, or of another writer's
    making), then P, P - 1, ... by name, as the listing's walk reads them, until a header names a
    generation below every wanted one. Every position between is read: an entry missing there
    (collected, or a gap the spec rules out), one naming no generation (a Lance 9 writer's, which
    never ends a walk: every header is read then) or headers out of order, and the listing says
    what is there (None). A P from a manifest older than the latest is as good: what was flushed since
    comes after it, in generations above those that manifest lists."""
    top = flushed_through
    if top is None:
        try:
            state = reader_shard_manifest(store, shard_id)
        except ShardManifestError:
            return None
        top = 0 if state is None else state.manifest.replay_after_wal_entry_position
    if not 0 < top < MAX_POSITION:
        return None
    if not _above_wanted(read_wal_entry_metas(store, shard_id, [top + 1, top + 2]), max(generations)):
        return None
    steps.step("operands.after-newest-entry")
    positions = range(1, top + 1)
    metas = _walk_back(store, shard_id, positions, min(generations), strict=True)
    if metas is None:
        return None
    read = positions[len(positions) - len(metas):]
    return _by_generation(((wal_key(shard_id, p), m) for p, m in zip(read, metas, strict=True)), generations)


def _walk_back(store: Store, shard_id: str, positions: Sequence[int], lowest: int, *,
               strict: bool) -> list[WalEntryMeta | None] | None:
    """The headers of the newest of ``positions``, read back in batches (:func:`_back_from`) until
    one names a generation below ``lowest``: the metas of the last ``len(result)`` positions, in
    order. Headers out of the spec's order have every header read; an entry gone since it was
    listed is None, and one naming no generation never ends the walk. ``strict`` (positions by name,
    not listed): any of those gives up instead (None)."""
    metas: list[WalEntryMeta | None] = []
    for start, stop in _back_from(len(positions)):
        batch = read_wal_entry_metas(store, shard_id, list(positions[start:stop]))
        if strict and any(m is None or m.generation == UNLABELLED for m in batch):
            return None
        metas[:0] = batch
        named = [m.generation for m in metas if m is not None and m.generation not in (None, UNLABELLED)]
        if named != sorted(named):  # not in the order the spec promises: every header, as before
            if strict:
                return None
            metas[:0] = read_wal_entry_metas(store, shard_id, list(positions[:start]))
            break
        if named and named[0] < lowest:
            break
    return metas


def _by_generation(found: Iterable[tuple[str, WalEntryMeta | None]],
                   generations: set[int]) -> dict[int, tuple[str, ...]]:
    """The keys of the entries each wanted generation's headers name (``(key, header)``, in order)."""
    out: dict[int, list[str]] = {g: [] for g in generations}
    for key, meta in found:
        if meta is not None and meta.generation in out:
            out[meta.generation].append(key)
    return {g: tuple(keys) for g, keys in out.items()}


def _back_from(end: int) -> Iterator[tuple[int, int]]:
    """The batches of a walk back from index ``end`` (excluded) to 0, newest first, each a
    ``(start, stop)`` range: :data:`HEADERS_FIRST` entries, then twice as many each time up to
    :data:`HEADERS_AT_ONCE` (a batch of 64 read 64 headers where a flush's generation needed one
    or two: on an object store a ranged GET each, at every folding merge)."""
    size = min(HEADERS_FIRST, HEADERS_AT_ONCE)
    while end > 0:
        start = max(0, end - size)
        yield start, end
        end, size = start, min(2 * size, HEADERS_AT_ONCE)


def _above_wanted(after: list[WalEntryMeta | None], highest: int) -> bool:
    """Whether the entries after the newest a flushed generation holds (P + 1, P + 2) belong to no
    wanted generation: the first that is not a fence sentinel (a new writer's claim, no generation)
    is missing or names a generation above ``highest``. One naming no generation (a Lance 9 writer's
    data) cannot tell; nor can sentinels alone."""
    for meta in after:
        if meta is None:
            return True
        if meta.generation is not None:
            return meta.generation != UNLABELLED and meta.generation > highest
    return False


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
