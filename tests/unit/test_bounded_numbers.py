"""Numbers from storage never size anything (issue 56 H2): GC's deletable generations and a
shard's flushed generations are rules, counted over a range without building it."""

from __future__ import annotations

import tracemalloc

from memwal.core.text import span
from memwal.gc.model import Deletable, Numbers


def test_numbers_below_a_huge_current_generation_cost_nothing():
    tracemalloc.start()
    n = Numbers(1 << 62, frozenset({3, 5}))
    d = Deletable(through=(1 << 62) - 10, kept=frozenset({3, 7}), drained=frozenset({5}))
    assert n.count(1, 1 << 62) == (1 << 62) - 1
    assert n.first_last(10, 20) == (10, 20) and n.first_last(1 << 63, 1 << 64) is None
    assert d.count_in(n, 1, 10) == 8  # 1..10 less the kept 3 and 7 (the drained 5 is counted once)
    assert 5 in d and 3 not in d and (1 << 62) - 5 not in d and bool(d)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20


def test_listed_generations_beyond_the_counter_are_counted_once():
    n = Numbers(4, frozenset({2, 9}))  # a manifest listing 9 while its counter says 4
    assert n.count(1, 10) == 4 and n.first_last(5, 10) == (9, 9) and n.top == 9


def test_nothing_deletable_is_false():
    assert not Deletable(through=3, kept=frozenset({1, 2, 3}))
    assert Deletable(through=3, kept=frozenset({1, 2, 7}))


def test_a_span_is_told_by_neighbours_not_by_a_range():
    assert span([1, 2, 3]) == "1..3" and span([1, 1 << 62]) == f"1,{1 << 62}" and span([]) == "-"


def _count_by_set(d: Deletable, n: Numbers, lo: int, hi: int) -> int:
    """The model: every number in [lo, hi] that is flushed and deletable, one by one."""
    flushed = set(range(max(lo, 1), min(hi, n.below - 1) + 1)) | {g for g in n.listed if lo <= g <= hi}
    return sum(1 for g in flushed if g in d)


def test_count_in_is_the_count_of_deletable_numbers_one_by_one():
    import random

    rng = random.Random(61)
    for _ in range(5000):
        d = Deletable(through=rng.randint(0, 50), kept=frozenset(rng.sample(range(60), rng.randint(0, 25))),
                      drained=frozenset(rng.sample(range(60), rng.randint(0, 5))))
        n = Numbers(rng.randint(0, 55), frozenset(rng.sample(range(70), rng.randint(0, 6))))
        lo = rng.randint(-3, 60)
        hi = rng.randint(lo - 2, 70)
        assert d.count_in(n, lo, hi) == _count_by_set(d, n, lo, hi), (d, n, lo, hi)
