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


def flush(g: int, rows: int, *, counted: bool = True) -> Entry:
    """A pylance 14 folder of two-integer rows: some 39 KB of bloom filter and key index whatever
    its rows, 21 bytes a row on disk, 17 decoded (the writer's figure, absent for Lance 9 writers;
    all three measured on a followed table)."""
    return Entry(g, f"0000000{g % 10}_gen_{g}", 38_900 + 21 * rows, 17 * rows if counted else None)


def test_small_flushes_after_a_rollup_are_tiered_by_their_rows_not_their_fixed_bytes():
    """A rollup of 4,000 rows is 123 KB on disk and a flush of 50 is 40 KB: by bytes the rollup
    takes in every two new flushes (it is less than 4 times theirs); by the writers' decoded figures
    it holds 40 times their rows, so it stays and the flushes roll up alone."""
    rollup_then_two = [flush(1, 4_000), flush(2, 50), flush(3, 50)]
    assert [[e.generation for e in r.entries] for r in plan_rollups("s", rollup_then_two)] == [[2, 3]]
    uncounted = [flush(1, 4_000, counted=False), flush(2, 50, counted=False), flush(3, 50, counted=False)]
    assert [[e.generation for e in r.entries] for r in plan_rollups("s", uncounted)] == [[1, 2, 3]]  # as before
    smaller = [flush(1, 3_000), flush(2, 50), flush(3, 50)]  # 30 times theirs: joins, as by bytes
    assert [[e.generation for e in r.entries] for r in plan_rollups("s", smaller)] == [[1, 2, 3]]


def passes(n: int, *, counted: bool) -> tuple[int, int, int]:
    """A writer that never stops beside a listing pass every two flushes of 50 rows, ``n`` passes
    (every row merged since the writer opened stays listed): rows listed, rows rewritten, and the
    most merged entries listed after a pass."""
    rows: list[int] = []
    rewritten = most = 0
    for _pass in range(n):
        rows += [50, 50]
        planned = plan_rollups("s", [flush(g, r, counted=counted) for g, r in enumerate(rows, start=1)])
        for r in reversed(planned):
            first, last = r.entries[0].generation - 1, r.entries[-1].generation
            rewritten += sum(rows[first:last])
            rows[first:last] = [sum(rows[first:last])]
        most = max(most, len(rows))
    return sum(rows), rewritten, most


def test_beside_a_writer_that_never_stops_fewer_rows_are_rewritten_and_no_more_entries_are_listed():
    """Tiered by decoded rows, 1,000 passes of rows that are all new (the most a tier can grow): a
    row is rewritten some 38 times, and the shard lists as few entries as bytes listed (the tiers
    the module's bound allows: log(2,000) / log(33) + 1, under 4). Tiered by bytes (each folder's
    fixed 39 KB) a row was rewritten some 54 times; rows that update the same keys make the gap
    wider (the rollup holds each key once, and by bytes the writer's whole rollup is taken in)."""
    total, rewritten, most = passes(1000, counted=True)
    assert total == 100_000 and most <= 3
    assert rewritten / total < 40
    total, by_bytes, most_by_bytes = passes(1000, counted=False)
    assert by_bytes / total > 50 and most_by_bytes <= 3
