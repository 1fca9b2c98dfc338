"""Taking rows by index in chunks: the one way the merge gathers wide rows.

Lance's ``merge_insert`` reads its input in batches of TAKE_ROWS rows and accounts each
batch it slices from a chunk at the whole chunk's buffer size, so larger chunks exhaust
its 300 MB memory pool ("Resources exhausted ... HashJoinInput") with a fraction of that
in rows (observed: one 300k-row chunk failed, the same rows in 8192-row chunks with
buffers of their own pass). Arrow gives each output chunk of a chunked take buffers of
its own, and one chunked take is also faster than one large take.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Rows per chunk of the upserts handed to merge_insert: Lance's batch size.
TAKE_ROWS = 8192


def chunked_indices(idx: np.ndarray) -> pa.ChunkedArray:
    """``idx`` as take indices in TAKE_ROWS chunks."""
    return pa.chunked_array([pa.array(idx[i:i + TAKE_ROWS], pa.int64()) for i in range(0, len(idx), TAKE_ROWS)],
                            type=pa.int64())


def take_rows(t: pa.Table, idx: np.ndarray) -> pa.Table:
    """The rows ``idx`` of ``t``, in chunks of at most TAKE_ROWS rows with buffers of their own."""
    return t.take(chunked_indices(idx))


#: Rows a table keeps per row dropped, at least, for :func:`rows_but` to drop by slicing: each slice
#: costs a few microseconds, and a filter some 25 ns a row (an 87,000-row table: slicing around
#: 100 rows 0.6 ms, a filter 2 ms; around 1,000 rows 4 ms against 3 ms).
ROWS_PER_SLICE = 256


def rows_but(t: pa.Table, drop: np.ndarray) -> pa.Table:
    """The rows of ``t`` but those where ``drop`` is true, in order.

    A reader drops from a large base the few rows some small generations replaced: a filter
    copies all the rows it keeps (a fifth of a plain read of the same rows), where slices of
    ``t`` around the dropped rows copy nothing. Many dropped rows are filtered."""
    hits = np.flatnonzero(drop)
    if len(hits) == 0:
        return t
    if len(hits) * ROWS_PER_SLICE > t.num_rows:
        return t.filter(pa.array(~drop))
    starts, ends = np.r_[0, hits + 1].tolist(), np.r_[hits, t.num_rows].tolist()
    return pa.concat_tables([t.slice(a, b - a) for a, b in zip(starts, ends, strict=True) if b > a])


def own_chunks(t: pa.Table) -> pa.Table:
    """``t`` with chunks of at most TAKE_ROWS rows, each with buffers of its own (copied
    only when a chunk is larger)."""
    if all(len(b) <= TAKE_ROWS for b in t.to_batches()):
        return t
    return take_rows(t, np.arange(t.num_rows))
