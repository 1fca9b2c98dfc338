"""Hostile shard-manifest states and GC inputs: nothing unmerged is ever deleted.

Every table here starts merged to generation 2 (of 4) in each shard, indexes caught up
and old versions expired, so that GC has real work (generations 1 and 2) next to data
it must keep (generations 3 and 4). One shard, the victim, then gets a hostile manifest
state. Each case runs ``status``, ``gc --orphans`` (no grace, no orphan age) and ``merge``
through the CLI and checks the exit code, the one error line naming the shard, and with
tree digests that no unmerged generation directory lost a byte.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

import memwal
from memwal.actions import run_action
from memwal.demo import create_base_table, shard_ids_for, write_generations
from memwal.errors import BadInputError
from memwal.pb import shard_manifest_pb2
from memwal.store import LocalStore
from memwal.table import Table, open_table
from memwal.table.naming import JOBS_DIR, manifest_key, shard_dir, version_hint_key, wal_key
from memwal.table.shards import list_generation_dirs, list_manifest_versions, list_wal_entries
from tests.conftest import SMALL, table_rows
from tests.helpers import assert_one_line_error, run_cli, tree_digest
from tests.interleave import running_at

MERGED = 2
SHARDS = shard_ids_for(SMALL)
VICTIM = SHARDS[0]
GC = ("gc", "--orphans", "--grace-seconds", "0", "--writer-idle-seconds", "0", "--orphan-age-seconds", "0")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One table built by pylance's ShardWriter, merged to generation 2, caught up, expired."""
    uri = str(tmp_path_factory.mktemp("template") / "t")
    _, model = create_base_table(uri, SMALL)
    write_generations(uri, SMALL, model)
    t = memwal.open(uri)
    assert t.merge(max_generations=MERGED).ok and t.catchup().ok
    t.table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    return uri, model


@pytest.fixture
def fresh(template, tmp_path):
    """A private copy of the template table (and the row model it must end up holding)."""
    uri, model = template
    dst = str(tmp_path / "t")
    shutil.copytree(uri, dst, symlinks=True)
    return open_table(dst), model


def manifest_file(table: Table, version: int, shard: str = VICTIM) -> Path:
    return Path(table.uri, manifest_key(shard, version))


def hint_file(table: Table) -> Path:
    return Path(table.uri, version_hint_key(VICTIM))


def latest(table: Table, shard: str = VICTIM) -> int:
    return list_manifest_versions(table.store, shard)[-1]


def unmerged_dirs(table: Table) -> dict[str, dict[str, str]]:
    """Digest of every generation directory above the merged generation, in every shard."""
    out = {}
    for s in SHARDS:
        for name, g in list_generation_dirs(table.store, s).items():
            if g > MERGED:
                path = str(Path(table.uri, shard_dir(s), name))
                out[path] = tree_digest(path)
    return out


def assert_unmerged_intact(before: dict[str, dict[str, str]]) -> None:
    for path, digest in before.items():
        assert tree_digest(path) == digest, f"{path} changed"


# -- hostile mutations of the victim shard ----------------------------------------------


def delete_version(v: int) -> Callable[[Table], None]:
    return lambda t: manifest_file(t, v).unlink()


def delete_versions(versions: range) -> Callable[[Table], None]:
    return lambda t: [manifest_file(t, v).unlink() for v in versions]


def renumbered_up_to(last: int) -> Callable[[Table], None]:
    """Versions after the latest up to ``last``, each the latest's state under its own number (as a
    writer's flushes that list nothing new leave them): a shard holding more than WHOLE_NEWEST."""
    def mutate(t: Table) -> None:
        top = latest(t)
        state = shard_manifest_pb2.ShardManifest.FromString(manifest_file(t, top).read_bytes())
        for v in range(top + 1, last + 1):
            state.version = v
            manifest_file(t, v).write_bytes(state.SerializeToString())

    return mutate


def drop_hint(t: Table) -> None:
    hint_file(t).unlink()


def set_hint(text: str) -> Callable[[Table], None]:
    return lambda t: hint_file(t).write_text(text)


def hint_directory(t: Table) -> None:
    hint_file(t).unlink()
    hint_file(t).mkdir()
    (hint_file(t) / "x").write_text('{"version": 1}')


def latest_is_directory(with_file: bool) -> Callable[[Table], None]:
    def mutate(t: Table) -> None:
        p = manifest_file(t, latest(t))
        p.unlink()
        p.mkdir()
        if with_file:
            (p / "inner.binpb").write_bytes(b"\x08\x05")

    return mutate


def rewrite_latest(transform: Callable[[Table, bytes], bytes]) -> Callable[[Table], None]:
    def mutate(t: Table) -> None:
        p = manifest_file(t, latest(t))
        p.write_bytes(transform(t, p.read_bytes()))

    return mutate


def previous_version_bytes(t: Table, _raw: bytes) -> bytes:
    return manifest_file(t, latest(t) - 1).read_bytes()


def other_shard_bytes(t: Table, _raw: bytes) -> bytes:
    return manifest_file(t, latest(t, SHARDS[1]), SHARDS[1]).read_bytes()


def all_manifests_gone(t: Table) -> None:
    shutil.rmtree(Path(t.uri, shard_dir(VICTIM), "manifest"))


def both(*fns: Callable[[Table], None]) -> Callable[[Table], None]:
    def mutate(t: Table) -> None:
        for fn in fns:
            fn(t)

    return mutate


@dataclass(frozen=True)
class Case:
    name: str
    mutate: Callable[[Table], None]
    needle: str | None  # None: the shard stays healthy; else a text its error names


CASES = [
    # broken shards: the latest manifest cannot be established
    Case("gap-v2", delete_version(2), "lack 2"),
    Case("gap-v2-hint-missing", both(delete_version(2), drop_hint), "lack 2"),
    Case("gap-v2-hint-stale", both(delete_version(2), set_hint('{"version": 1}')), "lack 2"),
    Case("gap-below-latest-hint-stale", both(delete_version(4), set_hint('{"version": 3}')), "lack 4"),
    Case("gap-below-latest-hint-ahead", both(delete_version(4), set_hint('{"version": 99}')), "lack 4"),
    # 200 versions: a gap among the newest WHOLE_NEWEST (73..200), at its lowest and in its middle
    Case("gap-among-the-newest-kept", both(renumbered_up_to(200), delete_version(73)), "lack 73"),
    Case("gaps-among-the-newest-kept", both(renumbered_up_to(200), delete_versions(range(60, 80, 2))),
         "lack 74, 76, 78"),
    Case("latest-is-directory", latest_is_directory(with_file=True), "is not a file"),
    Case("latest-is-empty-directory", both(latest_is_directory(with_file=False), drop_hint), "is not a file"),
    Case("latest-truncated-half", rewrite_latest(lambda t, raw: raw[: len(raw) // 2]), "corrupt shard manifest"),
    Case("latest-truncated-at-field", rewrite_latest(lambda t, raw: raw[:10]), "no shard id"),
    Case("latest-garbage", rewrite_latest(lambda t, raw: b"\xff\xff\xff garbage"), "corrupt shard manifest"),
    Case("latest-empty-file", rewrite_latest(lambda t, raw: b""), "corrupt shard manifest"),
    Case("latest-says-other-version", rewrite_latest(previous_version_bytes), "it says version 4"),
    Case("latest-of-other-shard", rewrite_latest(other_shard_bytes), "belongs to shard"),
    Case("latest-garbage-hint-missing", both(rewrite_latest(lambda t, raw: b"\x0a\xff"), drop_hint),
         "corrupt shard manifest"),
    Case("no-manifest-at-all", all_manifests_gone, "no manifest"),
    # healthy shards: the hint is best-effort and never trusted
    Case("hint-missing", drop_hint, None),
    Case("hint-stale", set_hint('{"version": 1}'), None),
    Case("hint-ahead", set_hint('{"version": 99}'), None),
    Case("hint-1e400", set_hint('{"version": 1e400}'), None),
    Case("hint-bare-1e400", set_hint("1e400"), None),
    Case("hint-beyond-u64", set_hint('{"version": 18446744073709551616}'), None),
    Case("hint-negative", set_hint('{"version": -5}'), None),
    Case("hint-string", set_hint('{"version": "abc"}'), None),
    Case("hint-float", set_hint('{"version": 2.5}'), None),
    Case("hint-empty-object", set_hint("{}"), None),
    Case("hint-list", set_hint("[]"), None),
    Case("hint-garbage", set_hint("\x00garbage"), None),
    Case("hint-is-directory", hint_directory, None),
    # GC prunes the oldest versions several deletes at once: a listing meanwhile shows some of them
    Case("pruning-under-way", both(renumbered_up_to(200), delete_versions(range(2, 72, 3))), None),
    Case("pruning-under-way-lowest-gone", both(renumbered_up_to(200), delete_versions(range(1, 72, 2))), None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_shard_manifest_state(fresh, case: Case):
    table, model = fresh
    case.mutate(table)
    keep = unmerged_dirs(table)
    victim_dir = str(Path(table.uri, shard_dir(VICTIM)))
    victim_before = tree_digest(victim_dir)
    broken = case.needle is not None

    status = run_cli("status", table.uri, "--json")
    shards = {s["shard_id"]: s for s in json.loads(status.stdout)["shards"]}
    assert set(shards) == set(SHARDS)  # the broken shard is shown, not dropped
    if broken:
        assert_one_line_error(status, 1, VICTIM, case.needle)
        assert shards[VICTIM]["status"] == "broken" and case.needle in shards[VICTIM]["problem"]
        assert shards[VICTIM]["unmerged_generations"] == [3, 4]  # from storage: the lag stays visible
        assert tree_digest(victim_dir) == victim_before
    else:
        assert status.rc == 0 and not status.error_lines, status.stderr
        assert shards[VICTIM]["flushed_generations"] == [1, 2, 3, 4]

    gc = run_cli(*GC, table.uri, "--json")
    doc = json.loads(gc.stdout)
    deleted = {(d["shard_id"], d["generation"]) for d in doc["deleted"]}
    assert_unmerged_intact(keep)
    if broken:
        assert_one_line_error(gc, 1, VICTIM, case.needle)
        assert tree_digest(victim_dir) == victim_before  # not a generation, WAL entry or orphan went
        assert deleted == {(s, g) for s in SHARDS[1:] for g in (1, 2)}
        victim_blocks = {b["generation"] for b in doc["blocked"] if b["shard_id"] == VICTIM}
        assert victim_blocks == {1, 2, 3, 4}
        assert {b["reason"] for b in doc["blocked"] if b["shard_id"] == VICTIM} <= {
            "shard-manifest-gap", "shard-manifest-unreadable", "shard-manifest-missing"}
    else:
        assert gc.rc == 0 and not gc.error_lines, gc.stderr
        assert deleted == {(s, g) for s in SHARDS for g in (1, 2)}
        assert doc["orphans"] == []

    merge = run_cli("merge", table.uri, "--json")
    compacted = table.manifest().compacted
    if broken:
        assert_one_line_error(merge, 1, VICTIM, case.needle)
        assert compacted == {VICTIM: MERGED, **{s: 4 for s in SHARDS[1:]}}
        assert tree_digest(victim_dir) == victim_before
    else:
        assert merge.rc == 0 and not merge.error_lines, merge.stderr
        assert compacted == {s: 4 for s in SHARDS}
        assert table_rows(table) == model.sorted_rows()


# -- orphans: "unlisted" never means "deletable" above the merged generation --------------


def copy_generation(table: Table, shard: str, g: int, name: str) -> str:
    src = next(n for n, gen in list_generation_dirs(table.store, shard).items() if gen == g)
    dst = Path(table.uri, shard_dir(shard), name)
    shutil.copytree(Path(table.uri, shard_dir(shard), src), dst)
    return str(dst)


def test_unlisted_generation_above_merged_is_kept_and_reported(fresh):
    table, _ = fresh
    above = copy_generation(table, VICTIM, 4, "deadbeef_gen_4")
    below = copy_generation(table, VICTIM, 1, "deadbeef_gen_1")
    above_digest = tree_digest(above)
    keep = unmerged_dirs(table)
    run = run_cli(*GC, table.uri, "--json")
    assert run.rc == 0 and not run.error_lines, run.stderr
    doc = json.loads(run.stdout)
    assert {"shard_id": VICTIM, "generation": 4, "reason": "orphan-not-merged"}.items() <= next(
        b for b in doc["blocked"] if b["reason"] == "orphan-not-merged").items()
    assert tree_digest(above) == above_digest
    assert_unmerged_intact(keep)
    assert [o["path"] for o in doc["orphans"]] == ["deadbeef_gen_1"] and doc["orphans_deleted"] == 1
    assert not Path(below).exists()


def test_unreadable_older_manifest_keeps_every_unlisted_directory(fresh):
    table, _ = fresh
    below = copy_generation(table, VICTIM, 1, "deadbeef_gen_1")
    manifest_file(table, 2).write_bytes(b"\xff\xff garbage")  # only older versions are damaged
    digest = tree_digest(below)
    run = run_cli(*GC, table.uri, "--json")
    assert run.rc == 0 and not run.error_lines, run.stderr
    doc = json.loads(run.stdout)
    assert doc["orphans"] == [] and tree_digest(below) == digest
    assert any(b["shard_id"] == VICTIM and b["generation"] == 1 and b["reason"] == "shard-manifest-unreadable"
               for b in doc["blocked"])


# -- validation before any write ---------------------------------------------------------


def test_corrupt_wal_entry_fails_before_anything_is_written(fresh, unchanged):
    table, _ = fresh
    table.dataset().update_config({"memwal.test": "old version to expire"})  # --expire-versions has work
    entry = list_wal_entries(table.store, VICTIM)[0]
    Path(table.uri, entry.key).write_bytes(b"not an arrow stream")
    with unchanged(table.uri):  # no expiry, no deletion, no lease object, no audit record
        run = run_cli(*GC, "--expire-versions", "0", "--audit-log", table.uri)
        assert_one_line_error(run, 2, wal_key(VICTIM, entry.position), "not an Arrow IPC stream")
        with pytest.raises(BadInputError, match="not an Arrow IPC stream"):  # the API validates first too
            memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0, orphans=True,
                                      audit=True)


def test_audit_path_that_is_a_file_fails_before_anything_is_written(fresh, unchanged):
    table, _ = fresh
    audit = Path(table.uri, JOBS_DIR, "audit")
    audit.parent.mkdir(parents=True, exist_ok=True)  # the template's merge and catch-up left run records
    audit.write_text("in the way")
    with unchanged(table.uri):
        run = run_cli(*GC, "--audit-log", table.uri)
        assert_one_line_error(run, 2, f"{JOBS_DIR}/audit", "not a folder")


# -- races -------------------------------------------------------------------------------


def test_second_gc_planned_before_the_first_deleted_still_succeeds(fresh):
    table, _ = fresh
    keep = unmerged_dirs(table)
    options = dict(grace_seconds=0, writer_idle_seconds=0, orphan_age_seconds=0, orphans=True)
    dry = memwal.open(table.uri).gc(dry_run=True, **options).to_dict()
    assert len(dry["deleted"]) == 6 and dry["wal_entries_deleted"]
    runs = []
    with running_at("gc.planned", lambda: runs.append(run_cli(*GC, table.uri))) as reached:
        result = memwal.open(table.uri).gc(**options).to_dict()  # planned; everything it planned is then gone
    assert reached and runs[0].rc == 0, runs[0].stderr
    # the other run drained the shard manifests first: ours finds each moved, drains and
    # deletes nothing of its plan, and says so; the next run has nothing left to do
    assert result["deleted"] == [] and result["drained"] == []
    assert {b["reason"] for b in result["blocked"] if b["generation"] <= 2} == {"changed-since-plan:shard-manifest"}
    assert all(set(list_generation_dirs(table.store, s).values()) == {3, 4} for s in SHARDS)
    assert_unmerged_intact(keep)
    again = memwal.open(table.uri).gc(**options).to_dict()
    assert again["deleted"] == [] and again["drained"] == []


def generation_digests(table, shard_id: str) -> dict[str, dict[str, str]]:
    """Every generation folder of the shard with its files' digests."""
    root = Path(table.uri, shard_dir(shard_id))
    return {p.name: tree_digest(str(p)) for p in root.iterdir() if "_gen_" in p.name}


class RacingStore(LocalStore):
    """The real local store; the first WAL read lets another GC run to completion first.

    That is the interleaving of two GCs: ours listed the WAL entries, the other deleted
    some of them, ours then reads one that is gone (``vanished``: the WAL reads of ours that
    found nothing).
    """

    def __init__(self, uri: str, other: Callable[[], None]) -> None:
        super().__init__(uri)
        self.other = other
        self.raced_key: str | None = None
        self.vanished: list[str] = []

    def get_heads(self, keys: list[str], length: int) -> list[bytes | None]:
        wal = [k for k in keys if "/wal/" in k]
        if self.raced_key is None and wal:
            self.raced_key = wal[0]
            self.other()
        heads = super().get_heads(keys, length)
        self.vanished += [k for k, h in zip(keys, heads, strict=True) if h is None and "/wal/" in k]
        return heads


def test_gc_that_loses_a_planning_race_replans_instead_of_failing(fresh):
    table, _ = fresh
    keep = unmerged_dirs(table)
    store = RacingStore(table.uri, lambda: memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0))
    racing = Table(table.uri)
    racing.__dict__["store"] = store  # Table.store is a cached property
    doc = run_action("gc", racing, grace_seconds=0, writer_idle_seconds=0)
    assert store.raced_key is not None and store.vanished  # ours did read an entry the other had deleted
    assert doc["deleted"] == [] or all(d["objects"] == 0 for d in doc["deleted"])
    assert all(set(list_generation_dirs(table.store, s).values()) == {3, 4} for s in SHARDS)
    assert_unmerged_intact(keep)


class CleanedUpStore(LocalStore):
    """The real local store; the first read of many manifests finds the oldest one deleted
    after it was listed, as Lance's cleanup of old versions does while GC plans."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.cleaned: str | None = None

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        manifests = [k for k in keys if k.startswith("_versions/")]
        if self.cleaned is None and len(manifests) > 1:
            self.cleaned = manifests[0]
            self.delete_many([self.cleaned])
        return super().get_many(keys)


def test_a_version_cleaned_up_while_gc_plans_is_planned_again_without_it(fresh):
    from memwal.gc.plan import plan_gc_settled
    from memwal.table.manifest import list_versions

    table, _ = fresh
    for _ in range(2):  # versions to clean up: the same data committed again
        table.dataset(table.dataset().version).restore()
    listed = list_versions(table.store)
    store = CleanedUpStore(table.uri)
    racing = Table(table.uri)
    racing.__dict__["store"] = store  # Table.store is a cached property
    plan = plan_gc_settled(racing, grace_seconds=0, writer_idle_seconds=0)
    assert store.cleaned is not None and not table.store.exists(store.cleaned)
    assert plan.retained_versions == len(listed) - 1 == len(list_versions(table.store)) > 1


def test_gates_are_rechecked_against_the_latest_version_before_deleting(fresh):
    table, _ = fresh
    options = dict(grace_seconds=0, writer_idle_seconds=0, orphan_age_seconds=0)
    assert len(memwal.open(table.uri).gc(dry_run=True, **options).to_dict()["deleted"]) == 6
    before = {s: generation_digests(table, s) for s in SHARDS}

    def compaction() -> None:  # Lance's compaction drops every index catch-up record
        table.dataset().optimize.compact_files()
        assert table.manifest().index_catchup == {}

    with running_at("gc.planned", compaction) as reached:  # after the plan, before the run deletes
        result = memwal.open(table.uri).gc(**options).to_dict()
    assert reached
    # the drains still happen (no index reads the shard manifest), no folder goes
    assert result["deleted"] == [] and result["drained"]
    assert {b["reason"] for b in result["blocked"] if b["generation"] <= MERGED} == {
        "changed-since-plan:index-not-caught-up:id_idx"}
    assert {s: generation_digests(table, s) for s in SHARDS} == before
