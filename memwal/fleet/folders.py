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

A table being written moves its folders at every flush and merge, and listing them again then grew
with its age as before (47 ms a probe at 11,000 versions, 4 ms at 480). What the probe makes of such a
folder is therefore *grown* instead (:meth:`FolderListings.derived` with ``grow``): from what it made
of the last listing, by what the caller can find out cheaply (the next names a stat each, the folders
the shard's newest manifest names), the listing itself taken again only when growing cannot tell, and
at the latest after :data:`GROWN_REFRESH_SECONDS`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from memwal.store import ObjectInfo, Store

T = TypeVar("T")

#: How long a folder must have stood still before a listing of it is kept.
SETTLED_SECONDS = 2.0
#: A kept listing is listed again after this long, whatever its folder's stamp.
REFRESH_SECONDS = 60.0
#: What is grown from a listing of a folder that moves is grown for this long at most, then listed
#: again: what growing cannot see (a folder another process added or removed that no manifest names)
#: is seen by then. Ten minutes is as long as a follower's whole GC backs off.
GROWN_REFRESH_SECONDS = 600.0
#: Names the kept listings may hold together, the least recently used dropped first: 176 bytes a
#: name with what the probe made of them (measured at 36,454 names), so some 180 MB at most; a week
#: beside a busy writer is some 350,000 generation folders in one shard.
KEPT_NAMES = 1_000_000


Stamp = tuple[int, int, int, int]  # device, inode, modification and change times


@dataclass(frozen=True)
class _Made:
    """What a caller made of a listing, or grew since: the stamp and time at which it held, when the
    folder was settled then (None: grown or listed while the folder moved; grown again at the next look)."""

    value: Any
    stamp: Stamp | None
    at: float


@dataclass(frozen=True)
class _Kept:
    stamp: Stamp
    files: tuple[str, ...]
    dirs: tuple[str, ...]
    at: float  # monotonic: when it was listed
    #: Whether the folder had stood still :data:`SETTLED_SECONDS` when it was listed: only then is the
    #: listing itself the folder's while the stamp holds; else only what was made of it is grown.
    settled: bool = True
    #: What callers made of this listing, or grew from it (:meth:`FolderListings.derived`), by name.
    made: dict[str, _Made] = field(default_factory=dict)
    #: Every file under the folder, with its size and time (:meth:`FolderListings.walked`).
    objects: tuple[ObjectInfo, ...] = ()

    @property
    def names(self) -> int:
        return len(self.files) + len(self.dirs) + len(self.objects)


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
        stamp = store.folder_stamp(prefix)
        hit = self._hit(store.uri_for(prefix))
        if hit is None or not self._current(hit, stamp):
            hit = self._list(store, prefix, stamp)
        return hit.files, hit.dirs

    def derived(self, store: Store, prefix: str, what: str, make: Callable[[Sequence[str], Sequence[str]], T],
                grow: Callable[[T], T | None] | None = None) -> T:
        """``make`` of the folder's listing (:meth:`level`: files, sub-folders), made once per listing
        kept and named ``what``: what a caller makes of thousands of names (the newest, a map of
        them) is not made again while the folder stands still.

        ``grow``: for a folder that moves (a table being written), what was made of its last listing
        (or grown since) handed to ``grow``, which returns it as it is now, or None when it cannot
        tell: only then, or past :data:`GROWN_REFRESH_SECONDS`, is the folder listed again."""
        stamp = store.folder_stamp(prefix)
        now = self._monotonic()
        hit = self._hit(store.uri_for(prefix))
        if hit is not None and stamp is not None:
            made = hit.made.get(what)
            if made is None and self._current(hit, stamp):
                made = hit.made[what] = _Made(make(hit.files, hit.dirs), stamp, hit.at)
            if made is not None and made.stamp == stamp and now - made.at < REFRESH_SECONDS:
                return cast(T, made.value)
            if made is not None and grow is not None and now - hit.at < GROWN_REFRESH_SECONDS:
                began = time.time()
                value = grow(cast(T, made.value))
                if value is not None:
                    still = _settled(began, stamp) and store.folder_stamp(prefix) == stamp
                    hit.made[what] = _Made(value, stamp if still else None, now)
                    return value
        listed = self._list(store, prefix, stamp)
        value = make(listed.files, listed.dirs)
        if stamp is not None:
            listed.made[what] = _Made(value, stamp if listed.settled else None, listed.at)
        return value

    def walked(self, store: Store, prefix: str) -> Sequence[ObjectInfo]:
        """:meth:`Store.list` of a folder whose files are written once and never changed (a merged
        generation's: Lance writes each file of a dataset once), kept while the folder's stamp is the
        one it had, a minute at most, as :meth:`level` keeps a listing. A probe walks a sample of the
        folders GC may take at every round for their bytes and times: one file stat-ed each, some
        ten a folder, was a tenth of a fleet follower's CPU (a profile beside six writers). A folder
        gone has no stamp: walked again, and found empty."""
        stamp = store.folder_stamp(prefix)
        where = f"{store.uri_for(prefix)}\0walked"  # never a listing's: a folder is listed or walked
        hit = self._hit(where)
        if hit is not None and self._current(hit, stamp):
            return hit.objects
        began = time.time()
        objects = tuple(store.list(prefix))
        if stamp is not None and _settled(began, stamp) and store.folder_stamp(prefix) == stamp:
            self._keep(where, _Kept(stamp, (), (), self._monotonic(), objects=objects))
        return objects

    def forget(self, store: Store, prefix: str) -> None:
        """Drop the folder's kept listing (the caller found it out of date): the next look lists it."""
        with self._lock:
            old = self._kept.pop(store.uri_for(prefix), None)
            self._names -= old.names if old is not None else 0

    def _hit(self, where: str) -> _Kept | None:
        with self._lock:
            hit = self._kept.get(where)
            if hit is not None:
                self._kept.move_to_end(where)
            return hit

    def _current(self, hit: _Kept, stamp: Stamp | None) -> bool:
        """Whether a kept listing is the folder's now: settled, the same stamp, younger than a minute."""
        return hit.settled and hit.stamp == stamp and self._monotonic() - hit.at < REFRESH_SECONDS

    def _list(self, store: Store, prefix: str, stamp: Stamp | None) -> _Kept:
        now = self._monotonic()
        began = time.time()
        files, dirs = store.list_level(prefix)
        if stamp is None:  # an object store: nothing to keep it by
            return _Kept((0, 0, 0, 0), tuple(files), tuple(dirs), now, settled=False)
        listed = _Kept(stamp, tuple(files), tuple(dirs), now,
                       settled=_settled(began, stamp) and store.folder_stamp(prefix) == stamp)
        self._keep(store.uri_for(prefix), listed)
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


def _settled(began: float, stamp: Stamp) -> bool:
    """Whether a folder of this stamp had stood still :data:`SETTLED_SECONDS` at wall time ``began``."""
    return began - stamp[2] / 1e9 >= SETTLED_SECONDS


__all__ = ["GROWN_REFRESH_SECONDS", "KEPT_NAMES", "REFRESH_SECONDS", "SETTLED_SECONDS", "FolderListings"]
