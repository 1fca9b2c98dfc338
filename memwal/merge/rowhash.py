"""A 128-bit digest of each row's values, so rows can be compared without holding both sides.

GC's proof and `memwal verify` compare each key's newest generation row with the base's row. Held
side by side, the rows cost their decoded size twice (issue 61: 10 KB rows that compress 600x);
a digest per row costs 16 bytes. Equal values give equal digests: floats by their bits, every
NaN as one NaN (a merged NaN is the same NaN), nulls as nulls, lists and structs from their
children. Different values collide with probability about 2**-128 (two independent 64-bit
hashes).

Columns are hashed one by one and combined, each by the fastest route its type allows: fixed-
width values from their bits with NumPy, strings and binaries by BLAKE2 over each value's bytes
where they lie in the Arrow buffer (never copied into Python objects), lists from their flattened
values reduced per row, structs from their fields. Anything else goes through its Python values
(slow, but exact).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The two halves of a digest start from different seeds (pandas takes a 16-character key).
_SEEDS = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344))
_KEY = b"memwal-rowhash"
_NULL = np.uint64(0x9E3779B97F4A7C15)
_MUL = np.uint64(0xBF58476D1CE4E5B9)


def _mix(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Fold ``v`` into the running hashes ``h`` (order matters; both halves at once)."""
    with np.errstate(over="ignore"):
        out: np.ndarray = (h ^ (v + _NULL + (h << np.uint64(6)) + (h >> np.uint64(2)))) * _MUL
    return out


def _bits(a: pa.Array) -> np.ndarray:
    """The values of a fixed-width array as uint64 (floats by their bits, NaNs made one NaN)."""
    t = a.type
    if pa.types.is_boolean(t):
        out: np.ndarray = a.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint64)
        return out
    if pa.types.is_floating(t):
        values = a.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        values[np.isnan(values)] = np.nan
        floats: np.ndarray = values.view(np.uint64)
        return floats
    ints = a.view({8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[t.bit_width])
    whole: np.ndarray = ints.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    return whole


def _two(h: np.ndarray) -> np.ndarray:
    """One uint64 per row, as the two halves of a digest (each mixed from its own seed)."""
    return _mix(np.stack([np.full(len(h), s, np.uint64) for s in _SEEDS], axis=1), h[:, None])


def _hashed_objects(a: pa.Array) -> np.ndarray:
    """Any type, through its Python values (slow: the types the others do not cover)."""
    return _blake(repr(v).encode() for v in a.to_pylist())


def _blake(values: Iterable[bytes | memoryview]) -> np.ndarray:
    digests = b"".join(hashlib.blake2b(v, digest_size=16, key=_KEY).digest() for v in values)
    return np.frombuffer(digests, np.uint64).reshape(-1, 2).copy()


def _hashed_bytes(a: pa.Array) -> np.ndarray:
    """Strings and binaries, each value's bytes hashed where they lie in the array's buffer (no
    copy into Python objects: a batch of 10 KB strings would double its memory)."""
    large = pa.types.is_large_string(a.type) or pa.types.is_large_binary(a.type)
    offsets_buf, data_buf = a.buffers()[1:3]
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32)[a.offset:a.offset + len(a) + 1].tolist()
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    return _blake(data[lo:hi] for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)) if len(a) else \
        np.zeros((0, 2), np.uint64)


def _column(a: pa.Array) -> np.ndarray:
    """Two uint64 per row of ``a`` (nulls hashed apart from every value)."""
    t = a.type
    if pa.types.is_dictionary(t):
        a = a.dictionary_decode()
        t = a.type
    n = len(a)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        h = _hashed_bytes(a)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if pa.types.is_fixed_size_list(t):
            lengths = np.full(n, t.list_size, np.int64)
            flat = a.values.slice(a.offset * t.list_size, n * t.list_size)
        else:
            lengths = pc.list_value_length(a).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            flat = a.flatten()
        inner = _column(flat)
        starts = np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64)
        h = np.full((n, 2), _NULL, np.uint64)
        nonempty = lengths > 0
        if len(inner) and nonempty.any():
            # an order-aware sum per list: each element weighted by its position in its list
            weights = np.arange(len(inner), dtype=np.int64) - np.repeat(starts, lengths)
            with np.errstate(over="ignore"):
                spread = inner * (weights.astype(np.uint64)[:, None] * np.uint64(2) + np.uint64(1))
            h[nonempty] = np.add.reduceat(spread, starts[nonempty], axis=0)
        h = _mix(h, lengths.astype(np.uint64)[:, None])
    elif pa.types.is_struct(t):
        h = _two(np.full(n, np.uint64(t.num_fields), np.uint64))
        for i in range(t.num_fields):
            h = _mix(h, _column(a.field(i)))
    elif pa.types.is_decimal(t):
        h = _hashed_objects(a)
    elif pa.types.is_primitive(t) or pa.types.is_temporal(t):
        h = _two(_bits(a))
    else:
        h = _hashed_objects(a)
    if a.null_count:
        h = np.where(a.is_null().to_numpy(zero_copy_only=False)[:, None], _NULL, h)
    return h


def row_digests(t: pa.Table | pa.RecordBatch) -> np.ndarray:
    """A ``(rows, 2)`` uint64 array: each row's digest over every column of ``t``, in order."""
    h = np.stack([np.full(t.num_rows, s, np.uint64) for s in _SEEDS], axis=1) if t.num_rows else \
        np.zeros((0, 2), np.uint64)
    for col in t.columns:
        h = _mix(h, _column(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col))
    return h


__all__ = ["row_digests"]
