"""Merge operators: the fold against a plain-Python model, and config validation."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwal.errors import BadInputError
from memwal.merge.fold import fold
from memwal.merge.ops import OPERATORS, MergeOps, from_config, validate

# ---------------------------------------------------------------- the model


def combine(op: str, old, new):
    """One step of the fold for one column, exactly as the operators' table says (docs/concepts/merge.md)."""
    if op == "replace":
        return new
    if op == "last_non_null":
        return old if new is None else new
    if op == "first_non_null":
        return new if old is None else old
    if old is None:
        return new
    if new is None:
        return old
    return {"sum": lambda a, b: a + b, "min": min, "max": max,
            "bool_or": lambda a, b: a or b, "bool_and": lambda a, b: a and b}[op](old, new)


def model_fold(events: list[tuple[int, bool, dict]], ops: dict[str, str]) -> dict[int, dict | None]:
    """events: (key, is_tombstone, row) in LSM order -> key -> folded row (None: deleted)."""
    state: dict[int, dict | None] = {}
    for key, tomb, row in events:
        if tomb:
            state[key] = None
        elif state.get(key) is None:
            state[key] = dict(row)
        else:
            old = state[key]
            state[key] = {c: combine(ops.get(c, "replace"), old[c], row[c]) for c in row}
    return state


COLUMNS = {"n": ("sum", pa.int64()), "lo": ("min", pa.int64()), "hi": ("max", pa.float64()),
           "s": ("last_non_null", pa.string()), "f": ("first_non_null", pa.string()),
           "any": ("bool_or", pa.bool_()), "all": ("bool_and", pa.bool_()), "r": ("replace", pa.int64())}

values = {"n": st.one_of(st.none(), st.integers(-5, 5)), "lo": st.one_of(st.none(), st.integers(-5, 5)),
          "hi": st.one_of(st.none(), st.floats(-5, 5, allow_nan=False)),
          "s": st.one_of(st.none(), st.sampled_from("abc")), "f": st.one_of(st.none(), st.sampled_from("xyz")),
          "any": st.one_of(st.none(), st.booleans()), "all": st.one_of(st.none(), st.booleans()),
          "r": st.one_of(st.none(), st.integers(0, 9))}
event = st.tuples(st.integers(0, 6), st.booleans(), st.fixed_dictionaries(values))


def to_table(events) -> pa.Table:
    cols = {"id": pa.array([k for k, _, _ in events], pa.int64())}
    for c, (_, t) in COLUMNS.items():
        cols[c] = pa.array([None if tomb else row[c] for _, tomb, row in events], t)
    cols["_tombstone"] = pa.array([tomb for _, tomb, _ in events])
    cols["__gen"] = pa.array(range(len(events)), pa.int64())  # LSM order = list order
    return pa.table(cols)


@settings(max_examples=200, deadline=None)
@given(st.lists(event, max_size=40))
def test_fold_equals_the_model_for_every_operator(events):
    ops = {c: op for c, (op, _) in COLUMNS.items()}
    upserts, deleted = fold(to_table(events), ["id"], MergeOps(ops),
                            order=["__gen"], tombstone="_tombstone")
    expect = model_fold(events, ops)
    got = {r["id"]: {c: r[c] for c in COLUMNS} for r in upserts.to_pylist()}
    assert got == {k: v for k, v in expect.items() if v is not None}
    assert sorted(deleted.column("id").to_pylist()) == sorted(k for k, v in expect.items() if v is None)


@settings(max_examples=100, deadline=None)
@given(st.lists(event, max_size=30), st.integers(0, 30))
def test_fold_is_associative_batch_then_base(events, cut):
    """Folding a prefix first, then the rest onto its result, equals folding everything at once
    (what a merge of generations 1..k followed by k+1..n does to the base table)."""
    ops = {c: op for c, (op, _) in COLUMNS.items()}
    m = MergeOps(ops)
    whole, _ = fold(to_table(events), ["id"], m, order=["__gen"], tombstone="_tombstone")
    first, _ = fold(to_table(events[:cut]), ["id"], m, order=["__gen"], tombstone="_tombstone")
    base = [(r["id"], False, {c: r[c] for c in COLUMNS}) for r in first.to_pylist()]
    again, _ = fold(to_table(base + events[cut:]), ["id"], m, order=["__gen"], tombstone="_tombstone")
    key = lambda t: sorted(t.to_pylist(), key=lambda r: r["id"])  # noqa: E731
    assert key(again) == key(whole)


@settings(max_examples=200, deadline=None)
@given(st.lists(event, max_size=30), st.dictionaries(st.integers(0, 6), st.fixed_dictionaries(values), max_size=7))
def test_fold_onto_base_rows_equals_the_model(events, base_rows):
    """Base rows (keys and folding columns only) fold in as each key's first version; a base
    key with no version in the batch gives nothing (what a merge does to the base table)."""
    ops = {c: op for c, (op, _) in COLUMNS.items()}
    folding = [c for c, op in ops.items() if op != "replace"]
    base = pa.table({"id": pa.array(list(base_rows), pa.int64()),
                     **{c: pa.array([r[c] for r in base_rows.values()], COLUMNS[c][1]) for c in folding}})
    upserts, deleted = fold(to_table(events), ["id"], MergeOps(ops), order=["__gen"], tombstone="_tombstone",
                            base=base)
    touched = {k for k, _, _ in events}
    first = [(k, False, {**row, "r": None}) for k, row in base_rows.items() if k in touched]
    expect = {k: v for k, v in model_fold(first + events, ops).items() if k in touched}
    got = {r["id"]: {c: r[c] for c in COLUMNS} for r in upserts.to_pylist()}
    assert got == {k: v for k, v in expect.items() if v is not None}
    assert sorted(deleted.column("id").to_pylist()) == sorted(k for k, v in expect.items() if v is None)


@pytest.mark.parametrize("ctype", [pa.int8(), pa.int32(), pa.uint16(), pa.float32(), pa.float64()])
@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_fold_of_each_numeric_type_keeps_the_type(ctype, op):
    events = [(1, False, [3, None]), (1, False, [4, 2]), (2, False, [None, None]), (2, False, [None, 5]),
              (3, False, [None, None]), (3, False, [None, None])]
    t = pa.table({"id": pa.array([k for k, _, _ in events], pa.int64()),
                  "v": pa.array([row[0] for *_, row in events], ctype),
                  "w": pa.array([row[1] for *_, row in events], ctype),
                  "_tombstone": [tomb for _, tomb, _ in events], "__gen": pa.array(range(len(events)), pa.int64())})
    up, _ = fold(t, ["id"], MergeOps({"v": op, "w": op}), order=["__gen"], tombstone="_tombstone")
    assert up.schema == t.select(["id", "v", "w"]).schema
    reduce = {"sum": sum, "min": min, "max": max}[op]
    expect = {k: [reduce(x) if (x := [row[i] for kk, _, row in events if kk == k and row[i] is not None]) else None
                  for i in (0, 1)] for k in (1, 2, 3)}
    assert {r["id"]: [r["v"], r["w"]] for r in up.to_pylist()} == expect


def test_fold_keeps_input_column_order_and_types():
    t = to_table([(1, False, {c: None for c in COLUMNS})])
    up, _ = fold(t, ["id"], MergeOps({"n": "sum"}), order=["__gen"], tombstone="_tombstone")
    assert up.schema.names == ["id", *COLUMNS]
    assert up.schema == t.select(["id", *COLUMNS]).schema


# ---------------------------------------------------------------- validation

SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("s", pa.string()), ("b", pa.bool_()),
                    ("ts", pa.timestamp("us")), ("v", pa.list_(pa.float32()))])


@pytest.mark.parametrize("ops, needle", [
    ({"n": "avg"}, "unknown merge operator"),
    ({"s": "sum"}, "needs a numeric column"),
    ({"b": "max"}, "numeric, string or temporal"),
    ({"n": "bool_or"}, "needs a boolean column"),
    ({"v": "min"}, "numeric, string or temporal"),
    ({"id": "sum"}, "primary-key column"),
    ({"missing": "sum"}, "not in the table schema"),
])
def test_validate_refuses(ops, needle):
    with pytest.raises(BadInputError, match=needle):
        validate(ops, SCHEMA, ["id"])


def test_validate_accepts_each_operator_on_its_types():
    validate({"n": "sum", "s": "max", "ts": "min", "b": "bool_and", "v": "last_non_null"}, SCHEMA, ["id"])
    for op in OPERATORS:
        if op not in ("sum", "bool_or", "bool_and"):
            validate({"s": op}, SCHEMA, ["id"])


def test_config_round_trip_and_unknown_op():
    assert from_config({"memwal.merge-op.n": "sum", "memwal.merge-op.s": "replace", "other": "x"}).to_dict() == {
        "n": "sum"}
    with pytest.raises(BadInputError, match="memwal.merge-op.n: unknown merge operator 'avg'"):
        from_config({"memwal.merge-op.n": "avg"})


# ---------------------------------------------------------------- end to end, ShardWriter data

import random  # noqa: E402

import lance  # noqa: E402

from tests.helpers import run_cli, tree_digest  # noqa: E402

PK = {"lance-schema:unenforced-primary-key": "true"}
E2E_OPS = {"n": "sum", "lo": "min", "hi": "max", "s": "last_non_null", "f": "first_non_null",
           "any": "bool_or", "all": "bool_and"}
E2E_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK),
                        *(pa.field(c, t) for c, (_, t) in COLUMNS.items())])


def random_row(rng: random.Random) -> dict:
    pick = {"n": lambda: rng.randint(-5, 5), "lo": lambda: rng.randint(-5, 5), "hi": lambda: rng.random() * 10,
            "s": lambda: rng.choice("abc"), "f": lambda: rng.choice("xyz"), "any": lambda: rng.random() < 0.3,
            "all": lambda: rng.random() < 0.7, "r": lambda: rng.randint(0, 9)}
    return {c: (None if rng.random() < 0.3 else pick[c]()) for c in COLUMNS}


class FoldModel:
    """The folded truth: every put and delete in LSM order, through :func:`model_fold`."""

    def __init__(self) -> None:
        self.events: list[tuple[int, bool, dict]] = []

    def rows(self) -> list[dict]:
        state = model_fold(self.events, E2E_OPS)
        return [{"id": k, **v} for k, v in sorted(state.items()) if v is not None]


def build_folding_table(uri: str, *, shards: int = 3, generations: int = 4, seed: int = 7,
                        ops: dict | None = E2E_OPS, storage_options: dict | None = None) -> FoldModel:
    """A base table with operators, then ``generations`` flushed generations per shard written
    by pylance's ShardWriter: puts with nulls, duplicate keys in one batch, deletes."""
    from memwal.demo import keys_by_bucket

    rng = random.Random(seed)
    model = FoldModel()
    base = [{"id": k, **random_row(rng)} for k in range(40)]
    lance.write_dataset(pa.Table.from_pylist(base, schema=E2E_SCHEMA), uri, storage_options=storage_options)
    model.events += [(r["id"], False, {c: r[c] for c in COLUMNS}) for r in base]
    ds = lance.dataset(uri, storage_options=storage_options)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=shards)
    if ops:
        lance.dataset(uri, storage_options=storage_options).update_config(
            {f"memwal.merge-op.{c}": op for c, op in ops.items()})
    ds = lance.dataset(uri, storage_options=storage_options)
    by_bucket = keys_by_bucket(ds, list(range(60)), shards)
    for b in range(shards):
        for _ in range(generations):  # close() flushes: one writer session per generation
            writer = ds.mem_wal_writer(f"00000000-0000-4000-8000-{b:012d}", durable_write=False)
            try:
                ids = [rng.choice(by_bucket[b]) for _ in range(12)]  # duplicates on purpose
                rows = [{"id": k, **random_row(rng)} for k in ids]
                writer.put(pa.Table.from_pylist(rows, schema=E2E_SCHEMA))
                model.events += [(r["id"], False, {c: r[c] for c in COLUMNS}) for r in rows]
                gone = sorted(set(rng.sample(by_bucket[b], 2)))
                writer.delete(pa.table({"id": pa.array(gone, pa.int64())}))
                model.events += [(k, True, {}) for k in gone]
                again = {"id": gone[0], **random_row(rng)}  # a key deleted then put again
                writer.put(pa.Table.from_pylist([again], schema=E2E_SCHEMA))
                model.events.append((gone[0], False, {c: again[c] for c in COLUMNS}))
            finally:
                writer.close()
    return model


def base_rows(uri: str, storage_options: dict | None = None) -> list[dict]:
    return sorted(lance.dataset(uri, storage_options=storage_options).to_table().to_pylist(), key=lambda r: r["id"])


def approx(rows: list[dict]) -> list[dict]:
    """Float sums differ in the last bit with the order of addition: round them."""
    return [{c: (round(v, 6) if isinstance(v, float) else v) for c, v in r.items()} for r in rows]


def test_merge_and_reads_fold_like_the_model(tmp_path):
    import memwal
    from memwal.read import lsm_scan
    from memwal.table import open_table

    uri = str(tmp_path / "t")
    model = build_folding_table(uri)
    table = open_table(uri)
    scan = lambda: approx(sorted(lsm_scan(table).to_pylist(), key=lambda r: r["id"]))  # noqa: E731
    assert scan() == approx(model.rows()), "a read before any merge folds base and generations"
    assert memwal.open(uri).merge(max_generations=1).ok
    assert scan() == approx(model.rows()), "after a partial merge"
    assert memwal.open(uri).merge().ok
    assert approx(base_rows(uri)) == approx(model.rows()), "the base table itself after the full merge"
    assert scan() == approx(model.rows())
    filtered = lsm_scan(table, filter="n > 0", columns=["id", "n"]).to_pylist()
    assert sorted(r["id"] for r in filtered) == [r["id"] for r in model.rows() if r["n"] is not None and r["n"] > 0]


def test_a_folding_merge_on_s3_equals_the_model(s3_server):
    """Operands are fetched from WAL entries on an object store (moto) as on a disk."""
    import memwal

    uri, opts = s3_server.new_table("tables/fold")
    model = build_folding_table(uri, storage_options=opts)
    assert memwal.open(uri, opts).merge().ok
    assert approx(base_rows(uri, opts)) == approx(model.rows())


@pytest.mark.parametrize("step", ["after-read", "before-delete-commit", "after-delete-pass", "before-marked-commit",
                                  "after-upsert-commit"])
def test_a_crash_at_each_step_never_applies_an_operand_twice(tmp_path, step):
    import memwal
    from memwal.core import steps

    uri = str(tmp_path / "t")
    model = build_folding_table(uri, ops={"n": "sum"})

    class Crash(Exception):
        pass

    def hook(name: str) -> None:
        if name == f"merge.{step}":
            raise Crash(name)

    with steps.hooked(hook), pytest.raises(Crash):
        memwal.open(uri).merge()
    assert memwal.open(uri).merge().ok
    expect = model_fold(model.events, {"n": "sum"})
    totals = {r["id"]: r["n"] for r in base_rows(uri)}
    assert totals == {k: v["n"] for k, v in expect.items() if v is not None}
    assert approx(base_rows(uri)) == approx([{"id": k, **v} for k, v in sorted(expect.items()) if v is not None])


def test_a_table_without_operators_merges_last_write_wins(tmp_path):
    import memwal

    uri = str(tmp_path / "t")
    model = build_folding_table(uri, ops=None)
    assert memwal.open(uri).merge().ok
    lww = model_fold(model.events, {})
    assert approx(base_rows(uri)) == approx([{"id": k, **v} for k, v in sorted(lww.items()) if v is not None])


@pytest.mark.parametrize("argv, needle", [
    (["--set", "n=avg"], "unknown merge operator 'avg'"),
    (["--set", "s=sum"], "column s: merge operator sum needs a numeric column"),
    (["--set", "id=max"], "primary-key column"),
    (["--set", "n"], "expected COLUMN=OPERATOR"),
    (["--set", "nope=sum"], "column nope: not in the table schema"),
    (["--set", "r=max"], "unmerged generations would change meaning"),
    (["--set", "n=max", "--unset", "n"], "both set and unset"),
])
def test_merge_ops_bad_input_exits_2_with_nothing_written(tmp_path, argv, needle):
    uri = str(tmp_path / "t")
    build_folding_table(uri, generations=1)
    before = tree_digest(uri)
    run = run_cli("merge-ops", uri, *argv)
    assert run.rc == 2, run.stderr
    assert len(run.error_lines) == 1 and needle in run.error_lines[0], run.stderr
    assert tree_digest(uri) == before


def test_merge_ops_shows_sets_and_unsets(tmp_path):
    import json

    uri = str(tmp_path / "t")
    build_folding_table(uri, generations=1, ops={"n": "sum"})
    shown = json.loads(run_cli("merge-ops", uri, "--json").stdout)
    assert shown["merge_ops"] == {"n": "sum"} and shown["version"] is None
    changed = json.loads(run_cli("merge-ops", uri, "--set", "hi=max", "--unset", "n", "--force", "--json").stdout)
    assert changed["merge_ops"] == {"hi": "max"} and changed["changed"] == {"hi": "max", "n": None}
    assert lance.dataset(uri).config().get("memwal.merge-op.hi") == "max"
    assert "memwal.merge-op.n" not in lance.dataset(uri).config()


def test_a_generation_whose_operands_are_gone_or_partial_is_never_folded(tmp_path):
    """Folding from the flushed rows alone would drop the operands the MemTable collapsed."""
    import json

    import memwal

    uri = str(tmp_path / "t")
    build_folding_table(uri, shards=2, generations=2, ops={"n": "sum"})
    t = memwal.open(uri)
    table = t.table
    plan = t.merge(dry_run=True).value
    gone, partial = plan.shards[0].generations[0], plan.shards[1].generations[0]
    table.store.delete_many(list(gone.wal_keys))  # shard 0: every WAL entry of its first generation
    # shard 1: its first generation's WAL loses its last operand (a put after a delete)
    entry = pa.ipc.open_stream(table.store.get(partial.wal_keys[-1])).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, entry.schema) as w:
        w.write_table(entry.slice(0, entry.num_rows - 1))
    table.store.put(partial.wal_keys[-1], sink.getvalue().to_pybytes())
    before = base_rows(uri)
    version = lance.dataset(uri).version

    shown = json.loads(run_cli("merge", uri, "--dry-run", "--json").stdout)
    assert [(b["shard_id"], b["generation"], b["reason"].split(":")[0]) for b in shown["blocked"]] == [
        (gone.shard_id, gone.generation, "operands-missing")]
    run = run_cli("merge", uri)
    assert run.rc == 1, run.stderr
    assert any(f"generation {partial.generation}" in line and "WAL entries do not reproduce it" in line
               for line in run.error_lines), run.stderr
    assert lance.dataset(uri).version == version and base_rows(uri) == before  # nothing folded, nothing committed
