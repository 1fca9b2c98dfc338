"""Keys as integers: one int64 code per row, equal exactly when the rows' keys are equal.

Sorting, grouping and comparing keys as Arrow tables costs a multi-column sort or a hash
plan per call; as one integer array the same work is a NumPy sort or a pandas hash pass.
The merge's dedupe, its fold and its operand check all go through :func:`key_codes`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


def key_codes(t: pa.Table, primary_key: list[str]) -> np.ndarray:
    """One int64 per row, equal exactly when the rows' keys are equal (nulls equal nulls).

    A single non-null integer key is its own code (no work); other keys are hashed once
    by Arrow (``dictionary_encode``) and several columns combined pairwise, re-coded
    whenever the product of cardinalities could overflow.
    """
    if (ints := int_key(t, primary_key)) is not None:
        return ints
    codes: np.ndarray | None = None
    card = 1
    for k in primary_key:
        enc = pc.dictionary_encode(t.column(k), null_encoding="encode").combine_chunks()
        c = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        n = max(1, len(enc.dictionary))
        if codes is None:
            codes, card = c, n
            continue
        if card * n >= 2**62:
            codes, uniques = pd.factorize(codes)
            card = max(1, len(uniques))
        codes, card = codes * n + c, card * n
    return codes if codes is not None else np.zeros(t.num_rows, dtype=np.int64)


def small_codes(codes: np.ndarray, room: int) -> tuple[np.ndarray, int]:
    """``codes`` as integers in ``[0, span)``, equal and ordered as the codes are, and ``span``,
    such that ``span * room`` fits in 62 bits: so each code can be combined with another
    number below ``room`` into one int64 (a generation, a row position, a tombstone).

    Integer keys usually span little (row ids, counters): shifting them by their minimum
    costs two passes; only a wider span pays for a hash pass (``pd.factorize``).
    """
    if len(codes) == 0:
        return codes.astype(np.int64), 1
    lo, hi = int(codes.min()), int(codes.max())
    if (hi - lo + 1) * room < 2**62:
        return codes - np.int64(lo), hi - lo + 1
    dense, uniques = pd.factorize(codes, sort=True)  # sorted: the order of the codes is kept
    return dense.astype(np.int64, copy=False), max(1, len(uniques))


def stable_order(codes: np.ndarray) -> np.ndarray:
    """``np.argsort(codes, kind="stable")``, in a fraction of its time: each code and its
    position make one unique integer (:func:`small_codes`), sorted by NumPy's SIMD sort,
    which a stable sort cannot use (docs/decisions/0018-integer-keys-by-sort-and-mask.md)."""
    n = len(codes)
    dense, span = small_codes(codes, max(1, n))
    return np.sort(dense * np.int64(n) + np.arange(n, dtype=np.int64)) % max(1, n)


class IntKeySet:
    """A set of int64 keys, built once and asked about many values (a table's keys, or a
    scan's batches one by one).

    Integer keys are usually dense (row ids, counters): over a span within a few times the
    number of values it will be asked about, membership is a bitmap, one pass and no
    hashing. A wider span is a pandas index, whose hash table is built once and kept.
    """

    def __init__(self, wanted: np.ndarray, asked: int) -> None:
        self._lo = int(wanted.min()) if len(wanted) else 0
        hi = int(wanted.max()) if len(wanted) else -1
        self._present: np.ndarray | None = None
        self._index: pd.Index | None = None
        if hi - self._lo < 4 * (asked + len(wanted)) + 1024:
            self._present = np.zeros(hi - self._lo + 1, dtype=bool)
            self._present[wanted - np.int64(self._lo)] = True
        else:  # sorted, then repeats dropped by one compare (NumPy's hashing ``unique`` is far slower)
            ordered = np.sort(wanted)
            self._index = pd.Index(ordered[np.r_[True, ordered[1:] != ordered[:-1]]])

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Whether each of ``values`` (int64) is in the set."""
        if self._index is not None:
            known: np.ndarray = self._index.get_indexer(values) >= 0
            return known
        present = self._present
        assert present is not None  # one of the bitmap and the index is built
        found = np.zeros(len(values), dtype=bool)
        inside = (values >= self._lo) & (values < self._lo + len(present))
        found[inside] = present[values[inside] - np.int64(self._lo)]
        return found


def int_key(t: pa.Table | pa.RecordBatch, primary_key: list[str]) -> np.ndarray | None:
    """The key of ``t`` as int64 when it is one integer column without nulls, else None
    (such keys are matched as integers, :class:`IntKeySet`; others through Arrow's join).
    A uint64 past 2**63 wraps to a negative int64: one to one, so equality is kept."""
    if len(primary_key) != 1:
        return None
    col = t.column(primary_key[0])
    if not pa.types.is_integer(col.type) or col.null_count:
        return None
    key: np.ndarray = col.to_numpy().astype(np.int64, copy=False)
    return key
