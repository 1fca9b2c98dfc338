"""How many threads GC's tree deletion uses: learnt from the batches' own speed (Pace).

The decisions are driven with the rates two file systems showed for 10,000 generations
(ext4 with a journal: one thread fastest; ext4 without one, mounted with ``discard``: eight
threads faster), and a deletion on four threads is checked file by file.
"""

from __future__ import annotations

import os
from pathlib import Path

from memwal.store import LocalStore
from memwal.store.delete_pace import Pace
from memwal.store.local_trees import delete_trees


def _counts(rate_of, batches: int, most: int = 8) -> list[int]:
    """The thread count of each batch when a batch on ``t`` threads deletes ``rate_of(t, i)`` items a second."""
    pace, seen = Pace(most), []
    for i in range(batches):
        seen.append(pace.threads)
        pace.took(1000, 1000 / rate_of(pace.threads, i))
    return seen


JOURNAL = {1: 60_000, 8: 33_000}  # ext4 with a journal: one thread fastest
DISCARD = {1: 9_000, 8: 14_500}  # ext4 without one, mounted with discard: eight faster


def test_a_file_system_that_punishes_threads_gets_one_and_eight_is_tried_again_every_few_batches() -> None:
    assert _counts(lambda t, i: JOURNAL[t], 16) == [8, 1] + [1] * 6 + [8] + [1] * 6 + [8]


def test_a_file_system_that_waits_on_its_disk_keeps_eight() -> None:
    assert _counts(lambda t, i: DISCARD[t], 16) == [8, 1] + [8] * 6 + [1] + [8] * 6 + [1]


def test_one_thread_must_be_clearly_faster_to_be_chosen() -> None:
    assert _counts(lambda t, i: {1: 10_000, 8: 9_000}[t], 4) == [8, 1, 8, 8]


def test_a_bad_moment_is_not_final() -> None:
    def rate(t: int, i: int) -> float:
        return {1: 9_000, 8: 3_000}[t] if i < 2 else DISCARD[t]  # the disk stalled under the first batch

    assert _counts(rate, 10) == [8, 1, 1, 1, 1, 1, 1, 1, 8, 8]


def test_small_batches_change_nothing_and_one_at_most_is_one() -> None:
    pace = Pace(8)
    pace.took(Pace.JUDGED_ITEMS - 1, 0.001)
    assert pace.threads == 8 and pace.rates == {}
    assert _counts(lambda t, i: 1_000 * t, 5, most=1) == [1] * 5


def test_trees_deleted_on_four_threads_go_whole_with_their_bytes(tmp_path: Path) -> None:
    sizes = {}
    for g in range(40):
        for rel, n in (("_versions/1.manifest", 10 + g), ("data/a.lance", 100 + g), ("data/b.lance", 7)):
            f = tmp_path / "shard" / f"gen_{g}" / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"x" * n)
        sizes[f"shard/gen_{g}"] = 10 + g + 100 + g + 7
    (tmp_path / "shard" / "keep.txt").write_bytes(b"kept")
    pace = Pace(4)
    assert pace.threads == 4
    out = delete_trees(LocalStore(str(tmp_path)), list(sizes), pace=pace,
                       first=lambda key, prefix: "/_versions/" in key)
    assert out == [(3, sizes[p], []) for p in sizes]
    assert os.listdir(tmp_path / "shard") == ["keep.txt"] and (tmp_path / "shard" / "keep.txt").read_bytes() == b"kept"
    assert pace.threads == 4  # 40 trees of 3 files and 3 folders: too few to judge
