"""Which runs of listed merged generations a rollup replaces (memwal.rollup.plan): size-tiered,
newest first, never a run of one, never past the cap on decoded bytes."""

from __future__ import annotations

from memwal.rollup.plan import MAX_DECODED_BYTES, UNKNOWN_FACTOR, Entry, plan_rollups


def entries(*sizes: int) -> list[Entry]:
    return [Entry(g, f"0000000{g % 10}_gen_{g}", size) for g, size in enumerate(sizes, start=1)]


def runs(*sizes: int, **kw: float) -> list[list[int]]:
    return [[e.generation for e in r.entries] for r in plan_rollups("s", entries(*sizes), **kw)]


def test_small_generations_after_a_big_rollup_become_one_run_and_the_big_one_stays():
    assert runs(100, 1, 1, 1, 1, 1) == [[2, 3, 4, 5, 6]]


def test_an_older_entry_joins_once_the_newer_ones_reach_a_quarter_of_it():
    assert runs(100, 20, 1, 1, 1, 1) == [[3, 4, 5, 6]]  # 20 > 4 x 4: it waits
    assert runs(100, 20, 6, 1, 1) == [[1, 2, 3, 4, 5]]  # 6 <= 4 x 2, 20 <= 4 x 8, 100 <= 4 x 28


def test_one_entry_alone_is_left_as_it_is():
    assert runs(5) == [] and runs() == [] and runs(100, 1) == []


def test_a_run_never_passes_the_cap_on_decoded_bytes():
    assert runs(60, 60, 60, max_decoded=100 * UNKNOWN_FACTOR) == []
    assert runs(40, 40, 40, max_decoded=100 * UNKNOWN_FACTOR) == [[2, 3]]


def test_the_cap_counts_the_writers_decoded_figure_not_bytes_on_disk():
    """Issue 61: folders of 0.16 MB that decode to 50 MB each. Counted by their bytes on disk
    the whole run fits; by the writer's own figure (``in_memory_bytes``) two do not."""
    small_on_disk = [Entry(g, f"0000000{g}_gen_{g}", 160_000, 50_000_000) for g in range(1, 13)]
    planned = plan_rollups("s", small_on_disk, max_decoded=MAX_DECODED_BYTES)
    assert planned and all(sum(e.decoded or 0 for e in r.entries) <= MAX_DECODED_BYTES for r in planned)
    assert all(len(r.entries) == 2 for r in planned)  # 128 MB: two of 50 MB, never three


def test_the_listing_stays_short_as_a_writer_never_stops():
    """Every cycle adds a few merged generations; whatever was rolled before is one entry. The
    listed merged entries stay a handful over a thousand cycles, and no run is planned twice."""
    listed: list[int] = []
    most = 0
    for _cycle in range(1000):
        listed += [1, 1, 1]
        for r in plan_rollups("s", entries(*listed)):
            first, last = r.entries[0].generation - 1, r.entries[-1].generation
            listed[first:last] = [sum(listed[first:last])]
        most = max(most, len(listed))
    assert most <= 8 and sum(listed) == 3000
