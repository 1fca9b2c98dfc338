"""``memwal status``, a whole GC and a fleet's probe read what they judge, not every folder a
table kept (issue 82).

A table merged every few seconds keeps a week of merged generation folders under the default
version retention (each one a retained version may still read): 84,000 files at 8,000 versions.
A status walked every one of them (``list_mem_wal``: 5.3k entries at 500 versions, 134k at
13,415). On a disk it now walks only the folders each shard's manifest lists (and, of a broken
shard, its folders above the mark); the merged folders a live checkpoint holds back are walked
only while one is live, for the bytes it holds.

Work is counted, never timed: the entries the store lists for one status, on the same table
keeping 30 and then 300 merged folders outside the listing (copies of a real merged generation,
as the 7-day retention keeps them), are the same; the status itself is the same.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import lance
import pytest

import memwal
from memwal.checkpoint.ops import create_checkpoint
from memwal.demo import write_generations
from memwal.fleet.cache import ProbeCache
from memwal.fleet.facts import TableFacts
from memwal.fleet.folders import GROWN_REFRESH_SECONDS, FolderListings
from memwal.fleet.probe import probe
from memwal.inspect.status import TableStatus, table_status
from memwal.store import open_store
from memwal.store.local import LocalStore
from memwal.table import Table, open_table
from memwal.table.naming import U64_MAX, bitrev64
from memwal.table.shards import parse_generation_dir
from tests.clients.jobs import ZERO
from tests.conftest import SMALL


@pytest.fixture
def listed_entries(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Entries (objects, folder and link names) a LocalStore listed since the last call."""
    seen = [0]

    def counting(name: str) -> None:
        real = getattr(LocalStore, name)

        def wrapper(self: LocalStore, *args: object, **kwargs: object) -> object:
            out = real(self, *args, **kwargs)
            if name == "list":
                out = list(out)
                seen[0] += len(out)
            elif isinstance(out, tuple):
                seen[0] += sum(len(part) for part in out)
            else:
                seen[0] += len(out)
            return out if name != "list" else iter(out)

        monkeypatch.setattr(LocalStore, name, wrapper)

    for name in ("list", "list_with_links", "list_dirs", "list_dirs_and_links", "list_level"):
        counting(name)

    def take() -> int:
        n, seen[0] = seen[0], 0
        return n

    return take


def _keep_merged_folders(uri: str, shard_id: str, total: int) -> None:
    """Copies of the shard's first merged folder, under other prefixes, until ``total`` merged
    folders outside the listing are on storage (what a week of retained versions keeps)."""
    shard = Path(uri, "_mem_wal", shard_id)
    merged = sorted(p for p in shard.iterdir() if parse_generation_dir(p.name) == 1)
    assert merged, "the first generation's folder is kept (the retention holds it)"
    have = sum(1 for p in shard.iterdir() if parse_generation_dir(p.name) is not None)
    for i in range(have, total):
        shutil.copytree(merged[0], shard / f"{i:08x}_gen_1")


def _files_above_the_mark(table: Table) -> int:
    """Files in the generation folders above each shard's merge mark (what a merge still owes)."""
    marks = table.manifest().compacted
    return sum(1 for shard in Path(table.uri, "_mem_wal").iterdir() if not shard.name.startswith("_")
               for folder in shard.iterdir() if (g := parse_generation_dir(folder.name)) is not None
               and g > marks.get(shard.name, 0) for f in folder.rglob("*") if f.is_file())


def _folders_of(uri: str, shard_id: str, generation: int) -> list[Path]:
    return sorted(p for p in Path(uri, "_mem_wal", shard_id).iterdir() if parse_generation_dir(p.name) == generation)


def _shape(status: TableStatus) -> list[tuple]:
    return [(s.shard_id, s.manifest_version, s.flushed_generations, s.collected_generations, s.unmerged_generations,
             s.merged_listed, s.rollups, s.unindexed, s.unmerged_bytes) for s in status.shards]


def _merged_and_drained(make_table: Callable[..., tuple[Table, object]]) -> tuple[Table, str]:
    """A table with generations merged and drained from the listing, their folders kept (the
    retained versions before the merge read them), and one of its shards."""
    table, _ = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok
    assert t.gc(**{**ZERO, "expire_versions": "never"}, writer_idle_seconds=0).ok
    return table, sorted(table.manifest().compacted)[0]


def test_a_status_lists_the_same_entries_whatever_the_merged_folders_kept(make_table, listed_entries):
    table, shard_id = _merged_and_drained(make_table)
    counts, shapes = [], []
    for kept in (30, 300):
        _keep_merged_folders(table.uri, shard_id, kept)
        fresh = open_table(table.uri)
        listed_entries()
        st = table_status(fresh)
        counts.append(listed_entries())
        shapes.append(_shape(st))
    assert shapes[0] == shapes[1]
    assert counts[1] == counts[0], counts  # 270 more folders kept, nothing more listed
    assert any(s.unmerged_generations for s in st.shards) and any(s.merged_listed or s.flushed_generations
                                                                  for s in st.shards)


def test_a_live_checkpoint_still_shows_the_bytes_it_holds(make_table):
    """The merged folders a live checkpoint holds back are walked for their bytes."""
    table, _ = make_table()
    t = memwal.open(table.uri)
    create_checkpoint(open_table(table.uri), lifetime_seconds=3600)
    assert t.merge().ok
    assert t.gc(**{**ZERO, "expire_versions": "never"}, writer_idle_seconds=0).ok
    (c,) = table_status(open_table(table.uri)).checkpoints
    assert c.generations_held > 0 and c.bytes_held > 0


def test_a_whole_gc_walks_the_folders_it_judges_not_every_folder_the_retention_keeps(make_table, listed_entries):
    """A whole GC run names every generation folder (the orphans and the gates need the names)
    but walks the files only of those it lists, deletes, proves or finds orphaned: 270 more merged
    folders kept by the retained versions add their 270 names to the listing, not their files
    (issue 82: 84,000 files at 8,000 versions, a second of a whole run's 1.6 s at 3,000)."""
    table, shard_id = _merged_and_drained(make_table)
    counts, docs = [], []
    for kept in (30, 300):
        _keep_merged_folders(table.uri, shard_id, kept)
        listed_entries()
        doc = memwal.open(table.uri).gc(**{**ZERO, "expire_versions": "never"}, writer_idle_seconds=0,
                                        dry_run=True).to_dict()
        counts.append(listed_entries())
        docs.append(doc)
    files = sum(1 for _ in Path(table.uri, "_mem_wal", shard_id, f"{299:08x}_gen_1").rglob("*") if _.is_file())
    assert files > 1
    assert counts[1] - counts[0] == 270, counts  # a name each, no file
    held = [[b for b in d["blocked"] if b["shard_id"] == shard_id and b["generation"] == 1] for d in docs]
    assert len(held[1]) - len(held[0]) == 270 and all(
        any(r.startswith("retained-version:") for r in b["reasons"]) for b in held[1])
    assert docs[0]["deleted"] == docs[1]["deleted"] == []


def test_a_fleet_probe_on_a_disk_counts_the_folders_it_does_not_walk(make_table, listed_entries):
    """A fleet's probe of a table on a disk lists each shard's folder names and walks only the
    folders its figures need: 270 more merged, caught-up folders kept add their 270 names, not
    their files (a fleet round over six tables of 4,000 versions spent 87% of its time walking
    them). Its figures are those of the object stores' one listing of every file, but for GC's
    bytes, estimated from the folders it walked."""
    table, shard_id = _merged_and_drained(make_table)
    assert memwal.open(table.uri).catchup().ok  # generation 1 caught up: GC may take its folders
    counts, facts = [], []
    for kept in (30, 300):
        _keep_merged_folders(table.uri, shard_id, kept)
        listed_entries()
        facts.append(probe(table.uri, open_store(table.uri)))
        counts.append(listed_entries())
    assert counts[1] - counts[0] == 270, counts  # a name each, no file
    whole_store = open_store(table.uri)
    whole_store.has_directories = False  # as on an object store: one listing of every file
    whole = probe(table.uri, whole_store)
    by_shard = [{s.shard_id: s for s in f.shards} for f in (facts[1], whole)]
    assert by_shard[0].keys() == by_shard[1].keys()
    for sid, chosen in by_shard[0].items():
        exact = by_shard[1][sid]
        assert replace(chosen, collectable_bytes=0) == replace(exact, collectable_bytes=0)
        assert exact.collectable_bytes / 2 <= chosen.collectable_bytes <= exact.collectable_bytes * 2
    before = {s.shard_id: s for s in facts[0].shards}[shard_id]
    assert by_shard[0][shard_id].collectable == before.collectable == 2  # generations: the copies are of one
    assert by_shard[0][shard_id].collectable_bytes > 5 * before.collectable_bytes  # their folders: bytes
    assert any(s.unmerged for s in facts[1].shards)  # the merge's debt is there too, walked


def _settle(uri: str) -> None:
    """Every folder of the table as if it had stood still for a minute (its time set back): what
    a fleet's probe finds of an idle table at its next round."""
    past = time.time() - 60
    for folder, _, _ in os.walk(uri):
        os.utime(folder, (past, past))


def test_a_fleet_probe_of_an_idle_table_on_a_disk_lists_nothing_at_two_ages(make_table, listed_entries):
    """A fleet plans every few seconds, each plan probing every table: on a disk the probe listed
    ``_versions/`` (a name a version), each shard's folders, manifest versions and WAL entries at
    every round, growing with what the retention keeps (76 ms a probe at 11,000 versions). Listings
    of folders that stood still are kept while each folder's stamp (device, inode, time) is the one
    it had: at 30 and at 300 merged folders kept, and 270 versions more, the probe of an idle table
    lists the files of the folders above the merge mark and no name (the merged folders it samples for
    GC's bytes are written once: their walks are kept too); its facts are a fresh probe's. A table
    being written: the next test."""
    table, shard_id = _merged_and_drained(make_table)
    assert memwal.open(table.uri).catchup().ok  # generation 1 caught up: GC may take its folders
    ds = lance.dataset(table.uri)
    counts, facts = [], []
    for kept in (30, 300):
        _keep_merged_folders(table.uri, shard_id, kept)
        while len(ds.versions()) < kept:
            ds.update_config({"n": str(len(ds.versions()))})  # a version each: what a week of merges keeps
        _settle(table.uri)
        cache = ProbeCache()
        first = probe(table.uri, open_store(table.uri), cache)
        listed_entries()
        facts.append(probe(table.uri, open_store(table.uri), cache))
        counts.append(listed_entries())
        assert facts[-1] == first == probe(table.uri, open_store(table.uri))  # a fresh cache's, too
    # the files of the folders above the merge mark alone: no name, and the sampled merged folders' walks kept
    assert counts == [_files_above_the_mark(table)] * 2, counts


def _sans_fingerprint(facts: TableFacts) -> TableFacts:
    """A probe's facts but the fingerprint (a grown listing's differs from a fresh one's: a digest of the
    folder names as they were found) and when each shard's progress moved (a fresh probe cannot tell)."""
    return replace(facts, fingerprint="", merged_at={})


def test_a_fleet_probe_of_a_table_being_written_lists_no_name_at_two_ages(make_table, listed_entries):
    """A table being written moves ``_versions/``, its shard's folder, ``manifest/`` and ``wal/`` at
    every flush and merge, and the probe listed each again whole (47 ms a probe at 11,000 versions
    beside a writer). What it made of them is grown instead: the latest version and the newest shard
    manifest and WAL entry by a stat of each next name, the shard's folders by those its newest
    manifest names. After a flush and a merge, at 30 and at 300 merged folders and versions kept, the
    probe lists the same files (those of the folders it walks) and no name, and its facts are a
    fresh probe's. Folders another process removed (the lowest, as GC takes them) are seen at the next
    probe; folders another process added that no manifest names, once the listing is
    :data:`GROWN_REFRESH_SECONDS` old."""
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok
    assert t.gc(**{**ZERO, "expire_versions": "never"}, writer_idle_seconds=0).ok
    assert t.catchup().ok  # generation 1 caught up: GC may take its folders
    shard_id = sorted(table.manifest().compacted)[0]
    originals = _folders_of(table.uri, shard_id, 1)
    clock = [0.0]
    ds = lance.dataset(table.uri)
    counts = []
    for kept in (30, 300):
        _keep_merged_folders(table.uri, shard_id, kept)
        while len(ds.versions()) < kept:
            ds.update_config({"n": str(len(ds.versions()))})
        _settle(table.uri)
        cache = ProbeCache(folders=FolderListings(monotonic=lambda: clock[0]))
        probe(table.uri, open_store(table.uri), cache)  # the folders listed, settled: kept
        model = write_generations(table.uri, SMALL, model, generations=1, seed_offset=kept)  # a flush a shard
        assert memwal.open(table.uri).merge(max_generations=1).ok  # and a version on top
        listed_entries()
        grown = probe(table.uri, open_store(table.uri), cache)
        counts.append(listed_entries())
        fresh = probe(table.uri, open_store(table.uri))
        assert _sans_fingerprint(grown) == _sans_fingerprint(fresh) and grown.version == table.manifest().version
        assert {s.shard_id: s.unmerged for s in grown.shards} != {}
    assert counts[0] == counts[1] and counts[0] < 300, counts  # the walked folders' files, no name

    # folders another process removed, the lowest first (as GC takes them): the shard's folder is listed again
    for p in set(_folders_of(table.uri, shard_id, 1)) - set(originals):
        shutil.rmtree(p)
    after_gc = probe(table.uri, open_store(table.uri), cache)
    assert _sans_fingerprint(after_gc) == _sans_fingerprint(probe(table.uri, open_store(table.uri)))

    # a folder another process added that no manifest names: seen once the listing is ten minutes old
    shutil.copytree(originals[0], originals[0].parent / "ffffffff_gen_1")
    model = write_generations(table.uri, SMALL, model, generations=1, seed_offset=1)  # the folder moves again
    unseen = probe(table.uri, open_store(table.uri), cache)
    whole = probe(table.uri, open_store(table.uri))
    unseen_bytes, whole_bytes = ({s.shard_id: s for s in f.shards}[shard_id].collectable_bytes for f in (unseen, whole))
    assert unseen_bytes < whole_bytes
    clock[0] += GROWN_REFRESH_SECONDS
    assert _sans_fingerprint(probe(table.uri, open_store(table.uri), cache)) == _sans_fingerprint(whole)


def test_a_forged_entry_at_the_top_of_the_numbers_does_not_stop_a_probe(make_table):
    """A WAL entry named for the last u64 position (anyone who can write the table's storage can put
    one) has no next name to stat: the probe lists the folder instead of failing, so the fleet still
    plans the table."""
    table, shard_id = _merged_and_drained(make_table)
    wal = Path(table.uri, "_mem_wal", shard_id, "wal")
    wal.mkdir(exist_ok=True)
    (wal / f"{bitrev64(U64_MAX)}.arrow").write_bytes(b"forged")
    _settle(table.uri)
    cache = ProbeCache()
    before = probe(table.uri, open_store(table.uri), cache)  # the forged name is the newest listed
    (wal / f"{bitrev64(7)}.arrow").write_bytes(b"another")  # the folder moves: grown from the newest known
    after = probe(table.uri, open_store(table.uri), cache)
    assert after.problems == before.problems
    assert {s.shard_id for s in after.shards} == {s.shard_id for s in before.shards}
