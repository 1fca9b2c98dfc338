"""Checkpoint records from whoever can write the table's storage (issue 38, L2 and M1).

A checkpoint record is neither trusted nor fatal: one that is corrupt or misnamed is named and
skipped by every view and job, and ``checkpoint delete`` removes it; an expiry a century away is
capped to the longest lifetime and shown as a long pin; a record that names a tag of the user's
own never makes GC delete that tag; a checkpoint whose base version is gone is reported by
``verify`` and ``status``, and ``scan --checkpoint`` says why it cannot read it. A record of a
newer format than this code knows holds GC (every generation, every version) and is never
removed as expired or malformed.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

import memwal
from memwal.checkpoint.ops import refresh_checkpoint
from memwal.checkpoint.record import MAX_LIFETIME_SECONDS, record_key
from memwal.demo import shard_ids_for
from memwal.errors import BadInputError
from memwal.table.shards import list_generation_dirs
from tests.conftest import SMALL
from tests.helpers import assert_one_line_error, run_cli


@pytest.fixture
def table(make_table) -> str:
    t, _ = make_table()
    api = memwal.open(t.uri)
    assert api.merge().ok and api.catchup().ok
    return t.uri


def plant(uri: str, cid: str, doc: object) -> Path:
    path = Path(uri, record_key(cid))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def record(cid: str, version: int, **fields: object) -> dict:
    now = time.time()
    return {"id": cid, "name": None, "version": version, "created_at": now - 10, "expires_at": now + 600,
            "shards": {}, "format": 1, **fields}


@pytest.mark.parametrize("doc", [{"id": "b" * 32, "version": "x"}, "not an object", {"id": "b" * 32}],
                         ids=["wrong type", "not an object", "fields missing"])
def test_a_corrupt_record_is_named_and_skipped_by_every_view_and_job_and_delete_removes_it(table, doc):
    path = plant(table, "b" * 32, doc)
    live = memwal.open(table).checkpoint(lifetime=600, refresh=False)
    with live as cp:
        run = run_cli("checkpoint", "list", table, "--json")
        assert run.rc == 0, run.stderr
        listed = json.loads(run.stdout)
        assert [c["id"] for c in listed["checkpoints"]] == [cp.id]  # the real one is still honoured
        assert [u["uri"] for u in listed["unreadable"]] == [str(path)]
        status = run_cli("status", table, "--json")
        assert status.rc == 0, status.stderr
        assert "corrupt checkpoint record" in json.loads(status.stdout)["unreadable_checkpoints"][0]
        gc = run_cli("gc", table, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--json")
        assert gc.rc == 0, gc.stderr
        assert f"skipping corrupt checkpoint record {path}" in gc.stderr
        verify = run_cli("verify", table)
        assert verify.rc == 1 and str(path) in verify.stdout, verify.stdout
        assert memwal.open(table).scan(checkpoint=cp.id).num_rows > 0  # its view survived the GC
    deleted = run_cli("checkpoint", "delete", table, "b" * 32, "--json")
    assert deleted.rc == 0, deleted.stderr
    assert json.loads(deleted.stdout) == {"id": "b" * 32, "deleted": True, "unreadable": True}
    assert not path.exists()
    assert run_cli("verify", table).rc == 0


def test_a_record_whose_id_is_not_its_file_name_is_skipped_and_can_be_removed(table):
    version = memwal.open(table).table.dataset().version
    path = plant(table, "c" * 32, record("d" * 32, version))
    listed = json.loads(run_cli("checkpoint", "list", table, "--json").stdout)
    assert listed["checkpoints"] == [] and "is not its file's" in listed["unreadable"][0]["reason"]
    assert run_cli("checkpoint", "delete", table, "c" * 32).rc == 0
    assert not path.exists()


def test_an_expiry_a_century_away_is_capped_and_shown_as_a_long_pin(table):
    version = memwal.open(table).table.dataset().version
    now = time.time()
    plant(table, "e" * 32, record("e" * 32, version, expires_at=now + 100 * 365 * 86400))
    (c,) = json.loads(run_cli("checkpoint", "list", table, "--json").stdout)["checkpoints"]
    assert c["expires_at"] <= time.time() + MAX_LIFETIME_SECONDS
    assert c["claimed_expiry"] > now + 99 * 365 * 86400
    (s,) = json.loads(run_cli("status", table, "--json").stdout)["checkpoints"]
    assert s["long_pin"] and s["claimed_expiry"] is not None
    text = run_cli("status", table).stdout
    assert "(its record claimed longer: capped)" in text and "more days" in text
    verify = run_cli("verify", table, "--json")
    warnings = json.loads(verify.stdout)["warnings"]
    assert any("e" * 32 in w["detail"] and "more days" in w["detail"] for w in warnings), warnings


def test_gc_never_deletes_a_tag_an_expired_record_names(table):
    t = memwal.open(table)
    ds = t.table.dataset()
    ds.tags.create("release-1", ds.version)
    now = time.time()
    plant(table, "f" * 32, record("f" * 32, ds.version, created_at=now - 7200, expires_at=now - 3600,
                                  tag="release-1"))
    doc = t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert doc["checkpoints_removed"] == ["f" * 32]
    assert "release-1" in t.table.dataset().tags.list()


def test_a_checkpoint_whose_version_is_gone_is_reported_and_scan_says_why(table):
    t = memwal.open(table)
    cp = t.checkpoint(lifetime=3600, refresh=False).__enter__()
    cid, version = cp.id, cp.version
    ds = t.table.dataset()
    ds.update_config({"memwal-test.later": "1"})  # a newer version, so the checkpoint's can be cleaned up
    ds.tags.delete(f"memwal-checkpoint-{cid}")
    ds.cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    assert version not in [v["version"] for v in t.table.dataset().versions()]  # gone, as a foreign cleanup does
    verify = run_cli("verify", table)
    assert verify.rc == 1 and f"checkpoint {cid}: base version {version} of its view is gone" in verify.stdout
    status = json.loads(run_cli("status", table, "--json").stdout)
    assert [c["version_gone"] for c in status["checkpoints"]] == [True]
    scan = run_cli("scan", table, "--checkpoint", cid)
    assert_one_line_error(scan, 2, cid, f"pins version {version}, which is gone")


def _folders(uri: str) -> dict[str, dict[str, int]]:
    """Every generation folder of the table on disk, with its bytes."""
    store = memwal.open(uri).table.store
    out = {}
    for s in shard_ids_for(SMALL):
        for name in list_generation_dirs(store, s):
            out[f"{s}/{name}"] = sum(p.stat().st_size for p in Path(uri, "_mem_wal", s, name).rglob("*") if p.is_file())
    return out


def test_a_record_of_a_newer_format_holds_gc_and_is_never_removed(table):
    """A newer memwal's record (format 2, a shape this code cannot read, its expiry passed by
    this code's reading) may pin any generation and any version: GC keeps them all, naming it,
    and neither removes it as expired nor skips it as corrupt; reading at it or refreshing it is
    refused; an operator's delete removes it, and then GC collects."""
    cid = "a" * 32
    path = plant(table, cid, {"id": cid, "format": 2, "expires": time.time() - 3600,
                              "views": [{"shard": "s", "upto": 99}]})
    t = memwal.open(table)
    versions = {v["version"] for v in t.table.dataset().versions()}
    assert len(versions) > 1
    before = _folders(table)
    assert len(before) == SMALL.shards * SMALL.generations and all(before.values())
    reason = f"checkpoint:{cid} unknown format 2"
    dry = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0, dry_run=True).to_dict()
    assert dry["deleted"] == [] and dry["checkpoints_removed"] == []
    assert dry["expired_versions"]["planned"] == []  # every version is held too
    assert len(dry["blocked"]) == len(before) and all(reason in b["reasons"] for b in dry["blocked"])
    done = t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert done["deleted"] == [] and done["checkpoints_removed"] == []
    assert _folders(table) == before and path.exists()
    assert {v["version"] for v in t.table.dataset().versions()} == versions
    listed = json.loads(run_cli("checkpoint", "list", table, "--json").stdout)
    assert listed["unreadable"] == [] and [c["newer_format"] for c in listed["checkpoints"]] == [2]
    assert_one_line_error(run_cli("scan", table, "--checkpoint", cid), 2, "format 2, newer than this memwal knows")
    with pytest.raises(BadInputError, match="format 2"):
        refresh_checkpoint(t.table, cid, lifetime_seconds=600)
    assert json.loads(path.read_text())["format"] == 2  # untouched
    assert run_cli("checkpoint", "delete", table, cid).rc == 0 and not path.exists()
    assert len(t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()["deleted"]) == len(before)
