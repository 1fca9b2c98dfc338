"""A job killed at any step of a rollup, a heal or a merge leaves every client reading right (issue 83, item 3).

A follower killed with SIGKILL and restarted beside a pylance writer that never stops: the
report saw the live writer's ``lsm_scanner()`` return keys twice. A rollup and a heal are two
steps on storage (the folder, moved from a staging clone, then the shard manifest version that
lists it) and a merge several (its passes, its marker): a kill between any two must leave
storage in a state every client reads right, and the next pass must finish or redo the job
without ever listing two folders of one generation number (pylance's block lists are keyed by
number: two folders of one number in a view make one of them hide the other's rows).

Each case runs the job as its own process (``memwal gc``, ``memwal merge``), holds it at one
named step through a barrier directory and kills it there: no ``finally``, no lease release, no
staging cleanup, as a SIGKILL leaves it. Then, with the live writer still open, each client's
read is compared with the model row for row (each key once, its newest value): the writer's own
``lsm_scanner()`` and a reader that builds its snapshots from the shard manifests, as a new
process does. The writer then flushes again, a new pass runs (merge, GC, a listing pass) and
every read is checked again: the kill, the writer's next flush and the restarted job in every
order a follower meets them.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memwal
from memwal.errors import StateMovedError
from memwal.table import open_table
from memwal.table.drain import ListedEntry, ShardManifest, compacted_manifest
from memwal.table.shards import ShardState, all_shard_manifests
from tests.clients.pylance_client import LiveWriter, client_view, live_writer
from tests.integration.test_clients_pylance import ONE, Writes
from tests.interleave import SETTLE_TIMEOUT, Barrier

pytestmark = pytest.mark.long  # 29 jobs killed, each its own process: the workers start it first

VENV_BIN = Path(sys.executable).parent

#: Every step a GC that rolls up passes on a disk, in order: before anything is written, the
#: rollup's folder staged, moved whole into the shard but unlisted, listed with its version hint
#: not yet moved, and the deletions after. (An object store copies the folder, its Lance manifests
#: last, a step more: ``rollup.copied``.)
ROLLUP_STEPS = ["gc.planned", "gc.leased", "gc.before-marker", "gc.before-drain", "gc.before-rollup",
                "rollup.staged", "rollup.written", "gc.before-manifest", "gc.before-hint",
                "gc.before-delete", "gc.after-delete"]
#: The steps where a heal differs from a rollup: its folder on storage, then listed.
HEAL_STEPS = ["gc.before-rollup", "rollup.staged", "rollup.written", "gc.before-manifest",
              "gc.before-hint", "gc.before-delete"]
#: Every step of a merge with a delete pass, from its plan to its report.
MERGE_STEPS = ["merge.planned", "merge.leased", "merge.before-read", "merge.after-read", "merge.before-delete-commit",
               "merge.after-delete-pass", "merge.before-marked-commit", "merge.after-upsert-commit",
               "merge.before-report"]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveWriter]:
    """A pylance ``ShardWriter`` kept open over a one-shard table, its writes in a model."""
    yield from live_writer(tmp_path, ONE)


def killed_at(step: str, argv: list[str], barrier_dir: Path) -> None:
    """Run ``memwal <argv>`` as its own process until it reaches ``step``, then SIGKILL it there
    (its process group: nothing of it runs on). Fails if the job ends without reaching the step
    (the case would then test nothing)."""
    with Barrier(str(barrier_dir), step) as barrier:
        env = {**os.environ, "MEMWAL_STEP_BARRIER": barrier.directory}
        proc = subprocess.Popen([str(VENV_BIN / "memwal"), *argv], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + SETTLE_TIMEOUT * 2
            while not os.path.exists(barrier.reached_path):  # a condition polled in another process
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    raise AssertionError(f"memwal {argv[0]} exited {proc.returncode} before step {step}: {err[-2000:]}")
                assert time.monotonic() < deadline, f"memwal {argv[0]} never reached step {step}"
                time.sleep(0.01)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stderr:
                proc.stderr.close()


def twice(rows: list[dict[str, Any]]) -> list[int]:
    """Keys a read returned more than once."""
    return sorted(k for k, n in collections.Counter(r["id"] for r in rows).items() if n > 1)


def reads_right(live: LiveWriter, when: str) -> None:
    """The live writer's ``lsm_scanner()`` and a reader of the shard manifests (a new process's
    view) each return every key once, with its newest value: row for row the model."""
    want = live.model.sorted_rows()
    view = live.view()
    assert twice(view) == [], f"{when}: the live writer reads keys twice: {twice(view)[:10]}"
    assert view == want, f"{when}: the live writer's lsm_scanner() differs from the model"
    other = client_view(live.uri)
    assert twice(other) == [], f"{when}: a new reader reads keys twice: {twice(other)[:10]}"
    assert other == want, f"{when}: a reader of the shard manifests differs from the model"


def one_folder_a_number_listed(uri: str) -> None:
    """No shard manifest version lists two entries of one generation number (a reader's block
    list is keyed by number: one of the two would hide the other's rows)."""
    (state,) = all_shard_manifests(open_table(uri).store).values()
    numbers = [g.generation for g in state.flushed]
    assert len(numbers) == len(set(numbers)), f"version {state.version} lists {numbers}"


def next_passes(live: LiveWriter, keys: Writes) -> None:
    """What follows a kill beside a writer that never stops: the writer flushes, a restarted
    follower merges, collects and rolls up (a whole GC, then a listing pass), the writer flushes
    again; every client reads right after each."""
    live.generation(keys.keys(live))
    reads_right(live, "after the writer's next flush")
    t = memwal.open(live.uri)
    assert t.merge().ok
    reads_right(live, "after the restarted merge")
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    one_folder_a_number_listed(live.uri)
    reads_right(live, "after the restarted GC")
    live.generation(keys.keys(live))
    reads_right(live, "after the writer's flush that follows the restarted GC")
    assert memwal.open(live.uri).merge().ok
    assert memwal.open(live.uri).gc(grace_seconds=0, listed_only=True).ok
    one_folder_a_number_listed(live.uri)
    live.generation(keys.keys(live))
    reads_right(live, "after a listing pass and the writer's next flush")


@pytest.mark.parametrize("step", ROLLUP_STEPS)
def test_a_gc_killed_at_each_step_of_a_rollup(live: LiveWriter, tmp_path: Path, step: str) -> None:
    """Five merged generations the live writer's view needs (it opened before their merge): GC
    keeps them listed, rolled up into one generation, and is killed at ``step``."""
    keys = Writes()
    for _ in range(5):
        live.generation(keys.keys(live))
    assert memwal.open(live.uri).merge().ok
    killed_at(step, ["gc", live.uri, "--grace-seconds", "0"], tmp_path / "barrier")
    one_folder_a_number_listed(live.uri)
    reads_right(live, f"right after a GC killed at {step}")
    next_passes(live, keys)


@pytest.mark.parametrize("step", HEAL_STEPS)
def test_a_gc_killed_at_each_step_of_a_heal(live: LiveWriter, tmp_path: Path, step: str) -> None:
    """A listed unmerged generation flushed without its key index (upstream lance#9035) is
    rewritten with one, beside a rollup of the merged ones, and GC is killed at ``step``. Every
    list reader fails while the generation is listed without its index (the writer's too, until
    its next flush lists the rewrite), so right after the kill the writer reads as it did before
    it, and a new reader as before or, once the heal is listed, right; once the restarted GC
    healed it and the writer flushed, each reads right."""
    keys = Writes()
    for _ in range(4):
        live.generation(keys.keys(live))
    assert memwal.open(live.uri).merge().ok
    live.generation(keys.keys(live))
    (state,) = all_shard_manifests(open_table(live.uri).store).values()
    broken = Path(live.uri, "_mem_wal", live.shard_id, state.flushed[-1].path)
    shutil.rmtree(broken / "_pk_index")
    then = time.time() - 60  # flushed a minute ago: past memwal.gc.generations.HEAL_AFTER
    for f in (broken / "_versions").iterdir():
        os.utime(f, (then, then))
    writer_before, reader_before = _outcome(live)
    killed_at(step, ["gc", live.uri, "--grace-seconds", "0"], tmp_path / "barrier")
    one_folder_a_number_listed(live.uri)
    writer_after, reader_after = _outcome(live)
    assert writer_after == writer_before, f"a GC killed at {step} changed what the live writer reads"
    # killed once the heal is listed (its hint not moved, or the deletions to go), a new reader
    # reads it: right; killed before, as before
    assert reader_after in (reader_before, live.model.sorted_rows()), f"a GC killed at {step}: a new reader reads wrong"
    assert memwal.open(live.uri).gc(grace_seconds=0).ok  # the restarted follower heals it
    one_folder_a_number_listed(live.uri)
    assert client_view(live.uri) == live.model.sorted_rows()
    next_passes(live, keys)


def _outcome(live: LiveWriter) -> tuple[object, object]:
    """What the live writer and a new reader read: rows, or the failure's kind."""
    def read(f: Any) -> object:
        try:
            return f()
        except OSError as exc:
            return type(exc).__name__
    return read(live.view), read(lambda: client_view(live.uri))


@pytest.mark.parametrize("step", MERGE_STEPS)
def test_a_merge_killed_at_each_step(live: LiveWriter, tmp_path: Path, step: str) -> None:
    """A rollup listed for the live writer, two more generations flushed (updates of rolled-up
    keys, a delete each), and their merge killed at ``step``: the rollup's older values never
    come back over the newer generations', and the restarted merge and GC finish the job."""
    keys = Writes()
    for _ in range(4):
        live.generation(keys.keys(live))
    assert memwal.open(live.uri).merge().ok
    assert memwal.open(live.uri).gc(grace_seconds=0).ok
    for _ in range(2):
        live.generation(keys.keys(live))
    reads_right(live, "before the merge")
    killed_at(step, ["merge", live.uri], tmp_path / "barrier")
    reads_right(live, f"right after a merge killed at {step}")
    next_passes(live, keys)


def test_a_rollup_is_never_listed_beside_another_entry_of_its_number() -> None:
    """The guard behind :func:`one_folder_a_number_listed`, without a writer: a listing that
    already holds two entries of one number (a writer's retried flush, a forged version) gets no
    rollup or heal of one of them under that number; the other entries are as they were."""
    manifest = ShardManifest(version=7, writer_epoch=1, current_generation=6)
    for g, path in [(4, "aaaaaaaa_gen_4"), (5, "bbbbbbbb_gen_5"), (5, "cccccccc_gen_5")]:
        manifest.sstables.add(generation=g, path=path)
    state = ShardState("s", 7, manifest, 0.0)
    heal = ([(5, "bbbbbbbb_gen_5")], ListedEntry(5, "dddddddd_gen_5"))
    with pytest.raises(StateMovedError, match="another entry of generation 5"):
        compacted_manifest(state, runs=[heal])
    rollup = ([(4, "aaaaaaaa_gen_4")], ListedEntry(4, "eeeeeeee_gen_4"))
    out = compacted_manifest(state, runs=[rollup])
    assert [(s.generation, s.path) for s in out.sstables] == [
        (4, "eeeeeeee_gen_4"), (5, "bbbbbbbb_gen_5"), (5, "cccccccc_gen_5")]
