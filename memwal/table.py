"""A MemWAL table: its URI, storage options, object store and Lance dataset.

One set of storage options (Lance's key names) configures both Lance and our own store,
so a user passes ``--storage-option`` once for everything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cached_property

import lance

from memwal.errors import BadInputError, NotFoundError
from memwal.storage import Store, open_store
from memwal.table_manifest import TableManifest, read_table_manifest

log = logging.getLogger(__name__)


@dataclass
class Table:
    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)

    @cached_property
    def store(self) -> Store:
        return open_store(self.uri, self.storage_options)

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """Open the base table with Lance (latest version unless ``version`` is given)."""
        try:
            return lance.dataset(self.uri, version=version, storage_options=self.storage_options or None)
        except (ValueError, OSError, RuntimeError) as exc:
            raise BadInputError(f"{self.uri}: cannot open the Lance table: {first_line(exc)}") from exc

    def manifest(self, version: int | None = None) -> TableManifest:
        return read_table_manifest(self.store, version)

    def require_mem_wal(self, version: int | None = None) -> TableManifest:
        """The table manifest, refusing tables that have no MemWAL index (exit code 2)."""
        m = self.manifest(version)
        if m.mem_wal is None:
            raise BadInputError(
                f"{self.uri}: table version {m.version} has no MemWAL index (run dataset.initialize_mem_wal first)"
            )
        return m


def open_table(uri: str, storage_options: dict[str, str] | None = None) -> Table:
    """Open and validate a MemWAL table; every problem is a one-line BadInputError."""
    if not uri:
        raise BadInputError("no table given")
    table = Table(uri.rstrip("/") if uri != "/" else uri, dict(storage_options or {}))
    try:
        table.require_mem_wal()
    except NotFoundError as exc:
        raise BadInputError(f"{uri}: no Lance table here ({exc})") from exc
    return table


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
