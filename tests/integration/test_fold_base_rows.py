"""The base rows a fold starts from (:func:`memwal.merge.changes.base_rows_for_fold`): exactly
the rows whose keys are among the change set's, whatever the key's type and however the
scan's batches fall, with the key and folding columns only."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from memwal.merge import changes
from memwal.merge.ops import MergeOps


@pytest.mark.parametrize("kind", ["dense int", "sparse int", "uint64 past 2**63", "a null key in the base", "string",
                                  "two columns"])
def test_base_rows_are_exactly_those_of_the_changed_keys(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(changes, "SCAN_BATCH_ROWS", 7)  # many batches, some with no match
    rng = np.random.default_rng(len(kind))
    n = 300
    ids = {"dense int": np.arange(n, dtype=np.int64),
           "sparse int": rng.choice(2**60, n, replace=False).astype(np.int64),
           "uint64 past 2**63": (np.arange(n, dtype=np.uint64) + np.uint64(2**63 - 150)),
           "string": np.array([f"k{i}" for i in range(n)], dtype=object),
           "a null key in the base": np.arange(n, dtype=np.int64),
           "two columns": np.arange(n, dtype=np.int64)}[kind]
    null_last = kind == "a null key in the base"
    base = {"id": pa.array(ids, mask=np.arange(n) == n - 1) if null_last else pa.array(ids),
            "value": pa.array(np.arange(n, dtype=np.float64)),
            "name": pa.array([f"n{i}" for i in range(n)])}
    pk = ["id"]
    if kind == "two columns":
        base["part"] = pa.array(np.arange(n) % 3, pa.int32())
        pk = ["id", "part"]
    ds = lance.write_dataset(pa.table(base), str(tmp_path / "base"))
    chosen = rng.choice(n - 1, 40, replace=False)
    keys = {k: base[k].take(pa.array(chosen)) for k in pk}
    if kind == "two columns":  # half the pairs exist in the base, half do not
        keys["part"] = pa.array(np.where(np.arange(40) % 2 == 0, keys["part"].to_numpy(),
                                         (keys["part"].to_numpy() + 1) % 3).astype(np.int32))
    else:  # and some keys the base does not have
        keys = {"id": pa.concat_arrays([keys["id"], pa.array(ids[:5] if kind == "string" else [], base["id"].type)])}
    got = changes.base_rows_for_fold(ds, pa.table(keys), pk, MergeOps({"value": "sum"}))
    assert got.column_names == [*pk, "value"]
    wanted = {tuple(r[k] for k in pk) for r in pa.table(keys).to_pylist()}
    expect = [r for r in pa.table(base).select([*pk, "value"]).to_pylist() if tuple(r[k] for k in pk) in wanted]
    assert sorted(got.to_pylist(), key=str) == sorted(expect, key=str)
    assert 0 < got.num_rows < n
