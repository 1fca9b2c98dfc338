"""A MemWAL table: its URI, storage options, object store and Lance dataset.

One set of storage options (Lance's key names) configures both Lance and our own store,
so a user passes ``--storage-option`` once for everything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

import lance

from memwal.core.retry import after_conflict
from memwal.errors import BadInputError, MemWalError, NotFoundError, StateMovedError, first_line
from memwal.store import LocalStore, Store, check_table_uri, open_store
from memwal.store.options import check_storage_options
from memwal.table.manifest import TableManifest, list_versions, read_table_manifest

log = logging.getLogger(__name__)


@dataclass
class Table:
    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)

    @cached_property
    def store(self) -> Store:
        return open_store(self.uri, self.storage_options)

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """Open the base table with Lance (latest version unless ``version`` is given).

        A version a concurrent ``gc --expire-versions`` removed after we read it is a lost
        race (:class:`StateMovedError`, retried), not bad input.
        """
        try:
            return lance.dataset(self.uri, version=version, storage_options=self.storage_options or None)
        except (ValueError, OSError, RuntimeError) as exc:
            if version is None and "not found" in str(exc).lower():
                try:  # the version Lance found latest expired as a newer one was committed: once more
                    return lance.dataset(self.uri, storage_options=self.storage_options or None)
                except (ValueError, OSError, RuntimeError):
                    pass
            if version is not None and self._expired(version):
                raise StateMovedError(f"{self.uri}: table version {version} was expired while in use "
                                      f"(a concurrent gc): {first_line(exc, self.uri)}") from exc
            raise BadInputError(f"{self.uri}: cannot open the Lance table: {first_line(exc, self.uri)}") from exc

    def manifest(self, version: int | None = None) -> TableManifest:
        """The decoded table manifest of ``version`` (latest when None); a version that
        vanished while we read it (expired by a concurrent cleanup) is a
        :class:`StateMovedError`, and the latest is listed again when the one listed went."""
        if version is not None:
            try:
                return read_table_manifest(self.store, version)
            except NotFoundError:
                if self._expired(version):
                    raise StateMovedError(f"{self.uri}: table version {version} was expired while in use "
                                          "(a concurrent gc)") from None
                raise

        return after_conflict(lambda _n: read_table_manifest(self.store, None), attempts=3, base_seconds=0.05,
                              what=f"{self.uri}: reading the table manifest")

    def _expired(self, version: int) -> bool:
        """Whether ``version`` is gone while the table goes on (a newer version exists)."""
        try:
            versions = list_versions(self.store)
        except MemWalError:
            return False
        return version not in versions and bool(versions) and max(versions) > version

    def require_mem_wal(self, version: int | None = None) -> TableManifest:
        """The table manifest, refusing tables that have no MemWAL index (exit code 2)."""
        m = self.manifest(version)
        if m.mem_wal is None:
            raise BadInputError(
                f"{self.uri}: table version {m.version} has no MemWAL index (run dataset.initialize_mem_wal first)"
            )
        return m


def open_table(uri: str, storage_options: dict[str, str] | None = None) -> Table:
    """Open and validate a MemWAL table; every problem is a one-line BadInputError.

    Validation comes first and writes nothing: the URI (one rule for every command), the
    storage option keys, and our own folders (``_mem_wal`` and ``_mem_wal/_jobs`` must
    not be files, or the first lease write would fail half-way).
    """
    if not uri:
        raise BadInputError("no table given")
    uri = check_table_uri(uri)
    options = check_storage_options(storage_options)
    table = Table(uri.rstrip("/") if uri != "/" else uri, options)
    try:
        table.require_mem_wal()
    except NotFoundError as exc:
        raise BadInputError(f"{uri}: no Lance table here ({exc})") from exc
    check_own_folders(table.store)
    return table


#: Folders the jobs write into (leases, audit records, staging): each must be a folder.
OWN_FOLDERS = ("_mem_wal", "_mem_wal/_jobs", "_mem_wal/_jobs/leases")


def check_own_folders(store: Store) -> None:
    """Refuse a table where one of our folders is a file (BadInputError naming it).

    Only local tables can have this problem: on S3 an object ``_mem_wal`` and keys under
    ``_mem_wal/`` coexist, so no request is spent there.
    """
    if not isinstance(store, LocalStore):
        return
    for key in OWN_FOLDERS:
        if store.head(key) is not None:
            raise BadInputError(f"{store.uri_for(key)} is a file, expected a folder: move it away and rerun")


