"""A folding merge's walk of the WAL by name (:func:`memwal.merge.operands.wal_keys_by_generation`)
against its definition: the entries of each wanted generation, in position order, among every
entry stored. Whatever position the shard manifest names as the newest its flushed generations
hold (the true one, or any other: storage is untrusted), and whichever merged generations' entries
GC collected, each wanted generation gets exactly its entries, or none (the merge then stops the
shard: never a fold from some of its operands)."""

from __future__ import annotations

import tempfile

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from memwal.merge import operands
from memwal.store import open_store
from memwal.table.naming import wal_key

SHARD = "00000000-0000-4000-8000-000000000000"


def _entry(generation: int | None) -> bytes:
    """A WAL entry's bytes: an Arrow IPC stream whose schema names its generation (None: a fence
    sentinel; 0: a Lance 9 writer's data, which names none)."""
    meta = {"writer_epoch": "1", **({"fence_sentinel": "true"} if generation is None else
                                    {"generation": str(generation)} if generation else {})}
    schema = pa.schema([pa.field("id", pa.int64())], metadata=meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        w.write_table(schema.empty_table())
    return sink.getvalue().to_pybytes()


@st.composite
def wals(draw: st.DrawFn) -> tuple[list[int | None], int, int, set[int], set[int]]:
    """Entries by position (generations non-decreasing, sentinels and unlabelled entries anywhere), the flushed
    generations' last position, the position a manifest names, the wanted generations, and the
    positions GC collected (entries of merged generations only)."""
    steps = draw(st.lists(st.sampled_from(["same", "next", "sentinel", "unlabelled"]), min_size=1, max_size=24))
    entries: list[int | None] = []
    g = 1
    for s in steps:
        g += s == "next"
        entries.append(None if s == "sentinel" else 0 if s == "unlabelled" else g)
    flushed = draw(st.integers(1, max(1, g - 1)))  # the active MemTable's generation is above them
    data = [i + 1 for i, e in enumerate(entries) if e and e <= flushed]
    true_top = max(data, default=0)
    lo = draw(st.integers(1, flushed))
    hi = draw(st.integers(lo, flushed))
    collected = {i + 1 for i, e in enumerate(entries) if e and e < lo and draw(st.booleans())}
    named = draw(st.one_of(st.just(true_top), st.integers(0, len(entries) + 3)))
    return entries, true_top, named, set(range(lo, hi + 1)), collected


@settings(max_examples=150, deadline=None)
@given(wals())
def test_each_wanted_generation_gets_all_its_entries_or_none(case) -> None:
    entries, true_top, named, wanted, collected = case
    with tempfile.TemporaryDirectory() as root:
        store = open_store(root)
        for position, generation in enumerate(entries, 1):
            if position not in collected:
                store.put(wal_key(SHARD, position), _entry(generation))
        truth = {g: tuple(wal_key(SHARD, p) for p, e in enumerate(entries, 1) if e == g and p not in collected)
                 for g in wanted}
        found = operands.wal_keys_by_generation(store, SHARD, wanted, flushed_through=named)
        for g in wanted:
            assert found[g] in (truth[g], ()), (g, found[g], truth[g])
        if named == true_top:  # the manifest says true: every entry found
            assert found == truth


def test_headers_out_of_order_have_every_header_read() -> None:
    """A WAL whose headers break the spec's order where the walk reads them (generations 2 and 3
    interleaved above generation 1's entries): every header is read once, and each wanted
    generation gets all its entries. No manifest here: the WAL is listed."""
    entries = [1] * 4 + [2, 3] * 8
    with tempfile.TemporaryDirectory() as root:
        store = open_store(root)
        for position, generation in enumerate(entries, 1):
            store.put(wal_key(SHARD, position), _entry(generation))
        found = operands.wal_keys_by_generation(store, SHARD, {2, 3})
    assert found == {g: tuple(wal_key(SHARD, p) for p, e in enumerate(entries, 1) if e == g) for g in (2, 3)}
