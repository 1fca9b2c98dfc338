"""memwal.sharding against Lance's own evaluator (the oracle) and against the spec text.

The oracle is ``lance.mem_wal.evaluate_sharding_spec(batch, spec, ds.lance_schema)``;
it accepts any hand-written spec, so one table with a column of every interesting type
serves every transform. Transforms pylance 14.0.2 rejects are checked against small
independent reference implementations written from the MemWAL spec.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import lance
import mmh3
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwal.errors import BadInputError
from memwal.sharding import (
    SPEC_ONLY_TRANSFORMS,
    evaluate_sharding_spec,
    field_names_from_lance_schema,
    lance_murmur3_bytes,
    parse_simple_filter,
    prune_shards,
    shard_field_value_from_bytes,
    shard_field_value_to_bytes,
    shard_matches,
    spec_to_dict,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PK_META = {"lance-schema:unenforced-primary-key": "true"}
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

# Column name -> Arrow type of the oracle table (every type Lance's bucket hashes, plus
# a few it rejects).
ORACLE_TYPES: dict[str, pa.DataType] = {
    "id": pa.int64(),
    "i8": pa.int8(),
    "i16": pa.int16(),
    "i32": pa.int32(),
    "u8": pa.uint8(),
    "u16": pa.uint16(),
    "u32": pa.uint32(),
    "u64": pa.uint64(),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "b": pa.bool_(),
    "s": pa.string(),
    "ls": pa.large_string(),
    "d32": pa.date32(),
    "ts_s": pa.timestamp("s"),
    "ts_ms": pa.timestamp("ms"),
    "ts_us": pa.timestamp("us"),
    "ts_ns": pa.timestamp("ns"),
    "ts_tz": pa.timestamp("us", tz="America/New_York"),
    "t32": pa.time32("ms"),
    "t64": pa.time64("ns"),
    "bin": pa.binary(),
    "d64": pa.date64(),
    "dec": pa.decimal128(10, 2),
}
HASHABLE = [n for n in ORACLE_TYPES if n not in ("bin", "d64", "dec")]
REJECTED = ["bin", "d64", "dec"]


def _pk_schema(types: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema(
        [pa.field(n, t, nullable=False, metadata=PK_META) if n == "id" else pa.field(n, t) for n, t in types.items()]
    )


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One table with every type; its LanceSchema resolves source ids for the oracle."""
    schema = _pk_schema(ORACLE_TYPES)
    table = pa.Table.from_batches([], schema=schema)
    path = tmp_path_factory.mktemp("oracle") / "t"
    ds = lance.write_dataset(table, str(path))
    names = field_names_from_lance_schema(ds)
    ids = {name: fid for fid, name in names.items()}
    return {"ds": ds, "lance_schema": ds.lance_schema, "names": names, "ids": ids, "schema": ds.schema}


@pytest.fixture(scope="module")
def init_specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Specs as ``initialize_mem_wal`` writes them, for each mode it offers."""
    schema = _pk_schema({"id": pa.int64(), "name": pa.string()})
    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=schema)
    out: dict[str, Any] = {}
    for mode, kwargs in {
        "bucket": {"bucket_column": "id", "num_buckets": 4},
        "identity": {"identity_column": "name"},
        "unsharded": {"unsharded": True},
    }.items():
        path = tmp_path_factory.mktemp(mode) / "t"
        ds = lance.write_dataset(table, str(path))
        ds.initialize_mem_wal(**kwargs)
        ds = lance.dataset(str(path))
        out[mode] = (ds, ds.mem_wal_index_details()["sharding_specs"][0])
    return out


def _field(
    transform: str | None,
    source_ids: list[int],
    params: dict[str, str] | None = None,
    field_id: str = "f",
    expression: str | None = None,
) -> dict[str, Any]:
    return {
        "field_id": field_id,
        "source_ids": source_ids,
        "transform": transform,
        "expression": expression,
        "result_type": "int32",
        "parameters": params or {},
    }


def _spec(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"spec_id": 1, "fields": list(fields)}


def _comparable(col: pa.Array) -> pa.Array:
    """Floats compared by bit pattern, so NaN equals NaN and -0.0 differs from 0.0."""
    if pa.types.is_float32(col.type):
        return col.view(pa.int32())
    if pa.types.is_float64(col.type):
        return col.view(pa.int64())
    return col


def assert_same_batch(ours: pa.RecordBatch, theirs: pa.RecordBatch) -> None:
    assert ours.schema == theirs.schema, (ours.schema, theirs.schema)
    assert ours.num_rows == theirs.num_rows
    for a, b in zip(ours.columns, theirs.columns, strict=True):
        assert _comparable(a).equals(_comparable(b)), (a, b)


def both(oracle: dict[str, Any], batch: pa.RecordBatch, spec: dict[str, Any]) -> tuple[Any, Any]:
    """(oracle result or 'error', our result or 'error')."""
    try:
        theirs: Any = lance.mem_wal.evaluate_sharding_spec(batch, spec, oracle["lance_schema"])
    except ValueError:
        theirs = "error"
    try:
        ours: Any = evaluate_sharding_spec(batch, spec, oracle["names"])
    except BadInputError:
        ours = "error"
    return theirs, ours


# ---------------------------------------------------------------------------
# Value strategies
# ---------------------------------------------------------------------------


def _int_range(t: pa.DataType) -> tuple[int, int]:
    if pa.types.is_time32(t):
        return 0, 86_400_000 - 1
    if pa.types.is_time64(t):
        return 0, 86_400 * 10**9 - 1
    bits = 32 if pa.types.is_date32(t) else t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = sorted({v for v in (lo, hi, 0, 1, -1, lo + 1, hi - 1) if lo <= v <= hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


def array_strategy(t: pa.DataType, min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[pa.Array]:
    """Arrow arrays of type t with extremes, nulls, unicode and empty strings."""
    if pa.types.is_boolean(t):
        elems: st.SearchStrategy[Any] = st.booleans()
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        elems = st.one_of(st.just(""), st.text(max_size=12), st.text(alphabet="aé日\U0001f600\x80\xff", max_size=9))
    elif pa.types.is_binary(t):
        elems = st.binary(max_size=8)
    elif pa.types.is_floating(t):
        width = t.bit_width
        elems = st.one_of(st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf]), st.floats(width=width))
    elif pa.types.is_decimal(t):
        elems = st.integers(-999, 999).map(lambda v: Decimal(v) / 100)
    elif pa.types.is_date64(t):
        elems = st.integers(-(10**6), 10**6).map(lambda d: d * 86_400_000)
    else:
        elems = _ints(*_int_range(t))
    values = st.lists(st.one_of(st.none(), elems), min_size=min_size, max_size=max_size)

    def build(vs: list[Any]) -> pa.Array:
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            return pa.array(vs, type=t)
        if pa.types.is_date32(t) or pa.types.is_time32(t):
            return pa.array(vs, pa.int32()).view(t)
        if pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t):
            return pa.array(vs, pa.int64()).view(t)
        return pa.array(vs, type=t)

    return values.map(build)


# ---------------------------------------------------------------------------
# Oracle equality: bucket, identity, unsharded
# ---------------------------------------------------------------------------

NUM_BUCKETS = st.one_of(st.sampled_from([1, 2, 3, 4, 7, 10, 16, 1000, I32_MAX]), st.integers(1, I32_MAX))


@SETTINGS
@given(data=st.data(), column=st.sampled_from(HASHABLE), num_buckets=NUM_BUCKETS)
def test_bucket_matches_oracle(oracle: dict[str, Any], data: st.DataObject, column: str, num_buckets: int) -> None:
    arr = data.draw(array_strategy(ORACLE_TYPES[column]))
    batch = pa.record_batch({column: arr})
    spec = _spec(_field("bucket", [oracle["ids"][column]], {"num_buckets": str(num_buckets)}))
    theirs, ours = both(oracle, batch, spec)
    assert not isinstance(theirs, str), "oracle rejected a supported type"
    assert_same_batch(ours, theirs)


@SETTINGS
@given(data=st.data(), column=st.sampled_from(list(ORACLE_TYPES)))
def test_identity_matches_oracle(oracle: dict[str, Any], data: st.DataObject, column: str) -> None:
    arr = data.draw(array_strategy(ORACLE_TYPES[column]))
    batch = pa.record_batch({column: arr, "other": pa.array(range(len(arr)), pa.int64())})
    theirs, ours = both(oracle, batch, _spec(_field("identity", [oracle["ids"][column]])))
    assert_same_batch(ours, theirs)


@SETTINGS
@given(n=st.integers(0, 50))
def test_unsharded_matches_oracle(oracle: dict[str, Any], n: int) -> None:
    batch = pa.record_batch({"id": pa.array(range(n), pa.int64())})
    theirs, ours = both(oracle, batch, _spec(_field("unsharded", [])))
    assert_same_batch(ours, theirs)


@SETTINGS
@given(data=st.data(), column=st.sampled_from(REJECTED), all_null=st.booleans())
def test_rejected_types_match_oracle(oracle: dict[str, Any], data: st.DataObject, column: str, all_null: bool) -> None:
    """Lance rejects these types only when it meets a non-null value; all-null -> bucket 0."""
    arr = data.draw(array_strategy(ORACLE_TYPES[column], min_size=1))
    if all_null:
        arr = pa.nulls(len(arr), ORACLE_TYPES[column])
    batch = pa.record_batch({column: arr})
    theirs, ours = both(oracle, batch, _spec(_field("bucket", [oracle["ids"][column]], {"num_buckets": "4"})))
    if isinstance(theirs, str) or isinstance(ours, str):
        assert theirs == ours == "error"
    else:
        assert_same_batch(ours, theirs)


@SETTINGS
@given(data=st.data(), columns=st.lists(st.sampled_from(HASHABLE), min_size=1, max_size=4, unique=True))
def test_multi_field_spec_and_table_input_match_oracle(
    oracle: dict[str, Any], data: st.DataObject, columns: list[str]
) -> None:
    n = data.draw(st.integers(0, 20))
    arrays = {c: data.draw(array_strategy(ORACLE_TYPES[c], min_size=n, max_size=n)) for c in columns}
    batch = pa.record_batch(arrays)
    fields = []
    for i, c in enumerate(columns):
        transform = data.draw(st.sampled_from(["bucket", "identity", "unsharded"]))
        fields.append(_field(transform, [oracle["ids"][c]], {"num_buckets": str(data.draw(NUM_BUCKETS))}, f"f{i}"))
    spec = _spec(*fields)
    theirs, ours = both(oracle, batch, spec)
    assert_same_batch(ours, theirs)
    # A multi-chunk Table gives the same answer as the batch.
    table = pa.Table.from_batches([batch.slice(0, n // 2), batch.slice(n // 2)])
    assert_same_batch(evaluate_sharding_spec(table, spec, oracle["names"]), theirs)


def test_spec_errors_match_oracle(oracle: dict[str, Any]) -> None:
    ids = oracle["ids"]
    batch = pa.record_batch({"id": pa.array([1, 5, 9], pa.int64())})
    bad_specs = [
        _spec(),
        _spec(_field("bucket", [ids["id"]])),
        _spec(_field("bucket", [ids["id"]], {"num_buckets": "0"})),
        _spec(_field("bucket", [ids["id"]], {"num_buckets": " 4"})),
        _spec(_field("bucket", [ids["id"]], {"num_buckets": "2147483648"})),
        _spec(_field("bucket", [])),
        _spec(_field("bucket", [999], {"num_buckets": "4"})),
        _spec(_field("bucket", [ids["s"]], {"num_buckets": "4"})),  # column not in batch
        _spec(_field(None, [ids["id"]], expression="col0 % 4")),
        _spec(_field("nonsense", [ids["id"]])),
    ]
    for spec in bad_specs:
        assert both(oracle, batch, spec) == ("error", "error"), spec
    with pytest.raises(BadInputError, match="custom shard expressions are not supported"):
        evaluate_sharding_spec(batch, _spec(_field(None, [ids["id"]], expression="col0 % 4")), oracle["names"])
    good_specs = [
        _spec(_field("bucket", [ids["id"]], {"num_buckets": "+4"})),
        _spec(_field("bucket", [], {"num_buckets": "8", "column": "id"})),  # `column` overrides
        _spec(_field("bucket", [ids["s"], ids["id"]], {"num_buckets": "8", "column": "id"})),
        _spec(_field("bucket", [ids["id"], ids["s"]], {"num_buckets": "8"})),  # first source only
        _spec(_field("unsharded", [12345])),
    ]
    for spec in good_specs:
        theirs, ours = both(oracle, batch, spec)
        assert_same_batch(ours, theirs)


@pytest.mark.parametrize("mode", ["bucket", "identity", "unsharded"])
def test_specs_written_by_initialize_mem_wal(init_specs: dict[str, Any], mode: str) -> None:
    ds, spec = init_specs[mode]
    batch = pa.record_batch(
        {"id": pa.array([1, 2, -3, I32_MIN, 2**63 - 1], pa.int64()), "name": pa.array(["a", "", None, "日本", "abcde"])}
    )
    theirs = lance.mem_wal.evaluate_sharding_spec(batch, spec, ds.lance_schema)
    assert_same_batch(evaluate_sharding_spec(batch, spec, field_names_from_lance_schema(ds)), theirs)
    if mode == "unsharded":
        assert spec["fields"][0]["source_ids"] == [] and spec["fields"][0]["field_id"] == "bucket"
        assert theirs.column(0).to_pylist() == [0] * 5


# ---------------------------------------------------------------------------
# Hash details
# ---------------------------------------------------------------------------


def _preimage_int32(target: int) -> int:
    """The int32 whose Lance/murmur3 4-byte hash is ``target`` (the hash is a bijection)."""
    m = 2**32
    h = target % m
    h ^= h >> 16
    h = (h * pow(0xC2B2AE35, -1, m)) % m
    h ^= (h >> 13) ^ (h >> 26)
    h = (h * pow(0x85EBCA6B, -1, m)) % m
    h ^= h >> 16
    h ^= 4  # length
    k = ((h - 0xE6546B64) * pow(5, -1, m)) % m
    k = ((k >> 13) | (k << 19)) % m  # rotr 13; h0 = 0 so this is k1
    k = (k * pow(0x1B873593, -1, m)) % m
    k = ((k >> 15) | (k << 17)) % m  # rotr 15
    v = (k * pow(0xCC9E2D51, -1, m)) % m
    return v - m if v >= 2**31 else v


def test_int32_min_hash_goes_to_bucket_zero(oracle: dict[str, Any]) -> None:
    """Lance uses ``hash & i32::MAX``: abs() would give 8 (unsigned) or -8 (wrapping) here."""
    v = _preimage_int32(I32_MIN)
    assert mmh3.hash(struct.pack("<i", v), 0, signed=True) == I32_MIN
    batch = pa.record_batch({"i32": pa.array([v, None], pa.int32())})
    spec = _spec(_field("bucket", [oracle["ids"]["i32"]], {"num_buckets": "10"}))
    theirs, ours = both(oracle, batch, spec)
    assert theirs.column(0).to_pylist() == [0, 0]  # NULL hashes to 0 too: bucket 0, not NULL
    assert_same_batch(ours, theirs)


@SETTINGS
@given(v=st.integers(-(2**63), 2**63 - 1))
def test_int64_bucket_is_mmh3_of_le_bytes(oracle: dict[str, Any], v: int) -> None:
    batch = pa.record_batch({"id": pa.array([v], pa.int64())})
    ours = evaluate_sharding_spec(
        batch, _spec(_field("bucket", [oracle["ids"]["id"]], {"num_buckets": "1000"})), oracle["names"]
    )
    assert ours.column(0)[0].as_py() == (mmh3.hash(struct.pack("<q", v), 0, signed=True) & I32_MAX) % 1000


@SETTINGS
@given(s=st.binary(max_size=64))
def test_string_hash_is_mmh3_only_for_whole_blocks(s: bytes) -> None:
    if len(s) % 4 == 0:
        assert lance_murmur3_bytes(s) == mmh3.hash(s, 0, signed=True)


def test_string_tail_differs_from_reference_murmur3() -> None:
    assert lance_murmur3_bytes(b"a") != mmh3.hash(b"a", 0, signed=True)


# ---------------------------------------------------------------------------
# Transforms pylance 14.0.2 rejects: reference implementations from the spec
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("transform", sorted(SPEC_ONLY_TRANSFORMS))
def test_lance_rejects_spec_only_transforms(oracle: dict[str, Any], transform: str) -> None:
    """If a new pylance accepts one of these, prove our evaluation against it."""
    batch = pa.record_batch({"ts_us": pa.array([0], pa.timestamp("us")), "i32": pa.array([1], pa.int32())})
    src = [oracle["ids"]["i32"]] if transform in ("truncate", "multi_bucket") else [oracle["ids"]["ts_us"]]
    spec = _spec(_field(transform, src, {"num_buckets": "4", "width": "2"}))
    with pytest.raises(ValueError, match="Unsupported MemWAL sharding transform"):
        lance.mem_wal.evaluate_sharding_spec(batch, spec, oracle["lance_schema"])


TEMPORAL = ["ts_s", "ts_ms", "ts_us", "ts_ns", "ts_tz", "d32", "d64"]


def _as_datetimes(arr: pa.Array) -> list[Any]:
    t = arr.type
    if pa.types.is_date(t):
        return arr.to_pylist()
    unit = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit]
    tz = dt.UTC
    out = []
    for raw in arr.view(pa.int64()).to_pylist():
        if raw is None:
            out.append(None)
            continue
        when = dt.datetime(1970, 1, 1, tzinfo=tz) + dt.timedelta(seconds=raw // unit)
        if t.tz:
            from zoneinfo import ZoneInfo

            when = when.astimezone(ZoneInfo(t.tz))
        out.append(when)
    return out


@SETTINGS
@given(data=st.data(), column=st.sampled_from(TEMPORAL), part=st.sampled_from(["year", "month", "day", "hour"]))
def test_date_parts_follow_spec(oracle: dict[str, Any], data: st.DataObject, column: str, part: str) -> None:
    t = ORACLE_TYPES[column]
    days = st.integers(-200_000, 200_000)  # years ~1422..2517
    if pa.types.is_date32(t):
        raw = data.draw(st.lists(st.one_of(st.none(), days), max_size=20))
        arr = pa.array(raw, pa.int32()).view(t)
    elif pa.types.is_date64(t):
        raw = data.draw(st.lists(st.one_of(st.none(), days.map(lambda d: d * 86_400_000)), max_size=20))
        arr = pa.array(raw, pa.int64()).view(t)
    else:
        per_sec = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[t.unit]
        secs = (
            st.integers(-200_000 * 86_400, 200_000 * 86_400)
            if t.unit != "ns"
            else st.integers(-(2**62) // 10**9, 2**62 // 10**9)
        )
        if t.tz:
            # Arrow's time zone database stops applying DST rules after 2037 (zoneinfo does
            # not), so zoned timestamps are compared before that year only.
            secs = st.integers(-200_000 * 86_400, 2_114_380_800 - 1)
        raw = data.draw(st.lists(st.one_of(st.none(), secs.map(lambda s: s * per_sec)), max_size=20))
        arr = pa.array(raw, pa.int64()).view(t)
    batch = pa.record_batch({column: arr})
    out = evaluate_sharding_spec(batch, _spec(_field(part, [oracle["ids"][column]])), oracle["names"])
    assert out.schema.field(0).type == pa.int32()
    expected = [
        None
        if d is None
        else (0 if part == "hour" and isinstance(d, dt.date) and not isinstance(d, dt.datetime) else getattr(d, part))
        for d in _as_datetimes(arr)
    ]
    assert out.column(0).to_pylist() == expected


def _trunc_int(v: int, w: int) -> int:
    rem = abs(v) % w
    return v - (rem if v >= 0 else -rem)  # Rust's % keeps the dividend's sign


@SETTINGS
@given(
    data=st.data(),
    column=st.sampled_from(["i8", "i16", "i32", "id", "u8", "u32", "u64", "f64", "s", "ls"]),
    width=st.one_of(st.sampled_from([1, 2, 3, 5, 10, 100, 1000, I32_MAX]), st.integers(1, I32_MAX)),
)
def test_truncate_follows_spec(oracle: dict[str, Any], data: st.DataObject, column: str, width: int) -> None:
    t = ORACLE_TYPES[column]
    arr = data.draw(array_strategy(t))
    batch = pa.record_batch({column: arr})
    out = evaluate_sharding_spec(
        batch, _spec(_field("truncate", [oracle["ids"][column]], {"width": str(width)})), oracle["names"]
    )
    col = out.column(0)
    assert col.type == t
    for v, got in zip(arr.to_pylist(), col.to_pylist(), strict=True):
        if v is None:
            assert got is None
        elif isinstance(v, str):
            assert got == v[:width]
        elif isinstance(v, float):
            want = v - math.fmod(v, width) if math.isfinite(v) else math.nan
            assert (math.isnan(got) and math.isnan(want)) or got == want
        else:
            assert got == _trunc_int(v, width)
    negatives = pa.record_batch({"i32": pa.array([-7, -5, -1, 0, 7], pa.int32())})
    spec = _spec(_field("truncate", [oracle["ids"]["i32"]], {"width": "5"}))
    assert evaluate_sharding_spec(negatives, spec, oracle["names"]).column(0).to_pylist() == [-5, -5, 0, 0, 5]


def _multi_ref_bytes(t: pa.DataType, v: Any) -> bytes:
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bool):
        return b"true" if v else b"false"
    if isinstance(v, float):
        return struct.pack("<f" if t.bit_width == 32 else "<d", v)
    fmt = {8: "b", 16: "h", 32: "i", 64: "q"}[t.bit_width]
    return struct.pack("<" + (fmt.upper() if pa.types.is_unsigned_integer(t) else fmt), v)


@SETTINGS
@given(
    data=st.data(),
    columns=st.lists(st.sampled_from(["i8", "i32", "id", "u16", "f64", "b", "s"]), min_size=1, max_size=3, unique=True),
    num_buckets=NUM_BUCKETS,
)
def test_multi_bucket_follows_spec(
    oracle: dict[str, Any], data: st.DataObject, columns: list[str], num_buckets: int
) -> None:
    n = data.draw(st.integers(0, 15))
    arrays = {c: data.draw(array_strategy(ORACLE_TYPES[c], min_size=n, max_size=n)) for c in columns}
    batch = pa.record_batch(arrays)
    spec = _spec(_field("multi_bucket", [oracle["ids"][c] for c in columns], {"num_buckets": str(num_buckets)}))
    expected: list[Any] = []
    for row in range(n):
        parts = [_multi_ref_bytes(ORACLE_TYPES[c], arrays[c][row].as_py()) for c in columns if arrays[c][row].is_valid]
        if not parts:
            expected.append(None)
            continue
        h = mmh3.hash(b"".join(parts), 0, signed=True)
        expected.append("overflow" if h == I32_MIN else abs(h) % num_buckets)
    if "overflow" in expected:
        with pytest.raises(BadInputError):
            evaluate_sharding_spec(batch, spec, oracle["names"])
        return
    assert evaluate_sharding_spec(batch, spec, oracle["names"]).column(0).to_pylist() == expected


# ---------------------------------------------------------------------------
# Spec / schema plumbing
# ---------------------------------------------------------------------------


def test_spec_to_dict_accepts_protobuf(oracle: dict[str, Any]) -> None:
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
    assert spec_to_dict(message) == {
        "spec_id": 3,
        "fields": [
            {
                "field_id": "bucket",
                "source_ids": [0],
                "transform": "bucket",
                "expression": None,
                "result_type": "int32",
                "parameters": {"num_buckets": "4"},
            }
        ],
    }
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    theirs = lance.mem_wal.evaluate_sharding_spec(batch, spec_to_dict(message), oracle["lance_schema"])
    assert_same_batch(evaluate_sharding_spec(batch, message, oracle["names"]), theirs)
    dataclass_spec = lance.mem_wal.ShardingSpec(
        spec_id=3, fields=[lance.mem_wal.ShardingField("bucket", [0], "bucket", None, "int32", {"num_buckets": "4"})]
    )
    assert spec_to_dict(dataclass_spec) == spec_to_dict(message)


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


# ---------------------------------------------------------------------------
# Pruning
# ---------------------------------------------------------------------------


def test_parse_simple_filter() -> None:
    assert parse_simple_filter("id = 5") == {"id": [5]}
    assert parse_simple_filter("5 = id") == {"id": [5]}
    assert parse_simple_filter("id IN (1, 2, 3)") == {"id": [1, 2, 3]}
    assert parse_simple_filter("id in (1,2) and name = 'O''Brien'") == {"id": [1, 2], "name": ["O'Brien"]}
    assert parse_simple_filter("(id = -1) AND (x = 1.5e3) AND flag = TRUE") == {
        "id": [-1],
        "x": [1500.0],
        "flag": [True],
    }
    assert parse_simple_filter("id = 1 AND (a = 2 OR b = 3)") == {"id": [1]}
    assert parse_simple_filter("id = 1 OR id = 2") == {}
    assert parse_simple_filter("(id = 1 AND x = 2) OR y = 3") == {}
    assert parse_simple_filter("name = 'x OR y' AND id = 2") == {"name": ["x OR y"], "id": [2]}
    assert parse_simple_filter("id >= 1 AND id != 3 AND id <> 4 AND b = 2") == {"b": [2]}
    assert parse_simple_filter("NOT id = 1") == {}
    assert parse_simple_filter("id NOT IN (1, 2)") == {}
    assert parse_simple_filter("id = NULL AND id IS NULL") == {}
    assert parse_simple_filter("lower(name) = 'x' AND id - 1 = 2 AND id = 1-1") == {}
    assert parse_simple_filter("id IN (1, 2,) AND id IN ()") == {}
    assert parse_simple_filter("id = 1 AND id IN (1, 2)") == {"id": [1]}
    assert parse_simple_filter("id = 1 AND id = 2") == {"id": []}
    assert parse_simple_filter("id = 1 AND id = '1'") == {}
    assert parse_simple_filter('"my col" = 3 AND `other` = 4') == {"my col": [3], "other": [4]}
    assert parse_simple_filter("((id = 7))") == {"id": [7]}
    assert parse_simple_filter("") == {}
    assert parse_simple_filter("x BETWEEN 1 AND y = 3 AND id = 2") == {"id": [2]}
    assert parse_simple_filter("CASE WHEN a = 1 THEN true END AND id = 2") == {}
    assert parse_simple_filter("name = 'unterminated OR x") == {}


def _bucket_spec(oracle: dict[str, Any], column: str, n: int = 4) -> dict[str, Any]:
    return _spec(_field("bucket", [oracle["ids"][column]], {"num_buckets": str(n)}, field_id="bucket"))


def _oracle_values(oracle: dict[str, Any], column: str, values: list[Any], spec: dict[str, Any]) -> list[Any]:
    batch = pa.record_batch({column: pa.array(values, ORACLE_TYPES[column])})
    return lance.mem_wal.evaluate_sharding_spec(batch, spec, oracle["lance_schema"]).column(0).to_pylist()


def test_prune_equality_and_in(oracle: dict[str, Any]) -> None:
    spec = _bucket_spec(oracle, "id", 10)
    allowed = prune_shards(spec, oracle["names"], parse_simple_filter("id = 123"), oracle["schema"])
    assert allowed == {"bucket": set(_oracle_values(oracle, "id", [123], spec))}
    allowed = prune_shards(spec, oracle["names"], parse_simple_filter("id IN (1, 2, 3, 4)"), oracle["schema"])
    assert allowed == {"bucket": set(_oracle_values(oracle, "id", [1, 2, 3, 4], spec))}
    shards = {f"shard{b}": {"bucket": b} for b in range(10)}
    kept = {name for name, values in shards.items() if shard_matches(values, allowed)}
    assert kept == {f"shard{b}" for b in allowed["bucket"]}
    # The hash depends on the column's width: an int32 column prunes differently.
    spec32 = _bucket_spec(oracle, "i32", 10)
    allowed32 = prune_shards(spec32, oracle["names"], {"i32": [1, 2, 3, 4]}, oracle["schema"])
    assert allowed32 == {"bucket": set(_oracle_values(oracle, "i32", [1, 2, 3, 4], spec32))}
    # Identity on strings, and unsharded.
    ident = _spec(_field("identity", [oracle["ids"]["s"]], field_id="region"), _field("unsharded", [], field_id="u"))
    assert prune_shards(
        ident, oracle["names"], parse_simple_filter("s IN ('a', 'é') AND id = 1"), oracle["schema"]
    ) == {"region": {"a", "é"}, "u": {0}}
    assert prune_shards(ident, oracle["names"], {"s": []}, oracle["schema"]) == {"region": set(), "u": {0}}


def test_prune_is_conservative_when_unsure(oracle: dict[str, Any]) -> None:
    spec = _bucket_spec(oracle, "id")
    names, schema = oracle["names"], oracle["schema"]
    assert prune_shards(spec, names, parse_simple_filter("id = 1 OR id = 2"), schema) == {}
    assert prune_shards(spec, names, parse_simple_filter("name = 'x' AND other = 3"), schema) == {}
    assert prune_shards(spec, names, {"id": [1]}) == {}  # no schema: the hash width is unknown
    assert prune_shards(spec, names, {"id": ["1"]}, schema) == {}  # SQL coercion not guessed
    assert prune_shards(spec, names, {"id": [1.5]}, schema) == {}
    assert prune_shards(spec, names, {"id": [1.0]}, schema) == prune_shards(spec, names, {"id": [1]}, schema)
    assert prune_shards(_bucket_spec(oracle, "i8"), names, {"i8": [300]}, schema) == {}
    for transform in sorted(SPEC_ONLY_TRANSFORMS):
        unproven = _spec(_field(transform, [oracle["ids"]["i32"]], {"num_buckets": "4", "width": "10"}))
        assert prune_shards(unproven, names, {"i32": [1]}, schema) == {}
    trunc = _spec(_field("truncate", [oracle["ids"]["i32"]], {"width": "10"}, field_id="t"))
    assert prune_shards(trunc, names, {"i32": [-17, 17]}, schema, trust_spec_only_transforms=True) == {"t": {-10, 10}}
    multi = _spec(
        _field("multi_bucket", [oracle["ids"]["i32"], oracle["ids"]["s"]], {"num_buckets": "4"}, field_id="m")
    )
    assert prune_shards(multi, names, {"i32": [1]}, schema, trust_spec_only_transforms=True) == {}  # s unconstrained
    assert (
        len(prune_shards(multi, names, {"i32": [1, 2], "s": ["a"]}, schema, trust_spec_only_transforms=True)["m"]) <= 2
    )
    # Unknown or undecodable shard values keep the shard.
    allowed = {"bucket": {1}}
    assert shard_matches({}, allowed)
    assert shard_matches({"bucket": None}, allowed)
    assert shard_matches({"bucket": b"\x02\x00\x00\x00"}, allowed)
    assert shard_matches({"other": 3}, allowed)
    assert shard_matches({"bucket": 1}, allowed)
    assert not shard_matches({"bucket": 2}, allowed)
    assert shard_matches({"bucket": 2}, {"bucket": None})


@SETTINGS
@given(
    data=st.data(),
    column=st.sampled_from(["id", "i32", "i16", "u64", "s", "b"]),
    num_buckets=NUM_BUCKETS,
    transform=st.sampled_from(["bucket", "identity"]),
)
def test_pruning_never_drops_a_matching_row(
    oracle: dict[str, Any], data: st.DataObject, column: str, num_buckets: int, transform: str
) -> None:
    t = ORACLE_TYPES[column]
    rows = data.draw(array_strategy(t, min_size=1, max_size=30)).to_pylist()
    literals = data.draw(
        st.lists(st.one_of(st.sampled_from(rows), array_strategy(t, 1, 1).map(lambda a: a[0].as_py())), max_size=5).map(
            lambda vs: [v for v in vs if v is not None]
        )
    )
    spec = _spec(_field(transform, [oracle["ids"][column]], {"num_buckets": str(num_buckets)}, field_id="k"))
    allowed = prune_shards(spec, oracle["names"], {column: literals}, oracle["schema"])
    assert "k" in allowed
    shard_values = _oracle_values(oracle, column, rows, spec)
    for value, shard_value in zip(rows, shard_values, strict=True):
        if value is not None and value in literals:
            assert shard_matches({"k": shard_value}, allowed), (value, shard_value, allowed)


# ---------------------------------------------------------------------------
# Shard manifest field entries
# ---------------------------------------------------------------------------


def test_writer_manifests_carry_no_field_entries(tmp_path: Path) -> None:
    """pylance 14.0.2 records shard_spec_id but no shard_field_entries for its shards.

    If a later version writes entries, check they decode to the evaluated shard value.
    """
    from memwal.pb import shard_manifest_pb2 as smpb

    schema = _pk_schema({"id": pa.int64(), "name": pa.string()})
    path = str(tmp_path / "t")
    ds = lance.write_dataset(pa.table({"id": [1], "name": ["a"]}, schema=schema), path)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=4)
    ds = lance.dataset(path)
    spec = ds.mem_wal_index_details()["sharding_specs"][0]
    batch = pa.record_batch({"id": pa.array(range(100, 140), pa.int64()), "name": pa.array(["x"] * 40)}, schema=schema)
    buckets = evaluate_sharding_spec(batch, spec, field_names_from_lance_schema(ds)).column(0)
    target = buckets[0].as_py()
    batch = batch.filter(pc.equal(buckets, target))
    writer = ds.mem_wal_writer(str(uuid.uuid4()))
    writer.put(batch)
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
    for rt, value in [
        ("int8", -128),
        ("uint64", 2**64 - 1),
        ("double", -0.5),
        ("float", 1.5),
        ("binary", b"\x00"),
        ("uint16", 65535),
        ("bool", False),
        ("date64:ms", dt.date(2020, 2, 29)),
    ]:
        assert shard_field_value_from_bytes(rt, shard_field_value_to_bytes(rt, value)) == value
    with pytest.raises(BadInputError):
        shard_field_value_from_bytes("int32", b"\x01\x00")
    with pytest.raises(BadInputError):
        shard_field_value_from_bytes("struct<a>", b"\x01")
    with pytest.raises(BadInputError):
        shard_field_value_to_bytes("int8", 1000)
