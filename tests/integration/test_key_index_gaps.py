"""A listed generation with no primary-key index (issue 62; upstream lance#9035: on a table whose
only index is the key, a flush may not wait for its key index) makes every list reader fail while
it is listed: pylance's ``lsm_scanner()`` and ``LsmScanner`` over the manifests. ``status`` and
``verify`` name it, and GC rewrites it with its key index (the same rows, under the same number),
merged or not, whatever holds it listed: every reader then reads the model again, the live
writer's too after its next flush."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

import memwal
from memwal.demo import shard_ids_for
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.clients.pylance_client import LiveWriter, client_view
from tests.helpers import run_cli
from tests.integration.test_clients_pylance import ONE, Writes


def without_key_index(uri: str, generation: int, *, flushed_ago: float = 120) -> str:
    """Remove the listed generation's ``_pk_index/`` and date its flush ``flushed_ago`` seconds back
    (by default past GC's heal delay)."""
    (state,) = all_shard_manifests(open_table(uri).store).values()
    (path,) = [g.path for g in state.flushed if g.generation == generation]
    folder = Path(uri, "_mem_wal", state.shard_id, path)
    shutil.rmtree(folder / "_pk_index", ignore_errors=True)  # a second call only dates it
    old = time.time() - flushed_ago
    for f in folder.rglob("*"):
        os.utime(f, (old, old))
    return path


def test_a_gap_younger_than_the_heal_delay_waits_and_says_when_it_goes(live: LiveWriter) -> None:
    """A flush writes its key index milliseconds after the generation's manifest (lance#9035: or
    never): GC leaves a gap flushed less than HEAL_AFTER ago and says when it may rewrite it (the
    follower comes back then); at that age it is rewritten."""
    from memwal.gc.generations import HEAL_AFTER

    keys = Writes()
    for _ in range(2):
        live.generation(keys.keys(live))
    broken = without_key_index(live.uri, 2, flushed_ago=0)
    (state,) = all_shard_manifests(open_table(live.uri).store).values()
    manifests = Path(live.uri, "_mem_wal", state.shard_id, broken, "_versions").glob("*.manifest")
    flushed = min(f.stat().st_mtime for f in manifests)
    gc = memwal.open(live.uri).gc(grace_seconds=0).to_dict()
    assert not [r for r in gc["rolled_up"] if {"generation": 2, "path": broken} in r["replaces"]]
    assert gc["heal_at"] == pytest.approx(flushed + HEAL_AFTER)
    without_key_index(live.uri, 2, flushed_ago=HEAL_AFTER)
    gc = memwal.open(live.uri).gc(grace_seconds=0).to_dict()
    assert [r["heal"] for r in gc["rolled_up"] if {"generation": 2, "path": broken} in r["replaces"]] == [True]
    assert gc["heal_at"] is None and client_view(live.uri) == live.model.sorted_rows()


@pytest.mark.parametrize("merged", [False, True])
def test_a_generation_without_its_key_index_is_named_and_rewritten(live: LiveWriter, merged: bool) -> None:
    keys = Writes()
    for _ in range(3):
        live.generation(keys.keys(live))
    if merged:
        assert memwal.open(live.uri).merge().ok
    broken = without_key_index(live.uri, 2)
    with pytest.raises(Exception, match="_pk_index"):
        client_view(live.uri)
    status = json.loads(run_cli("status", live.uri, "--json").stdout)
    assert status["shards"][0]["unindexed"] == [2]
    check = run_cli("verify", live.uri)
    assert check.rc == 1 and "listed-key-indexes-present" in check.stdout

    gc = memwal.open(live.uri).gc(grace_seconds=0).to_dict()  # the writer is live: nothing is drained
    (replaced,) = [r for r in gc["rolled_up"] if {"generation": 2, "path": broken} in r["replaces"]]
    # unmerged, it is rewritten alone; merged, the rollup of the live writer's run takes it in
    assert replaced["heal"] == (not merged) and (replaced["replaces"] == [{"generation": 2, "path": broken}]) != merged
    (state,) = all_shard_manifests(open_table(live.uri).store).values()
    assert broken not in [g.path for g in state.flushed]
    assert client_view(live.uri) == live.model.sorted_rows()
    live.generation(keys.keys(live))  # the live writer's next flush reloads the listing
    assert live.view() == live.model.sorted_rows()
    assert client_view(live.uri) == live.model.sorted_rows()
    assert run_cli("verify", live.uri).rc == 0


def test_old_shard_manifest_versions_go_and_every_reader_and_writer_goes_on(live: LiveWriter,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 62: a shard writes a manifest version at every flush and drain (some 50 a minute
    beside a follower); GC prunes the old ones no reader can hold (older than the grace period,
    below the newest few kept and below the live writer's claim), a prefix: the writer kept open,
    a new writer and every reader go on, and verify finds no gap."""
    import memwal.gc.manifests as manifests

    monkeypatch.setattr(manifests, "KEEP", 8)
    keys = Writes()
    for _ in range(24):
        live.generation(keys.keys(live))
    live.close()
    live = LiveWriter(live.uri, shard_ids_for(ONE)[0], live.model)  # replaced (a rotation): a new claim
    live.generation(keys.keys(live))
    assert memwal.open(live.uri).merge().ok and memwal.open(live.uri).catchup().ok
    folder = Path(live.uri, "_mem_wal", shard_ids_for(ONE)[0], "manifest")
    before = len(list(folder.glob("*.binpb")))
    gc = memwal.open(live.uri).gc(grace_seconds=0).to_dict()
    assert gc["manifest_versions_pruned"] >= 20 and len(list(folder.glob("*.binpb"))) <= before - 20 + 1  # + its own
    live.generation(keys.keys(live))
    assert live.view() == live.model.sorted_rows()
    claimed = memwal.open(live.uri).status().shards[0].writer_claimed_at
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    assert memwal.open(live.uri).status().shards[0].writer_claimed_at == claimed  # its claim's version stays
    live.close()
    assert run_cli("cycle", live.uri, "--grace-seconds", "0", "--expire-versions", "0",
                   "--writer-idle-seconds", "0").rc == 0
    assert client_view(live.uri) == live.model.sorted_rows()
    again = LiveWriter(live.uri, shard_ids_for(ONE)[0], live.model)
    again.generation(keys.keys(again))
    assert again.view() == again.model.sorted_rows()
    again.close()
    assert run_cli("verify", live.uri).rc == 0


def test_a_writer_that_never_reopens_keeps_its_claim_and_the_newest_versions_only(live: LiveWriter) -> None:
    """Issue 82: the versions of a live writer's epoch all stayed while it lived (4,011 after
    3,000 flushes, listed by every merge plan and listing pass). GC keeps its claim (which tells
    when its view opened) and the newest KEEP (128: a gap below them is one readers allow); the
    writer goes on, every reader reads every row, its claim time is unchanged, verify passes, and
    a new writer opens on the shard."""
    from memwal.gc.manifests import KEEP

    keys = Writes()
    folder = Path(live.uri, "_mem_wal", shard_ids_for(ONE)[0], "manifest")
    for _ in range(KEEP + 20):
        live.generation(keys.keys(live))
    assert memwal.open(live.uri).merge().ok and memwal.open(live.uri).catchup().ok
    claimed = memwal.open(live.uri).status().shards[0].writer_claimed_at
    before = len(list(folder.glob("*.binpb")))
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    kept = len(list(folder.glob("*.binpb")))
    assert before > KEEP + 20 and kept <= 1 + KEEP + 2, (before, kept)  # the claim, the newest, GC's own
    assert memwal.open(live.uri).status().shards[0].writer_claimed_at == claimed
    for _ in range(3):
        live.generation(keys.keys(live))
        assert live.view() == live.model.sorted_rows()
    assert client_view(live.uri) == live.model.sorted_rows()
    assert run_cli("verify", live.uri).rc == 0
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    assert memwal.open(live.uri).status().shards[0].writer_claimed_at == claimed
    live.close()
    again = LiveWriter(live.uri, shard_ids_for(ONE)[0], live.model)
    again.generation(keys.keys(again))
    assert again.view() == again.model.sorted_rows() and client_view(again.uri) == again.model.sorted_rows()
    again.close()
