"""Schema changes between generations: columns are matched by Lance field id, everywhere.

pylance's ``LsmScanner`` matches a generation's columns to the base table's by field id
(after ``alter_columns({"path": "v", "name": "v2"})`` it shows a generation's ``v`` under
``v2``). The merger and memwal's folded reader must agree with it, or a merge changes what
readers see. Each case writes generations with pylance's own ``ShardWriter`` before and
after a schema change (a writer opened before the change keeps writing with the old
names), then checks, row for row against a model kept by field id:

* what readers see before the merge: pylance's ``LsmScanner`` (last write wins only) and
  ``memwal scan``;
* ``memwal merge`` exits 0, and the base table afterwards equals that same view;
* with a ``sum`` merge operator on ``v`` set through ``memwal merge-ops`` before the change
  (the operator follows its column's field id through a rename).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import lance
import pyarrow as pa
import pytest
from lance.mem_wal import LsmScanner

from memwal.demo import PK_META
from memwal.read import plan_read
from memwal.table import open_table
from tests.conftest import table_rows
from tests.helpers import run_cli

SHARD = "6f1c3e0a-0b7d-4c1e-9d2a-5e8f7a6b4c3d"


class FieldModel:
    """Rows by primary key, values by field id; ``ops`` maps field ids to ``sum``."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[int, object]] = {}
        self.ops: dict[int, str] = {}

    def put(self, ids: dict[str, int], batch: pa.Table, all_fields: list[int]) -> None:
        for row in batch.to_pylist():
            new = {ids[c]: v for c, v in row.items()}
            key = new[ids["id"]]
            old = self.rows.get(key)
            if old is None:
                self.rows[key] = {f: new.get(f) for f in all_fields}
                continue
            for f in all_fields:
                a, b = old.get(f), new.get(f)
                if self.ops.get(f) == "sum":
                    old[f] = b if a is None else a if b is None else a + b
                else:
                    old[f] = b

    def delete(self, keys: list[int]) -> None:
        for k in keys:
            self.rows.pop(k, None)

    def view(self, ds: lance.LanceDataset) -> list[dict]:
        fields = [(f.name(), f.id()) for f in ds.lance_schema.fields()]
        return [{name: self.rows[k].get(fid) for name, fid in fields} for k in sorted(self.rows)]


def ids_of(ds: lance.LanceDataset) -> dict[str, int]:
    return {f.name(): f.id() for f in ds.lance_schema.fields()}


def every_field(ds: lance.LanceDataset) -> list[int]:
    return list(range(ds.max_field_id + 1))


def make_base(uri: str, model: FieldModel) -> lance.LanceDataset:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK_META),
                        pa.field("v", pa.int64()), pa.field("w", pa.string())])
    base = pa.table({"id": list(range(1, 7)), "v": [i * 10 for i in range(1, 7)],
                     "w": [f"b{i}" for i in range(1, 7)]}, schema=schema)
    ds = lance.write_dataset(base, uri)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=1)
    ds = lance.dataset(uri)
    model.put(ids_of(ds), base, every_field(ds))
    return ds


def batch(ds: lance.LanceDataset, **columns: list) -> pa.Table:
    """Rows in the writer's schema (``ds``'s); columns not given are null."""
    n = len(columns["id"])
    return pa.table({f.name: pa.array(columns.get(f.name, [None] * n), f.type) for f in ds.schema}, schema=ds.schema)


def put(writer, ds: lance.LanceDataset, model: FieldModel, now: lance.LanceDataset, **columns: list) -> None:
    """``writer`` (opened on ``ds``) puts rows; the model files them by ``ds``'s field ids
    and keeps every field the table has ``now``."""
    b = batch(ds, **columns)
    writer.put(b)
    model.put(ids_of(ds), b, every_field(now))


def rename_v(ds: lance.LanceDataset) -> None:
    ds.alter_columns({"path": "v", "name": "v2"})


def rename_v_then_add_v(ds: lance.LanceDataset) -> None:
    ds.alter_columns({"path": "v", "name": "v2"})
    lance.dataset(ds.uri).add_columns(pa.field("v", pa.int64()))


def add_x(ds: lance.LanceDataset) -> None:
    ds.add_columns(pa.field("x", pa.string()))


def drop_w(ds: lance.LanceDataset) -> None:
    ds.drop_columns(["w"])


def drop_w_then_add_w(ds: lance.LanceDataset) -> None:
    ds.drop_columns(["w"])
    lance.dataset(ds.uri).add_columns(pa.field("w", pa.string()))


CHANGES: dict[str, Callable[[lance.LanceDataset], None]] = {
    "rename": rename_v,
    "rename-then-readd-old-name": rename_v_then_add_v,
    "add": add_x,
    "drop": drop_w,
    "drop-then-readd": drop_w_then_add_w,
}


def new_values(ds: lance.LanceDataset, keys: list[int], tag: str) -> dict[str, list]:
    """Values for every column of the changed schema (the ``v``-like int columns get 1000+key)."""
    out: dict[str, list] = {"id": keys}
    for f in ds.schema:
        if f.name == "id":
            continue
        out[f.name] = [1000 + k for k in keys] if pa.types.is_integer(f.type) else [f"{tag}-{f.name}-{k}" for k in keys]
    return out


def write_around_change(uri: str, model: FieldModel, change: Callable[[lance.LanceDataset], None]) -> None:
    """Generation 1 by writer A, opened before the change: puts before and after it (with
    the old names) and a delete. Generation 2 by writer B, opened after: the new names."""
    ds = lance.dataset(uri)
    with ds.mem_wal_writer(SHARD) as a:
        put(a, ds, model, ds, id=[2, 3, 7], v=[1, 2, 3], w=["a2", "a3", "a7"])
        put(a, ds, model, ds, id=[2], v=[5], w=["a2b"])  # a second operand of key 2 in generation 1
        change(lance.dataset(uri))  # its own handle: Lance updates the handle it alters
        now = lance.dataset(uri)
        put(a, ds, model, now, id=[3, 8], v=[7, 8], w=["a3b", "a8"])
        a.delete(pa.table({"id": pa.array([4], pa.int64())}))
        model.delete([4])
    ds = lance.dataset(uri)
    with ds.mem_wal_writer(SHARD) as b:
        put(b, ds, model, ds, **new_values(ds, [2, 5, 9], "b"))


def scan_json(uri: str) -> list[dict]:
    run = run_cli("scan", uri, "--json")
    assert run.rc == 0, run.stderr
    return sorted(json.loads(run.stdout)["rows"], key=lambda r: r["id"])


def pylance_view(uri: str) -> list[dict]:
    table = open_table(uri)
    ds = table.dataset()
    rows = LsmScanner.from_snapshots(ds, plan_read(table, source="manifests").snapshots).to_table()
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("ops", [False, True], ids=["last-write-wins", "sum-operator"])
@pytest.mark.parametrize("case", sorted(CHANGES))
def test_schema_change_between_generations(tmp_path, case, ops):
    uri = str(tmp_path / "t")
    model = FieldModel()
    make_base(uri, model)
    if ops:
        run = run_cli("merge-ops", uri, "--set", "v=sum")
        assert run.rc == 0, run.stderr
        model.ops = {ids_of(lance.dataset(uri))["v"]: "sum"}
    write_around_change(uri, model, CHANGES[case])
    ds = lance.dataset(uri)
    expected = model.view(ds)
    if not ops:  # pylance's reader is last-write-wins: the reference for plain tables
        assert pylance_view(uri) == expected
    assert scan_json(uri) == expected
    run = run_cli("merge", uri)
    assert run.rc == 0, run.stderr
    table = open_table(uri)
    assert table_rows(table) == expected  # the merge changed nothing a reader sees
    assert scan_json(uri) == expected
    assert run_cli("verify", uri).rc == 0


def test_operator_on_a_renamed_column_without_field_id_is_refused(tmp_path):
    """An operator key set by hand (no recorded field id) on a column that was then renamed
    cannot be placed: refused (exit 2, naming the key and the way forward), not silently
    dropped; following the way forward merges."""
    uri = str(tmp_path / "t")
    model = FieldModel()
    ds = make_base(uri, model)
    ds.update_config({"memwal.merge-op.v": "sum"})
    model.ops = {ids_of(ds)["v"]: "sum"}
    write_around_change(uri, model, lambda d: None)
    rename_v(lance.dataset(uri))
    run = run_cli("merge", uri)
    assert run.rc == 2 and "memwal.merge-op.v" in run.stderr and "--unset v" in run.stderr, run.stderr
    run = run_cli("merge-ops", uri, "--unset", "v", "--set", "v2=sum", "--force")
    assert run.rc == 0, run.stderr
    run = run_cli("merge", uri)
    assert run.rc == 0, run.stderr
    assert lance.dataset(uri).config().get("memwal.merge-op.v2") == "sum"
    assert table_rows(open_table(uri)) == model.view(lance.dataset(uri))
