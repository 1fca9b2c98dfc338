"""Folder listings a fleet's probe reads again only when the folder changed (issue 82).

A fleet plans every few seconds (a follower) and each plan probes every table
(:mod:`memwal.fleet.probe`). On a disk the probe listed ``_versions/`` (a name a version), each
shard's folder (a name a generation folder kept), its ``manifest/`` and ``wal/`` (a name a shard
manifest version, a WAL entry): for every table at every round, growing with what the retention
keeps, though an idle table changed nothing (76 ms a probe at 11,000 versions, 4 ms at 480).

A folder's modification time moves whenever an entry is added to it, removed or renamed, and its
inode and change time (which no tool sets) tell it from a folder made again under the same name. A
listing taken once the folder had stood still for :data:`SETTLED_SECONDS` (longer than any file
system's time granularity, so that a change after the listing cannot leave the time as it was)
therefore stays the folder's listing while its device, inode and times are the same: a look after
costs one stat, and what the probe made of the names (the newest entry, the folders by generation)
is kept with it. A listing taken while the folder was still moving is not kept, nor one older than
:data:`REFRESH_SECONDS` (a file system whose clock runs behind this machine's, a network one, could
leave a change within one tick of the last unseen: a minute at most). Only the probe's estimates and
fingerprint stand on these listings (every job plans from the table itself, listing it afresh: GC
above all); an object store has no folder times and is listed each time, as before.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from memwal.store import Store

T = TypeVar("T")

#: How long a folder must have stood still before a listing of it is kept.
SETTLED_SECONDS = 2.0
#: A kept listing is listed again after this long, whatever its folder's stamp.
REFRESH_SECONDS = 60.0
#: Names the kept listings may hold together, the least recently used dropped first: 176 bytes a
#: name with what the probe made of them (measured at 36,454 names), so some 180 MB at most; a week
#: beside a busy writer is some 350,000 generation folders in one shard.
KEPT_NAMES = 1_000_000


@dataclass(frozen=True)
class _Kept:
    stamp: tuple[int, int, int, int]  # device, inode, modification and change times
    files: tuple[str, ...]
    dirs: tuple[str, ...]
    at: float  # monotonic: when it was listed
    #: What callers made of this listing (:meth:`FolderListings.derived`), by name.
    made: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> int:
        return len(self.files) + len(self.dirs)


class FolderListings:
    """Listings of folders (files, sub-folders) kept while each folder stands still (see the
    module docstring); thread-safe, in memory only. The sequences handed out are shared: read them."""

    def __init__(self, *, kept_names: int = KEPT_NAMES, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kept_names, self._monotonic = kept_names, monotonic
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._names = 0
        self._lock = threading.Lock()

    def level(self, store: Store, prefix: str) -> tuple[Sequence[str], Sequence[str]]:
        """:meth:`Store.list_level` of ``prefix`` (a folder, ending with ``/``): the listing kept for
        it while the folder's stamp is the one it had, else listed now (and kept when settled)."""
        listed = self._listed(store, prefix)
        return listed.files, listed.dirs

    def derived(self, store: Store, prefix: str, what: str, make: Callable[[Sequence[str], Sequence[str]], T]) -> T:
        """``make`` of the folder's listing (:meth:`level`: files, sub-folders), made once per listing
        kept and named ``what``: what a caller makes of thousands of names (the newest, a map of
        them) is not made again while the folder stands still."""
        listed = self._listed(store, prefix)
        if what not in listed.made:
            listed.made[what] = make(listed.files, listed.dirs)
        return cast(T, listed.made[what])

    def _listed(self, store: Store, prefix: str) -> _Kept:
        stamp = store.folder_stamp(prefix)
        now = self._monotonic()
        if stamp is None:
            files, dirs = store.list_level(prefix)
            return _Kept((0, 0, 0, 0), tuple(files), tuple(dirs), now)
        where = store.uri_for(prefix)
        with self._lock:
            hit = self._kept.get(where)
            if hit is not None and hit.stamp == stamp and now - hit.at < REFRESH_SECONDS:
                self._kept.move_to_end(where)
                return hit
        began = time.time()
        files, dirs = store.list_level(prefix)
        listed = _Kept(stamp, tuple(files), tuple(dirs), now)
        if began - stamp[2] / 1e9 >= SETTLED_SECONDS and store.folder_stamp(prefix) == stamp:
            self._keep(where, listed)
        return listed

    def _keep(self, where: str, listed: _Kept) -> None:
        with self._lock:
            old = self._kept.pop(where, None)
            self._names -= old.names if old is not None else 0
            if listed.names > self.kept_names:
                return
            self._kept[where] = listed
            self._names += listed.names
            while self._names > self.kept_names:
                self._names -= self._kept.popitem(last=False)[1].names


__all__ = ["KEPT_NAMES", "REFRESH_SECONDS", "SETTLED_SECONDS", "FolderListings"]
