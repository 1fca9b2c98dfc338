"""Table manifests by version, and the ``__lance_mem_wal`` entry of one.

Both the H3 locator (memwal.snapshot.locate) and the H1 guard (memwal.snapshot.guard) walk
table versions one by one; they share this small cache instead of re-listing ``_versions/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwal.errors import NotFoundError
from memwal.table.manifest import IndexEntry, TableManifest, decode_table_manifest, latest_version_key, list_versions
from memwal.table.naming import MEM_WAL_INDEX_NAME, table_manifest_key

if TYPE_CHECKING:
    from memwal.store import Store


def mem_wal_entry(m: TableManifest) -> IndexEntry | None:
    """The ``__lance_mem_wal`` index entry of a table version (None: no MemWAL index)."""
    return next((i for i in m.indices if i.name == MEM_WAL_INDEX_NAME), None)


class TableVersions:
    """Table manifests by version: the latest found without a listing, then direct reads and HEAD
    probes; every version listed only when asked for (:attr:`keys`: an interrupted refresh's
    recovery, the locator's search) or when a version is not where its name says.

    The check after each commit runs inside the window H1 opens, so it must be quick; and a refresh
    runs after a follower's merges, on a table whose retention keeps a week of versions: listing
    them all at each refresh grew with the table's age (issue 82)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        found = latest_version_key(store)
        if found is None:
            raise NotFoundError(f"{store.uri_for('_versions/')}: no table manifest")
        self.top, newest = found
        self.v2 = int(newest.rsplit("/", 1)[-1].split(".")[0]) > (1 << 63)
        self._named = {self.top: newest}
        self._listed: dict[int, str] | None = None

    @property
    def keys(self) -> dict[int, str]:
        """Every version listed (once, when first asked) and each read since, with its manifest key."""
        if self._listed is None:
            self._listed = list_versions(self.store)
        return {**self._listed, **self._named}

    def key(self, version: int) -> str:
        return self._named.get(version) or (self._listed or {}).get(version) or \
            table_manifest_key(version, v2_naming=self.v2)

    def at(self, version: int) -> TableManifest:
        key = self.key(version)
        try:
            data = self.store.get(key)
        except NotFoundError:
            self._listed = list_versions(self.store)  # a version cleaned up, or another naming scheme
            if version not in self._listed:
                raise NotFoundError(f"{self.store.root}: table version {version} does not exist") from None
            key = self._listed[version]
            data = self.store.get(key)
        self._named[version] = key
        self.top = max(self.top, version)
        return decode_table_manifest(data, key=key, where=self.store.uri_for(key))

    def latest(self, at_least: int | None = None) -> TableManifest:
        v = max(self.top, at_least or 0)
        while self.store.exists(self.key(v + 1)):
            v += 1
        return self.at(v)
