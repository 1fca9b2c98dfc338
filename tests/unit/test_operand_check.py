"""The operand check of merge operators (:func:`memwal.merge.operands.check_complete`) against
its definition: WAL entries pass exactly when each (generation, key)'s last entry has the
flushed row's tombstone and no (generation, key) is missing or extra. One check over a group
of generations gives the verdict of the generations checked one at a time."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwal.merge.operands import OperandsIncompleteError, check_complete

KEY = st.sampled_from(["a", "b", "c", None])
TOMB = st.sampled_from([False, True, None])
ROW = st.tuples(st.integers(1, 3), st.integers(0, 4), KEY, TOMB)  # generation, id, part, tombstone


def table(rows: list[tuple]) -> pa.Table:
    return pa.table({
        "gen": pa.array([r[0] for r in rows], pa.int64()),
        "id": pa.array([r[1] for r in rows], pa.int64()),
        "part": pa.array([r[2] for r in rows], pa.string()),
        "_tombstone": pa.array([r[3] for r in rows], pa.bool_()),
    })


def definition(operands: list[tuple], flushed: list[tuple]) -> bool:
    def newest(rows: list[tuple]) -> dict:
        return {(g, i, p): tomb for g, i, p, tomb in rows}  # later rows overwrite earlier ones

    def count(rows: list[tuple], g: int) -> int:
        return sum(r[0] == g for r in rows)

    return (all(count(operands, g) >= count(flushed, g) for g in {r[0] for r in flushed})
            and newest(operands) == newest(flushed))


def passes(operands: pa.Table, flushed: pa.Table, **kw) -> bool:
    try:
        check_complete(operands, flushed, ["id", "part"], "here", **kw)
        return True
    except OperandsIncompleteError:
        return False


@settings(max_examples=400, deadline=None)
@given(st.lists(ROW, max_size=25), st.lists(ROW, max_size=12), st.booleans())
def test_one_check_over_generations_is_the_definition(operands, flushed, from_operands):
    if from_operands:  # mostly consistent pairs: the flushed rows as the writer would flush them
        flushed = [(g, i, p, t) for (g, i, p), t in {(g, i, p): t for g, i, p, t in operands}.items()]
    operands.sort(key=lambda r: r[0])  # generations ascending, rows in write order within one
    flushed.sort(key=lambda r: r[0])
    assert passes(table(operands), table(flushed), generation="gen") == definition(operands, flushed)
    one_by_one = all(
        passes(table([r for r in operands if r[0] == g]), table([r for r in flushed if r[0] == g]))
        for g in {r[0] for r in operands + flushed})
    assert passes(table(operands), table(flushed), generation="gen") == one_by_one


def test_a_missing_entry_and_a_changed_tombstone_are_refused():
    operands = [(1, 1, "a", False), (1, 1, "a", True), (1, 2, "b", False)]
    assert passes(table(operands), table([(1, 1, "a", True), (1, 2, "b", False)]))
    assert not passes(table(operands[:1] + operands[2:]), table([(1, 1, "a", True), (1, 2, "b", False)]))
    assert not passes(table(operands), table([(1, 1, "a", False), (1, 2, "b", False)]))
    assert not passes(table(operands), table([(1, 1, "a", True), (1, 2, "b", None)]))


def test_keys_of_types_that_cannot_agree_are_refused():
    flushed = table([(1, 1, "a", False)]).set_column(1, "id", pa.array([[1]], pa.list_(pa.int64())))
    with pytest.raises(OperandsIncompleteError, match="here: its WAL entries do not reproduce it"):
        check_complete(table([(1, 1, "a", False)]), flushed, ["id", "part"], "here")


def test_generation_numbers_far_apart_are_checked_as_any_others():
    far = 2**61
    operands = [(1, 1, "a", False), (1, 1, "a", True), (far, 2, "b", False)]
    flushed = [(1, 1, "a", True), (far, 2, "b", False)]
    assert passes(table(operands), table(flushed), generation="gen")
    assert not passes(table(operands[1:]), table(flushed + [(far, 3, "c", False)]), generation="gen")
    assert not passes(table(operands), table(flushed + flushed), generation="gen")  # a flushed key twice: counts
