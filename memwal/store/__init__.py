"""Where a table's files live: one store interface over local disks and object stores.

- :mod:`memwal.store.base`: the :class:`Store` interface and :class:`ObjectInfo`.
- :mod:`memwal.store.local`: a local directory, never followed through a symbolic link.
- :mod:`memwal.store.object`: ``s3://``, ``az://``/``abfss://`` and ``gs://`` on obstore (the
  binding of the ``object_store`` crate Lance itself uses), plus obstore's in-memory store.
- :mod:`memwal.store.options`: storage options (Lance's keys) checked and translated once.
- :mod:`memwal.store.uri`: which store a table URI names, checked before any I/O.
"""

from __future__ import annotations

from memwal.store.base import ObjectInfo, Store
from memwal.store.local import LocalStore
from memwal.store.local_walk import TEMP_MARKER
from memwal.store.uri import check_table_uri, is_object_store_uri

__all__ = ["TEMP_MARKER", "LocalStore", "ObjectInfo", "Store", "check_table_uri", "open_store"]


def open_store(uri: str, storage_options: dict[str, str] | None = None) -> Store:
    """The store for a table URI (validated by :func:`check_table_uri`).

    Object stores take Lance-style storage options (see :mod:`memwal.store.options`);
    a local path ignores them. obstore loads only for object-store tables.
    """
    uri = check_table_uri(uri)
    if is_object_store_uri(uri):
        from memwal.store.object import ObjectStore

        return ObjectStore.open(uri, storage_options)
    return LocalStore(uri)
