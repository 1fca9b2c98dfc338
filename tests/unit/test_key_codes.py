"""Keys as integers (:mod:`memwal.merge.keys`): the shortcuts give what their definitions give."""

from __future__ import annotations

import numpy as np
import pytest

from memwal.merge.keys import small_codes, stable_order


@pytest.mark.parametrize("low, high", [(0, 5), (-3, 3), (0, 1_000_000), (-2**62, 2**62), (2**40, 2**40 + 7)])
def test_stable_order_is_a_stable_argsort(low, high):
    rng = np.random.default_rng(high % 97)
    for n in (0, 1, 2, 17, 5000):
        codes = rng.integers(low, high, n, dtype=np.int64, endpoint=True)
        assert np.array_equal(stable_order(codes), np.argsort(codes, kind="stable"))


@pytest.mark.parametrize("room", [1, 3, 1000, 2**40])
def test_small_codes_keep_equality_and_fit_the_room(room):
    rng = np.random.default_rng(room % 89)
    for codes in (rng.integers(-5, 5, 300), rng.integers(-2**63, 2**63 - 1, 300, dtype=np.int64),
                  np.array([2**63 - 1, -2**63, 0, 2**63 - 1], dtype=np.int64)):
        small, span = small_codes(codes, room)
        assert small.min() >= 0 and small.max() < span and span * room < 2**62
        assert np.array_equal(small[:, None] == small[None, :], codes[:, None] == codes[None, :])


@pytest.mark.parametrize("anti", [False, True])
@pytest.mark.parametrize("spread", [10, 10_000, 2**62])
def test_key_mask_matches_the_join(anti, spread):
    """The integer shortcut (a bitmap over a dense span, a hash lookup over a wide one) finds
    the rows Arrow's join finds."""
    import pyarrow as pa

    from memwal.merge.changes import key_mask

    def rows_with_keys(t, keys, pk, anti):
        found = key_mask(t, keys, pk)
        return np.flatnonzero(~found if anti else found).tolist()

    rng = np.random.default_rng(spread % 101)
    base = pa.table({"id": rng.integers(-spread, spread, 3000, dtype=np.int64)})
    keys = pa.table({"id": np.r_[rng.choice(base.column("id").to_numpy(), 500), rng.integers(-spread, spread, 500)]})
    got = rows_with_keys(base, keys, ["id"], anti)
    as_strings = pa.table({"id": base.column("id").cast(pa.string())})  # no shortcut: Arrow's join
    expect = rows_with_keys(as_strings, pa.table({"id": keys.column("id").cast(pa.string())}), ["id"], anti)
    assert got == expect
