"""The retained-progress digest (issue 23): a GC run remembers what each retained version had
merged, and the next plan reads only manifests it does not know, with the same answers.

Every test compares a plan made with the digest against one made from the manifests alone
(the digest removed): the gate it feeds decides what GC deletes, so a digest may make a plan
cheaper, never different.
"""

from __future__ import annotations

import json
import os
import time

import pytest

import memwal
from memwal.demo import shard_ids_for
from memwal.errors import BadInputError
from memwal.gc import plan_gc
from memwal.table import open_table
from memwal.table.manifest import list_version_infos, list_versions, read_table_manifest
from memwal.table.progress_digest import CACHE_MAX_BYTES, CACHE_MAX_VALUES, DIGEST_KEY, load_digest
from memwal.table.retained import retained_versions
from tests.conftest import SMALL, table_rows

KEEP_ALL = 10**6  # a grace period no test outlives: the runs delete nothing, so plans compare
NOW = time.time() + 3600  # one moment for every plan compared (the retention report gives ages)


def _history(table) -> dict[str, int]:
    """Versions L (progress 1), H (progress 4), R (a restore of L: progress 1 again), M (merged
    again: progress 4), then 8 commits. L and R hold generations 2..4 (the versions before L,
    which had merged nothing, hold all four); H and M hold none."""
    api = memwal.open(table.uri)
    assert api.merge(max_generations=1).ok and api.catchup().ok
    low = table.dataset().version
    assert api.merge().ok and api.catchup().ok
    high = table.dataset().version
    table.dataset(low).restore()
    restored = table.dataset().version
    assert api.merge().ok and api.catchup().ok
    ds = table.dataset()
    for i in range(8):
        ds.update_config({"test.commit": str(i)})
    return {"low": low, "high": high, "restored": restored}


def _plan(table) -> dict:
    """The plan's document without its count of manifests read (compared apart)."""
    doc = plan_gc(open_table(table.uri), grace_seconds=0, writer_idle_seconds=0, now=NOW).to_dict()
    del doc["retained_manifests_read"]
    return doc


def _manifests_read(table) -> int:
    return plan_gc(open_table(table.uri), grace_seconds=0, writer_idle_seconds=0,
                   now=NOW).to_dict()["retained_manifests_read"]


def _plan_from_manifests(table) -> dict:
    """The plan with no digest to read (it is put back afterwards)."""
    path = os.path.join(table.store.root, DIGEST_KEY)
    saved = open(path, "rb").read() if os.path.exists(path) else None
    if saved is not None:
        os.unlink(path)
    try:
        return _plan(table)
    finally:
        if saved is not None:
            with open(path, "wb") as f:
                f.write(saved)


def _manifest_path(table, version: int) -> str:
    return os.path.join(table.store.root, list_versions(table.store)[version])


def _spoil_in_place(path: str) -> None:
    """Zero a file's bytes keeping its inode, size and mtime: its ETag, so only a reader of
    the bytes can tell."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"\0" * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_run_leaves_the_digest_a_dry_run_does_not_and_the_next_plan_reads_no_remembered_manifest(make_table):
    table, _ = make_table()
    v = _history(table)
    expected = _plan(table)
    shards = shard_ids_for(SMALL)
    held = {(b["shard_id"], b["generation"]): b["reason"] for b in expected["blocked"]}
    assert set(held) == {(s, g) for s in shards for g in (1, 2, 3, 4)}  # 1: by the versions before L
    assert all(reason.startswith("retained-version:") for reason in held.values())
    by_version = {row["version"]: row["generations_held"] for row in expected["retention"]["blocking_versions"]}
    assert by_version[v["low"]] == by_version[v["restored"]] == 3 * len(shards) and v["high"] not in by_version

    assert memwal.open(table.uri).gc(dry_run=True, grace_seconds=KEEP_ALL).ok
    assert table.store.head(DIGEST_KEY) is None  # a dry run writes nothing
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    expected = _plan(table)  # the run rolled up what stays listed: the plans below start from there
    digest = load_digest(table.store)
    listed = list_version_infos(table.store)
    assert len(digest) == len(listed) == max(listed) > v["restored"]  # every version, none expired
    assert all(digest.get(info.key, info.etag, n) is not None for n, info in listed.items())
    assert _manifests_read(table) == 0

    # the restore's manifest is not read any more: spoiled under the same ETag, the plan is unchanged
    path = _manifest_path(table, v["restored"])
    good = open(path, "rb").read()
    _spoil_in_place(path)
    with pytest.raises(BadInputError, match="corrupt manifest"):
        read_table_manifest(table.store, v["restored"])
    assert _plan(table) == expected
    with open(path, "r+b") as f:  # put back: the plan from the manifests alone reads it again
        f.write(good)
    assert _plan_from_manifests(table) == expected


def _entries(digest) -> dict:
    return {k: (e.etag, e.version, e.timestamp, e.compacted, e.transaction_file) for k, e in digest._by_key.items()}


def test_the_bytes_a_run_wrote_are_not_decoded_again_and_any_other_bytes_are(make_table):
    """A follower reads the digest at every listing pass: what the run wrote is what a decode of
    those bytes gives, kept (not decoded again); bytes another run wrote, or forged, are decoded."""
    from memwal.table.progress_digest import _DECODED

    table, _ = make_table()
    _history(table)
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    kept = load_digest(table.store)
    assert load_digest(table.store) is kept and len(kept) > 8
    _DECODED.clear()
    decoded = load_digest(table.store)
    assert decoded is not kept and _entries(decoded) == _entries(kept)
    assert any(e[4] is not None for e in _entries(kept).values())  # transaction files, as decoded
    path = os.path.join(table.store.root, DIGEST_KEY)
    doc = json.loads(open(path, "rb").read())
    doc["timestamps"][0] += 1.0  # another writer's bytes
    with open(path, "wb") as f:
        f.write(json.dumps(doc).encode())
    changed = load_digest(table.store)
    first = doc["keys"][0]
    assert changed is not decoded and _entries(changed)[first][2] == _entries(decoded)[first][2] + 1.0


def test_versions_committed_since_the_digest_are_read(make_table):
    table, _ = make_table()
    v = _history(table)
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    known = len(load_digest(table.store))
    table.dataset(v["low"]).restore()  # one more version holding generations 2..4, unknown to the digest
    again = table.dataset().version
    plan = plan_gc(open_table(table.uri), grace_seconds=0, writer_idle_seconds=0, now=NOW)
    assert plan.retained_versions == known + 1 and plan.to_dict()["retained_manifests_read"] == 1
    assert plan.versions[-1].version == again and plan.versions[-1].compacted == read_table_manifest(
        table.store, again).compacted == {s: 1 for s in shard_ids_for(SMALL)}
    assert _plan(table) == _plan_from_manifests(table)


def test_a_listing_pass_leaves_the_digest_and_its_table_object_reads_each_newer_version_once(make_table):
    """The digest is the whole run's: a follower's listing passes (every few seconds) leave it as
    the last whole run wrote it, and the table object they run on keeps what its plan read of the
    versions committed since (same key and ETag), so the next pass reads only what is newer still.
    Another table object reads them: it was not told."""
    table, _ = make_table()
    _history(table)
    api = memwal.open(table.uri)
    assert api.gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    path = os.path.join(table.store.root, DIGEST_KEY)
    before = open(path, "rb").read()
    for i in range(3):  # versions the digest does not know
        table.dataset().update_config({"test.after": str(i)})
    follower = open_table(table.uri)

    def pass_reads() -> int:
        plan = plan_gc(follower, grace_seconds=0, writer_idle_seconds=0, now=NOW, listed_only=True)
        return plan.to_dict()["retained_manifests_read"]

    assert pass_reads() == 3
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, listed_only=True).ok
    assert open(path, "rb").read() == before  # the pass left the digest
    assert pass_reads() == 0  # what the first plan read kept by the table object
    table.dataset().update_config({"test.after": "3"})
    assert pass_reads() == 1  # the one version committed since
    assert _manifests_read(table) == 4  # a fresh table object: what the digest lacks is read
    assert plan_gc(follower, grace_seconds=0, writer_idle_seconds=0, now=NOW).to_dict() == \
        plan_gc(open_table(table.uri), grace_seconds=0, writer_idle_seconds=0, now=NOW).to_dict() | {
            "retained_manifests_read": 0}  # the same plan, from what it kept


def test_a_manifest_replaced_under_its_key_is_read_again(make_table):
    """A file under a remembered key with other bytes (a branch made again reuses keys) is a new
    ETag: the plan reads what it says now. Here a commit's manifest (progress 4) is replaced
    by the restore's (progress 1): that version now holds generations 2..4 too."""
    table, _ = make_table()
    v = _history(table)
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    newest = max(list_versions(table.store)) - 1  # not the latest: the gates' own view
    before = _plan(table)
    path = _manifest_path(table, newest)
    with open(path + ".new", "wb") as f:
        f.write(open(_manifest_path(table, v["restored"]), "rb").read())
    os.replace(path + ".new", path)
    after = _plan(table)
    assert after != before and after == _plan_from_manifests(table)
    assert {b["version"] for b in after["retention"]["blocking_versions"]} >= {v["restored"], newest}


@pytest.mark.parametrize("spoil", [
    lambda d: b"not json",
    lambda d: b"[" * 100_000 + b"]" * 100_000,
    lambda d: json.dumps({**d, "format": 2}).encode(),
    lambda d: json.dumps({**d, "sections": [[0, -1, *s[2:]] for s in d["sections"]]}).encode(),
    lambda d: json.dumps({**d, "sections": [[len(d["shards"]), *s[1:]] for s in d["sections"]]}).encode(),
    lambda d: json.dumps({**d, "versions": [True] * len(d["versions"])}).encode(),
    lambda d: json.dumps({**d, "etags": d["etags"][:-1]}).encode(),
    lambda d: json.dumps({**d, "timestamps": [float("nan")] * len(d["timestamps"])}).encode(),
    lambda d: json.dumps({**d, "section_of": [len(d["sections"])] * len(d["section_of"])}).encode(),
    lambda d: json.dumps({k: x for k, x in d.items() if k != "keys"}).encode(),
    # well formed, each, and refused before they size the plan's memory: not fetched; not decoded
    lambda d: json.dumps(d).encode().ljust(CACHE_MAX_BYTES + 1),
    lambda d: json.dumps({**d, "padding": [0] * CACHE_MAX_VALUES}).encode(),
], ids=["not-json", "too-deep", "format", "negative-generation", "shard-index", "bool-version", "short-column",
        "nan-time", "section-index", "no-keys", "over-the-byte-cap", "over-the-value-cap"])
def test_an_unusable_digest_is_ignored(make_table, spoil):
    table, _ = make_table()
    _history(table)
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    expected = _plan_from_manifests(table)
    doc = json.loads(table.store.get(DIGEST_KEY))
    table.store.put(DIGEST_KEY, spoil(doc))
    assert len(load_digest(table.store)) == 0
    assert _plan(table) == expected and _manifests_read(table) == expected["retained_versions"]


def test_an_entry_for_another_version_or_another_etag_is_not_used(make_table):
    """Remembered progress of one manifest forged onto another's key (or with the right key but
    another ETag) never replaces what that manifest says."""
    table, _ = make_table()
    v = _history(table)
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    expected = _plan_from_manifests(table)
    doc = json.loads(table.store.get(DIGEST_KEY))
    high = doc["versions"].index(v["high"])
    restored = doc["versions"].index(v["restored"])
    doc["section_of"][restored] = doc["section_of"][high]  # the restore remembered as fully merged...
    doc["etags"][restored] += "0"  # ...for another file than the one listed
    table.store.put(DIGEST_KEY, json.dumps(doc).encode())
    assert _plan(table) == expected
    doc["etags"][restored] = doc["etags"][restored][:-1]
    doc["versions"][restored] += 1  # ...for another version than the key names
    table.store.put(DIGEST_KEY, json.dumps(doc).encode())
    assert _plan(table) == expected


def test_after_an_expiry_the_digest_names_the_versions_left_and_a_branch_is_keyed_by_its_line(make_table):
    table, _ = make_table()
    v = _history(table)
    table.dataset().create_branch("before-merge", v["low"])
    total = len(list_versions(table.store))
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, writer_idle_seconds=0, expire_versions=0).ok
    left = {info.key: info.etag for info in list_version_infos(table.store).values()}
    branch = {f"tree/before-merge/{info.key}": info.etag
              for info in list_version_infos(table.store.child("tree/before-merge")).values()}
    assert len(left) < total and len(branch) == 1
    doc = json.loads(table.store.get(DIGEST_KEY))
    assert dict(zip(doc["keys"], doc["etags"], strict=True)) == left | branch
    assert [r.key for r in retained_versions(open_table(table.uri))] == sorted(left, key=lambda k: -int(
        k.rsplit("/", 1)[-1].split(".")[0])) + list(branch)
    assert _plan(table) == _plan_from_manifests(table)
    table.dataset().branches.delete("before-merge")  # its remembered entry matches no listing now
    assert _plan(table)["retained_versions"] == len(left) and _plan(table) == _plan_from_manifests(table)


def test_time_travel_to_a_remembered_holder_reads_its_rows_after_the_next_run(make_table):
    """End to end: the run that plans from the digest expires the untagged versions, deletes
    generation 1 only (L and R, tagged, hold 2..4), and the restore still reads its rows."""

    table, model = make_table()
    v = _history(table)
    assert memwal.open(table.uri).gc(grace_seconds=KEEP_ALL, expire_versions="never").ok
    rows = table_rows(table, v["restored"])
    for tag in ("low", "restored"):  # kept through the expiry of every version before L
        table.dataset().tags.create(tag, v[tag])
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    assert {(d["shard_id"], d["generation"]) for d in result["deleted"]} == {(s, 1) for s in shard_ids_for(SMALL)}
    assert table_rows(table, v["restored"]) == rows


@pytest.mark.parametrize("body", [b"{not json", b'{"format": 2, "compactions": {}}', b'{"format": 1}', b"[1]"])
def test_the_record_of_gcs_compactions_keeps_16_a_shard_and_a_malformed_one_is_not_used(tmp_path, body):
    """What ``memwal status`` reads to tell GC's manifest versions from a writer's: the last 16 a
    shard; a record it cannot use is none (a view's cache), and the next run writes it anew."""
    from memwal.store import open_store
    from memwal.table.compactions import COMPACTIONS_KEY, load_compactions, record_compactions

    store = open_store(str(tmp_path))
    for v in range(1, 21):
        record_compactions(store, {"a": v, **({"b": 100 + v} if v % 2 else {})})
    assert load_compactions(store) == {"a": tuple(range(5, 21)), "b": tuple(range(101, 121, 2))}
    store.put(COMPACTIONS_KEY, body)
    assert load_compactions(store) == {}
    record_compactions(store, {"a": 30})
    assert load_compactions(store) == {"a": (30,)}
