"""Path safety is a property of the store: no walk, read, write or delete follows a symlink.

Every hostile case plants a symbolic link in a merged table (statically, or swapped in after
GC planned) that points outside it, and asserts: the outside folder is byte-for-byte the
same afterwards (``tree_digest`` never follows links), the link itself is still in place,
the reason is reported as ``unsafe-path`` and the CLI exits 1 naming the link. Generations
not behind a link are still collected, so a planted link cannot be used to stop GC for
everything either. Merge refuses a generation reached through a link (exit 1 naming it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import lance
import pytest

import memwal
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations
from memwal.errors import LinkedPathError, NotFoundError, UnsafePathError
from memwal.gc import delete_objects
from memwal.store import LocalStore, local_trees, open_store
from memwal.table import open_table
from memwal.table.naming import parse_generation_dir
from memwal.table.shards import list_wal_entries, read_wal_entry_meta
from tests.helpers import assert_one_line_error, run_cli, tree_digest
from tests.interleave import running_at

W = Workload(base_rows=200, shards=2, generations=3, rows_per_generation=20, indexes=False, seed=3)
S0, S1 = shard_ids_for(W)
GC = ("gc", "--json", "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
ORPHANS = ("--orphans", "--orphan-age-seconds", "0")


# --------------------------------------------------------------------------- tables


def _build(root: Path, *, merged: bool) -> str:
    uri = str(root / "table")
    _, model = create_base_table(uri, W)
    write_generations(uri, W, model)
    if merged:
        run = run_cli("merge", uri)
        assert run.rc == 0, run.stderr
        # Old versions expired once here, so the tests' --expire-versions 0 changes no base file.
        lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    return uri


@pytest.fixture(scope="module")
def merged_template(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("merged"), merged=True)


@pytest.fixture(scope="module")
def unmerged_template(tmp_path_factory) -> str:
    return _build(tmp_path_factory.mktemp("unmerged"), merged=False)


def _copy(template: str, tmp_path: Path) -> Path:
    dst = tmp_path / "table"
    shutil.copytree(template, dst, symlinks=True)
    return dst


@pytest.fixture
def table(merged_template, tmp_path) -> Path:
    """A fresh copy of a merged table whose every generation passes every GC gate."""
    return _copy(merged_template, tmp_path)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the table that a planted link points into."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "precious.txt").write_text("must survive")
    return out


def shard(t: Path, s: str) -> Path:
    return t / "_mem_wal" / s


def gen(t: Path, s: str, g: int) -> Path:
    (d,) = [p for p in shard(t, s).iterdir() if parse_generation_dir(p.name) == g]
    return d


def gen_dirs(t: Path, s: str) -> set[int]:
    """Generations whose directory is really there (a link is not one)."""
    return {g for p in shard(t, s).iterdir() if (g := parse_generation_dir(p.name)) and not p.is_symlink()}


def swap_out(path: Path, outside: Path, *, relative: bool = False) -> Path:
    """Move ``path`` outside the table and leave a symbolic link to it in its place."""
    target = outside / f"moved-{path.name}"
    shutil.move(str(path), str(target))
    path.symlink_to(os.path.relpath(target, path.parent) if relative else target)
    return path


def link_to(path: Path, target: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def file_out(path: Path, outside: Path) -> Path:
    """Replace a file by a link to a copy of it outside the table."""
    target = outside / f"copy-{path.name}"
    shutil.copy(path, target)
    path.unlink()
    return link_to(path, target)


def outside_dir(outside: Path, name: str) -> Path:
    d = outside / name
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "data.lance").write_bytes(b"outside bytes")
    (d / "top.bin").write_bytes(b"more outside bytes")
    return d


def key_of(t: Path, p: Path) -> str:
    return p.relative_to(t).as_posix()


def latest_manifest(t: Path, s: str) -> Path:
    return max((shard(t, s) / "manifest").glob("*.binpb"), key=lambda p: p.name[::-1])


# --------------------------------------------------------------------------- GC: planted links


@dataclass
class Case:
    name: str
    plant: Callable[[Path, Path], Path]  # (table, outside) -> the link planted
    blocked: tuple[str | None, int] | None  # the unsafe-path entry expected; None: the run stops first
    args: tuple[str, ...] = ()
    other_shard_collected: bool = True
    one_error_line: bool = True  # a broken shard manifest adds its own line


def _staging_inner(t: Path, o: Path) -> Path:
    crashed = t / "_mem_wal" / "_staging" / "crashed"
    crashed.mkdir(parents=True)
    (crashed / "part-0.lance").write_bytes(b"staged")
    return link_to(crashed / "evil", o / "precious.txt")


def _orphan_inner(t: Path, o: Path) -> Path:
    orphan = shard(t, S0) / "deadbeef_gen_1"
    (orphan / "data").mkdir(parents=True)
    (orphan / "data" / "x.lance").write_bytes(b"orphan data")
    return link_to(orphan / "data" / "evil.lance", o / "precious.txt")


def _wal_file(t: Path, o: Path) -> Path:
    return file_out(sorted((shard(t, S0) / "wal").iterdir())[0], o)


def _gen_file(t: Path, o: Path) -> Path:
    return file_out(next((gen(t, S0, 1) / "data").iterdir()), o)


def _gen_to_table_root(t: Path, o: Path) -> Path:
    g = gen(t, S0, 1)
    shutil.move(str(g), str(o / "moved-gen"))
    g.symlink_to("../../..")  # the table root itself: deleting through it would delete the base table
    return g


def _gen_dangling(t: Path, o: Path) -> Path:
    g = gen(t, S0, 3)
    shutil.move(str(g), str(o / "moved-gen"))
    return link_to(g, o / "nowhere")


CASES = [
    Case("generation-dir", lambda t, o: swap_out(gen(t, S0, 1), o), (S0, 1)),
    Case("generation-dir-relative-link", lambda t, o: swap_out(gen(t, S0, 2), o, relative=True), (S0, 2)),
    Case("generation-dir-to-table-root", _gen_to_table_root, (S0, 1)),
    Case("generation-dir-dangling", _gen_dangling, (S0, 3)),
    Case("generation-_versions", lambda t, o: swap_out(gen(t, S0, 1) / "_versions", o), (S0, 1)),
    Case("generation-data-dir", lambda t, o: swap_out(gen(t, S0, 2) / "data", o), (S0, 2)),
    Case("generation-_pk_index", lambda t, o: swap_out(gen(t, S0, 1) / "_pk_index", o), (S0, 1)),
    Case("generation-file", _gen_file, (S0, 1)),
    Case("unlisted-deadbeef_gen_99", lambda t, o: link_to(shard(t, S0) / "deadbeef_gen_99", outside_dir(o, "g99")),
         (S0, 99), ORPHANS),
    Case("unlisted-deadbeef_gen_1", lambda t, o: link_to(shard(t, S0) / "deadbeef_gen_1", outside_dir(o, "g1")),
         (S0, 1), ORPHANS),
    Case("orphan-with-inner-link", _orphan_inner, (S0, 1), ORPHANS),
    Case("wal-dir", lambda t, o: swap_out(shard(t, S0) / "wal", o), (S0, 0)),
    Case("wal-file", _wal_file, (S0, 0)),
    Case("shard-dir", lambda t, o: swap_out(shard(t, S0), o), (S0, 0)),
    Case("manifest-dir", lambda t, o: swap_out(shard(t, S0) / "manifest", o), (S0, 0), one_error_line=False),
    Case("manifest-file", lambda t, o: file_out(latest_manifest(t, S0), o), (S0, 0), one_error_line=False),
    Case("_staging/evil", lambda t, o: link_to(t / "_mem_wal" / "_staging" / "evil", outside_dir(o, "evil")),
         (None, 0), ORPHANS),
    Case("_staging", lambda t, o: link_to(t / "_mem_wal" / "_staging", outside_dir(o, "staging")), (None, 0), ORPHANS),
    Case("_staging-inner-link", _staging_inner, (None, 0), ORPHANS),
    Case("_jobs", lambda t, o: swap_out(t / "_mem_wal" / "_jobs", o), None, other_shard_collected=False),
    Case("_mem_wal", lambda t, o: swap_out(t / "_mem_wal", o), None, other_shard_collected=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gc_never_deletes_through_a_planted_link(case: Case, table: Path, outside: Path) -> None:
    link = case.plant(table, outside)
    target = os.readlink(link)
    watched = {p: tree_digest(str(p)) for p in (outside, table / "data", table / "_versions")}

    run = run_cli(*GC, *case.args, str(table))

    link_key = key_of(table, link)
    if case.one_error_line:
        assert_one_line_error(run, 1, link_key)
    else:
        assert run.rc == 1 and "Traceback" not in run.stderr, run.stderr
        assert any(link_key in line for line in run.error_lines), run.stderr
    for p, digest in watched.items():
        assert tree_digest(str(p)) == digest, f"{p} changed"
    assert os.path.islink(link) and os.readlink(link) == target  # the link itself is left in place
    if case.blocked is None:
        assert "symbolic link" in run.error_lines[0]
        return
    doc = json.loads(run.stdout)
    shard_id, generation = case.blocked
    unsafe = [b for b in doc["blocked"] if b["reason"] == "unsafe-path"]
    assert any(b["shard_id"] == shard_id and b["generation"] == generation and link_key in " ".join(b["reasons"])
               for b in unsafe), unsafe
    assert not any(f"{d['shard_id']}/{d['path']}" in link_key for d in doc["deleted"])
    if ORPHANS[0] in case.args:
        assert doc["orphans_deleted"] == 0
    if case.other_shard_collected:
        assert gen_dirs(table, S1) == set()  # what no link touches is still collected
        assert {d["generation"] for d in doc["deleted"] if d["shard_id"] == S1} == {1, 2, 3}


@pytest.mark.parametrize("folder", ["history", "history-detail", "history-month", "checkpoints", "digest",
                                    "compactions"])
def test_a_link_among_our_records_is_reported_and_left(table: Path, outside: Path, folder: str) -> None:
    """The plan's survey does not stat ``_jobs/`` (a year of run records cost a stat each), but
    its links are still found by name: one planted among the run records GC prunes (or as the
    detail object of an expired record, which GC prunes with it, or as the month folder of
    expired records), among the checkpoint records, or as the retained-progress digest or the
    record of GC's compactions a GC run reads and rewrites, is reported by name and left in place
    (neither read, nor written, nor pruned through), and GC's own work is done."""
    from memwal.history.log import detail_key, record_key
    from memwal.history.record import RunRecord
    from memwal.table.compactions import COMPACTIONS_KEY
    from memwal.table.progress_digest import DIGEST_KEY

    expired = record_key(1_000.0, "merge", "abc")
    record = RunRecord("merge", "abc", "local", None, "ok", 1_000.0, detail=True)
    key = {"history": record_key(1_000.0, "merge", "planted"),
           "history-detail": detail_key(expired),
           "history-month": expired.rsplit("/", 1)[0],
           "checkpoints": "_mem_wal/_jobs/checkpoints/x.json",
           "digest": DIGEST_KEY, "compactions": COMPACTIONS_KEY}[folder]
    target = outside / "precious.txt"
    if folder == "history-detail":  # the expired record itself is a regular file
        (table / expired).parent.mkdir(parents=True, exist_ok=True)
        (table / expired).write_bytes(record.dumps())
    if folder == "history-month":  # the link's folder holds what would be an expired record
        target = outside / "month"
        target.mkdir()
        (target / expired.rsplit("/", 1)[1]).write_bytes(record.dumps())
    before = tree_digest(outside)
    link = link_to(table / key, target)
    run = run_cli(*GC, "--history-retention", "0", str(table))
    assert_one_line_error(run, 1, key)
    assert link.is_symlink() and tree_digest(outside) == before
    assert (outside / "precious.txt").read_text() == "must survive"
    assert gen_dirs(table, S0) == gen_dirs(table, S1) == set()


def test_generation_link_holds_its_wal_entries_and_nothing_else(table: Path, outside: Path) -> None:
    """A generation held by a link keeps its WAL entries (they may go only with it); its shard's
    other generations still go."""
    store = open_table(str(table)).store
    gen1_wal = {e.key for e in list_wal_entries(store, S0)
                if read_wal_entry_meta(store, S0, e.position).generation == 1}
    assert gen1_wal
    swap_out(gen(table, S0, 1), outside)
    run = run_cli(*GC, str(table))
    assert_one_line_error(run, 1, key_of(table, gen(table, S0, 1)))
    assert all((table / k).is_file() for k in gen1_wal)
    assert gen_dirs(table, S0) == set() and gen(table, S0, 1).is_symlink()
    assert {(d["shard_id"], d["generation"]) for d in json.loads(run.stdout)["deleted"]} == {
        (S0, 2), (S0, 3), (S1, 1), (S1, 2), (S1, 3)}


def test_dry_run_reports_the_link_and_exits_1(table: Path, outside: Path) -> None:
    link = swap_out(shard(table, S0) / "wal", outside)
    with_digest = tree_digest(str(table))
    run = run_cli("gc", "--json", "--dry-run", "--grace-seconds", "0", "--writer-idle-seconds", "0", str(table))
    assert_one_line_error(run, 1, key_of(table, link))
    assert tree_digest(str(table)) == with_digest
    assert {"shard_id": S0, "generation": 0, "reason": "unsafe-path"}.items() <= next(
        b for b in json.loads(run.stdout)["blocked"] if b["reason"] == "unsafe-path").items()


# --------------------------------------------------------------------------- GC: swapped in after planning


@dataclass
class Swap:
    name: str
    swap: Callable[[Path, Path], Path]
    held: tuple[str, int] | None  # a (shard, generation) that must not be reported deleted
    orphans: bool = False


def _plan_staging(t: Path) -> None:
    crashed = t / "_mem_wal" / "_staging" / "crashed"
    crashed.mkdir(parents=True)
    (crashed / "part-0.lance").write_bytes(b"staged")


SWAPS = [
    Swap("generation-dir", lambda t, o: swap_out(gen(t, S0, 1), o), (S0, 1)),
    Swap("generation-_versions", lambda t, o: swap_out(gen(t, S0, 2) / "_versions", o), (S0, 2)),
    Swap("generation-data-dir", lambda t, o: swap_out(gen(t, S0, 3) / "data", o), (S0, 3)),
    Swap("wal-dir", lambda t, o: swap_out(shard(t, S0) / "wal", o), None),
    Swap("shard-dir", lambda t, o: swap_out(shard(t, S0), o), (S0, 1)),
    Swap("_mem_wal", lambda t, o: swap_out(t / "_mem_wal", o), (S1, 1)),
    Swap("staging-orphan", lambda t, o: swap_out(t / "_mem_wal" / "_staging" / "crashed", o), None, orphans=True),
]


@pytest.mark.parametrize("case", SWAPS, ids=[s.name for s in SWAPS])
def test_link_swapped_in_after_planning_is_refused_at_deletion(case: Swap, table: Path, outside: Path) -> None:
    if case.orphans:
        _plan_staging(table)
    options = dict(grace_seconds=0, writer_idle_seconds=0, orphan_age_seconds=0, orphans=case.orphans)
    dry = memwal.open(str(table)).gc(dry_run=True, **options).to_dict()
    assert not [b for b in dry["blocked"] if b["reason"] == "unsafe-path"]
    assert dry["deleted"] and (dry["orphans"] or not case.orphans)
    swapped: dict = {}

    def swap() -> None:  # after the plan and its re-check, right before the deletions
        swapped["link"] = case.swap(table, outside)
        swapped["target"] = os.readlink(swapped["link"])
        swapped["before"] = tree_digest(str(outside))

    if case.name == "_mem_wal":  # the run's own records live there too: it ends naming the link
        with running_at("gc.before-delete", swap), pytest.raises(LinkedPathError, match="_mem_wal is a symbolic link"):
            memwal.open(str(table)).gc(**options)
        assert tree_digest(str(outside)) == swapped["before"]  # nothing deleted or written through it
        assert os.path.islink(swapped["link"]) and os.readlink(swapped["link"]) == swapped["target"]
        return
    with running_at("gc.before-delete", swap):
        result = memwal.open(str(table)).gc(**options).to_dict()
    link, target, before = swapped["link"], swapped["target"], swapped["before"]

    assert tree_digest(str(outside)) == before  # byte-for-byte: nothing deleted through the link
    assert os.path.islink(link) and os.readlink(link) == target
    unsafe = [b for b in result["blocked"] if b["reason"] == "unsafe-path"]
    assert unsafe, result["blocked"]
    if case.held:
        assert case.held not in {(d["shard_id"], d["generation"]) for d in result["deleted"]}
        assert any((b["shard_id"], b["generation"]) == case.held for b in unsafe), unsafe
    if case.orphans:
        assert result["orphans_deleted"] == 0


def _data_file(t: Path) -> Path:
    (f,) = (gen(t, S0, 2) / "data").iterdir()
    return f


# Swapped in after GC listed a batch of generations on a local disk and before it unlinks
# them (the step between the phases of memwal.store.local_trees): every directory is checked
# in place right before its tree's unlinks, every file lstat-ed right before its own.
LISTED_SWAPS = [
    Swap("generation-dir", lambda t, o: swap_out(gen(t, S0, 1), o), (S0, 1)),
    Swap("generation-data-dir", lambda t, o: swap_out(gen(t, S0, 3) / "data", o), (S0, 3)),
    Swap("generation-_versions", lambda t, o: swap_out(gen(t, S0, 2) / "_versions", o), (S0, 2)),
    Swap("generation-data-file", lambda t, o: file_out(_data_file(t), o), (S0, 2)),
    Swap("shard-dir", lambda t, o: swap_out(shard(t, S0), o), (S0, 1)),
]


@pytest.mark.parametrize("quiet", [False, True], ids=["recent-dirs", "quiet-dirs"])
@pytest.mark.parametrize("case", LISTED_SWAPS, ids=[s.name for s in LISTED_SWAPS])
def test_link_swapped_in_after_listing_a_batch_is_refused_at_unlink(case: Swap, quiet: bool, table: Path, outside: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a file is unlinked: lstat-ed again (the table's directories were made just
    now), and as listed when its directory was quiet (every directory counts as quiet
    here): the swap moves the directory's ctime, so the file is lstat-ed and refused."""
    if quiet:
        monkeypatch.setattr(local_trees, "QUIET_NS", 0)
    swapped: dict = {}

    def swap() -> None:
        swapped["link"] = case.swap(table, outside)
        swapped["target"] = os.readlink(swapped["link"])
        swapped["before"] = tree_digest(str(outside))

    with running_at("store.trees-listed", swap) as reached:
        result = memwal.open(str(table)).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert reached == ["store.trees-listed"]
    link, target, before = swapped["link"], swapped["target"], swapped["before"]
    assert tree_digest(str(outside)) == before  # nothing deleted in what was moved out, nor through the link
    assert os.path.islink(link) and os.readlink(link) == target
    unsafe = {(b["shard_id"], b["generation"]) for b in result["blocked"] if b["reason"] == "unsafe-path"}
    assert case.held in unsafe and case.held not in {(d["shard_id"], d["generation"]) for d in result["deleted"]}
    assert gen_dirs(table, S1) == set()  # the other shard's generations all went


def test_a_file_written_after_listing_keeps_its_directories_until_the_next_run(table: Path) -> None:
    late: dict = {}

    def write() -> None:
        late["file"] = gen(table, S0, 1) / "data" / "late.lance"
        late["file"].write_bytes(b"written after the listing")

    with running_at("store.trees-listed", write):
        memwal.open(str(table)).gc(grace_seconds=0, writer_idle_seconds=0)
    assert late["file"].read_bytes() == b"written after the listing"  # never listed: never unlinked
    assert sorted(p.name for p in late["file"].parent.parent.iterdir()) == ["data"]  # the rest went
    assert gen_dirs(table, S0) == {1} and gen_dirs(table, S1) == set()
    memwal.open(str(table)).gc(grace_seconds=0,
                               writer_idle_seconds=0)  # the shard manifest still lists it: the next run finishes
    assert gen_dirs(table, S0) == set()


def test_gc_holds_only_what_a_quarter_of_its_descriptors_allow(table: Path) -> None:
    """Every directory of a batch stays open until it is removed: with a soft limit of 64
    descriptors GC opens four trees at a time (not 512) and still collects everything."""
    code = ("import resource, sys, memwal\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
            "from memwal.store.local_trees import trees_at_once\n"
            "assert trees_at_once() == 4, trees_at_once()\n"
            f"r = memwal.open({str(table)!r}).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()\n"
            "print(len(r['deleted']), r['wal_entries_deleted'], len(r['blocked']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(W.shards * W.generations), str(W.shards * W.generations), "0"]
    assert gen_dirs(table, S0) == gen_dirs(table, S1) == set()


def test_store_refuses_keys_whose_directory_became_a_link_after_listing(table: Path, outside: Path) -> None:
    """The window between listing a generation and unlinking its files: checked per key, at deletion."""
    store = open_store(str(table))
    g = gen(table, S0, 1)
    keys = [o.key for o in store.list(f"{key_of(table, g)}/")]
    assert keys
    swap_out(g, outside)
    before = tree_digest(str(outside))
    with pytest.raises(LinkedPathError) as err:
        store.delete_many(keys)
    assert sorted(err.value.refused) == sorted(keys)
    assert "symbolic link" in str(err.value) and key_of(table, g) in str(err.value)
    assert tree_digest(str(outside)) == before and g.is_symlink()


# --------------------------------------------------------------------------- merge


MERGE_CASES = {
    "generation-dir": lambda t, o: swap_out(gen(t, S0, 1), o),
    "generation-dir-relative": lambda t, o: swap_out(gen(t, S0, 1), o, relative=True),
    "generation-_versions": lambda t, o: swap_out(gen(t, S0, 1) / "_versions", o),
    "generation-data-file": _gen_file,
    # listings skip links, so this shard would look empty: it must be reported, not skipped
    "shard-dir": lambda t, o: swap_out(shard(t, S0), o),
}


@pytest.mark.parametrize("name", list(MERGE_CASES))
def test_merge_refuses_a_generation_reached_through_a_link(name: str, unmerged_template, tmp_path,
                                                           outside: Path) -> None:
    t = _copy(unmerged_template, tmp_path)
    link = MERGE_CASES[name](t, outside)
    before = tree_digest(str(outside))
    run = run_cli("merge", "--json", str(t))
    assert_one_line_error(run, 1, S0, "unsafe-path", key_of(t, link))
    doc = json.loads(run.stdout)
    assert [(b["shard_id"], b["generation"]) for b in doc["blocked"]] == [(S0, 1)]
    assert [s["shard_id"] for s in doc["shards"]] == [S1]  # the other shard still merged
    assert tree_digest(str(outside)) == before and os.path.islink(link)


def test_merge_stops_a_shard_at_the_first_linked_generation(unmerged_template, tmp_path, outside: Path) -> None:
    t = _copy(unmerged_template, tmp_path)
    swap_out(gen(t, S0, 2), outside)
    run = run_cli("merge", "--json", str(t))
    assert_one_line_error(run, 1, S0, "unsafe-path")
    doc = json.loads(run.stdout)
    assert {s["shard_id"]: (s["from_generation"], s["to_generation"]) for s in doc["shards"]} == {
        S0: (1, 1), S1: (1, 3)}
    assert doc["blocked"][0]["generation"] == 2


def test_merge_refuses_a_linked_mem_wal_folder(unmerged_template, tmp_path, outside: Path) -> None:
    t = _copy(unmerged_template, tmp_path)
    link = swap_out(t / "_mem_wal", outside)
    before, table_before = tree_digest(str(outside)), tree_digest(str(t))
    run = run_cli("merge", str(t))
    assert_one_line_error(run, 1, "_mem_wal", "symbolic link")
    assert tree_digest(str(outside)) == before and tree_digest(str(t)) == table_before and os.path.islink(link)


# --------------------------------------------------------------------------- the store itself


def test_local_store_lists_reads_and_writes_nothing_through_links(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "t"
    (root / "a" / "real").mkdir(parents=True)
    (root / "a" / "real" / "f").write_bytes(b"inside")
    link_to(root / "a" / "dlink", outside_dir(outside, "d"))
    link_to(root / "a" / "flink", outside / "precious.txt")
    before = tree_digest(str(outside))
    store = LocalStore(str(root))
    assert [o.key for o in store.list("a/")] == ["a/real/f"]
    assert [o.key for o in store.list("a/dlink/")] == []
    assert store.list_dirs("a/") == ["real"]
    assert store.list_dirs("a/dlink/") == []
    assert store.list_links("a/") == ["a/dlink", "a/flink"]
    assert store.list_links("a/dlink/sub/") == ["a/dlink"]
    assert store.list_links("a/real/") == []
    assert store.head("a/flink") is None and store.head("a/dlink/top.bin") is None
    for key in ("a/flink", "a/dlink/top.bin"):
        with pytest.raises(LinkedPathError, match="symbolic link"):
            store.get(key)
        with pytest.raises(LinkedPathError):
            store.get_range(key, -4, 4)
        with pytest.raises(LinkedPathError):
            store.get_heads(["a/real/f", key], 4)
        with pytest.raises(LinkedPathError):
            store.get_many(["a/real/f", key])
        with pytest.raises(LinkedPathError):
            store.put(key, b"overwritten")
        with pytest.raises(LinkedPathError):
            store.put_if_absent(key, b"overwritten")
    with pytest.raises(LinkedPathError):
        store.put("a/dlink/new/file", b"x")
    with pytest.raises(LinkedPathError) as err:
        store.delete_many(["a/flink", "a/dlink/top.bin", "a/dlink/sub/data.lance", "a/real/f"])
    assert sorted(err.value.refused) == ["a/dlink/sub/data.lance", "a/dlink/top.bin", "a/flink"]
    assert not (root / "a" / "real" / "f").exists()  # the safe key of the batch still went
    assert tree_digest(str(outside)) == before
    assert (root / "a" / "flink").is_symlink() and (root / "a" / "dlink").is_symlink()
    assert store.child("a/dlink").list_dirs("") == [] and store.child("a/dlink").head("top.bin") is None


def test_a_folder_is_never_moved_through_or_with_a_link(tmp_path: Path, outside: Path) -> None:
    """A rollup's move (LocalStore.move_folder) neither reaches a folder through a link, nor
    moves a link: a staged folder holding one is left for the copy, which skips links."""
    root = tmp_path / "t"
    (root / "stage" / "gen").mkdir(parents=True)
    (root / "stage" / "gen" / "f").write_bytes(b"rows")
    link_to(root / "stage" / "gen" / "escape", outside_dir(outside, "d"))
    link_to(root / "linked", outside_dir(outside, "e"))
    before = tree_digest(str(outside))
    store = LocalStore(str(root))
    assert store.move_folder("stage/gen", "shard/new") is None  # a link inside: not moved
    assert (root / "stage" / "gen" / "f").read_bytes() == b"rows" and not (root / "shard").exists()
    (root / "stage" / "gen" / "escape").unlink()
    with pytest.raises(LinkedPathError):
        store.move_folder("stage/gen", "linked/new")  # the target's folder is a link
    with pytest.raises(LinkedPathError):
        store.move_folder("linked/sub", "shard/new")  # the source's folder is a link
    assert (root / "stage" / "gen" / "f").read_bytes() == b"rows"
    assert tree_digest(str(outside)) == before


def test_a_folder_nested_past_any_generation_is_left_to_the_copy(tmp_path: Path) -> None:
    """A staged folder is walked before its move: one nested far deeper than a Lance generation
    (planted in the staging) is not moved, and nothing in it changes; the copy, whose walk keeps
    its own stack, takes it."""
    from memwal.store.local_writes import MOVE_DEPTH

    root = tmp_path / "t"
    deep = root / "stage" / "gen" / Path(*["d"] * (MOVE_DEPTH + 1))
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"rows")
    (root / "stage" / "gen" / "top").write_bytes(b"top")
    store = LocalStore(str(root))
    assert store.move_folder("stage/gen", "shard/new") is None
    assert (deep / "f").read_bytes() == b"rows" and not (root / "shard").exists()
    assert store.move_folder("stage/gen/d", "shard/new") == 4  # one level less: within the bound, moved
    assert (root / "shard" / "new" / Path(*["d"] * MOVE_DEPTH) / "f").read_bytes() == b"rows"


def test_a_fifo_in_the_table_is_not_an_object_and_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    os.mkfifo(root / "pipe")
    store = LocalStore(str(root))
    with pytest.raises(NotFoundError):
        store.get("pipe")
    assert store.head("pipe") is None and list(store.list("")) == []
    assert store.get_heads(["pipe"], 4) == [None] and store.get_many(["pipe"]) == [None]


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_gc_deletes_only_under_its_own_folders(kind: str, request, tmp_path: Path) -> None:
    """The allowed-prefix rule holds for every store (S3 has no links, it has keys)."""
    if kind == "local":
        store = open_store(str(tmp_path / "t"))
    else:
        uri, opts = request.getfixturevalue("s3_server").new_table("tables/t")
        store = open_store(uri, opts)
    keep = ["_versions/1.manifest", "data/x.lance", "_mem_wal/notashard/f", f"_mem_wal/{S1}", "_mem_wal/_other/f"]
    for key in keep + [f"_mem_wal/{S0}/wal/a", "_mem_wal/_staging/s/x", "_mem_wal/_jobs/audit/y"]:
        store.put(key, b"x")
    for key in keep:
        with pytest.raises(UnsafePathError, match="deletions are allowed only under"):
            delete_objects(store, [f"_mem_wal/{S0}/wal/a", key])
    assert all(store.exists(k) for k in keep) and store.exists(f"_mem_wal/{S0}/wal/a")  # nothing of a bad batch
    assert delete_objects(store, [f"_mem_wal/{S0}/wal/a", "_mem_wal/_staging/s/x", "_mem_wal/_jobs/audit/y"]) == []
    assert [o.key for o in store.list("")] == sorted(keep)
