"""A reader finds each shard's latest manifest from its version hint (issue 62).

Beside a writer that never reopens, a shard keeps every manifest version of the writer's epoch (GC
prunes none of them: its claim is among them), some 50 a minute, and a reader that listed them all
paid more for it every minute. A reader now reads ``version_hint.json``, checks that the version it
names is there and probes the next ones; a hint that cannot be used (missing, garbage, leading, or
naming a version that is gone) falls back to the listing. Every read is checked against the model.
"""

from __future__ import annotations

import json

import pytest

import memwal
from memwal.table import open_table
from memwal.table.naming import manifest_key, version_hint_key
from memwal.table.shards import latest_shard_manifest, list_manifest_versions, list_shard_ids, reader_shard_manifest
from tests.clients.pylance_client import LiveWriter
from tests.integration.test_clients_pylance import Writes


def flushed(live: LiveWriter, n: int) -> int:
    keys = Writes()
    for _ in range(n):
        live.generation(keys.keys(live))
    return max(list_manifest_versions(open_table(live.uri).store, live.shard_id))


HINTS = {
    "lags": lambda latest: json.dumps({"version": latest - 3}).encode(),
    "leads": lambda latest: json.dumps({"version": latest + 5}).encode(),
    "garbage": lambda latest: b"{not json",
    "no-version": lambda latest: json.dumps({"version": 0}).encode(),
    "too-large": lambda latest: b" " * 5000 + json.dumps({"version": latest}).encode(),
    "missing": lambda latest: None,
}


@pytest.mark.parametrize("hint", sorted(HINTS))
def test_a_reader_reads_the_latest_manifest_whatever_the_hint_says(live: LiveWriter, hint: str) -> None:
    latest = flushed(live, 5)
    store = open_table(live.uri).store
    body = HINTS[hint](latest)
    if body is None:
        store.delete_many([version_hint_key(live.shard_id)])
    else:
        store.put(version_hint_key(live.shard_id), body)
    found = reader_shard_manifest(store, live.shard_id)
    assert found is not None and found.version == latest == latest_shard_manifest(store, live.shard_id).version
    assert memwal.open(live.uri).scan().sort_by("id").to_pylist() == live.model.sorted_rows()


def test_a_hint_naming_a_pruned_version_or_far_behind_falls_back_to_the_listing(live: LiveWriter,
                                                                                monkeypatch) -> None:
    from memwal.table import shards

    latest = flushed(live, 4)
    store = open_table(live.uri).store
    store.delete_many([manifest_key(live.shard_id, 1)])  # GC prunes a prefix of the versions
    store.put(version_hint_key(live.shard_id), json.dumps({"version": 1}).encode())
    assert reader_shard_manifest(store, live.shard_id).version == latest  # type: ignore[union-attr]
    monkeypatch.setattr(shards, "HINT_PROBES", 1)
    store.put(version_hint_key(live.shard_id), json.dumps({"version": latest - 2}).encode())
    assert reader_shard_manifest(store, live.shard_id).version == latest  # type: ignore[union-attr]
    assert memwal.open(live.uri).scan().sort_by("id").to_pylist() == live.model.sorted_rows()


def test_a_read_with_a_current_hint_lists_no_manifest_folder(make_table, s3_server) -> None:
    uri, opts = s3_server.new_table("tables/hinted")
    table, model = make_table(uri=uri, storage_options=opts)
    t = memwal.open(uri, storage_options=opts)
    t.scan(source="manifests")  # warm: the table's own listing of _versions/ is not what is counted
    since = len(s3_server.requests)
    rows = t.scan(source="manifests").sort_by("id").to_pylist()
    listed = [p for m, p in s3_server.requests[since:] if m == "GET" and "list-type=2" in p and "manifest" in p]
    assert listed == [] and rows == model.sorted_rows()


def test_the_lag_a_job_records_is_the_status_lag_from_the_hints(make_table, manual_clock, monkeypatch) -> None:
    """Every job of a follower ends with the table's lag (its history record, its gauges). On a disk
    it finds each shard's latest manifest from the hint, as a reader does, and walks neither the
    manifest versions nor the merged generations, nor lists the names of a shard's folders (it walks
    the folders the manifest lists above the mark): what it finds is what the whole status finds,
    with the hint current, lagging or garbage. (On an object store it lists them, as the status
    does: a thousand versions a request; tests/integration/test_requests.py counts them.)"""
    from memwal.inspect.status import lag_now, table_status

    table, _ = make_table()
    memwal.open(table.uri).merge(max_generations=1)  # merged and unmerged generations both
    shards = list_shard_ids(table.store)
    listed: list[str] = []
    names = table.store.list_dirs_and_links
    monkeypatch.setattr(table.store, "list_dirs_and_links", lambda prefix: listed.append(prefix) or names(prefix))
    for hint in ("current", "lags", "garbage"):
        if hint != "current":
            for sid in shards:
                latest = max(list_manifest_versions(table.store, sid))
                table.store.put(version_hint_key(sid), HINTS[hint](latest))
        listed.clear()
        lag = lag_now(table)
        assert listed == ["_mem_wal/"]  # the shards' folders, not the names in them
        status = table_status(table, now=manual_clock())
        assert lag == {s.shard_id: [len(s.unmerged_generations), s.unmerged_rows, s.oldest_unmerged_age_seconds and
                                    round(s.oldest_unmerged_age_seconds, 1)] for s in status.shards}
        assert sorted(lag) == shards and all(gens > 0 and rows for gens, rows, _ in lag.values())


def test_gc_finds_a_shard_moved_since_its_plan_from_the_planned_version(live: LiveWriter, monkeypatch) -> None:
    """GC's check before it rolls up (did another compactor write the shard since the plan?) probes
    the versions after the planned one instead of listing the thousands a writer that never
    reopens keeps: the latest it finds is the listing's, and it lists only when the planned version
    is gone (a prefix pruned) or far behind."""
    from memwal.table import shards

    planned = flushed(live, 2)
    latest = flushed(live, 3)
    store = open_table(live.uri).store
    listed: list[str] = []
    listing = shards._listed_versions
    monkeypatch.setattr(shards, "_listed_versions", lambda s, sid: listed.append(sid) or listing(s, sid))
    assert shards.probe_shard_manifest(store, live.shard_id, planned).version == latest  # type: ignore[union-attr]
    assert shards.probe_shard_manifest(store, live.shard_id, latest).version == latest  # type: ignore[union-attr]
    assert listed == []
    store.delete_many([manifest_key(live.shard_id, v) for v in range(1, planned + 1)])  # pruned: listed instead
    assert shards.probe_shard_manifest(store, live.shard_id, planned).version == latest  # type: ignore[union-attr]
    assert shards.probe_shard_manifest(store, live.shard_id, None).version == latest  # type: ignore[union-attr]
    assert listed == [live.shard_id, live.shard_id]
    assert latest_shard_manifest(store, live.shard_id).version == latest  # type: ignore[union-attr]


def test_the_merges_check_before_its_commit_finds_a_drain_from_the_hint(live: LiveWriter, monkeypatch) -> None:
    """The check before a merge commits (did another compactor drain a planned generation?) reads
    the shard's latest manifest as a reader does, from its hint, listing none of the versions a
    writer that never reopens keeps; it refuses the plan once a drain took a planned generation,
    and lets it be while only a flush came after the plan."""
    from memwal.merge import plan_merge
    from memwal.merge.guard import StaleProgressError, guard_progress
    from memwal.table import shards
    from memwal.table.drain import compacted_manifest, write_next_version

    flushed(live, 3)
    table = open_table(live.uri)
    plan = plan_merge(table)
    (planned,) = plan.shards
    flushed(live, 1)  # a flush since the plan: nothing the plan took moved
    listed: list[str] = []
    listing = shards._listed_versions
    monkeypatch.setattr(shards, "_listed_versions", lambda s, sid: listed.append(sid) or listing(s, sid))
    guard_progress(table, plan)
    state = reader_shard_manifest(table.store, live.shard_id)
    assert state is not None and listed == []
    first = planned.generations[0]
    write_next_version(table.store, state, compacted_manifest(state, drained=[(first.generation, first.path)]))
    with pytest.raises(StaleProgressError, match=f"generation {first.generation} left its shard manifest"):
        guard_progress(table, plan)
    assert listed == []


def test_a_version_the_caller_names_is_read_by_its_name_not_found_by_a_listing(live: LiveWriter,
                                                                               monkeypatch) -> None:
    """What a job reads of the version it just committed (its transaction file, for its receipt)
    comes from the manifest under its V2 name; a version not under one is found by the listing,
    and one that is gone is not found."""
    from memwal.errors import NotFoundError
    from memwal.table import handle

    flushed(live, 1)
    uri = live.uri
    latest = open_table(uri).manifest()
    listed: list[int] = []
    listing = handle.list_versions
    monkeypatch.setattr(handle, "list_versions", lambda s: listed.append(1) or listing(s))
    from memwal.table.manifest import read_table_manifest

    store = open_table(uri).store
    for v in (latest.version, 1):
        m = open_table(uri).manifest(v)
        listed_read = read_table_manifest(store, v)  # found by the listing
        assert (m.version, m.compacted, m.transaction_file, m.timestamp) == (
            v, listed_read.compacted, listed_read.transaction_file, listed_read.timestamp)
    assert listed == []
    with pytest.raises(NotFoundError):
        open_table(uri).manifest(latest.version + 100)
    assert listed  # not under its V2 name: the listing says it does not exist
