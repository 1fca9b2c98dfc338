"""Drains and writers, against shard manifests pylance's ``ShardWriter`` wrote: what a drain
writes, how a writer's next version is told from a drain, what a drain by another compactor
says about merge progress, and when a writer counts as live."""

from __future__ import annotations

from pathlib import Path

import lance
import pytest

from memwal.demo import Workload, create_base_table, shard_ids_for
from memwal.errors import StateMovedError
from memwal.store import Store
from memwal.table import open_table
from memwal.table.drain import compacted_manifest, drained_through, is_drain, merged_through, write_next_version
from memwal.table.listing import list_mem_wal
from memwal.table.shards import ShardState, all_shard_manifests, read_shard_manifest
from memwal.table.writer import ManifestHistory, writer_view
from tests.clients.pylance_client import LiveWriter

ONE = Workload(base_rows=50, shards=1, generations=0, seed=4, indexes=False)


@pytest.fixture
def written(tmp_path: Path) -> tuple[str, LiveWriter]:
    uri = str(tmp_path / "t")
    _, model = create_base_table(uri, ONE)
    w = LiveWriter(uri, shard_ids_for(ONE)[0], model, rows=10)
    for k in range(3):
        w.generation(list(range(100 + 10 * k, 110 + 10 * k)))
    yield uri, w
    w.close()


def write_drain(store: Store, state: ShardState, generations: set[int]) -> ShardState:
    """The drain GC writes (its compaction with nothing rolled up), read back."""
    entries = {(s.generation, s.path) for s in state.manifest.sstables if s.generation in generations}
    return read_shard_manifest(store, state.shard_id,
                               write_next_version(store, state, compacted_manifest(state, drained=entries)))


def state(uri: str):  # type: ignore[no-untyped-def]
    (s,) = all_shard_manifests(open_table(uri).store).values()
    return s


def test_a_drain_is_the_next_version_with_everything_but_the_generations(written) -> None:
    uri, w = written
    before = state(uri)
    after = write_drain(open_table(uri).store, before, {1, 2})
    stored = read_shard_manifest(open_table(uri).store, before.shard_id, before.version + 1)
    assert stored.manifest == after.manifest and after.version == before.version + 1
    assert [g.generation for g in after.flushed] == [3]
    assert (after.writer_epoch, after.current_generation, after.replay_after_wal_entry_position) == (
        before.writer_epoch, before.current_generation, before.replay_after_wal_entry_position)
    assert is_drain(before.manifest, after.manifest)
    assert drained_through(after) == 2 and merged_through(0, after) == 2 and merged_through(3, after) == 3
    with pytest.raises(StateMovedError):  # planned from a version that is no longer the latest
        write_drain(open_table(uri).store, before, {1})


def test_the_writers_next_version_is_not_a_drain_and_keeps_it(written) -> None:
    uri, w = written
    drained = write_drain(open_table(uri).store, state(uri), {1, 2, 3})
    w.generation(list(range(500, 510)))
    flushed = state(uri)
    assert [g.generation for g in flushed.flushed] == [4]  # rebased: nothing drained comes back
    assert not is_drain(drained.manifest, flushed.manifest)
    assert drained_through(flushed) == 3


def test_a_writer_is_live_until_quiet_for_the_idle_period_and_lists_what_it_wrote(written) -> None:
    uri, w = written
    store = open_table(uri).store
    listing = list_mem_wal(store)
    s = state(uri)
    history = ManifestHistory(store, s, listing.shards[s.shard_id].manifests)
    last = max(e.mtime for e in listing.shards[s.shard_id].wal)
    live = writer_view(history, listing.shards[s.shard_id], now=last + 10, idle_seconds=60, claim=True)
    assert live.live and live.epoch == s.writer_epoch and live.claimed_at is not None
    assert live.own_paths == {g.path for g in s.flushed} and live.may_list(s.flushed[0].path)
    quiet = writer_view(history, listing.shards[s.shard_id], now=last + 61, idle_seconds=60)
    assert not quiet.live and not quiet.may_list(s.flushed[0].path)
    # a drain is no writer activity: the writer's own last version still lists the drained folder
    drained = write_drain(store, s, {1})
    listing = list_mem_wal(store)
    history = ManifestHistory(store, drained, listing.shards[s.shard_id].manifests)
    view = writer_view(history, listing.shards[s.shard_id], now=last + 10, idle_seconds=60)
    assert view.live and view.may_list(s.flushed[0].path)
    assert not view.opened_after(history.mtime(drained.version), grace_seconds=0)


def test_a_new_epoch_claimed_after_a_time_has_that_view(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_base_table(uri, ONE)
    sid = shard_ids_for(ONE)[0]
    first = lance.dataset(uri).mem_wal_writer(sid)
    first.put(lance.dataset(uri).to_table(limit=1))  # a base row written again: one generation at close
    first.close()
    store = open_table(uri).store
    before = max(o.mtime for o in list_mem_wal(store).shards[sid].manifests.values())
    second = lance.dataset(uri).mem_wal_writer(sid)
    try:
        listing = list_mem_wal(store)
        s = state(uri)
        view = writer_view(ManifestHistory(store, s, listing.shards[sid].manifests), listing.shards[sid],
                           now=before + 1, idle_seconds=3600, claim=True)
        assert view.live and view.epoch == 2 and view.claimed_at is not None and view.claimed_at >= before
        assert view.opened_after(before, grace_seconds=0)
        assert not view.opened_after(view.claimed_at + 1, grace_seconds=0)
    finally:
        second.close()
