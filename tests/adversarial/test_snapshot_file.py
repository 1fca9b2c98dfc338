"""Past 100 shards the shard snapshot is a file, and version expiry must not delete it (H3).

The MemWAL index entry gets a new UUID on every merge, while an idle snapshot refresh
publishes nothing new: the published ``_indices/<uuid>/index.lance`` is then named only by
the old version whose entry had that UUID. Lance's cleanup of that version deleted it, and
readers fell back to reading every shard manifest ("shard snapshot unreadable: snapshot file
... not found") while ``verify`` said OK. Shards are built cheaply: 1,000 shards of one
one-row generation each, written by pylance's ShardWriter (on a few threads).
"""

from __future__ import annotations

import json
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import lance
import pyarrow as pa

import memwal
import memwal.snapshot.locate
from memwal.demo import PK_META
from memwal.snapshot.format import snapshot_file_key
from memwal.snapshot.versions import mem_wal_entry
from memwal.table import open_table
from tests.helpers import run_cli

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK_META), pa.field("v", pa.int64())])


def shard_id(i: int) -> str:
    return str(uuid.UUID(int=i + 1, version=4))


def put(uri: str, shard: int, key: int) -> None:
    ds = lance.dataset(uri)
    with ds.mem_wal_writer(shard_id(shard), durable_write=False) as w:
        w.put(pa.table({"id": [key], "v": [key]}, schema=SCHEMA))


def many_shards(uri: str, n: int) -> dict[int, int]:
    """A base table of one row and ``n`` shards of one generation each; the row model."""
    ds = lance.write_dataset(pa.table({"id": [0], "v": [0]}, schema=SCHEMA), uri)
    ds.initialize_mem_wal(bucket_column="id", num_buckets=n)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: put(uri, i, 1_000_000 + i), range(n)))
    return {0: 0, **{1_000_000 + i: 1_000_000 + i for i in range(n)}}


def ok(*argv: str) -> dict:
    run = run_cli(*argv, "--json")
    assert run.rc == 0, (argv, run.stderr)
    return json.loads(run.stdout)


def scan_from_the_snapshot(uri: str, model: dict[int, int], written_since: tuple[int, ...] = (),
                           drained: bool = False) -> None:
    """The scan starts from the published snapshot (only shards flushed since it was
    published, or drained by a GC since, come from their manifests) and sees the model."""
    doc = ok("scan", uri)
    stale = {shard_id(i) for i in written_since}
    assert doc["source"] == "index", doc
    assert all((drained or f["shard_id"] in stale) and "newer than the snapshot" in f["reason"]
               for f in doc["fallbacks"]), doc
    assert sorted((r["id"], r["v"]) for r in doc["rows"]) == sorted(model.items())


def live_file(uri: str) -> str:
    table = open_table(uri)
    return os.path.join(uri, snapshot_file_key(mem_wal_entry(table.manifest()).uuid))


def test_gc_version_expiry_keeps_the_published_snapshot_file_at_200_shards(tmp_path):
    """The issue's sequence (it had 1,000 shards; 200 are stored as a file just the same, in a
    fifth of the time: past 100 is a file): snapshot; merge; snapshot (idle); merge; catchup; compact;
    snapshot (idle); gc --grace-seconds 0 --writer-idle-seconds 0 --expire-versions 0. Then one more merge (a new
    entry UUID again) and gc: the file survives both, and readers start from it."""
    uri = str(tmp_path / "t")
    model = many_shards(uri, 200)
    first = ok("snapshot", uri)
    assert first["storage"] == "file" and first["num_shards"] == 200
    ok("merge", uri)
    assert ok("snapshot", uri)["version"] is None  # idle: nothing new to publish
    ok("merge", uri)
    ok("catchup", uri)
    ok("compact", uri)
    assert ok("snapshot", uri)["version"] is None
    gc = ok("gc", uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
    assert len(gc["deleted"]) == 200
    scan_from_the_snapshot(uri, model, drained=True)  # the drained shards from their manifests
    assert os.path.exists(live_file(uri))
    assert gc["expired_versions"]["snapshot_file_kept"], gc["expired_versions"]
    assert "shard-snapshot-readable" in ok("verify", uri)["checks"]
    assert ok("snapshot", uri)["version"] is not None  # the cycle's last job: the drains published
    scan_from_the_snapshot(uri, model)

    put(uri, 7, 5_000_000)  # one more flushed generation, merged: the entry's UUID moves on
    model[5_000_000] = 5_000_000
    ok("merge", uri)
    ok("gc", uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
    scan_from_the_snapshot(uri, model, written_since=(7,), drained=True)
    ok("verify", uri)


def test_a_merge_between_keeping_the_file_and_the_cleanup(tmp_path, monkeypatch):
    """A merge commits right after GC put its copy under the live entry's UUID and before
    Lance's cleanup: that UUID is no longer the live one and its version expires with the
    others, so GC keeps the file again after the cleanup. 101 shards: the smallest count
    stored as a file."""
    uri = str(tmp_path / "t")
    model = many_shards(uri, 101)
    ok("snapshot", uri)
    ok("merge", uri)
    real = memwal.snapshot.locate.keep_snapshot_file
    calls: list[str | None] = []

    def keep_then_merge(table, held):
        key = real(table, held)
        calls.append(key)
        if len(calls) == 1:
            put(uri, 3, 6_000_000)
            model[6_000_000] = 6_000_000
            assert memwal.open(uri).merge().ok
        return key

    monkeypatch.setattr(memwal.snapshot.locate, "keep_snapshot_file", keep_then_merge)
    gc = ok("gc", uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
    assert len(calls) == 2 and all(calls) and calls[0] != calls[1], calls
    assert gc["expired_versions"]["snapshot_file_kept"] == calls
    # The run expires exactly the versions its plan named (never by a clock difference): the
    # version that named the first copy was the plan's latest, so it and its copy stay.
    assert gc["expired_versions"]["old_versions"] == len(gc["expired_versions"]["planned"])
    assert all(os.path.exists(os.path.join(uri, key)) for key in calls)
    scan_from_the_snapshot(uri, model, written_since=(3,), drained=True)
    ok("verify", uri)


def test_verify_names_a_lost_snapshot_file_and_a_refresh_republishes(tmp_path):
    """Lance's own cleanup (not memwal gc) still deletes the file: verify says so, naming
    the file it looked for, and ``memwal snapshot`` publishes it again."""
    uri = str(tmp_path / "t")
    model = many_shards(uri, 101)
    ok("snapshot", uri)
    ok("merge", uri)
    lance.dataset(uri).cleanup_old_versions(older_than=__import__("datetime").timedelta(0))
    run = run_cli("verify", uri, "--json")
    assert run.rc == 1, run.stdout
    problems = json.loads(run.stdout)["problems"]
    assert [p["check"] for p in problems] == ["shard-snapshot-readable"]
    assert "index.lance" in problems[0]["detail"] and "not found" in problems[0]["detail"]
    assert ok("snapshot", uri)["version"] is not None
    ok("verify", uri)
    scan_from_the_snapshot(uri, model)
