"""A lease write never makes a removed table's folders again (issue 83).

A local store's writes create the folders of the key they write (``os.makedirs`` of the table's
path, then ``_mem_wal/_jobs/leases/``): that is how a table's first lease makes its folder. But
a table removed under a running process (``rm -r``, a follower still running) was made again by
it: the follow lease's heartbeat, each job's lease, each release wrote ``leases/`` back into the
removed path, and the follower failed merges there for ever. An object store has no folders to
make (a conditional write of a missing object fails there by itself), so only a
:class:`~memwal.store.local.LocalStore` is guarded, with no request added elsewhere:

* a rewrite (``put_if_match``) of a lease object that is not there fails, and makes no folder:
  the local store's own rule for every conditional write (:mod:`memwal.store.local_writes`);
* a new lease object (``put_if_absent``) on a store this process saw holding a table
  (:func:`note_table`) is refused while the table's ``_versions/`` is gone
  (:class:`TableGoneError`). A store never seen with a table (the lease contract's tests, an
  empty folder) is written as before.

The check and the write are two steps: a table removed between them still gets its lease
folder back, once; the next write is refused.
"""

from __future__ import annotations

import threading

from memwal.errors import MemWalError
from memwal.store import LocalStore, Store

#: The table's own folder of manifests: a Lance table is there while it holds it.
VERSIONS_DIR = "_versions"

#: Roots of local stores this process saw holding a table (bounded by the tables it opened).
_tables: set[str] = set()
_lock = threading.Lock()


class TableGoneError(MemWalError):
    """The table a lease is for was removed (its ``_versions/`` is gone): exit 1, nothing written."""


def table_gone(store: Store) -> bool:
    """Whether ``store`` holds no table now: no ``_versions/`` at its root (one listing)."""
    return VERSIONS_DIR not in store.list_dirs("")


def note_table(store: Store) -> None:
    """Remember that ``store`` holds a table now (a local store only: see the module docstring)."""
    if isinstance(store, LocalStore) and store.root not in _tables and not table_gone(store):
        with _lock:
            _tables.add(store.root)


def noted_gone(store: Store) -> bool:
    """Whether ``store`` held a table when this process noted it (:func:`note_table`), and now
    holds none."""
    return store.root in _tables and table_gone(store)


def check_create(store: Store, uri: str) -> None:
    """Refuse to create the lease object ``uri`` in a table this process saw that is gone."""
    if isinstance(store, LocalStore) and noted_gone(store):
        raise TableGoneError(f"{store.root}: the table is gone (no {VERSIONS_DIR}/): no lease written at {uri}")


__all__ = ["VERSIONS_DIR", "TableGoneError", "check_create", "note_table", "noted_gone", "table_gone"]
