"""GC's listing pass (``memwal gc --listed-only``, issue 62): what a follower runs after each merge.

It rolls up and heals what the shard manifests list exactly as a whole GC run would, walking only
the listed folders, and it drains and deletes nothing: a drain is proven by reading back every
folder its version covers, which a pass that walks the listed folders only has not seen. Every
file that was there stays, byte for byte, and every reader (the live writer's, pylance's list
reader, memwal's) reads the model after it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import memwal
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.clients.pylance_client import LiveWriter, client_view
from tests.helpers import assert_one_line_error, run_cli, tree_digest
from tests.integration.test_clients_pylance import Writes
from tests.integration.test_key_index_gaps import without_key_index


def merged(live: LiveWriter, n: int) -> memwal.MemWalTable:
    """``n`` generations flushed by the live writer, then merged: the table."""
    keys = Writes()
    for _ in range(n):
        live.generation(keys.keys(live))
    t = memwal.open(live.uri)
    assert t.merge().ok
    return t


def listed(uri: str) -> list[tuple[int, str]]:
    (state,) = all_shard_manifests(open_table(uri).store).values()
    return [(g.generation, g.path) for g in state.flushed]


def replaced(doc: dict) -> list[list[tuple[int, str]]]:  # type: ignore[type-arg]
    return [[(e["generation"], e["path"]) for e in r["replaces"]] for r in doc["rolled_up"]]


def files(digest: dict[str, str]) -> dict[str, str]:
    """A tree digest's files but the run records and leases, and the shard's version hint (a hint
    every new manifest version rewrites: a rollup writes one)."""
    return {k: v for k, v in digest.items() if not k.startswith("_mem_wal/_jobs/") and not k.endswith("/")
            and not k.endswith("version_hint.json")}


def test_a_listing_pass_rolls_up_what_a_whole_run_would_and_removes_nothing(live: LiveWriter) -> None:
    t = merged(live, 4)
    whole = t.gc(dry_run=True).to_dict()
    planned = t.gc(dry_run=True, listed_only=True).to_dict()
    assert replaced(planned) == replaced(whole) == [listed(live.uri)]  # the four merged generations, one run
    before = files(tree_digest(live.uri))
    done = t.gc(listed_only=True).to_dict()
    assert done["listed_only"] is True and replaced(done) == replaced(planned)
    assert done["deleted"] == [] and done["drained"] == [] and done["wal_entries_deleted"] == 0
    after = files(tree_digest(live.uri))
    assert {k: after.get(k) for k in before} == before  # every file stays, byte for byte
    assert len(listed(live.uri)) == 1  # one rollup, under the newest merged number
    assert client_view(live.uri) == live.model.sorted_rows() == live.view()
    assert memwal.open(live.uri).scan().sort_by("id").to_pylist() == live.model.sorted_rows()


def test_a_listing_pass_drains_nothing_and_names_what_the_whole_run_drains(live: LiveWriter) -> None:
    t = merged(live, 3)
    live.close()
    entries = listed(live.uri)
    before = files(tree_digest(live.uri))
    passed = t.gc(listed_only=True, grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert passed["drained"] == [] and passed["rolled_up"] == [] and passed["deleted"] == []
    assert {(b["generation"], b["reason"]) for b in passed["blocked"]} == {(g, "listed-only") for g, _ in entries}
    assert "whole GC run" in passed["wait"]["frees"]
    assert listed(live.uri) == entries and {k: v for k, v in files(tree_digest(live.uri)).items() if k in before} \
        == before
    whole = t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert [d["generations"] for d in whole["drained"]] == [[g for g, _ in entries]] and listed(live.uri) == []
    assert client_view(live.uri) == live.model.sorted_rows()


def test_a_listing_pass_walks_only_the_listed_folders(live: LiveWriter) -> None:
    """What the manifests no longer list is the whole run's: a pass neither sees nor judges it."""
    t = merged(live, 2)
    live.close()
    t.gc(writer_idle_seconds=0, grace_seconds=0, expire_versions=600)  # drained; folders go with the grace
    live2 = LiveWriter(live.uri, live.shard_id, live.model, seed=1)
    try:
        live2.generation(Writes().keys(live2))
        kept_by_drain = {b["generation"] for b in t.gc(dry_run=True).to_dict()["blocked"]}
        passed = t.gc(dry_run=True, listed_only=True).to_dict()
        assert {b["generation"] for b in passed["blocked"]} == {g for g, _ in listed(live.uri)}
        assert kept_by_drain - {g for g, _ in listed(live.uri)}  # the whole run judges unlisted folders too
    finally:
        live2.close()


def test_a_listing_pass_heals_a_generation_without_its_key_index(live: LiveWriter) -> None:
    keys = Writes()
    for _ in range(3):
        live.generation(keys.keys(live))
    broken = without_key_index(live.uri, 2)
    done = memwal.open(live.uri).gc(listed_only=True).to_dict()
    assert [r["heal"] for r in done["rolled_up"] if {"generation": 2, "path": broken} in r["replaces"]] == [True]
    assert client_view(live.uri) == live.model.sorted_rows()


def test_listed_only_with_orphans_is_bad_input_with_nothing_written(live: LiveWriter) -> None:
    before = tree_digest(live.uri)
    run = run_cli("gc", live.uri, "--listed-only", "--orphans")
    assert_one_line_error(run, 2, "--listed-only")
    assert tree_digest(live.uri) == before
    doc = json.loads(run_cli("gc", live.uri, "--listed-only", "--dry-run", "--json").stdout)
    assert doc["listed_only"] is True


def test_a_listing_pass_on_a_disk_stats_only_the_manifest_versions_it_asks_for(live: LiveWriter) -> None:
    """The writer's view from the versions' names (each stat-ed when asked) is the one a listing
    with a stat of every version gives; a version gone between its listing and its stat is a lost
    race (NotFoundError: the plan is made again), never a wrong view."""
    from memwal.errors import NotFoundError
    from memwal.table.listing import list_mem_wal
    from memwal.table.naming import manifest_key
    from memwal.table.shards import read_shard_manifests
    from memwal.table.writer import ManifestHistory, StatOnUse, writer_view

    keys = Writes()
    for _ in range(5):
        live.generation(keys.keys(live))
    store = open_table(live.uri).store
    (sid, state), = all_shard_manifests(store).items()
    listing = list_mem_wal(store)
    lazy = StatOnUse(store, sid, read_shard_manifests(store).versions[sid])
    assert list(lazy) == sorted(listing.shards[sid].manifests) and len(lazy) == state.version
    views = [writer_view(ManifestHistory(store, state, versions), listing.shards[sid], now=state.mtime + 1,
                         idle_seconds=3600, claim=True) for versions in (listing.shards[sid].manifests, lazy)]
    assert views[0] == views[1] and views[1].live and views[1].claimed_at is not None
    asked = set(lazy._infos)
    assert asked and len(asked) < len(lazy)  # a few stat-ed, not every version
    assert all(lazy[v] == listing.shards[sid].manifests[v] for v in asked)
    gone = StatOnUse(store, sid, list(lazy))
    store.delete_many([manifest_key(sid, 1)])
    assert 1 in gone
    with pytest.raises(NotFoundError, match="gone since the listing"):
        gone[1]


def placed_whole(live: LiveWriter, rollup: dict[str, Any]) -> None:
    """The rollup's folder in its shard, whole: its marker once and its Lance manifest, the bytes it
    reported; the staging gone; listed alone; every client reads the model."""
    from memwal.table.naming import ROLLUP_MARKER, STAGING_DIR

    store = open_table(live.uri).store
    folder = f"_mem_wal/{rollup['shard_id']}/{rollup['path']}/"
    objects = list(store.list(folder))
    names = [o.key[len(folder):] for o in objects]
    assert names.count(ROLLUP_MARKER) == 1 and any(n.startswith("_versions/") for n in names), names
    assert rollup["bytes"] == sum(o.size for o in objects)
    assert list(store.list(f"{STAGING_DIR}/")) == []  # the staging is gone
    assert listed(live.uri) == [(rollup["generation"], rollup["path"])]
    assert client_view(live.uri) == live.model.sorted_rows() == live.view()


def test_a_rollup_on_a_disk_is_moved_into_its_shard_not_copied(live: LiveWriter,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The staged rollup becomes its shard's folder by one rename: no object of the staging is read
    or written again (a copy reads and writes each, some twenty a rollup), and the folder comes
    whole, its marker and Lance manifest inside, read right by every client."""
    from memwal.store.local import LocalStore
    from memwal.table.naming import STAGING_DIR

    t = merged(live, 3)
    staged: list[str] = []
    real_get = LocalStore.get

    def get(self: LocalStore, key: str, **kwargs: object) -> bytes:
        if key.startswith(STAGING_DIR):
            staged.append(key)
        return real_get(self, key, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalStore, "get", get)
    done = t.gc(listed_only=True).to_dict()
    (rollup,) = done["rolled_up"]
    assert staged == []  # nothing of the staged folder read back
    placed_whole(live, rollup)


def test_a_rollup_that_cannot_be_moved_is_copied_whole(live: LiveWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the staged folder cannot be renamed into its shard (another file system, a link in
    it), it is copied object by object, the marker with it: the same folder, read right by every
    client, and the staging removed."""
    from memwal.store.local import LocalStore

    t = merged(live, 3)
    monkeypatch.setattr(LocalStore, "move_folder", lambda self, source, target: None)  # as on EXDEV
    (rollup,) = t.gc(listed_only=True).to_dict()["rolled_up"]
    placed_whole(live, rollup)
