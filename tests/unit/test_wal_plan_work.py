"""The WAL collector's work follows what may go, not what the retention keeps (issue 82).

A table on the default 7-day retention keeps a week of WAL entries with the generation folders the
retained versions hold: 16,000 entries at 8,000 flushes, every one judged at every whole GC run. An
entry placed above the highest deletable generation stays whatever else is asked of it: one
comparison, not a count. Work is counted (the deletable counts asked), never timed, at 30 and 300
entries kept; the plan is checked entry for entry against the model (what goes: the entries of
the generations whose folders went).
"""

from __future__ import annotations

import random

import pytest

from memwal.gc.model import Deletable
from memwal.gc.wal import plan_shard_wal
from memwal.pb import shard_manifest_pb2
from memwal.table.listing import ShardListing, WalEntry
from memwal.table.shards import ShardState
from memwal.table.wal_digest import Header, WalDigest

GONE = 5  # generations whose folders went: their WAL entries go


def _shard(entries: int) -> tuple[ShardState, ShardListing, WalDigest]:
    """A shard that flushed ``entries`` generations, one WAL entry each, every header known."""
    manifest = shard_manifest_pb2.ShardManifest(current_generation=entries + 1,
                                                replay_after_wal_entry_position=entries, writer_epoch=1)
    wal = tuple(WalEntry(p, f"_mem_wal/s/wal/{p:020d}.arrow", 4096, 0.0, f"e{p}") for p in range(1, entries + 1))
    digest = WalDigest({e.key: Header(e.etag, e.position, 1) for e in wal})
    return ShardState("s", 7, manifest, 0.0), ShardListing("s", wal=wal), digest


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the plan counted deletable generations over a span."""
    seen = [0]
    real = Deletable.count_in

    def counting(self: Deletable, *args: object) -> int:
        seen[0] += 1
        return real(self, *args)

    monkeypatch.setattr(Deletable, "count_in", counting)
    return seen


def test_entries_kept_with_their_folders_are_not_counted(counts: list[int]) -> None:
    asked = []
    for kept in (30, 300):
        state, listed, digest = _shard(GONE + kept)
        deletable = Deletable(through=GONE + kept, kept=frozenset(range(GONE + 1, GONE + kept + 1)))
        counts[0] = 0
        plan = plan_shard_wal(None, state, listed, deletable, None, digest)  # type: ignore[arg-type]
        asked.append(counts[0])
        assert [d.position for d in plan.deletions] == list(range(1, GONE + 1))
        assert plan.kept == ()
    assert asked[0] == asked[1] <= 2 * GONE, asked


def test_top_is_the_highest_deletable_generation() -> None:
    rng = random.Random(82)
    for _ in range(3000):
        d = Deletable(through=rng.randint(-2, 40), kept=frozenset(rng.sample(range(-2, 50), rng.randint(0, 30))),
                      drained=frozenset(rng.sample(range(60), rng.randint(0, 3))))
        assert d.top == max([g for g in range(-2, 61) if g > 0 and g in d], default=0), d


def test_a_forged_through_costs_a_step_per_kept_number() -> None:
    d = Deletable(through=1 << 62, kept=frozenset(range((1 << 62) - 1000, (1 << 62) + 1)))
    assert d.top == (1 << 62) - 1001
