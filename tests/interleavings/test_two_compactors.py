"""Two compactors on one table: memwal's jobs beside lance-context's own ``cleanup_wal()`` (issue 54).

A lance-context user who also runs memwal has two mergers: the store's ``cleanup_wal()``
(Lance 9; it records progress only by draining the shard manifest, and re-merges whatever is
still listed) and ours. Each interleaving holds one of our jobs at a named step while
``cleanup_wal()`` runs to the end (deterministically: the single-threaded form of the step
hooks, never threads and sleeps), then lets ours go on. Whatever the order, every reader
(the live lance-context process, a new one, pylance over the manifests) reads the model, keys
updated across generations included, and `memwal verify` agrees, then and after a cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memwal
from tests.clients.context_store import available
from tests.clients.jobs import ZERO
from tests.clients.pylance_client import client_view
from tests.helpers import run_cli
from tests.integration.test_clients_lance_context import Client, listed
from tests.interleave import running_at

pytestmark = pytest.mark.skipif(not available(), reason="lance-context's venv is missing: make lance-context")


def cleanup_all(c: Client) -> int:
    """lance-context's merger until it has nothing left (8 generations a call); generations merged."""
    merged = 0
    while (n := c.live.cleanup_wal()) > 0:
        merged += n
    return merged


def readers_agree(c: Client) -> None:
    c.reads_every_row()
    assert client_view(c.uri) == client_view(c.control_uri)  # pylance too, against the untouched copy


def written(tmp_path: Path, generations: int = 12) -> Client:
    c = Client(tmp_path)
    for _ in range(generations):
        c.generation(12)
    return c


@pytest.fixture
def client(tmp_path: Path):
    c = written(tmp_path)
    yield c
    c.close()


@pytest.mark.parametrize("step", ["merge.before-read", "merge.after-read", "merge.before-marked-commit"])
def test_cleanup_wal_during_our_merge_loses_no_update(client: Client, step: str) -> None:
    """Our merge of generations 1-10 is held; meanwhile ``cleanup_wal()`` merges and drains 1-12.
    Ours must notice (the drain shows in the shard manifest it re-reads before committing, and
    its commit is bound to the version it planned on) and plan again: nothing older is written
    over 11-12."""
    with running_at(step, lambda: cleanup_all(client)) as reached:
        result = memwal.open(client.uri).merge(max_generations=10)
    assert reached == [step] and result.ok
    assert listed(client.uri) == []
    readers_agree(client)
    assert run_cli("verify", client.uri).rc == 0


def test_our_merge_then_cleanup_wal_over_it_keeps_what_it_reverted_listed(client: Client) -> None:
    """We merge 1-12; ``cleanup_wal()`` then merges 1-8 again (it reads the listing, not the
    merge progress) over our newer rows of 9-12 and drains 1-8. Readers stay right while 9-12
    are listed, and verify names the reverted keys. GC writes no row into the base (issue 61):
    it finds the base at the latest version holds an older generation's values where 9-12 wrote
    newer ones, and keeps 9-12 listed (named) with 1-8 as the evidence. lance-context's next
    ``cleanup_wal()`` merges 9-12 again, and then they go."""
    assert memwal.open(client.uri).merge().ok
    assert client.live.cleanup_wal() == 8
    assert listed(client.uri) == [9, 10, 11, 12]
    readers_agree(client)
    stale = run_cli("verify", client.uri)
    assert stale.rc == 1 and "merged-data-in-base" in stale.stdout
    gc = memwal.open(client.uri).gc(**ZERO, writer_idle_seconds=0).to_dict()
    kept = {b["generation"] for b in gc["blocked"] if b["reason"] == "progress-unproven"}
    assert {9, 10, 11, 12} & kept and listed(client.uri) == [9, 10, 11, 12]
    readers_agree(client)
    assert client.live.cleanup_wal() == 4
    client.live.close()
    assert run_cli("cycle", client.uri, "--grace-seconds", "0", "--expire-versions", "0",
                   "--writer-idle-seconds", "0").rc == 0
    assert listed(client.uri) == []
    assert client.reopened_rows() == client.model
    assert run_cli("verify", client.uri).rc == 0


@pytest.mark.parametrize("step", ["gc.before-rollup", "gc.before-manifest", "gc.before-delete"])
def test_cleanup_wal_during_our_gc_loses_nothing(client: Client, step: str) -> None:
    """GC is held while it rolls up (or drains) what we merged, and ``cleanup_wal()`` drains
    the generations GC planned for: GC's manifest write finds its run gone and gives it up, or
    lands first; every reader stays right, then and after a cycle with the writer gone."""
    assert memwal.open(client.uri).merge().ok
    with running_at(step, lambda: cleanup_all(client)) as reached:
        gc = memwal.open(client.uri).gc(**ZERO)
    assert reached == [step] and gc.ok
    readers_agree(client)
    client.live.close()
    assert run_cli("cycle", client.uri, "--grace-seconds", "0", "--expire-versions", "0",
                   "--writer-idle-seconds", "0").rc == 0
    assert client.reopened_rows() == client.model
    assert run_cli("verify", client.uri).rc == 0
