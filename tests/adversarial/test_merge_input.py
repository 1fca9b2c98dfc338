"""Hostile generations: a merge refuses them at plan time, exit 2, with nothing written.

Each case adds one generation that pylance's ShardWriter would not write (written with
``lance.write_dataset`` into the shard folder and listed by a newly committed shard
manifest) on top of a real ShardWriter generation. ``memwal merge`` must exit 2 with one
line naming the shard, the generation and the column, and the table tree, lease folder
included, must be byte-for-byte unchanged.
"""

from __future__ import annotations

import os

import lance
import numpy as np
import pyarrow as pa
import pytest

from memwal.demo import PK_META, Workload, shard_ids_for
from memwal.table.shards import all_shard_manifests
from tests.conftest import commit_shard_manifest, table_rows
from tests.helpers import assert_one_line_error, run_cli

WL = Workload(base_rows=60, shards=1, generations=1, rows_per_generation=10, indexes=False, seed=3)
SHARD = shard_ids_for(WL)[0]
DIM = WL.dim


def add_generation(table, data: pa.Table, drop: tuple[str, ...] = ()) -> int:
    """Write ``data`` as the shard's next generation and list it in a new shard manifest.

    Lance numbers a new dataset's field ids in column order, and the merger matches columns
    to the base table's by field id (as pylance's ShardWriter writes them): ``data`` comes
    with the base's columns in the base's order (then new ones, then ``_tombstone``), and
    columns the generation must lack are dropped afterwards (``drop``), which keeps the
    other columns' ids.
    """
    st = all_shard_manifests(table.store)[SHARD]
    g = st.current_generation
    path = f"0badf00d_gen_{g}"
    ds = lance.write_dataset(data, os.path.join(table.uri, "_mem_wal", SHARD, path))
    if drop:
        ds.drop_columns(list(drop))

    def edit(msg):
        msg.sstables.add(generation=g, path=path, physical_rows=data.num_rows, in_memory_bytes=data.nbytes)
        msg.current_generation = g + 1

    commit_shard_manifest(table, SHARD, edit)
    return g


def vectors(n: int, dim: int = DIM, value_type: pa.DataType = pa.float32()) -> pa.Array:
    flat = pa.array(np.arange(n * dim, dtype=np.float64), value_type)
    return pa.FixedSizeListArray.from_arrays(flat, dim)


def columns(n: int = 3) -> dict[str, tuple[pa.Field, pa.Array]]:
    """A well-formed generation's columns (keys far above the base's), to be spoiled."""
    ids = [10_000 + i for i in range(n)]
    return {
        "id": (pa.field("id", pa.int64(), nullable=False, metadata=PK_META), pa.array(ids, pa.int64())),
        "name": (pa.field("name", pa.string()), pa.array([f"g-{i}" for i in ids])),
        "value": (pa.field("value", pa.float64()), pa.array([1.5] * n)),
        "vec": (pa.field("vec", pa.list_(pa.float32(), DIM)), vectors(n)),
        "_tombstone": (pa.field("_tombstone", pa.bool_(), nullable=False), pa.array([False] * n)),
    }


def build(cols: dict[str, tuple[pa.Field, pa.Array]]) -> pa.Table:
    return pa.Table.from_arrays([a for _, a in cols.values()], schema=pa.schema([f for f, _ in cols.values()]))


def with_column(name: str, field: pa.Field, array: pa.Array) -> pa.Table:
    """The columns with ``name`` replaced, or added before ``_tombstone`` (field ids stay the base's)."""
    cols = columns()
    tombstone = cols.pop("_tombstone")
    cols[name] = (field, array)
    if name != "_tombstone":
        cols["_tombstone"] = tombstone
    return build(cols)


def without(name: str) -> pa.Table:
    cols = columns()
    del cols[name]
    return build(cols)


def add_base_int32_column(table) -> None:
    table.dataset().add_columns(pa.schema([pa.field("small", pa.int32())]))


HOSTILE = {
    "extra-column": (None, lambda: with_column("color", pa.field("color", pa.string()), pa.array(["r"] * 3)), "color"),
    "int64-to-string": (None, lambda: with_column("name", pa.field("name", pa.int64()), pa.array([1, 2, 3])), "name"),
    "string-to-float64": (
        None,
        lambda: with_column("value", pa.field("value", pa.string()), pa.array(["1.5", "x", "3"])),
        "value",
    ),
    "string-to-int64-key": (
        None,
        lambda: with_column(
            "id", pa.field("id", pa.string(), nullable=False, metadata=PK_META), pa.array(["a", "b", "c"])
        ),
        "id",
    ),
    "float64-to-int64-key": (
        None,
        lambda: with_column(
            "id", pa.field("id", pa.float64(), nullable=False, metadata=PK_META), pa.array([1.0, 2.0, 3.5])
        ),
        "id",
    ),
    "int64-to-float64": (
        None,
        lambda: with_column("value", pa.field("value", pa.int64()), pa.array([1, 2, 3])),
        "value",
    ),
    "int64-to-int32": (
        add_base_int32_column,
        lambda: with_column("small", pa.field("small", pa.int64()), pa.array([1, 2, 3], pa.int64())),
        "small",
    ),
    "binary-to-string": (
        None,
        lambda: with_column("name", pa.field("name", pa.binary()), pa.array([b"a", b"b", b"c"])),
        "name",
    ),
    "vector-size": (
        None,
        lambda: with_column("vec", pa.field("vec", pa.list_(pa.float32(), 4)), vectors(3, 4)),
        "vec",
    ),
    "vector-float64": (
        None,
        lambda: with_column("vec", pa.field("vec", pa.list_(pa.float64(), DIM)), vectors(3, DIM, pa.float64())),
        "vec",
    ),
    "no-tombstone": (None, lambda: without("_tombstone"), "_tombstone"),
    "string-tombstone": (
        None,
        lambda: with_column("_tombstone", pa.field("_tombstone", pa.string()), pa.array(["false"] * 3)),
        "_tombstone",
    ),
    "missing-key": (None, lambda: (build(columns()), ("id",)), "id"),
    "null-key": (
        None,
        lambda: with_column(
            # Lance refuses a nullable column marked as primary key, so the hostile
            # generation drops the marker and declares the key nullable.
            "id", pa.field("id", pa.int64(), nullable=True), pa.array([10_000, None, 10_002])
        ),
        "id",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_generation_exits_2_with_nothing_written(make_table, unchanged, case):
    table, _ = make_table(WL)
    prepare, data, column = HOSTILE[case]
    if prepare:
        prepare(table)
    made = data()
    g = add_generation(table, *(made if isinstance(made, tuple) else (made,)))
    with unchanged(table.uri):
        run = run_cli("merge", table.uri)
    assert_one_line_error(run, 2, SHARD, f"generation {g}", column)
    assert not os.path.exists(os.path.join(table.uri, "_mem_wal", "_jobs", "leases", "merge.json"))


def test_dry_run_refuses_the_same_input(make_table, unchanged):
    table, _ = make_table(WL)
    g = add_generation(table, with_column("color", pa.field("color", pa.string()), pa.array(["r"] * 3)))
    with unchanged(table.uri):
        run = run_cli("merge", table.uri, "--dry-run")
    assert_one_line_error(run, 2, SHARD, f"generation {g}", "color")


def test_safe_widening_and_a_missing_nullable_column_merge(make_table):
    """int32 -> int64 key, float32 -> float64 and a generation without ``name`` merge: the
    refusals above are about lossy input, not about any difference at all."""
    table, model = make_table(WL)
    cols = columns()
    keys = pa.array([10_000, 10_001, 10_002], pa.int32())
    cols["id"] = (pa.field("id", pa.int32(), nullable=False, metadata=PK_META), keys)
    cols["value"] = (pa.field("value", pa.float32()), pa.array([1.5, 2.5, 3.5], pa.float32()))
    data = build(cols)
    add_generation(table, data, drop=("name",))
    run = run_cli("merge", table.uri)
    assert run.rc == 0, run.stderr
    expected = {r["id"]: r for r in model.sorted_rows()}
    for i, key in enumerate(data.column("id").to_pylist()):
        vec = data.column("vec")[i].as_py()
        expected[key] = {"id": key, "name": None, "value": [1.5, 2.5, 3.5][i], "vec": vec}
    assert table_rows(table) == [expected[k] for k in sorted(expected)]
