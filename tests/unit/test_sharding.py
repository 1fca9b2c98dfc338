"""Shard pruning against Lance's own routing and Lance's own filter evaluation.

Rows are routed by ``lance.mem_wal.evaluate_sharding_spec`` (our users' ShardWriter
routing); whether a row matches a filter is what Lance's scanner says. The property every
test here serves: a shard that pruning skips never holds a row (or a version of a key) that
matches the filter. The shard field value codec and the spec helpers are checked too.
"""

from __future__ import annotations

import datetime as dt
import struct
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwal.demo import Workload, make_demo_table, shard_ids_for
from memwal.errors import BadInputError
from memwal.read import plan_read
from memwal.read.pruning import allowed_shard_values, filter_literals, routed_values, shard_matches
from memwal.table import open_table
from memwal.table.sharding import (
    field_names_from_lance_schema,
    shard_field_value_from_bytes,
    shard_field_value_to_bytes,
    spec_to_dict,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PK_META = {"lance-schema:unenforced-primary-key": "true"}

#: Key column types pruning supports (integers, strings, booleans), with value ranges.
KEY_TYPES: dict[str, pa.DataType] = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "int16": pa.int16(),
    "uint64": pa.uint64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "bool": pa.bool_(),
}


def _key_values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.one_of(st.just(""), st.text(alphabet="ab'\"é日 \\", max_size=4))
    if pa.types.is_unsigned_integer(t):
        hi = 2**t.bit_width - 1
        return st.one_of(st.sampled_from([0, 1, hi, hi - 1, 2**63]).filter(lambda v: v <= hi), st.integers(0, hi))
    lo, hi = -(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1
    return st.one_of(st.sampled_from([lo, hi, 0, -1, 1]), st.integers(lo, hi))


def _render(value: Any, double_quoted: bool = False) -> str:
    """A literal as Lance filter text ('' escapes a quote; double quotes also make strings)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        q = '"' if double_quoted else "'"
        return q + value.replace(q, q + q) + q
    return str(value)


def filter_strategy(key: str, values: st.SearchStrategy[Any], other: str = "v") -> st.SearchStrategy[str]:
    """Filters mixing what pruning reads (=, IN, AND, OR) with what it must ignore."""
    lit = st.builds(_render, values, st.booleans())
    atoms = st.one_of(
        st.builds(lambda v: f"{key} = {v}", lit),
        st.builds(lambda v: f"{v} = `{key}`", lit),
        st.builds(lambda vs: f"{key} IN ({', '.join(vs)})", st.lists(lit, min_size=1, max_size=4)),
        st.builds(lambda v: f"{key} != {v}", lit),
        st.builds(lambda v: f"NOT {key} = {v}", lit),
        st.builds(lambda vs: f"{key} NOT IN ({', '.join(vs)})", st.lists(lit, min_size=1, max_size=3)),
        st.builds(lambda v: f"{key} >= {v}", lit),
        st.builds(lambda n: f"{other} > {n}", st.integers(-5, 5)),
        st.builds(lambda n: f"{other} = {n}", st.integers(-5, 5)),
        st.just(f"{key} IS NULL"),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.builds(lambda a, b: f"{a} AND {b}", inner, inner),
            st.builds(lambda a, b: f"{a} OR {b}", inner, inner),
            st.builds(lambda a: f"({a})", inner),
        ),
        max_leaves=5,
    )


def _spec(field: dict[str, Any]) -> dict[str, Any]:
    return {"spec_id": 1, "fields": [field]}


def _field(transform: str, source_ids: list[int], params: dict[str, str] | None = None, fid: str = "f") -> dict:
    return {
        "field_id": fid,
        "source_ids": source_ids,
        "transform": transform,
        "expression": None,
        "result_type": "int32",
        "parameters": params or {},
    }


def _lance_matches(ds: lance.LanceDataset, expr: str) -> pa.Table | None:
    """Rows Lance's scanner returns for ``expr``; None when Lance rejects the filter."""
    try:
        return ds.to_table(filter=expr)
    except (ValueError, OSError, RuntimeError):
        return None


# ---------------------------------------------------------------------------
# The property: random tables, Lance-routed shards, random filters
# ---------------------------------------------------------------------------


@SETTINGS
@given(
    data=st.data(),
    type_name=st.sampled_from(sorted(KEY_TYPES)),
    transform=st.sampled_from(["bucket", "identity"]),
    num_buckets=st.one_of(st.sampled_from([1, 2, 3, 4, 16]), st.integers(1, 2**31 - 1)),
)
def test_a_pruned_shard_never_holds_a_matching_row(
    data: st.DataObject, type_name: str, transform: str, num_buckets: int
) -> None:
    t = KEY_TYPES[type_name]
    keys = data.draw(st.lists(_key_values(t), min_size=1, max_size=25), label="keys")
    expr = data.draw(filter_strategy("k", st.one_of(st.sampled_from(keys), _key_values(t))), label="filter")
    schema = pa.schema([pa.field("k", t, nullable=False, metadata=PK_META), pa.field("v", pa.int64())])
    rows = pa.table({"k": pa.array(keys, t), "v": pa.array([i % 7 - 3 for i in range(len(keys))])}, schema=schema)
    with tempfile.TemporaryDirectory() as tmp:
        ds = lance.write_dataset(rows, tmp)
        spec = _spec(_field(transform, [0], {"num_buckets": str(num_buckets)}))
        shard_of_row = lance.mem_wal.evaluate_sharding_spec(rows.to_batches()[0], spec, ds.lance_schema).column(0)
        allowed = allowed_shard_values(spec, ds.lance_schema, filter_literals(expr))
        matching = _lance_matches(ds, expr)
    if matching is None:
        return  # Lance refuses the filter: a read fails whatever pruning says
    matched_keys = set(matching.column("k").to_pylist())
    for shard_value in set(shard_of_row.to_pylist()):
        shard_rows = rows.filter(pc.equal(shard_of_row, pa.scalar(shard_value, shard_of_row.type)))
        if not shard_matches({"f": shard_value}, allowed):
            assert not matched_keys & set(shard_rows.column("k").to_pylist()), (expr, shard_value, allowed)


@SETTINGS
@given(type_name=st.sampled_from(sorted(KEY_TYPES)), data=st.data(), num_buckets=st.integers(1, 64))
def test_equality_and_in_prune_to_the_buckets_lance_routes_to(data: st.DataObject, type_name: str, num_buckets: int):
    """Not vacuous: a filter pinning the key keeps exactly the literals' own shard values."""
    t = KEY_TYPES[type_name]
    literals = data.draw(st.lists(_key_values(t), min_size=1, max_size=5, unique=True))
    expr = " OR ".join(f"k = {_render(v)}" for v in literals[:1]) + f" OR k IN ({', '.join(map(_render, literals))})"
    schema = pa.schema([pa.field("k", t, nullable=False, metadata=PK_META)])
    lance_schema = lance.schema.LanceSchema.from_pyarrow(schema)
    spec = _spec(_field("bucket", [0], {"num_buckets": str(num_buckets)}))
    routed = lance.mem_wal.evaluate_sharding_spec(pa.record_batch({"k": pa.array(literals, t)}), spec, lance_schema)
    assert allowed_shard_values(spec, lance_schema, filter_literals(expr)) == {"f": set(routed.column(0).to_pylist())}


@pytest.fixture(scope="module")
def demo_table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real MemWAL table written by ShardWriter, plus one key put into the wrong shard."""
    uri = str(tmp_path_factory.mktemp("demo") / "t")
    wl = Workload(base_rows=60, shards=3, generations=2, rows_per_generation=12, indexes=False, seed=3)
    model = make_demo_table(uri, wl)
    ds = lance.dataset(uri)
    spec = ds.mem_wal_index_details()["sharding_specs"][0]
    fresh = list(range(700_000, 700_040))
    buckets = lance.mem_wal.evaluate_sharding_spec(
        pa.record_batch({"id": pa.array(fresh, pa.int64())}), spec, ds.lance_schema
    ).column(0)
    misrouted = next(k for k, b in zip(fresh, buckets.to_pylist(), strict=True) if b != 0)
    row = ds.to_table(limit=1).to_pylist()[0] | {"id": misrouted, "name": "misrouted"}
    shard0 = shard_ids_for(wl)[0]  # bucket 0's shard: the wrong one for this key
    with ds.mem_wal_writer(shard0, durable_write=False) as w:
        w.put(pa.Table.from_pylist([row], schema=ds.schema))
    return {"uri": uri, "keys": sorted(model.rows) + [misrouted], "misrouted": misrouted, "shard0": shard0}


def _generation_datasets(uri: str) -> dict[str, list[lance.LanceDataset]]:
    """Every flushed generation of every shard, opened as a Lance dataset."""
    out: dict[str, list[lance.LanceDataset]] = {}
    for shard_dir in sorted(Path(uri, "_mem_wal").iterdir()):
        if shard_dir.name.startswith("_"):
            continue
        gens = [p for p in shard_dir.iterdir() if "_gen_" in p.name]
        out[shard_dir.name] = [lance.dataset(str(p)) for p in sorted(gens)]
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_plan_read_never_prunes_a_shard_holding_a_matching_key(demo_table: dict[str, Any], data: st.DataObject):
    """End to end on ShardWriter's shards: no key version in a pruned shard matches the filter.

    A key matches when any version of it (base row, put or tombstone, in any shard) does:
    skipping a shard holding another version of such a key would change what readers see.
    """
    keys = demo_table["keys"]
    expr = data.draw(
        filter_strategy("id", st.one_of(st.sampled_from(keys), st.integers(-(2**63), 2**63 - 1)), "value"),
        label="filter",
    )
    table = open_table(demo_table["uri"])
    base = lance.dataset(demo_table["uri"])
    generations = _generation_datasets(demo_table["uri"])
    found = [_lance_matches(d, expr) for d in [base, *(g for gs in generations.values() for g in gs)]]
    if any(f is None for f in found):
        return
    matching_keys = {k for f in found for k in f.column("id").to_pylist()}  # type: ignore[union-attr]
    plan = plan_read(table, source="manifests", filter=expr)
    for shard_id in plan.pruned:
        held = {k for g in generations[shard_id] for k in g.to_table(columns=["id"]).column("id").to_pylist()}
        assert not held & matching_keys, (expr, shard_id)


def test_plan_read_prunes_and_keeps_the_misrouted_key(demo_table: dict[str, Any]) -> None:
    table = open_table(demo_table["uri"])
    k = demo_table["misrouted"]
    for expr in (f"id = {k}", f"id = {k} OR id = {k}", f"(id IN ({k}) AND value > -1e9) OR id = {k}"):
        plan = plan_read(table, source="manifests", filter=expr)
        # Kept: bucket 0's shard (it holds the misrouted key) and the key's own bucket's shard.
        assert len(plan.pruned) == 1 and demo_table["shard0"] not in plan.pruned, expr
    assert plan_read(table, source="manifests", filter="id = 'x'").pruned == []  # Lance rejects: no pruning


# ---------------------------------------------------------------------------
# Reading filters with sqlglot
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("id = 5", {"id": [5]}),
        ("5 = id", {"id": [5]}),
        ("id == -5", {"id": [-5]}),
        ("id IN (1, 2, 3)", {"id": [1, 2, 3]}),
        ("id in (1,2) and name = 'O''Brien'", {"id": [1, 2], "name": ["O'Brien"]}),
        ('name = "double" AND `my col` = 4', {"name": ["double"], "my col": [4]}),
        ("name = 'a\\'", {"name": ["a\\"]}),  # a backslash is not an escape in Lance
        ("flag = TRUE AND x = 1.5", {"flag": [True]}),
        ("id = 1 OR id = 2", {"id": [1, 2]}),
        ("(id = 1 AND x = 2) OR (id = 3 AND y = 4)", {"id": [1, 3]}),
        ("(id = 1 AND x = 2) OR y = 3", {}),
        ("id = 1 AND (a = 2 OR b = 3)", {"id": [1]}),
        ("id = 1 AND id IN (1, 2)", {"id": [1]}),
        ("id = 1 AND id = 2", {"id": []}),
        ("id IN (1, 2) AND id = '1'", {"id": [1, 2]}),  # kinds differ: not intersected
        ("flag = TRUE AND flag = 1", {"flag": [True]}),
        ("((id = 7))", {"id": [7]}),
        ("x BETWEEN 1 AND y = 3 AND id = 2", {"id": [2]}),
        ("id >= 1 AND id != 3 AND id <> 4 AND b = 2", {"b": [2]}),
    ],
)
def test_filter_literals(expr: str, expected: dict[str, list[Any]]) -> None:
    got = filter_literals(expr)
    assert {c: sorted(v, key=repr) for c, v in got.items()} == {c: sorted(v, key=repr) for c, v in expected.items()}


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "   ",
        "NOT id = 1",
        "id NOT IN (1, 2)",
        "id = NULL",
        "id IS NULL",
        "id IN (1, NULL)",
        "lower(name) = 'x'",
        "id - 1 = 2",
        "id = 1 - 1",
        "id = 1.0",
        "id = 1e3",
        "id = CAST('1' AS BIGINT)",
        "t.id = 1",
        "id = 1 x",  # Lance reads `x` as an alias: not ours to guess
        "id = 0x10",
        "id = 1_000",
        "id = 1; id = 2",
        "CASE WHEN id = 1 THEN TRUE END",
        "name = 'unterminated OR x",
        "id = 1 AND",
        "id IN (SELECT 1)",
        "name = 'a' 'b'",
        '"id" = 1',  # a string compared with 1, not the column id
        "id",
        "id = 1 OR name = 'x'",
    ],
)
def test_filter_literals_constrains_nothing_when_unsure(expr: str) -> None:
    assert "id" not in filter_literals(expr)


@settings(max_examples=300, deadline=None)
@given(expr=st.text(alphabet="ab=()'\"` ,-1INORANDT\\;", max_size=30) | st.text(max_size=30))
def test_filter_literals_never_raises(expr: str) -> None:
    assert isinstance(filter_literals(expr), dict)


# ---------------------------------------------------------------------------
# Literal conversion and fields pruning must leave alone
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema_of_types() -> Any:
    schema = pa.schema(
        [
            pa.field("i8", pa.int8()),
            pa.field("i64", pa.int64()),
            pa.field("u64", pa.uint64()),
            pa.field("f64", pa.float64()),
            pa.field("s", pa.string()),
            pa.field("d", pa.date32()),
            pa.field("b", pa.bool_()),
        ]
    )
    return lance.schema.LanceSchema.from_pyarrow(schema)


def test_literals_that_do_not_convert_exactly_prune_nothing(schema_of_types: Any) -> None:
    ids = {name: fid for fid, name in field_names_from_lance_schema(schema_of_types).items()}

    def allowed(column: str, literals: list[Any], transform: str = "identity") -> dict[str, set[Any]]:
        spec = _spec(_field(transform, [ids[column]], {"num_buckets": "4"}))
        return allowed_shard_values(spec, schema_of_types, {column: literals})

    assert allowed("i8", [300]) == {}  # out of range (Lance rejects the filter)
    assert allowed("i64", ["1"]) == {} and allowed("s", [1]) == {} and allowed("b", [1]) == {}
    assert allowed("f64", [1]) == {}  # floats: -0.0 = 0.0 and NaN are Lance's business
    assert allowed("d", ["2020-01-01"]) == {}
    assert allowed("u64", [2**64 - 1]) == {"f": {2**64 - 1}}
    assert allowed("i64", [1, 2], "bucket") == allowed("i64", [2, 1, 2], "bucket")
    assert allowed("i64", []) == {"f": set()}  # contradictory literals: no shard can match
    assert allowed("i64", [1], "year") == {}  # pylance 14 does not evaluate it: no pruning
    assert allowed_shard_values(_spec(_field("unsharded", [])), schema_of_types, {"i64": [1]}) == {}
    assert allowed_shard_values(_spec(_field("identity", [99])), schema_of_types, {"i64": [1]}) == {}
    two = _spec(_field("identity", [ids["i64"]], {"column": "s"}))  # `column` overrides source ids
    assert allowed_shard_values(two, schema_of_types, {"i64": [1]}) == {}
    assert allowed_shard_values(two, schema_of_types, {"s": ["x"]}) == {"f": {"x"}}


def test_shard_matches_keeps_unknown_values() -> None:
    allowed = {"bucket": {1}}
    assert shard_matches({}, allowed)
    assert shard_matches({"bucket": None}, allowed)
    assert shard_matches({"bucket": b"\x02\x00\x00\x00"}, allowed)  # undecoded bytes
    assert shard_matches({"other": 3}, allowed)
    assert shard_matches({"bucket": 1}, allowed)
    assert not shard_matches({"bucket": 2}, allowed)
    assert not shard_matches({"bucket": 1}, {"bucket": set()})
    assert shard_matches({"bucket": 2}, {"bucket": None})


def test_routed_values_are_lances_over_every_batch(schema_of_types: Any) -> None:
    spec = _spec(_field("bucket", [1], {"num_buckets": "8"}))
    batches = [pa.record_batch({"i64": pa.array(range(i, i + 10), pa.int64())}) for i in (0, 10, 20)]
    expected = set()
    for b in batches:
        expected |= set(lance.mem_wal.evaluate_sharding_spec(b, spec, schema_of_types).column(0).to_pylist())
    assert routed_values(iter(batches), spec, schema_of_types) == {"f": expected}
    assert routed_values([], spec, schema_of_types) == {"f": set()}
    nulls = _spec(_field("identity", [1]))
    assert routed_values([pa.record_batch({"i64": pa.array([1, None], pa.int64())})], nulls, schema_of_types) is None
    year = _spec(_field("year", [5]))
    assert (
        routed_values([pa.record_batch({"d": pa.array([1], pa.int32()).view(pa.date32())})], year, schema_of_types)
        is None
    )


# ---------------------------------------------------------------------------
# Spec / schema plumbing and the shard field value codec
# ---------------------------------------------------------------------------


def test_spec_to_dict_accepts_protobuf_and_lance_dataclasses() -> None:
    from memwal.pb import mem_wal_index_pb2 as pb

    message = pb.ShardingSpec(
        spec_id=3,
        fields=[
            pb.ShardingField(
                field_id="bucket",
                source_ids=[0],
                transform="bucket",
                result_type="int32",
                parameters={"num_buckets": "4"},
            )
        ],
    )
    expected = {"spec_id": 3, "fields": [_field("bucket", [0], {"num_buckets": "4"}, fid="bucket")]}
    assert spec_to_dict(message) == expected
    dataclass_spec = lance.mem_wal.ShardingSpec(
        spec_id=3, fields=[lance.mem_wal.ShardingField("bucket", [0], "bucket", None, "int32", {"num_buckets": "4"})]
    )
    assert spec_to_dict(dataclass_spec) == expected
    with pytest.raises(BadInputError):
        spec_to_dict(42)


def test_field_names_include_nested_paths(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("st", pa.struct([pa.field("a", pa.int32())])),
            pa.field("name", pa.string()),
        ]
    )
    ds = lance.write_dataset(pa.Table.from_batches([], schema=schema), str(tmp_path / "t"))
    assert field_names_from_lance_schema(ds) == {0: "id", 1: "st", 2: "st.a", 3: "name"}
    assert field_names_from_lance_schema(ds.lance_schema) == field_names_from_lance_schema(schema)


def test_writer_manifests_carry_no_field_entries(tmp_path: Path) -> None:
    """pylance 14.0.2 records shard_spec_id but no shard_field_entries for its shards.

    If a later version writes entries, check they decode to Lance's routed shard value.
    """
    from memwal.pb import shard_manifest_pb2 as smpb

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK_META), pa.field("name", pa.string())])
    path = str(tmp_path / "t")
    ds = lance.write_dataset(pa.table({"id": [1], "name": ["a"]}, schema=schema), path)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=4)
    ds = lance.dataset(path)
    spec = ds.mem_wal_index_details()["sharding_specs"][0]
    batch = pa.record_batch({"id": pa.array(range(100, 140), pa.int64()), "name": pa.array(["x"] * 40)}, schema=schema)
    buckets = lance.mem_wal.evaluate_sharding_spec(batch, spec, ds.lance_schema).column(0)
    target = buckets[0].as_py()
    writer = ds.mem_wal_writer(str(uuid.uuid4()))
    writer.put(batch.filter(pc.equal(buckets, target)))
    writer.close()
    manifests = sorted(Path(path, "_mem_wal").glob("*/manifest/*.binpb"))
    assert manifests
    for file in manifests:
        manifest = smpb.ShardManifest.FromString(file.read_bytes())
        assert manifest.shard_spec_id == spec["spec_id"]
        for entry in manifest.shard_field_entries:
            assert shard_field_value_from_bytes("int32", entry.value) == target
        assert len(manifest.shard_field_entries) == 0


def test_shard_field_value_bytes() -> None:
    assert shard_field_value_from_bytes("int32", b"\x03\x00\x00\x00") == 3
    assert shard_field_value_from_bytes("int32", b"\xff\xff\xff\xff") == -1
    assert shard_field_value_from_bytes("int64", struct.pack("<q", -(2**63))) == -(2**63)
    assert shard_field_value_from_bytes("utf8", "日本".encode()) == "日本"
    assert shard_field_value_from_bytes("large_utf8", b"") == ""
    assert shard_field_value_from_bytes("boolean", b"\x01") is True
    assert shard_field_value_from_bytes("int32", b"") is None
    assert shard_field_value_from_bytes("date32:day", struct.pack("<i", 1)) == dt.date(1970, 1, 2)
    roundtrip: list[tuple[str, Any]] = [
        ("int8", -128),
        ("uint64", 2**64 - 1),
        ("double", -0.5),
        ("float", 1.5),
        ("binary", b"\x00"),
        ("uint16", 65535),
        ("bool", False),
        ("date64:ms", dt.date(2020, 2, 29)),
    ]
    for rt, value in roundtrip:
        assert shard_field_value_from_bytes(rt, shard_field_value_to_bytes(rt, value)) == value
    bad: list[Callable[[], Any]] = [
        lambda: shard_field_value_from_bytes("int32", b"\x01\x00"),
        lambda: shard_field_value_from_bytes("struct<a>", b"\x01"),
        lambda: shard_field_value_from_bytes("boolean", b"\x02"),
        lambda: shard_field_value_from_bytes("utf8", b"\xff"),
        lambda: shard_field_value_to_bytes("int8", 1000),
    ]
    for call in bad:
        with pytest.raises(BadInputError):
            call()
