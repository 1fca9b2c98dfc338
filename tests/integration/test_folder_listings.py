"""A fleet's probe keeps a folder's listing while the folder stands still (issue 82).

The rule (:mod:`memwal.fleet.folders`): a listing is kept only when its folder had stood still for
:data:`SETTLED_SECONDS` before it was taken, and stays that folder's listing while the folder's
device, inode, modification and change times are the ones it had and it is younger than
:data:`REFRESH_SECONDS`; an object store (no folder times) is listed each time. Folder times are set
with ``os.utime``, the monotonic clock is the test's: nothing waits.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from memwal.fleet.folders import GROWN_REFRESH_SECONDS, REFRESH_SECONDS, SETTLED_SECONDS, FolderListings
from memwal.store.local import LocalStore
from memwal.store.object import ObjectStore


class Counted(LocalStore):
    """A disk store that counts its listings of one level."""

    levels = 0

    def list_level(self, prefix: str) -> tuple[list[str], list[str]]:
        self.levels += 1
        return super().list_level(prefix)


def _aged(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Counted, Path]:
    root = tmp_path / "root"
    (root / "f" / "sub").mkdir(parents=True)
    (root / "f" / "a").write_bytes(b"1")
    return Counted(str(root)), root / "f"


def test_a_listing_is_kept_once_its_folder_stood_still_and_read_again_when_it_moves(folder) -> None:
    store, path = folder
    clock = [0.0]
    listings = FolderListings(monotonic=lambda: clock[0])
    assert listings.level(store, "f/") == (("f/a",), ("sub",))
    assert listings.level(store, "f/") == (("f/a",), ("sub",)) and store.levels == 2  # just changed: not kept
    _aged(path, SETTLED_SECONDS + 1)
    listings.level(store, "f/")
    assert listings.level(store, "f/") == (("f/a",), ("sub",)) and store.levels == 3  # settled: a stat, no listing
    (path / "b").write_bytes(b"2")  # the folder's time moves
    assert listings.level(store, "f/") == (("f/a", "f/b"), ("sub",)) and store.levels == 4
    _aged(path, SETTLED_SECONDS + 1)
    listings.level(store, "f/")
    clock[0] += REFRESH_SECONDS  # kept a minute: listed again, whatever its stamp
    listings.level(store, "f/")
    assert store.levels == 6


def test_a_folder_put_back_with_its_old_time_is_listed_again_within_a_minute(folder) -> None:
    """A restore that keeps times (``cp -a``) puts back a folder whose device, inode (reused) and
    modification time may all be the ones kept; its change time moved, unless within one tick of the
    listing: at the latest it is listed again after :data:`REFRESH_SECONDS`."""
    store, path = folder
    clock = [0.0]
    listings = FolderListings(monotonic=lambda: clock[0])
    _aged(path, SETTLED_SECONDS + 1)
    stamp = os.stat(path)
    listings.level(store, "f/")
    shutil.rmtree(path)
    path.mkdir()
    (path / "c").write_bytes(b"3")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    clock[0] += REFRESH_SECONDS
    assert listings.level(store, "f/") == (("f/c",), ())


def test_what_was_made_of_a_moving_folder_is_grown_until_growing_cannot_tell_or_ten_minutes_pass(folder) -> None:
    """A folder being written (a table's ``_versions/`` at every merge) is not listed again while the
    caller can grow what it made of it: ``grow`` gets the value last made or grown, and its answer is
    kept; None (it cannot tell), or a listing :data:`GROWN_REFRESH_SECONDS` old, lists it. A folder
    listed while it moved is grown from, never handed out as its listing."""
    store, path = folder
    clock = [0.0]
    listings = FolderListings(monotonic=lambda: clock[0])
    grown: list[int] = []

    def count(files, dirs) -> int:
        return len(files)

    def grow(n: int) -> int | None:
        grown.append(n)
        return None if n < 0 else len(list(path.iterdir())) - 1  # what a cheap look finds: files, not "sub"

    assert listings.derived(store, "f/", "n", count, grow) == 1 and store.levels == 1
    (path / "b").write_bytes(b"2")  # moves: grown, not listed
    assert listings.derived(store, "f/", "n", count, grow) == 2 and store.levels == 1 and grown == [1]
    assert listings.derived(store, "f/", "n", count, grow) == 2 and grown == [1, 2]  # still moving: grown again
    assert listings.level(store, "f/") == (("f/a", "f/b"), ("sub",)) and store.levels == 2  # never the moving one
    _aged(path, SETTLED_SECONDS + 1)
    listings.derived(store, "f/", "n", count, grow)
    assert listings.derived(store, "f/", "n", count, grow) == 2 and store.levels == 3 and len(grown) == 2  # settled
    (path / "c").write_bytes(b"3")
    assert listings.derived(store, "f/", "n", lambda files, dirs: -1, lambda n: None) == -1  # cannot tell: listed
    assert store.levels == 4
    (path / "d").write_bytes(b"4")
    assert listings.derived(store, "f/", "n", count, grow) == 4 and store.levels == 5  # grow(-1) cannot tell
    (path / "e").write_bytes(b"5")
    clock[0] += GROWN_REFRESH_SECONDS
    assert listings.derived(store, "f/", "n", count, grow) == 5 and store.levels == 6  # ten minutes: listed


def test_a_walked_folder_is_kept_while_it_stands_still_and_walked_again_when_gone(folder) -> None:
    """A merged generation's files are written once: its walk (every file, size and time) is kept while
    the folder's stamp holds, a minute at most; a folder removed (GC) is walked again and found empty."""
    store, path = folder
    walks = [0]
    real = store.list

    def counted(prefix: str, **kw):
        walks[0] += 1
        return real(prefix, **kw)

    store.list = counted  # type: ignore[method-assign]
    clock = [0.0]
    listings = FolderListings(monotonic=lambda: clock[0])
    first = listings.walked(store, "f/")
    assert [o.key for o in first] == ["f/a"] and walks[0] == 1
    listings.walked(store, "f/")
    assert walks[0] == 2  # just written: not kept
    _aged(path, SETTLED_SECONDS + 1)
    listings.walked(store, "f/")
    assert listings.walked(store, "f/") == tuple(first) and walks[0] == 3  # settled: a stat, no walk
    clock[0] += REFRESH_SECONDS
    listings.walked(store, "f/")
    assert walks[0] == 4  # a minute: walked again
    shutil.rmtree(path)
    assert listings.walked(store, "f/") == () and walks[0] == 5


def test_past_its_bound_the_least_recently_used_listing_goes(folder) -> None:
    store, path = folder
    (path / "sub" / "x").write_bytes(b"4")
    for p in (path, path / "sub"):
        _aged(p, SETTLED_SECONDS + 1)
    listings = FolderListings(kept_names=2)
    listings.level(store, "f/")  # two names: kept
    listings.level(store, "f/sub/")  # one more: the older goes
    store.levels = 0
    listings.level(store, "f/sub/")
    listings.level(store, "f/")
    assert store.levels == 1


def test_an_object_store_is_listed_each_time() -> None:
    store = ObjectStore.memory("memory://bucket/t")
    store.put("f/a", b"1")
    listings = FolderListings()
    assert store.folder_stamp("f/") is None
    assert list(listings.level(store, "f/")[0]) == ["f/a"]
    store.put("f/b", b"2")
    assert list(listings.level(store, "f/")[0]) == ["f/a", "f/b"]
