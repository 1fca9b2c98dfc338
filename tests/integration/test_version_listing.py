"""A table's listing of its versions on a disk: names from one scandir, only a manifest not listed
before stat-ed (a committed manifest never changes), and exactly the versions on storage now."""

from __future__ import annotations

import os
from datetime import timedelta

import lance
import pyarrow as pa

from memwal.table import open_table
from memwal.table.manifest import list_version_infos


def test_a_tables_version_listing_follows_commits_and_expiry_and_stats_each_manifest_once(tmp_path):
    uri = str(tmp_path / "t.lance")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    lance.write_dataset(rows, uri).initialize_mem_wal(unsharded=True)
    table = open_table(uri)
    first = table.version_infos()
    assert first == list_version_infos(table.store) and len(first) == 2  # the write and the MemWAL's commit

    # a manifest listed before keeps its listing, though its file's metadata changed since
    oldest = min(first)
    path = os.path.join(uri, first[oldest].key)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert list_version_infos(table.store)[oldest].etag != first[oldest].etag  # a fresh listing sees the change
    assert table.version_infos()[oldest] == first[oldest]

    # a new commit is listed (stat-ed once), an expired version is gone
    lance.write_dataset(rows, uri, mode="append")
    grown = table.version_infos()
    fresh = list_version_infos(table.store)
    assert set(grown) == set(fresh) == {*first, max(first) + 1}
    assert grown[max(grown)] == fresh[max(fresh)]
    os.remove(path)
    assert set(table.version_infos()) == set(grown) - {oldest}
    assert set(list_version_infos(table.store)) == set(grown) - {oldest}

    # a file that is not a manifest is never listed as a version
    with open(os.path.join(uri, "_versions", "notes.txt"), "w") as f:
        f.write("not a manifest")
    assert set(table.version_infos()) == set(grown) - {oldest}


def test_the_latest_is_found_from_the_newest_seen_without_listing_the_versions(tmp_path, monkeypatch):
    """A table object finds the latest version from the newest it found before (a stat each),
    not by listing ``_versions/`` (one name a version: a merge reads the latest several times):
    the same 1 and 20 versions on, and right after others' commits, an expiry of old versions and a
    restore (Lance commits an older version's state as a new version); more than LATEST_PROBES
    versions on, one listing again."""
    from datetime import timedelta

    from memwal.store.local import LocalStore
    from memwal.table.handle import LATEST_PROBES

    listed: list[str] = []
    for name in ("least_key", "list"):
        real = getattr(LocalStore, name)

        def counting(self: LocalStore, prefix: str, *args: object, _real=real, **kwargs: object) -> object:
            if prefix.startswith("_versions"):
                listed.append(prefix)
            return _real(self, prefix, *args, **kwargs)

        monkeypatch.setattr(LocalStore, name, counting)
    uri = str(tmp_path / "t.lance")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    lance.write_dataset(rows, uri).initialize_mem_wal(unsharded=True)
    table = open_table(uri)
    assert table.manifest().version == 2 and len(listed) == 1  # the first read lists
    for commits in (1, 20):
        for _ in range(commits):
            lance.write_dataset(rows, uri, mode="append")
        listed.clear()
        assert table.manifest().version == lance.dataset(uri).version  # others' commits are seen
        assert listed == []  # 1 or 20 versions on: found by stats alone
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0))
    lance.dataset(uri, version=lance.dataset(uri).version).restore()
    assert table.manifest().version == lance.dataset(uri).version and listed == []
    # more than LATEST_PROBES versions on: Lance's hint is where the probe starts
    for _ in range(LATEST_PROBES + 1):
        lance.write_dataset(rows, uri, mode="append")
    assert table.manifest().version == lance.dataset(uri).version and listed == []
    # without a usable hint (gone, or naming a version not there), one listing again
    hint = os.path.join(uri, "_versions", "latest_version_hint.json")
    for forged in (None, b'{"version": 9999}', b"not json"):
        for _ in range(LATEST_PROBES + 1):
            lance.write_dataset(rows, uri, mode="append")
        if forged is None:
            os.remove(hint)
        else:
            with open(hint, "wb") as f:
                f.write(forged)
        listed.clear()
        assert table.manifest().version == lance.dataset(uri).version and listed == ["_versions/"]


def test_versions_committed_and_expired_between_two_looks_do_not_hide_the_latest(tmp_path):
    """The newest version a table object saw is kept (a tag), the versions committed after it are
    expired before it looks again: probing forward from it stops at the first one gone, while the
    latest lies beyond. Lance's own hint starts the probe past the gap: the latest manifest, the
    base a job opens, and a listing pass's versions are the latest's."""
    uri = str(tmp_path / "t.lance")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    lance.write_dataset(rows, uri).initialize_mem_wal(unsharded=True)
    table = open_table(uri)
    seen = table.manifest().version
    with table.reading(grown=True):
        assert max(table.version_infos()) == seen
    lance.dataset(uri).tags.create("kept", seen)
    for _ in range(5):
        lance.write_dataset(rows, uri, mode="append")
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    latest = lance.dataset(uri).version
    assert {v["version"] for v in lance.dataset(uri).versions()} == {seen, latest} and latest > seen + 1
    assert table.manifest().version == latest
    assert table.dataset().version == latest
    with table.reading(grown=True):
        assert max(table.version_infos()) == latest and seen + 1 not in table.version_infos()
