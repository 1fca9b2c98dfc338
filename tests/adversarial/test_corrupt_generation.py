"""One damaged generation stops only its shard, and every command names it.

A generation written by pylance's ShardWriter has data files (``data/*.lance``) and a
deletion file (``_deletions/*.bin``: the MemTable's superseded duplicates). Each case
truncates, garbles, empties or deletes one of them in generation 2 of one shard, then:

* ``memwal merge --dry-run`` exits 1 naming the shard, the generation and the file (the
  plan validates every fragment's footer and deletion file);
* ``memwal merge`` exits 1 with one error line naming them, merges every other shard and
  the damaged shard's generation 1, row for row what the same merge does on an intact
  copy restricted that way;
* ``memwal status`` and ``memwal verify`` exit 1 naming them;
* restoring the file's bytes and merging again gives exactly the row model.

A page garbled inside a data file (footer intact) passes those checks; the merge's read
of it fails, and is attributed the same way.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

import memwal
from memwal.demo import Workload, shard_ids_for
from memwal.table.shards import all_shard_manifests
from tests.conftest import table_rows
from tests.helpers import run_cli

WL = Workload(base_rows=120, shards=3, generations=3, rows_per_generation=40, duplicate_fraction=0.1,
              indexes=False, seed=31)
VICTIM = shard_ids_for(WL)[0]
GEN = 2


def damage(path: Path, mode: str) -> None:
    data = path.read_bytes()
    rng = random.Random(7)
    if mode == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif mode == "garble":
        path.write_bytes(bytes(rng.getrandbits(8) for _ in data))
    elif mode == "empty":
        path.write_bytes(b"")
    elif mode == "delete":
        path.unlink()
    elif mode == "garble-inside":  # the first bytes (page data), footer intact
        path.write_bytes(bytes(rng.getrandbits(8) for _ in data[:64]) + data[64:])
    else:
        raise AssertionError(mode)


def generation_dir(table) -> Path:
    st = all_shard_manifests(table.store)[VICTIM]
    return Path(table.uri, "_mem_wal", VICTIM, st.generation(GEN).path)


def only_file(folder: Path) -> Path:
    files = sorted(p for p in folder.iterdir() if p.is_file())
    assert len(files) == 1, files
    return files[0]


def reference_rows(tmp_path: Path, table) -> list[dict]:
    """What the merge must leave: the same table, intact, merged without the victim's
    generations from GEN on."""
    copy = tmp_path / "reference"
    shutil.copytree(table.uri, copy, symlinks=True)
    ref = memwal.open(str(copy))
    assert ref.merge(shards=[s for s in shard_ids_for(WL) if s != VICTIM]).ok
    assert ref.merge(shards=[VICTIM], max_generations=GEN - 1).ok
    return table_rows(ref.table)


def progress(table) -> dict[str, int]:
    return dict(table.manifest().compacted)


CASES = [(target, mode) for target in ("data", "_deletions") for mode in ("truncate", "garble", "empty", "delete")]


@pytest.mark.parametrize("target, mode", CASES, ids=[f"{t.strip('_')}-{m}" for t, m in CASES])
def test_damaged_generation_file_stops_only_its_shard(make_table, tmp_path, target, mode):
    table, model = make_table(WL)
    victim = only_file(generation_dir(table) / target)
    original = victim.read_bytes()
    expected = reference_rows(tmp_path, table)
    damage(victim, mode)
    needles = (VICTIM, f"generation {GEN}", victim.name)

    dry = run_cli("merge", table.uri, "--dry-run", "--json")
    assert dry.rc == 1, dry.stderr
    assert [b["shard_id"] for b in json.loads(dry.stdout)["blocked"]] == [VICTIM]
    assert len(dry.error_lines) == 1 and all(n in dry.error_lines[0] for n in needles), dry.stderr

    run = run_cli("merge", table.uri)
    assert run.rc == 1, run.stderr
    assert len(run.error_lines) == 1 and all(n in run.error_lines[0] for n in needles), run.stderr
    assert "Traceback" not in run.stderr
    highest = {s: st.current_generation - 1 for s, st in all_shard_manifests(table.store).items()}
    assert progress(table) == {**highest, VICTIM: GEN - 1}
    assert table_rows(table) == expected

    status = run_cli("status", table.uri, "--json")
    assert status.rc == 1
    problems = {s["shard_id"]: s["problem"] for s in json.loads(status.stdout)["shards"]}
    assert all(n in problems[VICTIM] for n in needles[1:]), problems
    assert [s for s, p in problems.items() if p] == [VICTIM]

    verify = run_cli("verify", table.uri, "--json")
    assert verify.rc == 1
    found = json.loads(verify.stdout)["problems"]
    assert [(p["check"], p["shard_id"]) for p in found] == [("generations-readable", VICTIM)], found
    assert all(n in found[0]["detail"] for n in needles[1:]), found

    victim.write_bytes(original)
    assert run_cli("merge", table.uri).rc == 0
    assert table_rows(table) == model.sorted_rows()
    assert run_cli("verify", table.uri).rc == 0


def test_page_garbled_inside_a_data_file_stops_only_its_shard(make_table, tmp_path):
    """The footer and the deletion file are intact, so the plan cannot tell; the merge's
    read of the generation fails, and the run stops that shard and merges the others."""
    table, model = make_table(WL)
    victim = only_file(generation_dir(table) / "data")
    original = victim.read_bytes()
    expected = reference_rows(tmp_path, table)
    damage(victim, "garble-inside")
    run = run_cli("merge", table.uri)
    assert run.rc == 1, run.stderr
    line = run.error_lines[0] if len(run.error_lines) == 1 else run.stderr
    assert VICTIM in line and f"generation {GEN}" in line and os.path.basename(generation_dir(table)) in line, line
    highest = {s: st.current_generation - 1 for s, st in all_shard_manifests(table.store).items()}
    assert progress(table) == {**highest, VICTIM: GEN - 1}
    assert table_rows(table) == expected
    victim.write_bytes(original)
    assert run_cli("merge", table.uri).rc == 0
    assert table_rows(table) == model.sorted_rows()


def test_spark_engine_attributes_an_unreadable_generation(make_table, tmp_path, spark_session):
    """The same with the Spark engine: the executor's error comes back to the driver as the
    shard's stop, and the other shards merge."""
    table, _ = make_table(WL)
    victim = only_file(generation_dir(table) / "data")
    expected = reference_rows(tmp_path, table)
    damage(victim, "garble-inside")
    run = memwal.open(table.uri).merge(engine="spark")
    blocked = run.to_dict()["blocked"]
    assert not run.ok and run.to_dict()["engine"] == "spark"
    assert [(b["shard_id"], b["generation"]) for b in blocked] == [(VICTIM, GEN)]
    assert os.path.basename(generation_dir(table)) in blocked[0]["reason"]
    assert table_rows(table) == expected
