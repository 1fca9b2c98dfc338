"""Table manifests by version, and the ``__lance_mem_wal`` entry of one.

Both the H3 locator (memwal.snapshot.locate) and the H1 guard (memwal.snapshot.guard) walk
table versions one by one; they share this small cache instead of re-listing ``_versions/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memwal.errors import NotFoundError
from memwal.table.manifest import IndexEntry, TableManifest, decode_table_manifest, list_versions
from memwal.table.naming import MEM_WAL_INDEX_NAME, table_manifest_key

if TYPE_CHECKING:
    from memwal.store import Store


def mem_wal_entry(m: TableManifest) -> IndexEntry | None:
    """The ``__lance_mem_wal`` index entry of a table version (None: no MemWAL index)."""
    return next((i for i in m.indices if i.name == MEM_WAL_INDEX_NAME), None)


class TableVersions:
    """Table manifests by version: one listing, then direct reads and HEAD probes (no re-listing).

    The check after each commit runs inside the window H1 opens, so it must be quick.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.keys = list_versions(store)
        if not self.keys:
            raise NotFoundError(f"{store.uri_for('_versions/')}: no table manifest")
        newest = self.keys[max(self.keys)].rsplit("/", 1)[-1].split(".")[0]
        self.v2 = int(newest) > (1 << 63)
        self.top = max(self.keys)

    def key(self, version: int) -> str:
        return self.keys.get(version) or table_manifest_key(version, v2_naming=self.v2)

    def at(self, version: int) -> TableManifest:
        key = self.key(version)
        try:
            data = self.store.get(key)
        except NotFoundError:
            self.keys = list_versions(self.store)  # a version cleaned up, or another naming scheme
            if version not in self.keys:
                raise NotFoundError(f"{self.store.root}: table version {version} does not exist") from None
            key = self.keys[version]
            data = self.store.get(key)
        self.keys[version] = key
        self.top = max(self.top, version)
        return decode_table_manifest(data, key=key, where=self.store.uri_for(key))

    def latest(self, at_least: int | None = None) -> TableManifest:
        v = max(self.top, at_least or 0)
        while self.store.exists(self.key(v + 1)):
            v += 1
        return self.at(v)
