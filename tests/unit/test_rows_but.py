"""``rows_but``: a few rows dropped from a large table by slicing around them, many by a filter;
either way exactly the rows a filter keeps, in order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from memwal.merge.take import ROWS_PER_SLICE, rows_but


def chunked(rows: int, chunk: int) -> pa.Table:
    """A table of several chunks, as a Lance scan gives one (a string column and an integer one)."""
    batches = [pa.record_batch({"k": [f"k{i}" for i in range(a, min(a + chunk, rows))],
                                "v": list(range(a, min(a + chunk, rows)))}) for a in range(0, rows, chunk)]
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("dropped", [[], [0], [9_999], [0, 1, 2, 4_095, 4_096, 9_999], "few", "many", "all"])
def test_rows_but_keeps_exactly_the_rows_a_filter_keeps_in_order(dropped):
    t = chunked(10_000, 4_096)
    rng = np.random.default_rng(7)
    drop = np.zeros(t.num_rows, dtype=bool)
    if dropped == "few":  # sliced around
        drop[rng.choice(t.num_rows, t.num_rows // ROWS_PER_SLICE, replace=False)] = True
    elif dropped == "many":  # filtered
        drop[rng.choice(t.num_rows, t.num_rows // 10, replace=False)] = True
    elif dropped == "all":
        drop[:] = True
    else:
        drop[dropped] = True
    kept = rows_but(t, drop)
    assert kept.schema == t.schema
    assert kept.to_pydict() == t.filter(pa.array(~drop)).to_pydict()
    assert kept.num_rows == t.num_rows - int(drop.sum())


def test_a_few_dropped_rows_copy_nothing_the_kept_rows_are_slices_of_the_table():
    t = chunked(10_000, 4_096)
    drop = np.zeros(t.num_rows, dtype=bool)
    drop[[5, 5_000]] = True
    kept = rows_but(t, drop)
    buffers = {b.address for c in t.column("k").chunks for b in c.buffers() if b is not None}
    assert all(c.buffers()[2].address in buffers for c in kept.column("k").chunks)  # the same string data
    assert kept.column("v").to_pylist() == [v for v in range(10_000) if v not in (5, 5_000)]
