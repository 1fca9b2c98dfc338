"""A folding merge reads the WAL headers of what it merges, not of every entry the table kept (issue 82).

A table with merge operators folds each generation from its WAL entries, each naming its generation
in its header. Under the default retention a week of entries stays beside a busy writer (they go with
their generations), and every folding merge read every entry's header to find its generations':
a ranged GET each on an object store. It now reads them from the newest back until one names a
generation below those it merges (the spec's order of the entries, as GC places them).

Work is counted, never timed: after 8 and after 40 generations merged (their entries kept), the merge
of one more generation, written by pylance's ``ShardWriter``, reads the same headers, and the base
then holds the model's folded rows.
"""

from __future__ import annotations

import random
from collections import Counter

import lance
import pyarrow as pa

import memwal
from memwal.merge import operands as operands_module
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


def test_a_folding_merge_reads_the_same_headers_whatever_the_wal_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(operands_module, "HEADERS_AT_ONCE", 4)  # the rule's batch, on a WAL of tens
    real = operands_module.read_wal_entry_metas
    read: Counter[int] = Counter()

    def counting(store, shard_id, positions):
        read[len(read)] = len(positions)
        return real(store, shard_id, positions)

    monkeypatch.setattr(operands_module, "read_wal_entry_metas", counting)
    headers = {}
    for kept in (8, 40):
        uri = str(tmp_path / f"t{kept}")
        model = build_folding_table(uri, shards=1, generations=kept)
        assert memwal.open(uri).merge().ok  # every generation merged, its WAL entries kept
        _one_more_generation(uri, model, random.Random(kept))
        read.clear()
        assert memwal.open(uri).merge().ok
        headers[kept] = sum(read.values())
        assert approx(base_rows(uri)) == approx(model.rows())  # the put twice folded from both operands
    assert headers[8] == headers[40] <= 8, headers
