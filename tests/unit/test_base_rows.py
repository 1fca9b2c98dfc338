"""memwal.merge.base_rows against real Lance files: base rows found by key, and the rule that
two tasks' rows of one fragment become one deletion file (two files would each miss the
other's rows)."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

from memwal.merge.base_rows import base_addresses, by_fragment, merge_offsets, retire


def _table(path: str) -> lance.LanceDataset:
    t = pa.table({"id": pa.array(range(100), pa.int64()), "v": pa.array(range(100), pa.int64())})
    return lance.write_dataset(t, path, max_rows_per_file=50)  # fragments 0 (ids 0-49) and 1 (50-99)


def test_offsets_group_by_fragment_sorted_and_unique():
    a = np.array([(3 << 32) | 5, (1 << 32) | 2, (3 << 32) | 1, (1 << 32) | 2, 7], dtype=np.uint64)
    got = by_fragment(a)
    assert {k: v.tolist() for k, v in got.items()} == {0: [7], 1: [2], 3: [1, 5]}
    assert all(v.dtype == np.uint32 for v in got.values()) and by_fragment(np.zeros(0, np.uint64)) == {}


def test_two_tasks_rows_of_one_fragment_make_one_deletion_file(tmp_path):
    """Keys of one fragment found by two tasks: joined per fragment, one delete_rows call,
    one deletion file holding both; committed, exactly those rows are gone."""
    ds = _table(str(tmp_path / "t"))
    first = by_fragment(base_addresses(ds, pa.table({"id": pa.array([1, 2, 60], pa.int64())}), ["id"]))
    second = by_fragment(base_addresses(ds, pa.table({"id": pa.array([3, 61, 99], pa.int64())}), ["id"]))
    sent = [(fid, offs.tobytes()) for part in (first, second) for fid, offs in part.items()]
    joined = merge_offsets(sent)
    assert {k: v.tolist() for k, v in joined.items()} == {0: [1, 2, 3], 1: [10, 11, 49]}
    done = retire(ds, joined)
    assert [fid for fid, _ in done] == [0, 1]
    assert [m.deletion_file.num_deleted_rows for _, m in done] == [3, 3]
    op = lance.LanceOperation.Update(updated_fragments=[m for _, m in done])
    after = lance.LanceDataset.commit(ds.uri, op, read_version=ds.version)
    assert sorted(after.to_table()["id"].to_pylist()) == [i for i in range(100) if i not in (1, 2, 3, 60, 61, 99)]


def test_a_fragment_with_no_row_left_is_named_for_removal(tmp_path):
    ds = _table(str(tmp_path / "t"))
    done = retire(ds, by_fragment(base_addresses(ds, pa.table({"id": pa.array(range(50), pa.int64())}), ["id"])))
    assert done == [(0, None)]
