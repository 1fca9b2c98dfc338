"""Wire formats and readers, against files pylance's ShardWriter and initialize_mem_wal wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.demo import Workload, create_base_table, write_generations
from memwal.errors import BadInputError
from memwal.pb import mem_wal_index_pb2, shard_manifest_pb2
from memwal.store import open_store
from memwal.table import open_table
from memwal.table.manifest import decode_table_manifest, latest_version_key, list_versions, read_table_manifest
from memwal.table.naming import (
    U64_MAX,
    bitrev64,
    manifest_key,
    parse_bitrev64,
    parse_generation_dir,
    table_version_of,
    version_hint_key,
)
from memwal.table.shards import (
    all_shard_manifests,
    latest_shard_version,
    list_generation_dirs,
    list_wal_entries,
    read_shard_manifest,
    read_wal_entry_meta,
)
from tests.helpers import ROOT


def test_bitrev64_matches_pylance_names():
    assert bitrev64(1) == "1" + "0" * 63
    assert bitrev64(5) == "101" + "0" * 61
    for n in (0, 1, 2, 5, 12345, (1 << 64) - 1):
        assert parse_bitrev64(bitrev64(n)) == n
    for bad in ("12", "1" * 63, "1" * 65, "1" * 64 + "\n", "2" + "0" * 63, "\u0661" + "0" * 63, " " + "0" * 63):
        with pytest.raises(ValueError):
            parse_bitrev64(bad)


@pytest.mark.parametrize(("name", "version"), [
    ("_versions/18446744073709551000.manifest", U64_MAX - 18446744073709551000),  # V2: u64::MAX - version
    ("_versions/12.manifest", 12), ("tree/b/_versions/3.manifest", 3),  # the older scheme: the version
    ("_versions/-1.manifest", None), ("_versions/0.manifest", None), ("00000000000000000000.manifest", None),
    ("18446744073709551615.manifest", None), ("123456789012345678901.manifest", None),  # out of range, 21 digits
    ("12.manifest\n", None), ("\u0661\u0662.manifest", None), ("12.manifest.manifest", None), (".manifest", None),
    ("1.manifesto", None), ("x.manifest", None), ("_versions/12.txn", None),
])
def test_a_table_manifest_name_is_read_as_lance_names_them_and_nothing_else_is(name, version):
    assert table_version_of(name) == version


@pytest.mark.parametrize(("name", "generation"), [
    ("abcdef01_gen_5", 5), ("00000000_gen_1", 1), ("abcdef01_gen_123456789", 123456789),
    ("abcdef01_gen_5\n", None), ("ABCDEF01_gen_5", None), ("abcdef0_gen_5", None), ("abcdef012_gen_5", None),
    ("abcdef01_gen_0", None), ("abcdef01_gen_05", None), ("abcdef01_gen_", None), ("abcdef01_gen_\u0661", None),
    ("abcdef01-gen_5", None), ("0000000g_gen_1", None), ("abcdef01_gen_+5", None), (" bcdef01_gen_1", None),
    ("abcdef01_gen_5 ", None), ("", None),
])
def test_a_generation_folder_name_is_read_as_writers_name_them_and_nothing_else_is(name, generation):
    assert parse_generation_dir(name) == generation


def test_generated_protobuf_modules_are_fresh(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iproto",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto/memwal/pb").glob("*.proto")),
        ],
        cwd=ROOT,
        check=True,
    )
    generated = sorted((tmp_path / "memwal/pb").glob("*_pb2.py*"))
    assert generated, "protoc produced nothing"
    for fresh in generated:
        committed = ROOT / "memwal/pb" / fresh.name
        assert committed.read_text() == fresh.read_text(), f"{committed} is stale: run `make proto`"


def test_shard_manifests_roundtrip_byte_for_byte(make_table):
    table, _ = make_table()
    files = [p for p in Path(table.uri, "_mem_wal").glob("*/manifest/*.binpb")]
    assert len(files) >= 3 * 4
    for f in files:
        raw = f.read_bytes()
        msg = shard_manifest_pb2.ShardManifest.FromString(raw)
        assert msg.SerializeToString() == raw, f
        assert bitrev64(msg.version) + ".binpb" == f.name


def test_latest_manifest_and_decoded_fields(make_table):
    table, _ = make_table()
    states = all_shard_manifests(table.store)
    assert len(states) == 3
    for shard_id, st in states.items():
        assert st.shard_id == shard_id
        assert [g.generation for g in st.flushed] == [1, 2, 3, 4]
        assert st.current_generation == 5
        assert st.writer_epoch == 1 and st.status == "active"
        assert all(g.physical_rows == 40 + 4 for g in st.flushed)  # puts plus delete tombstones
        assert set(list_generation_dirs(table.store, shard_id).values()) == {1, 2, 3, 4}
        hint = json.loads(table.store.get(version_hint_key(shard_id)))
        assert st.version == hint["version"] == latest_shard_version(table.store, shard_id)


def test_latest_version_probes_past_a_stale_or_missing_hint(make_table):
    table, _ = make_table()
    shard_id, st = next(iter(all_shard_manifests(table.store).items()))
    hint = Path(table.uri) / version_hint_key(shard_id)
    hint.write_text(json.dumps({"version": 1}))
    assert latest_shard_version(table.store, shard_id) == st.version
    hint.unlink()
    assert latest_shard_version(table.store, shard_id) == st.version
    hint.write_text(json.dumps({"version": st.version + 50}))  # ahead of reality
    assert latest_shard_version(table.store, shard_id) == st.version
    hint.write_text("garbage")
    assert latest_shard_version(table.store, shard_id) == st.version


def test_wal_entry_metadata_without_bodies(make_table):
    table, _ = make_table()
    shard_id = next(iter(all_shard_manifests(table.store)))
    entries = list_wal_entries(table.store, shard_id)
    assert entries and entries[0].position == 1
    metas = [read_wal_entry_meta(table.store, shard_id, e.position) for e in entries]
    gens = [m.generation for m in metas]
    assert gens == sorted(gens) and set(gens) == {1, 2, 3, 4}
    assert {m.writer_epoch for m in metas} == {1}
    # The metadata agrees with a full read of the stream.
    with pa.ipc.open_stream(Path(table.uri, entries[-1].key).read_bytes()) as r:
        assert int(r.schema.metadata[b"generation"]) == metas[-1].generation


def test_index_details_progress_and_time_travel(make_table):
    table, _ = make_table()
    before = read_table_manifest(table.store)
    assert before.mem_wal is not None and before.compacted == {}
    assert list(before.mem_wal.maintained_indexes) == ["id_idx", "vec_idx"]
    assert before.mem_wal.sharding_specs[0].fields[0].transform == "bucket"
    result = memwal.open(table.uri).merge(max_generations=2).value
    after = read_table_manifest(table.store)
    assert after.version == result.version
    assert after.compacted == {s.shard_id: 2 for s in result.shards}
    # time travel: the old version still says nothing was merged
    assert read_table_manifest(table.store, before.version).compacted == {}
    ds = table.dataset()
    ds.optimize.optimize_indices()
    caught = read_table_manifest(table.store)
    assert caught.index_catchup == {"id_idx": after.compacted, "vec_idx": after.compacted}
    # decode -> encode is byte-identical for the details pylance wrote
    entry = next(i for i in caught.indices if i.name == "__lance_mem_wal")
    assert mem_wal_index_pb2.MemWalIndexDetails.FromString(entry.details).SerializeToString() == entry.details
    stats = ds.stats.index_stats("__lance_mem_wal")
    assert stats["num_compacted_sstables"] == len(caught.compacted)
    assert stats["num_index_catchup_entries"] == len(caught.index_catchup)


def test_old_manifest_naming_scheme(tmp_path):
    uri = str(tmp_path / "old")
    wl = Workload(base_rows=50, shards=2, generations=2, rows_per_generation=10, indexes=False, seed=3)
    ds, model = create_base_table(uri, wl)
    # rewrite as an old-style table: same rows, V1 manifest names
    old = str(tmp_path / "v1")
    lance.write_dataset(ds.to_table(), old, enable_v2_manifest_paths=False).initialize_mem_wal(
        bucket_column="id", num_buckets=2
    )
    names = os.listdir(Path(old, "_versions"))
    assert "2.manifest" in names
    t = open_table(old)
    assert set(list_versions(t.store)) == {1, 2}
    assert read_table_manifest(t.store, 1).mem_wal is None
    assert read_table_manifest(t.store).mem_wal.num_shards == 2
    write_generations(old, wl, model)
    assert all(len(s.flushed) == 2 for s in all_shard_manifests(t.store).values())
    assert latest_version_key(t.store) == (2, "_versions/2.manifest")  # older names: the whole listing
    assert open_table(old).manifest().version == 2


def test_the_latest_manifest_is_found_from_the_first_name_of_v2_tables(tmp_path):
    """A followed table commits a version every few seconds: its latest manifest is found from the
    first of its V2 names (newest first), whatever else lies in ``_versions/``."""
    uri = str(tmp_path / "t")
    ds = lance.write_dataset(pa.table({"id": pa.array([1], pa.int64())}), uri)
    for i in range(5):
        ds.update_config({"n": str(i)})
    Path(uri, "_versions", "-1.manifest").write_text("stray")  # no manifest: skipped
    Path(uri, "_versions", "notes.txt").write_text("stray")
    store = open_store(uri)
    version, key = latest_version_key(store) or (0, "")
    assert version == 6 == max(list_versions(store)) and key == f"_versions/{2**64 - 1 - 6:020d}.manifest"


def test_corrupt_and_truncated_manifests_are_bad_input(make_table):
    table, _ = make_table()
    key = read_table_manifest(table.store).key
    raw = table.store.get(key)
    with pytest.raises(BadInputError, match="truncated|corrupt"):
        decode_table_manifest(raw[: len(raw) // 2], key=key, where="x")
    with pytest.raises(BadInputError, match="truncated"):
        decode_table_manifest(raw[:10], key=key, where="x")
    shard_id, st = next(iter(all_shard_manifests(table.store).items()))
    path = Path(table.uri, manifest_key(shard_id, st.version))
    path.write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(BadInputError, match="corrupt shard manifest"):
        read_shard_manifest(table.store, shard_id, st.version)
