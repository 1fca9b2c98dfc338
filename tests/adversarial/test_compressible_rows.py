"""Memory follows decoded rows, never bytes on disk (issue 61).

Twelve generations of rows that compress some 300x: 10 KB strings of one repeated letter, 0.2 MB
a generation folder on disk, 50 MB decoded. GC (its proof reading the generations back, with no
receipt to spare it; its rollups of what a live writer needs listed) and verify stay under 1 GB
each, measured as the process's own peak, and finish: a GC that cannot roll a run up within its
bound leaves it listed and does the rest of its work.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from tests.helpers import memwal_program, run_watched, wait_flushed

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("blob", pa.string())])
ROWS, WIDTH, GENERATIONS = 5000, 10_000, 12
LIMIT_MB = 1024


def rows(g: int) -> pa.Table:
    keys = list(range(g * ROWS // 2, g * ROWS // 2 + ROWS))  # half of each generation updates the one before
    return pa.table({"id": pa.array(keys, pa.int64()), "blob": [chr(97 + (k + g) % 26) * WIDTH for k in keys]},
                    schema=SCHEMA)


@pytest.fixture
def compressible(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The table, written by pylance's ``ShardWriter``; the writer stays open (live) after."""
    uri = str(tmp_path / "t")
    ds = lance.write_dataset(pa.table({"id": pa.array([0], pa.int64()), "blob": ["x"]}, schema=SCHEMA), uri)
    ds.create_scalar_index("id", "BTREE")
    lance.dataset(uri).initialize_mem_wal(unsharded=True)
    writer = lance.dataset(uri).mem_wal_writer(str(uuid.uuid4()), max_memtable_rows=ROWS, max_memtable_size=1 << 30,
                                                max_unflushed_memtable_bytes=4 << 30, durable_write=False)
    for g in range(GENERATIONS):
        writer.put(rows(g))
    wait_flushed(writer, GENERATIONS)
    writer.put(rows(GENERATIONS).slice(0, 1))  # its MemTable holds a row: it flushed the twelve, it is open
    yield uri
    writer.close()


def test_gc_and_verify_stay_under_a_gigabyte(compressible: str) -> None:
    m = memwal_program()
    folder = max(p for p in Path(compressible, "_mem_wal").glob("*/*_gen_1"))
    assert sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) < 1 << 20  # small on disk
    assert run_watched([m, "merge", compressible], kill_after=300).rc == 0  # the merge's own memory is not asked here
    assert run_watched([m, "catchup", compressible], kill_after=300).rc == 0
    shutil.rmtree(Path(compressible, "_mem_wal", "_jobs", "receipts"))  # nothing spares the proof its reads
    verify = run_watched([m, "verify", compressible], kill_after=300)
    assert verify.rc == 0, verify.stdout + verify.stderr
    assert verify.peak_mb < LIMIT_MB, verify.peak_mb
    gc = run_watched([m, "gc", compressible, "--grace-seconds", "0", "--expire-versions", "0", "--json"],
                     kill_after=300)
    assert gc.rc == 0, gc.stderr
    assert gc.peak_mb < LIMIT_MB, gc.peak_mb
    rolled = json.loads(gc.stdout)["rolled_up"]  # the live writer's view, rolled up within the bound: runs of two
    assert rolled and all(len(r["replaces"]) == 2 for r in rolled)
    drain = run_watched([m, "gc", compressible, "--grace-seconds", "0", "--expire-versions", "0",
                         "--writer-idle-seconds", "0", "--json"], kill_after=300)
    assert drain.rc == 0, drain.stderr
    assert drain.peak_mb < LIMIT_MB, drain.peak_mb
    doc = json.loads(drain.stdout)
    assert doc["proofs_recorded"] >= 1 and doc["drained"]
    assert not [b for b in doc["blocked"] if b["reason"] == "progress-unproven"]
