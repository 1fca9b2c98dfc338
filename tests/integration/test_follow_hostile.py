"""A follower over a table that breaks under it (issue 83, item 7), as users run it: ``memwal cycle
TABLE --follow``, a process of its own, over a table pylance's ShardWriter wrote.

* The table removed (``rm -r``) while the follower runs: it says so in one line and exits 1, and
  nothing of it writes the removed path back (its leases used to: ``_mem_wal/_jobs/leases/``),
  whether it was idle or in the middle of a merge.
* A shard's newest manifest cut short in place: one line names it (not one a look, and not one
  per job that meets it), the other shards go on being merged, and the broken one is looked at
  again by the rescan only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import lance
import pyarrow as pa

from memwal.demo import Workload, keys_by_bucket, shard_ids_for
from memwal.table import open_table
from memwal.table.naming import manifest_key
from memwal.table.shards import latest_shard_version
from tests.helpers import memwal_program, wait_flushed
from tests.integration.test_follow import follower, runs_ended, wait_for  # noqa: F401 - the fixture
from tests.interleave import Barrier

WORKLOAD = Workload(base_rows=200, shards=2, generations=2, rows_per_generation=20, seed=83, indexes=False)


def start(procs: list[subprocess.Popen[str]], uri: str, *extra: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([memwal_program(), "cycle", uri, "--follow", "--json", "--poll-seconds", "0.1",
                          "--expire-versions", "600", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ})
    procs.append(p)
    return p


def all_merged(uri: str) -> bool:
    table = open_table(uri)
    return set(table.manifest().compacted.values()) == {WORKLOAD.generations}


def said(err: str) -> list[str]:
    """What the follower said at warning and above: its log lines and its ``memwal:`` lines."""
    return [line for line in err.splitlines()
            if " WARNING " in line or " ERROR " in line or line.startswith("memwal: ")]


def test_a_table_removed_under_an_idle_follower_stops_it_in_one_line(make_table, follower):  # noqa: F811
    table, _ = make_table(WORKLOAD)
    uri = table.uri
    # a short lease: its heartbeat renews every second, as it would write the removed path back
    p = start(follower, uri, "--lease-ttl", "3")
    wait_for("merge every generation", lambda: all_merged(uri))
    wait_for("end its runs", lambda: runs_ended(uri))
    time.sleep(1.5)  # a renewal or two of the follow lease
    shutil.rmtree(uri)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1, err[-3000:]
    assert said(err) == [f"memwal: error: {uri}: the table is gone (no _versions/): stopped following it"], err[-3000:]
    assert json.loads(out)["stopped"] == "table-gone"
    assert not os.path.exists(uri)  # no lease, no folder written back


def test_a_table_removed_under_a_running_merge_stops_the_follower_in_one_line(make_table, follower,  # noqa: F811
                                                                            tmp_path: Path):
    table, _ = make_table(WORKLOAD)
    uri = table.uri
    with Barrier(str(tmp_path / "barrier"), "merge.after-read") as barrier:
        p = start(follower, uri)
        barrier.wait_reached()  # the merge read its batch, holding its lease
        shutil.rmtree(uri)
        barrier.release()
        out, err = p.communicate(timeout=60)
    assert p.returncode == 1, err[-3000:]
    gone = f"memwal: error: {uri}: the table is gone (no _versions/): stopped following it"
    assert [line for line in said(err) if "memwal.history" not in line] == [gone], err[-3000:]
    assert not os.path.exists(os.path.join(uri, "_mem_wal", "_jobs", "leases"))  # no lease written back
    assert not os.path.exists(uri)  # nothing of it made again: a rewrite never creates folders


def flush_one_generation(uri: str, bucket: int) -> None:
    """One more generation of the shard of ``bucket``, by pylance's ShardWriter: 9 new keys and a
    delete of one of them, flushed (the MemTable holds 10 rows)."""
    ds = lance.dataset(uri)
    keys = keys_by_bucket(ds, list(range(100_000, 100_200)), WORKLOAD.shards)[bucket][:9]
    writer = ds.mem_wal_writer(shard_ids_for(WORKLOAD)[bucket], max_memtable_rows=10, durable_write=False)
    try:
        rows = pa.table({"id": pa.array(keys, pa.int64()), "name": [f"late-{k}" for k in keys],
                         "value": pa.array([float(k) for k in keys]),
                         "vec": pa.FixedSizeListArray.from_arrays(pa.array([0.5] * (9 * WORKLOAD.dim), pa.float32()),
                                                                  WORKLOAD.dim)}, schema=ds.schema)
        writer.put(rows)
        writer.delete(pa.table({"id": pa.array(keys[:1], pa.int64())}))
        wait_flushed(writer, 1)
    finally:
        writer.close()


def test_a_truncated_newest_shard_manifest_is_said_once_and_the_other_shards_are_merged(make_table,
                                                                                       follower):  # noqa: F811
    table, _ = make_table(WORKLOAD)
    uri = table.uri
    broken, healthy = shard_ids_for(WORKLOAD)
    p = start(follower, uri, "--rescan-seconds", "0.5")
    wait_for("merge every generation", lambda: all_merged(uri))
    wait_for("end its runs", lambda: runs_ended(uri))

    newest = Path(uri) / manifest_key(broken, latest_shard_version(table.store, broken))
    with open(newest, "r+b") as f:  # cut short in place: no new name, no new hint
        f.truncate(newest.stat().st_size // 2)
    flush_one_generation(uri, 1)
    merged_before = open_table(uri).manifest().compacted[healthy]
    wait_for("merge the healthy shard's new generation",
             lambda: open_table(uri).manifest().compacted[healthy] > merged_before)
    time.sleep(3)  # more looks and rescans

    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err[-3000:]
    logged = [line for line in said(err) if not line.startswith("memwal: warning:")]  # the exit's summary apart
    naming = [line for line in logged if broken in line]
    assert len(naming) == 1, "\n".join(logged)
    assert "cannot be read" in naming[0] and str(newest.name) in naming[0] and "truncated" in naming[0], naming
    assert open_table(uri).manifest().compacted[broken] == WORKLOAD.generations  # left as it was
