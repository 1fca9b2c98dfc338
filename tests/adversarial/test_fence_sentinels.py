"""Fence sentinels are collected once the writers they stop are past the version-expiry bound
(issue 38, Note; docs/decisions/0001-fence-sentinels.md).

Every writer session after the first starts with a fence sentinel: an empty WAL entry at the
tip that makes the writer it superseded collide, and learn it is fenced, instead of landing an
acknowledged write nobody replays. GC used to keep every one (285 after 96 sessions). Now an
older epoch's sentinel at or below ``replay_after_wal_entry_position`` goes once it is older
than the ``--expire-versions`` bound; the newest epoch's sentinel always stays, and with
``never`` every one does.
"""

from __future__ import annotations

import time

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations
from memwal.table import open_table
from memwal.table.shards import latest_shard_manifest, list_wal_entries, read_wal_entry_meta
from tests.conftest import SMALL, lsm_rows, table_rows
from tests.integration.test_gc import expire_all


def sentinels(table) -> dict[str, list[tuple[int, int]]]:
    """Per shard, (position, writer epoch) of every fence sentinel on storage."""
    out = {}
    for s in shard_ids_for(SMALL):
        metas = [read_wal_entry_meta(table.store, s, e.position) for e in list_wal_entries(table.store, s)]
        out[s] = [(m.position, m.writer_epoch) for m in metas if m.is_fence_sentinel]
    return out


def three_sessions(make_table):
    """A table whose every shard was written by three writer sessions, all merged."""
    table, model = make_table()
    write_generations(table.uri, SMALL, model, generations=1, seed_offset=99)
    write_generations(table.uri, SMALL, model, generations=1, seed_offset=199)
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    expire_all(table)
    return table, model


def test_older_epochs_sentinels_go_and_the_newest_stays(make_table):
    table, model = three_sessions(make_table)
    before = sentinels(table)
    assert all(len(v) == 2 for v in before.values()), before  # sessions 2 and 3 each fenced the one before
    t = memwal.open(table.uri)

    dry = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0, dry_run=True).to_dict()
    result = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()

    newest = {s: max(v, key=lambda pe: pe[1]) for s, v in before.items()}
    assert sentinels(table) == {s: [pe] for s, pe in newest.items()}
    for s, pe in newest.items():
        assert latest_shard_manifest(table.store, s).writer_epoch == pe[1]
    kept = {(k["shard_id"], k["position"]) for k in result["kept_wal_entries"] if k["reason"] == "fence-sentinel"}
    assert kept == {(s, pe[0]) for s, pe in newest.items()}
    assert dry["kept_wal_entries"] == result["kept_wal_entries"]
    assert result["wal_entries_deleted"] == dry["wal_entries_deleted"] > 0
    assert lsm_rows(table) == model.sorted_rows() == table_rows(table)


def test_every_sentinel_stays_within_the_bound_or_with_never(make_table):
    table, _ = three_sessions(make_table)
    before = sentinels(table)
    t = memwal.open(table.uri)
    assert t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions="never").ok
    assert sentinels(table) == before
    assert t.gc(grace_seconds=0, writer_idle_seconds=0,
                expire_versions=3600).ok  # written a moment ago: within the bound
    assert sentinels(table) == before


def test_a_superseded_writer_still_running_is_fenced_by_the_sentinel_gc_kept(tmp_path):
    """Writer A holds a shard; B and then C open it (each writes a sentinel). A, never told,
    puts again: the sentinel B wrote at A's next position is still there after GC (within
    the bound), so A's put fails as fenced instead of being acknowledged and lost."""
    uri = str(tmp_path / "t")
    w = Workload(base_rows=10, shards=1, generations=1, rows_per_generation=5, seed=1, indexes=False)
    create_base_table(uri, w)
    (shard,) = shard_ids_for(w)
    schema = lance.dataset(uri).schema

    def rows(ids: list[int]) -> pa.Table:
        return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids],
                         "value": [float(i) for i in ids],
                         "vec": pa.array([[0.0] * 8 for _ in ids], pa.list_(pa.float32(), 8))}, schema=schema)

    a = lance.dataset(uri).mem_wal_writer(shard, max_memtable_rows=8)
    a.put(rows([100, 101, 102, 103, 104]))
    a.put(rows([105, 106, 107, 108, 109]))
    for first in (200, 300):
        with lance.dataset(uri).mem_wal_writer(shard, max_memtable_rows=8) as b:
            b.put(rows(list(range(first, first + 5))))
            b.put(rows(list(range(first + 5, first + 10))))
    t = memwal.open(uri)
    assert t.merge().ok
    expire_all(open_table(uri))
    assert t.gc(grace_seconds=0, writer_idle_seconds=0).ok  # the default bound: a week

    with pytest.raises(OSError, match="fenced"):
        a.put(rows([999]))
    time.sleep(0.2)
    assert 999 not in {r["id"] for r in lsm_rows(open_table(uri))}
