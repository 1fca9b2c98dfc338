"""A folding merge reads the WAL headers of what it merges, not of every entry the table kept (issue 82).

A table with merge operators folds each generation from its WAL entries, each naming its generation
in its header. Under the default retention a week of entries stays beside a busy writer (they go with
their generations), and every folding merge read every entry's header to find its generations':
a ranged GET each on an object store. It now reads them from the newest back until one names a
generation below those it merges (the spec's order of the entries, as GC places them).

Work is counted, never timed: after 8 and after 40 generations merged (their entries kept), the merge
of one more generation, written by pylance's ``ShardWriter``, reads the same headers and lists no WAL
name (the walk starts at the newest entry the shard manifest says a flushed generation holds), and
the base then holds the model's folded rows; a manifest that names a wrong newest entry has the WAL
listed instead.
"""

from __future__ import annotations

import random
from collections import Counter

import lance
import pyarrow as pa

import memwal
from memwal.merge import operands as operands_module
from memwal.pb.shard_manifest_pb2 import ShardManifest
from memwal.store import LocalStore
from memwal.table import open_table
from memwal.table.drain import write_next_version
from memwal.table.shards import latest_shard_manifest
from tests.integration.test_merge_ops import (
    COLUMNS,
    E2E_SCHEMA,
    FoldModel,
    approx,
    base_rows,
    build_folding_table,
    random_row,
)

SHARD = "00000000-0000-4000-8000-000000000000"


def _one_more_generation(uri: str, model: FoldModel, rng: random.Random) -> None:
    """One writer session's puts, with a key put twice (two operands of one generation)."""
    writer = lance.dataset(uri).mem_wal_writer(SHARD, durable_write=False)
    try:
        for ids in ([3, 5, 7], [5, 9]):
            rows = [{"id": k, **random_row(rng)} for k in ids]
            writer.put(pa.Table.from_pylist(rows, schema=E2E_SCHEMA))
            model.events += [(r["id"], False, {c: r[c] for c in COLUMNS}) for r in rows]
    finally:
        writer.close()


def _counted(monkeypatch) -> Counter[str]:
    """Headers read and WAL names listed, counted as they happen (``clear()`` between merges)."""
    seen: Counter[str] = Counter()
    real_metas, real_list = operands_module.read_wal_entry_metas, LocalStore.list

    def metas(store, shard_id, positions):
        seen["headers read"] += len(positions)
        return real_metas(store, shard_id, positions)

    def listing(self, prefix, *args, **kwargs):
        out = list(real_list(self, prefix, *args, **kwargs))
        if "/wal/" in f"/{prefix}":
            seen["WAL names listed"] += len(out)
        return iter(out)

    monkeypatch.setattr(operands_module, "read_wal_entry_metas", metas)
    monkeypatch.setattr(LocalStore, "list", listing)
    return seen


def test_a_folding_merge_reads_the_same_headers_whatever_the_wal_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(operands_module, "HEADERS_AT_ONCE", 4)  # the rule's batch, on a WAL of tens
    seen = _counted(monkeypatch)
    work = {}
    for kept in (8, 40):
        uri = str(tmp_path / f"t{kept}")
        model = build_folding_table(uri, shards=1, generations=kept)
        assert memwal.open(uri).merge().ok  # every generation merged, its WAL entries kept
        _one_more_generation(uri, model, random.Random(kept))
        seen.clear()
        assert memwal.open(uri).merge().ok
        work[kept] = dict(seen)
        assert approx(base_rows(uri)) == approx(model.rows())  # the put twice folded from both operands
    # from the newest entry the manifest names back, by name: no WAL name listed
    assert work[8] == work[40] == {"headers read": 6}, work


def test_a_manifest_naming_a_wrong_newest_entry_has_the_wal_listed(tmp_path, monkeypatch) -> None:
    """A shard manifest whose newest flushed entry is not the newest (forged, or a writer's bug):
    the entry after it names a generation being merged, so the walk by name is not trusted and
    the WAL is listed; the generation still folds from every operand."""
    seen = _counted(monkeypatch)
    uri = str(tmp_path / "t")
    model = build_folding_table(uri, shards=1, generations=3)
    assert memwal.open(uri).merge().ok
    _one_more_generation(uri, model, random.Random(3))
    store = open_table(uri).store
    state = latest_shard_manifest(store, SHARD)
    assert state is not None
    forged = ShardManifest()
    forged.CopyFrom(state.manifest)
    forged.version = state.version + 1
    forged.replay_after_wal_entry_position = 2  # entries 1-7: g1, sentinel, g2, sentinel, g3, sentinel, g4
    write_next_version(store, state, forged)
    seen.clear()
    assert memwal.open(uri).merge().ok
    assert seen["WAL names listed"] > 0, seen
    assert approx(base_rows(uri)) == approx(model.rows())
