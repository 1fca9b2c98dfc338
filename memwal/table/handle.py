"""A MemWAL table: its URI, storage options, object store and Lance dataset.

One set of storage options (Lance's key names) configures both Lance and our own store,
so a user passes ``--storage-option`` once for everything.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import lance
from lance.lance import _Session as Session  # what lance.Session is; pylance's stubs leave it out of __all__

from memwal.core.retry import after_conflict
from memwal.errors import BadInputError, MemWalError, NotFoundError, StateMovedError, first_line
from memwal.store import LocalStore, ObjectInfo, Store, check_table_uri, open_store
from memwal.store.options import check_storage_options
from memwal.table.manifest import (
    TableManifest,
    decode_table_manifest,
    latest_version_key,
    list_versions,
    read_table_manifest,
)
from memwal.table.naming import table_manifest_key
from memwal.table.versions_cursor import VersionsCursor, lance_hint, versions_after

if TYPE_CHECKING:
    from memwal.table.progress_digest import ProgressDigest
    from memwal.table.retained import MainLine

log = logging.getLogger(__name__)

#: Decoded manifests a table keeps, the most recently used: a version's manifest never changes,
#: so the run that reads the latest again after reading it once (open, plan, status) lists
#: ``_versions/`` but gets it for nothing; few, because a big table's manifest is big.
MANIFESTS_KEPT = 4

#: Versions :meth:`Table._probe_latest` steps over before it lists ``_versions/`` instead.
LATEST_PROBES = 32

#: The base tables' session caches, bounded: a long-lived process (a follower, a fleet) opens its
#: tables' bases again and again (each job, its plan and its run), and what a version holds never
#: changes.
BASE_METADATA_CACHE_BYTES = 128 << 20
BASE_INDEX_CACHE_BYTES = 128 << 20


@lru_cache(maxsize=1)
def base_session() -> Session:
    """One Lance session for every base table a process opens: a follower opens the base several
    times a flush (the merge's plan and run, GC's listing pass), each open with a session of its
    own read the same manifest, fragments and index metadata again (py-spy: 15% of its busy time
    at minute 2 beside a pylance writer; an open and a count 0.35 ms, 0.06 ms in a shared session).
    Lance still finds the latest version on storage at each open (tested: another process's commit
    is seen at the next open); the session keeps only what a version's files say, which never
    changes."""
    return Session(index_cache_size_bytes=BASE_INDEX_CACHE_BYTES, metadata_cache_size_bytes=BASE_METADATA_CACHE_BYTES)


@dataclass
class Table:
    """A MemWAL table (:func:`open_table` opens one).

    It keeps what cannot change: the decoded manifests of the last few versions it read.
    Inside :meth:`reading` (a run's plan, a status), the listing of ``_versions/`` is read
    once too; outside, every :meth:`manifest` lists ``_versions/`` afresh (latest is what
    another writer may move).
    """

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict)
    #: The latest manifest as :func:`open_table` read it: a command that reads the table once,
    #: right after opening it (``memwal status``), starts from it instead of reading it again.
    opened: TableManifest | None = field(default=None, repr=False, compare=False)
    _manifests: OrderedDict[int, TableManifest] = field(default_factory=OrderedDict, init=False, repr=False,
                                                        compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    _scope: threading.local = field(default_factory=threading.local, init=False, repr=False, compare=False)
    #: The versions the last listing found, grown by a stat each where a stretch allows
    #: (:meth:`reading` with ``grown``).
    cursor: VersionsCursor = field(default_factory=VersionsCursor, init=False, repr=False, compare=False)
    #: The merge progress of the retained versions the last plan did not find in the digest, as
    #: :func:`memwal.table.retained.retained_versions` read it (same key and ETag only): the digest
    #: is a whole GC run's, and a follower's listing passes between two whole runs would read every
    #: version committed since, each pass.
    progress_read: ProgressDigest | None = field(default=None, init=False, repr=False, compare=False)
    #: The main line's retained versions this table built last (:func:`memwal.table.retained.retained_versions`
    #: grows them by what was committed since, rather than building a week of versions at every pass).
    main_line: MainLine | None = field(default=None, init=False, repr=False, compare=False)
    #: Held while the main line is built or grown (two plans of one table object at once grow it once).
    main_line_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    #: On a disk, the newest V2-named version this table found: where :meth:`_probe_latest` starts.
    _newest: int | None = field(default=None, init=False, repr=False, compare=False)

    @contextlib.contextmanager
    def reading(self, *, grown: bool = False) -> Iterator[None]:
        """A stretch of reads that writes nothing (a plan, a status): in it, on this thread,
        ``_versions/`` is listed once and that listing serves every read of the latest
        manifest and of the versions (:meth:`version_infos`). Call :meth:`moved` when the
        stretch must see the store afresh (a retry after a lost race).

        ``grown`` (a follower's listing pass): the versions this table knew, grown by those
        committed on top since (:meth:`VersionsCursor.grow`), not a listing of them all; a
        version removed since stays known until a stretch without it lists them."""
        depth = getattr(self._scope, "depth", 0)
        self._scope.depth = depth + 1
        if depth == 0:
            self._scope.grown = grown
        try:
            yield
        finally:
            self._scope.depth = depth
            if depth == 0:
                self._scope.listing = None
                self._scope.grown = False

    def _in_reading(self) -> bool:
        return bool(getattr(self._scope, "depth", 0))

    def moved(self) -> None:
        """Forget the listing of ``_versions/`` this thread's :meth:`reading` holds."""
        self._scope.listing = None

    def version_infos(self) -> dict[int, ObjectInfo]:
        """Every committed version and its manifest's listing: listed now, or once in :meth:`reading`."""
        if not self._in_reading():
            return self._list_versions()
        listing: dict[int, ObjectInfo] | None = getattr(self._scope, "listing", None)
        if listing is None:
            grown = self.cursor.grow(self.store) if getattr(self._scope, "grown", False) else None
            listing = self._scope.listing = grown if grown is not None else self._list_versions()
        return listing

    def _list_versions(self) -> dict[int, ObjectInfo]:
        """Every committed version now, a manifest listed before not stat-ed again (threads that
        list at once each start from a listing that was true of what it holds: no lock)."""
        return self.cursor.relist(self.store)

    def remembered(self, version: int) -> TableManifest | None:
        """The manifest of ``version`` if this table read it lately (it cannot have changed), else None."""
        with self._lock:
            m = self._manifests.get(version)
            if m is not None:
                self._manifests.move_to_end(version)
            return m

    def _remember(self, m: TableManifest) -> TableManifest:
        with self._lock:
            self._manifests[m.version] = m
            self._manifests.move_to_end(m.version)
            while len(self._manifests) > MANIFESTS_KEPT:
                self._manifests.popitem(last=False)
        return m

    def _read_manifest(self, version: int | None) -> TableManifest:
        """The manifest of ``version`` (latest when None): remembered, else read. Outside a
        :meth:`reading` stretch the latest is found without listing every version
        (:func:`memwal.table.manifest.latest_version_key`), another version from the versions'
        names alone (no stat of each: a followed table keeps thousands)."""
        if version is not None and (known := self.remembered(version)) is not None:
            return known
        if not self._in_reading():
            if version is None:
                found = self._probe_latest() or latest_version_key(self.store)
                if found is not None and self.store.has_directories and found[1] == table_manifest_key(
                        found[0], v2_naming=True):
                    self._newest = found[0]
                if found is None:
                    raise NotFoundError(f"{self.store.uri_for('_versions/')}: no table manifest: not a Lance table")
                version, key = found
                if (known := self.remembered(version)) is not None:
                    return known
                return self._remember(read_table_manifest(self.store, version, versions={version: key}, latest=True))
            return self._remember(self._read_named(version))
        infos = self.version_infos()
        if version is not None and version not in infos:
            self.moved()  # a version newer than the listing this stretch holds: list again
            infos = self.version_infos()
        wanted = max(infos, default=None) if version is None else version
        if version is None and wanted is not None and (known := self.remembered(wanted)) is not None:
            return known
        # only the key of the version read: a proof reads thousands of manifests in one stretch,
        # and a map of every version built for each read cost versions x reads (issue 82)
        if infos and wanted not in infos:
            raise NotFoundError(f"{self.store.root}: table version {wanted} does not exist")
        named = {wanted: infos[wanted].key} if wanted is not None else {}
        return self._remember(read_table_manifest(self.store, wanted, versions=named, latest=version is None))

    def _probe_latest(self) -> tuple[int, str] | None:
        """On a disk, the latest version found from the newest this table found before (or Lance's
        own hint, when newer and there): that one still there, then each next while one is (a stat
        each; Lance commits versions in order, each by a put-if-absent of the next, and a cleanup
        never removes the latest, but may remove versions committed since this table looked: the
        hint starts past them), instead of listing
        ``_versions/`` (one name a version: a merge read the latest six times, 28 ms at 13,415
        versions, issue 82). None (the listing then): nothing found before, or that version gone."""
        v = self._newest
        if v is None:
            return None
        # from Lance's hint when it is newer: versions committed since the last look and expired
        # before this one leave a gap the probe from the newest seen would stop at
        hint = lance_hint(self.store)
        v = max(v, hint) if hint is not None else v
        after = versions_after(self.store, v, LATEST_PROBES)
        if after is None:
            return None
        latest = after[-1][0] if after else v
        return latest, table_manifest_key(latest, v2_naming=True)

    def _read_named(self, version: int) -> TableManifest:
        """The manifest of ``version`` under its V2 name (what pylance 14 writes), read without a
        listing of ``_versions/``; a table of older names, or a version not there, is listed. A job
        reads the version it just committed (its receipt names the commit's transaction file), and
        a followed table keeps thousands of versions: listing them was 1.8% of a follower's busy
        time at minute 27 beside pylance."""
        key = table_manifest_key(version, v2_naming=True)
        try:
            data = self.store.get(key)
        except NotFoundError:
            return read_table_manifest(self.store, version, versions=list_versions(self.store))
        return decode_table_manifest(data, key=key, where=self.store.uri_for(key))

    @cached_property
    def store(self) -> Store:
        return open_store(self.uri, self.storage_options)

    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        """Open the base table with Lance (latest version unless ``version`` is given).

        A version a concurrent ``gc --expire-versions`` removed after we read it is a lost
        race (:class:`StateMovedError`, retried), not bad input.

        On a disk the latest is opened by its number, found from the newest this table found
        before (:meth:`_probe_latest`, a stat each): Lance's own open of the latest lists every
        version (1.2 ms at 3,000 versions, some 20 ms at 50,000, and a follower opens the base a
        dozen times a flush: issue 82), an open by number reads that one manifest (0.04 ms).
        """
        if version is None and (found := self._probe_latest()) is not None:
            try:
                ds = lance.dataset(self.uri, version=found[0], storage_options=self.storage_options or None,
                                   session=base_session())
                self._newest = found[0]
                return ds
            except (ValueError, OSError, RuntimeError):
                pass  # expired meanwhile (a newer version committed, then a cleanup): Lance finds the latest
        try:
            return lance.dataset(self.uri, version=version, storage_options=self.storage_options or None,
                                 session=base_session())
        except (ValueError, OSError, RuntimeError) as exc:
            if version is None and "not found" in str(exc).lower():
                try:  # the version Lance found latest expired as a newer one was committed: once more
                    return lance.dataset(self.uri, storage_options=self.storage_options or None,
                                         session=base_session())
                except (ValueError, OSError, RuntimeError):
                    pass
            if version is not None and self._expired(version):
                raise StateMovedError(f"{self.uri}: table version {version} was expired while in use "
                                      f"(a concurrent gc): {first_line(exc, self.uri)}") from exc
            raise BadInputError(f"{self.uri}: cannot open the Lance table: {first_line(exc, self.uri)}") from exc

    def newest_read(self) -> TableManifest:
        """The newest manifest this table object has read already (none yet: the latest, read
        now): what a run takes the table's own settings from (:mod:`memwal.actions.policy`)
        without one more read of the store, as fresh as the table's last read."""
        with self._lock:
            known = max(self._manifests.values(), key=lambda m: m.version, default=None)
        if self.opened is not None and (known is None or self.opened.version > known.version):
            known = self.opened
        return known if known is not None else self.manifest()

    def manifest(self, version: int | None = None) -> TableManifest:
        """The decoded table manifest of ``version`` (latest when None); a version that
        vanished while we read it (expired by a concurrent cleanup) is a
        :class:`StateMovedError`, and the latest is listed again when the one listed went."""
        if version is not None:
            try:
                return self._read_manifest(version)
            except NotFoundError:
                if self._expired(version):
                    raise StateMovedError(f"{self.uri}: table version {version} was expired while in use "
                                          "(a concurrent gc)") from None
                raise

        def latest(attempt: int) -> TableManifest:
            if attempt > 1:  # the latest version listed went: list again
                self.moved()
            return self._read_manifest(None)

        return after_conflict(latest, attempts=3, base_seconds=0.05, what=f"{self.uri}: reading the table manifest")

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
        table.opened = table.require_mem_wal()
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


