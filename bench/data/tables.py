"""The benches' input tables, written once by pylance's ``ShardWriter`` through ``memwal.demo``.

Every contender then gets its own ``shutil.copytree`` of the same directory, so each
starts from identical bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from unittest import mock

import lance

from memwal import demo as demo_data
from memwal.demo import Model, Workload

# Rows a generation stores per ``rows_per_generation``: the writer keeps one row of a key
# put twice in one batch (duplicate_fraction 0.05) and adds the tombstones
# (delete_fraction 0.1): 1 - 0.05 + 0.1 (measured: 419,704 rows for n=2860 x 140).
ROWS_PER_UNIT = 1.05


class KeyModel(Model):
    """Tracks only the live keys (what ``write_generations`` needs), not whole rows.

    The demo model keeps a dict per row, which is gigabytes at 10M base rows; the benchmark
    checks the contenders against each other and against the LSM view instead.
    """

    def put(self, table) -> None:
        self.rows.update(dict.fromkeys(table.column("id").to_pylist()))


@dataclass
class TableSpec:
    base_rows: int
    change_rows: int  # the target: rows stored in generations (puts and tombstones)
    shards: int = 4
    generations_per_shard: int = 35
    indexes: bool = True
    maintain_vector_index: bool = True
    seed: int = 7

    @property
    def rows_per_generation(self) -> int:
        gens = self.shards * self.generations_per_shard
        return max(4, round(self.change_rows / (gens * ROWS_PER_UNIT)))

    def workload(self) -> Workload:
        return Workload(
            base_rows=self.base_rows,
            shards=self.shards,
            generations=self.generations_per_shard,
            rows_per_generation=self.rows_per_generation,
            indexes=self.indexes,
            maintain_vector_index=self.maintain_vector_index,
            seed=self.seed,
        )


def dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def generation_stats(path: str) -> dict:
    """What the merge will read: generations, rows, puts and tombstones (counted, not assumed)."""
    from memwal.store import open_store
    from memwal.table.shards import all_shard_manifests

    store = open_store(path, {})
    gens = rows = tombstones = 0
    for state in all_shard_manifests(store).values():
        for g in state.flushed:
            uri = store.uri_for(state.generation_key(g))
            t = lance.dataset(uri).to_table(columns=["_tombstone"])
            gens += 1
            rows += t.num_rows
            tombstones += t.column("_tombstone").to_numpy(zero_copy_only=False).sum()
    return {
        "generations": gens,
        "change_rows": rows,
        "put_rows": rows - int(tombstones),
        "tombstone_rows": int(tombstones),
    }


def build_table(path: str, spec: TableSpec) -> dict:
    """Write the base table and every generation; return what was actually written."""
    shutil.rmtree(path, ignore_errors=True)
    w = spec.workload()
    t0 = time.perf_counter()
    with mock.patch.object(demo_data, "Model", KeyModel):
        _, model = demo_data.create_base_table(path, w)
    t1 = time.perf_counter()
    demo_data.write_generations(path, w, model)
    t2 = time.perf_counter()
    info = {
        **asdict(spec),
        "change_rows_target": spec.change_rows,
        "rows_per_generation": spec.rows_per_generation,
        "base_write_seconds": round(t1 - t0, 3),
        "generations_write_seconds": round(t2 - t1, 3),
        "bytes": dir_bytes(path),
    }
    info.update(generation_stats(path))  # the measured change_rows replaces the target
    return info


def copy_table(src: str, dst: str | Path, *, sync: bool = False, preserve: bool = False) -> str:
    """A fresh copy of the table at ``src`` at ``dst`` (replacing what was there): each contender
    starts from identical bytes. ``preserve``: ``cp -a`` (file times and hard links kept);
    ``sync``: written back to disk before it is returned, or the write-back of a copy just made
    (90 MB at 1M rows, 1.4 GB at 16M) lands in whichever timed run comes next, on one contender
    more than another."""
    shutil.rmtree(dst, ignore_errors=True)
    if preserve:
        subprocess.run(["cp", "-a", str(src), str(dst)], check=True)
    else:
        shutil.copytree(src, dst)
    if sync:
        os.sync()
    return str(dst)


def cached_table(work: Path, name: str, spec: TableSpec) -> tuple[str, dict]:
    """The pristine table ``work/name`` written from ``spec``, built once per work folder (its
    facts beside it in ``name.json``): a bench reruns on the table a previous run left."""
    path, info_file = work / name, work / f"{name}.json"
    if path.exists() and info_file.exists():
        return str(path), json.loads(info_file.read_text())
    work.mkdir(parents=True, exist_ok=True)
    info = build_table(str(path), spec)
    info_file.write_text(json.dumps(info))
    return str(path), info
