"""The merge's memory follows decoded bytes, never bytes on disk (issue 83, item 4).

Twenty generations of 50 rows of 1 MiB strings of one repeated letter (some 100 KB a folder on
disk, 50 MB decoded), written by pylance's ``ShardWriter``: a default ``memwal merge`` (a real
process, as users run it) once held the whole backlog at once and passed 2.8 GB. It now merges
it in several commits of bounded decoded size (:mod:`memwal.merge.batches`), stays under 1 GB,
merges every row right and records progress at the last generation. The bound is measured
from Lance, never from the shard manifest: a forged small ``in_memory_bytes`` and
``physical_rows`` change nothing. Memory is counted, never time. Small rows stay one commit.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from memwal.merge import run_merge
from memwal.merge.batches import DEFAULT_MAX_DECODED_BYTES, decoded_sizes, split_plan
from memwal.merge.engine import LocalMergeEngine
from memwal.merge.plan import plan_merge
from memwal.table import open_table
from tests.conftest import commit_shard_manifest, table_rows
from tests.helpers import memwal_program, run_watched, wait_flushed

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("blob", pa.string())])
ROWS, WIDTH, GENERATIONS = 50, 1 << 20, 20
LIMIT_MB = 1024


def letter(key: int, g: int) -> str:
    return chr(97 + (key + g) % 26)


def rows(g: int) -> pa.Table:
    keys = list(range(g * ROWS // 2, g * ROWS // 2 + ROWS))  # half of each generation updates the one before
    return pa.table({"id": pa.array(keys, pa.int64()), "blob": [letter(k, g) * WIDTH for k in keys]}, schema=SCHEMA)


def model() -> dict[int, str]:
    """Key -> the letter its newest version repeats (the base's key 0, ``"x"``, is replaced)."""
    out: dict[int, str] = {}
    for g in range(GENERATIONS):
        for k in range(g * ROWS // 2, g * ROWS // 2 + ROWS):
            out[k] = letter(k, g)
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's table, written once by pylance's ``ShardWriter`` (closed: all 20 flushed)."""
    uri = str(tmp_path_factory.mktemp("merge-memory") / "t")
    ds = lance.write_dataset(pa.table({"id": pa.array([0], pa.int64()), "blob": ["x"]}, schema=SCHEMA), uri)
    ds.create_scalar_index("id", "BTREE")
    lance.dataset(uri).initialize_mem_wal(unsharded=True)
    writer = lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=ROWS, max_memtable_size=1 << 30,
                                                max_unflushed_memtable_bytes=4 << 30, durable_write=False)
    for g in range(GENERATIONS):
        writer.put(rows(g))
    wait_flushed(writer, GENERATIONS)
    writer.close()
    return Path(uri)


@pytest.fixture
def compressible(pristine: Path, tmp_path: Path) -> str:
    dest = tmp_path / "t"
    shutil.copytree(pristine, dest)
    return str(dest)


def _forge_small_figures(uri: str) -> None:
    """Every generation of the shard manifest claims one row of one byte."""
    table = open_table(uri)
    (shard_id,) = {s.shard_id for s in plan_merge(table).shards}

    def edit(msg) -> None:  # type: ignore[no-untyped-def]
        for sst in msg.sstables:
            sst.in_memory_bytes = 1
            sst.physical_rows = 1

    commit_shard_manifest(table, shard_id, edit)


def _merged_right(uri: str) -> None:
    """Row for row against the model, one batch of rows at a time (never the whole table)."""
    expected = model()
    seen = 0
    for batch in lance.dataset(uri).to_batches(columns=["id", "blob"], batch_size=16):
        for key, blob in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            assert blob == expected[key] * WIDTH, key
            seen += 1
    assert seen == len(expected)


@pytest.mark.parametrize("forged", [False, True], ids=["as-written", "forged-small-figures"])
def test_a_default_merge_stays_under_a_gigabyte_in_several_commits(compressible: str, forged: bool) -> None:
    folder = next(Path(compressible, "_mem_wal").glob("*/*_gen_1"))
    assert sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) < 2 << 20  # small on disk
    if forged:
        _forge_small_figures(compressible)
    run = run_watched([memwal_program(), "merge", compressible, "--json"], kill_after=300)
    assert run.rc == 0, run.stdout + run.stderr
    assert run.peak_mb < LIMIT_MB, run.peak_mb
    doc = json.loads(run.stdout)
    assert doc["commits"] > 1, doc  # the bound split it
    (shard,) = doc["shards"]
    assert (shard["from_generation"], shard["to_generation"]) == (1, GENERATIONS)
    table = open_table(compressible)
    assert table.manifest().compacted_generation(shard["shard_id"]) == GENERATIONS
    _merged_right(compressible)


def test_batches_are_bounded_by_measured_decoded_bytes_whatever_the_manifest_says(compressible: str) -> None:
    """Each batch but a lone oversized generation is within the bound by Lance's own figures,
    the same batches with the shard manifest's figures forged small; in generation order."""
    table = open_table(compressible)
    honest = split_plan(table, plan_merge(table), DEFAULT_MAX_DECODED_BYTES)
    _forge_small_figures(compressible)
    plan = plan_merge(table)
    batches = split_plan(table, plan, DEFAULT_MAX_DECODED_BYTES)
    assert [b.generations[0].generation for b in batches] == [b.generations[0].generation for b in honest]
    assert len(batches) > 1
    assert [g.generation for b in batches for g in b.generations] == list(range(1, GENERATIONS + 1))
    for b in batches:
        sizes = decoded_sizes(b.generations, None)
        assert sizes[0] >= ROWS * WIDTH  # the decoded rows, not the forged byte
        assert len(sizes) == 1 or sum(sizes) <= DEFAULT_MAX_DECODED_BYTES
    for prev, nxt in zip(batches, batches[1:], strict=False):
        assert nxt.shards[0].compacted_generation == prev.shards[0].to_generation


def test_a_generation_over_the_bound_merges_alone(make_table: Callable) -> None:  # type: ignore[type-arg]
    """A bound below every generation: each commits alone, with its own marker, on every
    shard, and the table is the model's (tombstones and updates across the batches)."""
    table, model_ = make_table()
    result = run_merge(table, engine=LocalMergeEngine(max_decoded_bytes=1))
    plan_gens = sum(s.to_generation - s.from_generation + 1 for s in result.shards)
    assert result.ok and result.commits >= plan_gens
    assert table_rows(table) == model_.sorted_rows()
    assert not plan_merge(table).shards


def test_small_rows_stay_one_commit(tmp_path: Path) -> None:
    """200,000 changed keys of two int64 columns: one batch, as before the bound."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("val", pa.int64())])
    uri = str(tmp_path / "small")
    ids = np.arange(1000, dtype=np.int64)
    lance.write_dataset(pa.table({"id": ids, "val": ids}, schema=schema), uri)
    lance.dataset(uri).initialize_mem_wal(unsharded=True)
    writer = lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=50_000, durable_write=False)
    keys = np.arange(200_000, dtype=np.int64)
    for part in np.array_split(keys, 4):
        writer.put(pa.table({"id": part, "val": -part}, schema=schema))
    writer.close()
    table = open_table(uri)
    plan = plan_merge(table)
    assert len(plan.generations) >= 4
    assert split_plan(table, plan, DEFAULT_MAX_DECODED_BYTES) == [plan]
    result = run_merge(table)
    assert result.ok and result.commits == 1
