"""The table versions a table object knows, grown by what was committed since (issue 82).

A followed table commits a version per merge and the default retention keeps a week of them
(50,000 beside a writer that never stops). A follower's listing pass, every few seconds, asked
for every version: a listing of ``_versions/`` (one name each) and, built on it, the retained
versions, both growing with the table's age. What changes between two passes is the few
versions committed on top: Lance commits version n + 1 by a put-if-absent of its name, never
below the latest, and a cleanup never removes the latest. So a pass that may work from the
versions known before (:meth:`VersionsCursor.grow`) stats the next names until one is missing,
instead of listing them all (on an object store, once they fill more than a few pages of its listing).

What growing cannot see: a version removed meanwhile (a cleanup, version expiry), a manifest
rewritten in place, a name of the other naming scheme. A removed version stays known, which
only keeps more (it still counts as a holder, as it did at the last listing), until the next
full listing (:meth:`VersionsCursor.relist`: every whole GC run, ``status``, ``verify``), which
bumps :attr:`VersionsCursor.epoch` when it finds anything but new versions on top, so that what
was built on the old listing (:func:`memwal.table.retained.retained_versions`) is built again.
"""

from __future__ import annotations

from memwal.core.json_doc import JsonDocError, load_json
from memwal.errors import MemWalError
from memwal.store import ObjectInfo, Store
from memwal.table import listing
from memwal.table.manifest import list_version_infos, list_versions
from memwal.table.naming import table_manifest_key

#: New versions :meth:`VersionsCursor.grow` stats before it gives up (the caller lists instead).
GROW_PROBES = 32

#: Lance's own record of the latest version it committed (``{"version": N}``), written after each commit.
LANCE_HINT = "_versions/latest_version_hint.json"


def lance_hint(store: Store) -> int | None:
    """The latest version Lance's hint names (None: none, unreadable, not a version). A hint is a
    claim: a caller never takes a version from it that it did not find on storage, only a place
    to look from. It matters where versions were expired between two looks: probing forward
    from the newest seen stops at the first one gone, while the latest lies beyond."""
    try:
        doc = load_json(store.get(LANCE_HINT, max_bytes=4096), max_values=8)
    except (MemWalError, JsonDocError, OSError):
        return None
    v = doc.get("version") if isinstance(doc, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 63 else None


def versions_after(store: Store, start: int, probes: int) -> list[tuple[int, ObjectInfo]] | None:
    """The V2-named versions committed after ``start``, in order, a stat each until one is missing
    (None: ``start`` itself is gone, or more than ``probes`` follow it: list them instead). Lance
    commits version n + 1 by a put-if-absent of its name and a cleanup never removes the latest,
    so the first one missing ends them, unless versions were expired since ``start`` was seen
    (callers look from Lance's hint too: :func:`lance_hint`)."""
    if store.head(table_manifest_key(start, v2_naming=True)) is None:
        return None
    found: list[tuple[int, ObjectInfo]] = []
    for v in range(start + 1, start + probes + 1):
        info = store.head(table_manifest_key(v, v2_naming=True))
        if info is None:
            return found
        found.append((v, info))
    return None


def versions_on_top(store: Store, start: int, probes: int) -> list[tuple[int, ObjectInfo]] | None:
    """:func:`versions_after`, and None too when Lance's hint names a newer version than the last
    found: one committed since was expired before this look, and the latest lies past the gap."""
    found = versions_after(store, start, probes)
    if found is None:
        return None
    hint = lance_hint(store)
    return None if hint is not None and hint > (found[-1][0] if found else start) else found


def versions_since(store: Store, since_version: int) -> list[int]:
    """The versions from ``since_version`` on: a stat of each name on top of it (a compaction's
    window holds a few), a listing of every version only where that cannot tell
    (:func:`versions_on_top`, as a table's cursor grows). Listing them at every compaction (its
    caller) grew with what the retention keeps: a follower's tail pass compacts every few merges
    (issue 82)."""
    found = versions_on_top(store, since_version, GROW_PROBES)
    if found is not None:
        return [since_version, *(v for v, _ in found)]
    return sorted(v for v in list_versions(store) if v >= since_version)


class VersionsCursor:
    """Every version the last listing found, plus those grown on top since (see the module docstring).

    :attr:`infos` is replaced, never changed in place: a listing handed out stays as it was."""

    def __init__(self) -> None:
        self.infos: dict[int, ObjectInfo] = {}
        #: The newest version known (None: nothing listed yet).
        self.top: int | None = None
        #: Bumped when a listing found anything but new versions on top of the last one.
        self.epoch = 0

    def relist(self, store: Store) -> dict[int, ObjectInfo]:
        """Every version now, by a listing (on a disk a known manifest is not stat-ed again); the
        epoch moves when it found a version gone, changed, or new below the newest known."""
        known, top = self.infos, self.top
        found = list_version_infos(store, known)
        if top is not None and (not found.keys() >= known.keys() or any(v <= top for v in found.keys() - known.keys())
                                or any(found[v] is not info and found[v].etag != info.etag
                                       for v, info in known.items())):
            self.epoch += 1
        self.infos, self.top = found, max(found, default=None)
        return found

    def grow(self, store: Store) -> dict[int, ObjectInfo] | None:
        """The versions known plus those committed on top since, a stat each (None: grow cannot
        tell, list them: nothing known, the newest known not V2-named or gone, more than
        :data:`GROW_PROBES` new, or Lance's hint names a newer version than the probe found: one
        committed since was expired before this look, and the latest lies past the gap). On an
        object store only once the versions fill more than :data:`~memwal.table.listing.WHOLE_PAGES`
        pages of its listing: a probe takes a request for the newest known, each new one, the one
        missing and Lance's hint, some seven after a follower's jobs, where a page lists a thousand
        versions in one; past them the listing paged through every version at each pass, 50
        requests at 50,000, a day beside a writer that never stops (issue 82)."""
        top = self.top
        if top is None or self.infos[top].key != table_manifest_key(top, v2_naming=True):
            return None
        if not store.has_directories and len(self.infos) <= listing.WHOLE_PAGES * getattr(store, "list_chunk", 0):
            return None
        new = versions_on_top(store, top, GROW_PROBES)
        if new is None:
            return None
        if new:
            self.infos, self.top = {**self.infos, **dict(new)}, new[-1][0]
        return self.infos

    def since(self, version: int) -> list[tuple[int, ObjectInfo]]:
        """The known versions above ``version``, ascending (what grew on top since a caller's last look)."""
        if self.top is None:
            return []
        return [(v, self.infos[v]) for v in range(version + 1, self.top + 1) if v in self.infos]


__all__ = ["GROW_PROBES", "LANCE_HINT", "VersionsCursor", "lance_hint", "versions_after", "versions_on_top",
           "versions_since"]
