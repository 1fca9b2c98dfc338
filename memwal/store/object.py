"""Tables on S3, Azure Blob Storage and Google Cloud Storage: one store on obstore.

obstore is the Python binding of the Rust ``object_store`` crate, the one Lance itself uses, so
our store speaks to the same endpoints with the same options. One class serves every scheme
(``s3://``, ``az://``/``abfss://``, ``gs://``, and obstore's in-memory store for tests):

- **Conditional writes** are ``obstore.put`` with ``mode="create"`` (``If-None-Match: *``) or an
  update by version: the ETag on S3 and Azure, the object *generation* on GCS (matched by
  ``x-goog-if-generation-match``). The opaque ``etag`` this store hands out is therefore the
  generation on GCS, the ETag elsewhere; callers only hand it back to :meth:`put_if_match`.
- **Bulk deletes** go in the backend's batches: S3 DeleteObjects of 1,000 keys (missing ones
  ignored); an Azure blob batch of 256, each key deleted on its own, a missing one reported
  (observed on Azurite: the others are gone), which ends the batch; GCS one request a key. A
  missing key never fails a batch, so a rerun of GC converges.
- **Listings** ask for the backend's page size and can leave folders out
  (:meth:`ObjectStore.list_with_links`): a page ending inside one makes the next request start
  after it, so GC and status list ``_mem_wal/`` once without the run history under ``_jobs/``.

Every request goes through :func:`memwal.core.retry.after_transient` (object_store's own retries
are off): a 503 or a dropped connection is sent again, a 4xx is final and becomes a typed
error (:mod:`memwal.store.failures`).
"""

from __future__ import annotations

import builtins
import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import obstore
from obstore.store import MemoryStore

from memwal.core.retry import after_transient
from memwal.errors import BadInputError, NotFoundError, PreconditionFailedError
from memwal.store.backends import backend_for
from memwal.store.base import ObjectInfo, Store, clean_key, clean_prefix
from memwal.store.failures import is_transient, summary, to_memwal_error
from memwal.store.object_listing import LIST_CHUNK, ObjectListing
from memwal.store.options import ObstoreOptions, for_obstore
from memwal.store.uri import Location, parse_location

if TYPE_CHECKING:  # obstore's TypedDicts exist in its stubs only
    from obstore import ObjectMeta, PutMode, PutResult

log = logging.getLogger(__name__)


T = TypeVar("T")


#: Keys per obstore.delete call: one S3 DeleteObjects request, one Azure blob batch, one GCS
#: object (GCS has no batch delete).
DELETE_BATCH = {"s3": 1000, "az": 256, "abfss": 256, "gs": 1, "memory": 1000}


#: Delete requests a caller keeps in flight at once (GC's batches). One blob batch at a time on
#: Azure: Azurite serves batches one after another, so more in flight only queue into the
#: client's timeout (docs/decisions/0023-azure-one-delete-batch-in-flight.md). S3 and GCS take
#: them side by side.
DELETES_IN_FLIGHT = {"s3": 8, "az": 1, "abfss": 1, "gs": 8, "memory": 1}


#: Backends whose bulk delete deletes every key it is given and reports a missing one afterwards.
REPORTS_AFTER_BATCH = frozenset({"az", "abfss"})


def _quoted(etag: str | None) -> str:
    """ETags as HEAD and PUT return them (quoted): Azure listings drop the quotes."""
    if not etag:
        return ""
    return etag if etag.startswith(('"', 'W/"')) else f'"{etag}"'


class ObjectStore(ObjectListing, Store):
    """A prefix of a bucket (container) on an object store, through obstore.

    Keys are joined to the prefix here, so a :meth:`child` shares the parent's obstore
    client (and its connection pool). ``retry_wait`` is the backoff between attempts:
    (multiplier, max) seconds.
    """

    #: Requests :meth:`get_heads` keeps in flight: each waits on the network, not on us.
    READ_THREADS = 16

    def __init__(self, location: Location, backend: Any, options: ObstoreOptions) -> None:
        self.location = location
        self.root = location.root
        self.prefix = location.prefix
        self.bucket = location.bucket
        self._backend = backend
        self._options = options
        self._by_version = location.scheme == "gs"
        self.retry_wait: tuple[float, float] = (0.1, 5.0)
        self.delete_batch = DELETE_BATCH.get(location.scheme, 1000)
        self.list_chunk = LIST_CHUNK.get(location.scheme, 1000)
        self.deletes_in_flight = DELETES_IN_FLIGHT.get(location.scheme, 8)
        self._sent = 0
        self._sent_lock = threading.Lock()

    # -- construction

    @classmethod
    def open(cls, uri: str, storage_options: dict[str, str] | None = None) -> ObjectStore:
        """The store for an ``s3://``, ``az://``, ``abfss://`` or ``gs://`` table URI."""
        location = parse_location(uri)
        options = for_obstore(location.scheme, storage_options)
        return cls(location, backend_for(location, options), options)

    @classmethod
    def memory(cls, uri: str = "memory://bucket/table") -> ObjectStore:
        """obstore's in-memory store (tests: the contract of an object store without a server)."""
        location = parse_location(uri)
        return cls(location, MemoryStore(), ObstoreOptions())

    @property
    def backend(self) -> Any:
        """The obstore store (for a call this class does not wrap)."""
        return self._backend

    @property
    def requests_sent(self) -> int:
        """Requests sent to the backend so far, each retry counted (the fleet's probes report
        what a table cost from this, not from an estimate of what a listing should take)."""
        return self._sent

    def _count(self) -> None:
        with self._sent_lock:
            self._sent += 1

    # -- helpers

    def _full(self, key: str) -> str:
        k = clean_key(key)
        return f"{self.prefix}/{k}" if self.prefix else k

    def _full_prefix(self, prefix: str) -> str:
        p = clean_prefix(prefix)
        if not self.prefix:
            return p
        return f"{self.prefix}/{p}" if p else f"{self.prefix}/"

    def _rel(self, path: str) -> str:
        return path[len(self.prefix) + 1:] if self.prefix else path

    def _token(self, meta: ObjectMeta | PutResult) -> str:
        """The opaque version token of an object (see the module docstring)."""
        if self._by_version and meta.get("version"):
            return str(meta["version"])
        return _quoted(meta.get("e_tag"))

    def _info(self, meta: ObjectMeta) -> ObjectInfo:
        modified = meta.get("last_modified")
        return ObjectInfo(key=self._rel(str(meta["path"])), size=int(meta["size"]), etag=self._token(meta),
                          mtime=modified.timestamp() if modified is not None else 0.0)

    def _call(self, what: str, key: str, fn: Callable[[], T], *, counted: bool = True) -> T:
        """One request, sent again after transient failures; a final failure becomes our error.
        ``counted=False``: the caller counts it (a listing's end of stream sends nothing)."""
        uri = self.uri_for(key) if key else self.root
        multiplier, max_wait = self.retry_wait

        def attempt() -> T:
            if counted:
                self._count()
            return fn()

        try:
            return after_transient(attempt, what=f"{self.location.kind} {what} {uri}", is_transient=is_transient,
                                   attempts=self._options.attempts, base_seconds=multiplier, max_seconds=max_wait,
                                   describe=lambda exc: summary(exc, self._options.secrets))
        except Exception as exc:  # noqa: BLE001 - mapped to our typed errors (or re-raised)
            if isinstance(exc, (PreconditionFailedError, NotFoundError, BadInputError)):
                raise
            if not isinstance(exc, obstore.exceptions.BaseError | FileNotFoundError):
                raise
            raise to_memwal_error(exc, what=what, uri=uri, kind=self.location.kind,
                                  bucket_uri=self.location.bucket_url, attempts=self._options.attempts,
                                  secrets=self._options.secrets) from None

    # -- reads

    def _get(self, key: str, max_bytes: int | None) -> tuple[bytes, ObjectMeta]:
        """GET an object; the body is read inside the retry (a dropped stream is sent again).
        Over ``max_bytes`` (the response's size, known before its body), the body is never read."""
        path = self._full(key)

        def op() -> tuple[bytes, ObjectMeta]:
            result = obstore.get(self._backend, path)
            self.check_size(key, int(result.meta["size"]), max_bytes)
            return bytes(result.bytes()), result.meta

        return self._call("get", key, op)

    def get_with_etag(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, str]:
        data, meta = self._get(key, max_bytes)
        return data, self._token(meta)

    def get_with_time(self, key: str, *, max_bytes: int | None = None) -> tuple[bytes, float]:
        """:meth:`get` and the object's time, from the one GET's answer."""
        data, meta = self._get(key, max_bytes)
        return data, self._info(meta).mtime

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Ranged GET (a suffix range for a negative ``start``) to read trailers."""
        if length < 0:
            raise ValueError("length must be >= 0")
        path = self._full(key)
        if length == 0:
            if self.head(key) is None:
                raise self.not_found(key)
            return b""

        offset = start
        if start < 0 and self.location.scheme in ("az", "abfss"):  # Azure takes no suffix range: HEAD first
            info = self.head(key)
            if info is None:
                raise self.not_found(key)
            offset = max(info.size + start, 0)
            length = min(length, info.size - offset)
            if length <= 0:
                return b""

        def op() -> bytes:
            if offset < 0:
                return bytes(obstore.get(self._backend, path, options={"range": {"suffix": -offset}}).bytes())
            return bytes(obstore.get_range(self._backend, path, start=offset, length=length))

        try:
            data = self._call("get_range", key, op)
        except NotFoundError:
            raise
        except Exception:
            info = self.head(key)  # a range past the end: the answer is "nothing there"
            if info is not None and offset >= info.size:
                return b""
            raise
        return data[:length]

    def head(self, key: str) -> ObjectInfo | None:
        """HEAD an object; None if it does not exist."""
        path = self._full(key)

        def op() -> ObjectInfo | None:
            try:
                return self._info(obstore.head(self._backend, path))
            except FileNotFoundError:
                return None

        return self._call("head", key, op)

    # -- writes

    def put(self, key: str, data: bytes) -> str:
        """PUT an object (atomic on every object store); returns the new token."""
        path = self._full(key)
        return self._call("put", key, lambda: self._token(
            obstore.put(self._backend, path, data, mode="overwrite", use_multipart=False)))

    def _conditional_put(self, what: str, key: str, data: bytes, mode: PutMode) -> str:
        """A conditional PUT that tells a lost race from its own earlier attempt having landed.

        If an attempt fails transiently after the server applied it, the next one loses its
        precondition: the object is then read back, and if it holds exactly our bytes, our
        write won.
        """
        path = self._full(key)
        attempts = 0

        def op() -> str:
            nonlocal attempts
            attempts += 1
            return self._token(obstore.put(self._backend, path, data, mode=mode, use_multipart=False))

        try:
            return self._call(what, key, op)
        except PreconditionFailedError:
            if attempts > 1:
                try:
                    current, token = self.get_with_etag(key)
                except NotFoundError:
                    current, token = None, ""
                if current == data:
                    log.info("%s %s: an earlier attempt had succeeded", what, self.uri_for(key))
                    return token
            raise

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create only if no object has the key (``PutMode`` create)."""
        return self._conditional_put("put_if_absent", key, data, "create")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace only if the object is still at ``etag`` (``PutMode`` update by ETag, or generation on GCS)."""
        mode: PutMode = {"version": etag} if self._by_version else {"e_tag": etag}
        try:
            return self._conditional_put("put_if_match", key, data, mode)
        except NotFoundError as exc:
            if type(exc) is not NotFoundError:
                raise  # the bucket is missing, not the object
            raise PreconditionFailedError(f"conditional write failed, object is gone: {self.uri_for(key)}") from exc

    # -- deletes

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete in requests of the backend's batch size; missing keys are not errors."""
        paths = [self._full(k) for k in keys]
        for i in range(0, len(paths), self.delete_batch):
            self._delete_batch(paths[i:i + self.delete_batch])
        return len(paths)

    def _delete_batch(self, paths: builtins.list[str]) -> None:
        """One delete request; a key reported missing never fails it (see the module docstring).

        Where the backend stops at a missing key (GCS, obstore's memory store), the rest of
        the batch is deleted key by key; an Azure blob batch has deleted every other key by
        the time it reports one missing.
        """
        try:
            self._call("delete", "", lambda: obstore.delete(self._backend, paths))
            return
        except NotFoundError as exc:
            if type(exc) is not NotFoundError:
                raise
            if self.location.scheme in REPORTS_AFTER_BATCH or len(paths) == 1:
                return
        for path in paths:
            try:
                self._call("delete", self._rel(path), functools.partial(obstore.delete, self._backend, path))
            except NotFoundError as exc:
                if type(exc) is not NotFoundError:
                    raise

    # -- naming

    def uri_for(self, key: str) -> str:
        """``<scheme>://<bucket>/<prefix>/<key>``: what Lance opens for the same object."""
        k = clean_key(key, allow_empty=True)
        return f"{self.root}/{k}" if k else self.root

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``root/prefix`` sharing this store's obstore client."""
        p = clean_key(prefix, allow_empty=True)
        if not p:
            return self
        full = f"{self.prefix}/{p}" if self.prefix else p
        loc = Location(self.location.scheme, self.location.bucket, full, self.location.authority)
        c = ObjectStore(loc, self._backend, self._options)
        c.retry_wait, c.delete_batch, c.list_chunk = self.retry_wait, self.delete_batch, self.list_chunk
        c.deletes_in_flight = self.deletes_in_flight
        return c
