"""One object-store interface over a local directory and ``s3://`` (DESIGN.md sections 2, 3.7).

Keys are ``/``-separated strings relative to the store root (the table URI).  Every job
reads and writes the table's side files through a :class:`Store`, so a local table and
an S3 table behave the same: atomic puts, conditional puts (``put_if_absent`` and the
compare-and-swap ``put_if_match`` the leases are built on), lexicographically ordered
listings, and batched deletes where a missing key is not an error.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

import boto3
import botocore.config
import botocore.exceptions
from botocore import UNSIGNED
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from memwal.errors import (
    BadInputError,
    MemWalError,
    NotFoundError,
    PreconditionFailedError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Temporary files written by :class:`LocalStore` carry this marker in their name, so
#: listings can skip them (a crashed writer may leave one behind).
TEMP_MARKER = ".memwal-tmp-"

#: S3 DeleteObjects accepts at most this many keys per request.
S3_DELETE_BATCH = 1000


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or a HEAD tells about one object."""

    key: str  # relative to the store root
    size: int
    etag: str  # opaque: only compare it or hand it back to put_if_match
    mtime: float  # seconds since the epoch


def _clean_key(key: str, *, allow_empty: bool = False) -> str:
    """Normalise a key and refuse one that could escape the store root.

    Keys come from manifests and plans (data, not trust: DESIGN 3.5), so ``..``,
    absolute keys and empty components are refused rather than resolved.
    """
    if not isinstance(key, str):
        raise BadInputError(f"object key must be a string, got {type(key).__name__}")
    stripped = key.strip("/")
    if not stripped:
        if allow_empty:
            return ""
        raise BadInputError(f"invalid object key {key!r}: empty")
    parts = stripped.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in stripped or "\x00" in stripped:
        raise BadInputError(f"invalid object key {key!r}")
    return stripped


def _clean_prefix(prefix: str) -> str:
    """Normalise a listing prefix: keeps a trailing ``/`` (directory) if given."""
    if prefix in ("", "/"):
        return ""
    trailing = prefix.endswith("/")
    body = _clean_key(prefix)
    return body + "/" if trailing else body


def _dir_prefix(prefix: str) -> str:
    """A prefix forced to name a directory (``a/b`` -> ``a/b/``), for list_dirs."""
    p = _clean_prefix(prefix)
    return p if (p == "" or p.endswith("/")) else p + "/"


class Store(abc.ABC):
    """An object store rooted at a table URI; keys are relative to :attr:`root`."""

    root: str

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Read a whole object (NotFoundError if absent): manifests, hints, lease records."""

    @abc.abstractmethod
    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes, to CAS-write it back later."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` without fetching the whole object.

        Used to read file trailers (Lance manifests end with a 16-byte trailer).  A negative
        ``start`` counts from the end of the object, like a Python slice.  Bytes past the
        end are simply not returned (a short or empty result).  NotFoundError if absent.
        """

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime of an object, or None if it does not exist."""

    def exists(self, key: str) -> bool:
        """Whether an object exists (a "directory" with objects under it does not count)."""
        return self.head(key) is not None

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write an object atomically (readers see the old or the new bytes, never a part).

        Returns the new ETag.  Parent "directories" are created as needed.
        """

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create an object only if no object has the key: the first lease write.

        Exactly one of several concurrent callers wins; the others get
        PreconditionFailedError.  Returns the new ETag.
        """

    @abc.abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Compare-and-swap: replace the object only if its ETag is still ``etag``.

        PreconditionFailedError if the ETag changed or the object is gone.  Of several
        concurrent callers holding the same ETag exactly one wins.  Returns the new ETag.
        """

    @abc.abstractmethod
    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in lexicographic key order.

        ``prefix`` is usually a directory prefix such as ``"_mem_wal/abc/"``.  With
        ``recursive=False`` only objects directly under it are yielded (S3 ``Delimiter='/'``).
        Paginated underneath, so it is safe on directories with many objects.
        """

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> list[str]:
        """Immediate child "directory" names under ``prefix`` (no trailing slash), sorted.

        Like S3 CommonPrefixes with delimiter ``/``: finds shards and generations.
        """

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete objects in batches; a missing key is not an error (GC reruns converge).

        Returns the number of keys requested.
        """

    @abc.abstractmethod
    def uri_for(self, key: str) -> str:
        """Full URI of a key, for messages, reports and for handing paths to Lance."""

    @abc.abstractmethod
    def child(self, prefix: str) -> Store:
        """A store rooted at ``root/prefix`` (e.g. one generation dataset), same credentials."""

    def __repr__(self) -> str:
        """Name the store by its root, for logs."""
        return f"{type(self).__name__}({self.root!r})"


# --------------------------------------------------------------------------- local


class LocalStore(Store):
    """A directory on a local (POSIX) file system.

    Atomicity comes from the file system: puts write a temporary file in the target's
    directory and rename it into place; ``put_if_absent`` hard-links the temporary file
    (link fails if the name exists); ``put_if_match`` holds an exclusive ``flock`` on the
    target's directory while it compares and renames, which serialises threads and
    processes without leaving lock files inside the table.

    ETags are ``<mtime_ns>-<size>-<inode>``.  Every write gives the new file an mtime
    strictly greater than the file it replaces, so an ETag is never reused for the same
    key (no ABA), even on file systems with coarse timestamps that recycle inodes.
    """

    def __init__(self, uri: str) -> None:
        """Root the store at a plain path or a ``file://`` URI (the directory may not exist yet)."""
        self.root = uri
        path = uri
        if path.startswith("file://"):
            path = path[len("file://") :]
            if path.startswith("localhost/"):
                path = path[len("localhost") :]
        if not path:
            raise BadInputError(f"invalid local table path {uri!r}")
        self._base = os.path.abspath(os.path.expanduser(path))

    # -- helpers

    def _path(self, key: str, *, allow_empty: bool = False) -> str:
        """Absolute path of a (validated) key."""
        k = _clean_key(key, allow_empty=allow_empty)
        return os.path.join(self._base, *k.split("/")) if k else self._base

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        """An ETag from file metadata (cheap: listings never read file contents)."""
        return f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}"

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        """ObjectInfo from a stat result (one place builds ETags for head and list)."""
        return ObjectInfo(key=key, size=st.st_size, etag=self._etag(st), mtime=st.st_mtime)

    def _write_temp(self, path: str, data: bytes) -> str:
        """Write ``data`` to a new temporary file next to ``path``; returns its path.

        The temporary file is in the same directory so rename/link stay atomic.  It is
        fsynced so that a rename never exposes an empty file after a crash.
        """
        directory = os.path.dirname(path)
        # Truncated base name: the temporary name must stay within NAME_MAX.
        base = os.path.basename(path)[:100]
        tmp = os.path.join(directory, f".{base}{TEMP_MARKER}{uuid.uuid4().hex}")
        for attempt in range(5):
            os.makedirs(directory, exist_ok=True)
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileNotFoundError:
                # A concurrent delete_many pruned the (empty) directory: recreate it.
                if attempt == 4:
                    raise
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    @staticmethod
    def _bump_mtime(tmp: str, previous: os.stat_result | None) -> None:
        """Make the new file's mtime strictly greater than the one it replaces (no ETag reuse)."""
        if previous is None:
            return
        st = os.stat(tmp)
        if st.st_mtime_ns <= previous.st_mtime_ns:
            ns = previous.st_mtime_ns + 1
            os.utime(tmp, ns=(ns, ns))

    @contextlib.contextmanager
    def _dir_lock(self, directory: str) -> Iterator[None]:
        """Exclusive flock on a directory: serialises writers of keys in it.

        flock locks belong to the open file description, so each call opening its own
        descriptor excludes other threads of this process as well as other processes.
        """
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor releases the lock

    @staticmethod
    def _stat_file(path: str) -> os.stat_result | None:
        """stat() of a regular file, None if absent or not a file."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _not_found(self, key: str) -> NotFoundError:
        """The error for a missing object, naming its full path."""
        return NotFoundError(f"object not found: {self.uri_for(key)}")

    # -- reads

    def get(self, key: str) -> bytes:
        """Read a whole object (NotFoundError if absent): manifests, hints, lease records."""
        return self.get_with_etag(key)[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """Read an object and the ETag of exactly those bytes (fstat of the open file)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                return f.read(), self._etag(st)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(key) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes from ``start`` (negative: from the end) to read trailers cheaply."""
        if length < 0:
            raise ValueError("length must be >= 0")
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                offset = max(size + start, 0) if start < 0 else start
                if offset >= size or length == 0:
                    return b""
                f.seek(offset)
                return f.read(length)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(key) from None

    def head(self, key: str) -> ObjectInfo | None:
        """Size, ETag and mtime of an object, or None if it does not exist."""
        k = _clean_key(key)
        st = self._stat_file(self._path(k))
        return None if st is None else self._info(k, st)

    # -- writes

    def put(self, key: str, data: bytes) -> str:
        """Write atomically via a temporary file and rename; returns the new ETag."""
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            with self._dir_lock(os.path.dirname(path)):
                self._bump_mtime(tmp, self._stat_file(path))
                os.replace(tmp, path)
                return self._etag(os.stat(path))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create only if absent: ``link()`` of a complete temporary file fails if the name exists."""
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise PreconditionFailedError(f"object already exists: {self.uri_for(key)}") from None
            return self._etag(os.stat(tmp))  # same inode as the new object
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Compare-and-swap under the directory's flock: rename only if the ETag still matches."""
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            with self._dir_lock(os.path.dirname(path)):
                current = self._stat_file(path)
                if current is None:
                    raise PreconditionFailedError(f"conditional write failed, object is gone: {self.uri_for(key)}")
                if self._etag(current) != etag:
                    raise PreconditionFailedError(f"conditional write failed, object changed: {self.uri_for(key)}")
                self._bump_mtime(tmp, current)
                os.replace(tmp, path)
                return self._etag(os.stat(path))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # -- listing

    def _walk(self, directory: str, rel: str, name_prefix: str, recursive: bool) -> Iterator[ObjectInfo]:
        """Depth-first walk yielding files in lexicographic order of their full keys.

        Directories sort as ``name + "/"``, which makes depth-first order equal the order
        S3 lists keys in.
        """
        try:
            with os.scandir(directory) as it:
                entries = [e for e in it if e.name.startswith(name_prefix)]
        except (FileNotFoundError, NotADirectoryError):
            return
        keyed: list[tuple[str, os.DirEntry[str], bool]] = []
        for e in entries:
            try:
                is_dir = e.is_dir(follow_symlinks=True)
            except OSError:
                continue
            if not is_dir and TEMP_MARKER in e.name:
                continue
            keyed.append((e.name + "/" if is_dir else e.name, e, is_dir))
        keyed.sort(key=lambda t: t[0])
        for _, e, is_dir in keyed:
            key = rel + e.name
            if is_dir:
                if recursive:
                    yield from self._walk(e.path, key + "/", "", True)
                continue
            try:
                st = e.stat(follow_symlinks=True)
            except FileNotFoundError:
                continue  # deleted while listing
            if stat.S_ISREG(st.st_mode):
                yield self._info(key, st)

    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order, skipping our temporary files."""
        p = _clean_prefix(prefix)
        dir_part, _, name_prefix = p.rpartition("/")
        directory = self._path(dir_part, allow_empty=True)
        rel = dir_part + "/" if dir_part else ""
        yield from self._walk(directory, rel, name_prefix, recursive)

    def list_dirs(self, prefix: str) -> list[str]:
        """Immediate subdirectory names under ``prefix`` (os.scandir), sorted."""
        directory = self._path(_dir_prefix(prefix), allow_empty=True)
        try:
            with os.scandir(directory) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=True))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- deletes

    def delete_many(self, keys: Iterable[str]) -> int:
        """Unlink files (missing ones are fine), then prune directories left empty.

        Pruning keeps local listings like S3's, where a "directory" exists only while
        objects are under it (an emptied generation must not show up in list_dirs).
        """
        count = 0
        parents: set[str] = set()
        for key in keys:
            count += 1
            path = self._path(key)
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                continue
            except PermissionError as exc:
                if os.path.isdir(path):  # EPERM on some systems for unlink(dir)
                    continue
                raise MemWalError(f"cannot delete {path}: {exc}") from exc
            parents.add(os.path.dirname(path))
        for parent in sorted(parents, key=len, reverse=True):
            self._prune(parent)
        return count

    def _prune(self, directory: str) -> None:
        """Remove ``directory`` and its ancestors while empty, never the store root."""
        while directory != self._base and directory.startswith(self._base + os.sep):
            try:
                os.rmdir(directory)
            except OSError as exc:
                if exc.errno != errno.ENOENT:  # not empty (or busy): stop climbing
                    return
            directory = os.path.dirname(directory)

    # -- naming

    def uri_for(self, key: str) -> str:
        """Absolute local path of a key."""
        return self._path(key, allow_empty=True)

    def child(self, prefix: str) -> LocalStore:
        """A store rooted at ``root/prefix``."""
        p = _clean_key(prefix, allow_empty=True)
        if not p:
            return LocalStore(self.root)
        return LocalStore(self.root.rstrip("/") + "/" + p)


# --------------------------------------------------------------------------- S3

_TRUE = frozenset({"1", "true", "on", "yes", "y"})
_FALSE = frozenset({"0", "false", "off", "no", "n"})

# Lance / object_store key names (case-insensitive) -> our canonical name.
_OPTION_ALIASES: dict[str, str] = {
    "aws_endpoint": "endpoint",
    "aws_endpoint_url": "endpoint",
    "endpoint": "endpoint",
    "endpoint_url": "endpoint",
    "allow_http": "allow_http",
    "aws_access_key_id": "access_key_id",
    "access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "aws_token": "session_token",
    "session_token": "session_token",
    "token": "session_token",
    "aws_region": "region",
    "region": "region",
    "aws_default_region": "region",
    "default_region": "region",
    "aws_virtual_hosted_style_request": "virtual_hosted_style_request",
    "virtual_hosted_style_request": "virtual_hosted_style_request",
    "aws_skip_signature": "skip_signature",
    "skip_signature": "skip_signature",
    "client_max_retries": "client_max_retries",
}

_RETRY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
    }
)
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_ACCESS_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}
)
_TRANSIENT_EXC: tuple[type[BaseException], ...] = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ResponseStreamingError,
)


class BucketNotFoundError(NotFoundError):
    """The bucket of an s3:// table does not exist."""


def _parse_bool(name: str, value: Any) -> bool:
    """Parse a boolean storage option the way object_store does; BadInputError otherwise."""
    v = str(value).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise BadInputError(f"storage option {name}={value!r}: expected true or false")


@dataclass(frozen=True)
class S3Options:
    """The storage options S3Store uses, parsed from Lance-style keys."""

    endpoint: str | None = None
    allow_http: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    virtual_hosted_style_request: bool = False
    skip_signature: bool = False
    max_attempts: int = 5

    @classmethod
    def parse(cls, options: dict[str, str] | None) -> S3Options:
        """Parse Lance storage options; ignore keys we don't use, refuse bad values of ones we do."""
        raw: dict[str, tuple[str, Any]] = {}
        for k, v in (options or {}).items():
            canon = _OPTION_ALIASES.get(str(k).strip().lower())
            if canon is None:
                continue  # a Lance option we don't need (timeouts, proxies, ...)
            if v is None:
                continue
            raw[canon] = (str(k), v)

        def text(name: str) -> str | None:
            if name not in raw:
                return None
            key, v = raw[name]
            if not isinstance(v, str):
                raise BadInputError(f"storage option {key}: expected a string, got {type(v).__name__}")
            return v.strip() or None

        def flag(name: str, default: bool) -> bool:
            if name not in raw:
                return default
            return _parse_bool(*raw[name])

        allow_http = flag("allow_http", False)
        endpoint = text("endpoint")
        if endpoint is not None:
            key = raw["endpoint"][0]
            parsed = urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise BadInputError(f"storage option {key}={endpoint!r}: expected an http(s):// URL")
            try:
                _ = parsed.port  # raises ValueError on a bad port
            except ValueError:
                raise BadInputError(f"storage option {key}={endpoint!r}: bad port") from None
            if parsed.scheme == "http" and not allow_http:
                raise BadInputError(f"storage option {key}={endpoint!r} is plain http: set allow_http=true")
        max_attempts = 5
        if "client_max_retries" in raw:
            key, v = raw["client_max_retries"]
            try:
                retries = int(str(v).strip())
            except ValueError:
                raise BadInputError(f"storage option {key}={v!r}: expected an integer") from None
            if retries < 0:
                raise BadInputError(f"storage option {key}={v!r}: must be >= 0")
            max_attempts = retries + 1
        access = text("access_key_id")
        secret = text("secret_access_key")
        if (access is None) != (secret is None):
            raise BadInputError("storage options aws_access_key_id and aws_secret_access_key must be given together")
        return cls(
            endpoint=endpoint,
            allow_http=allow_http,
            access_key_id=access,
            secret_access_key=secret,
            session_token=text("session_token"),
            region=text("region"),
            virtual_hosted_style_request=flag("virtual_hosted_style_request", False),
            skip_signature=flag("skip_signature", False),
            max_attempts=max_attempts,
        )

    def make_client(self) -> Any:
        """A boto3 S3 client; botocore's own retries are off (we retry transient errors only)."""
        config = botocore.config.Config(
            s3={"addressing_style": "virtual" if self.virtual_hosted_style_request else "path"},
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=64,
            connect_timeout=10,
            read_timeout=60,
            # S3-compatible servers (and older MinIO) may not know the new default checksums.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            signature_version=UNSIGNED if self.skip_signature else None,
        )
        with _SESSION_LOCK:  # creating clients from one session is not thread-safe
            return _session().client(
                "s3",
                endpoint_url=self.endpoint,
                region_name=self.region or None,
                aws_access_key_id=self.access_key_id,
                aws_secret_access_key=self.secret_access_key,
                aws_session_token=self.session_token,
                config=config,
            )


_SESSION_LOCK = threading.Lock()
_SESSION: boto3.session.Session | None = None


def _session() -> boto3.session.Session:
    """One boto3 session per process: it caches the service models (slow to load)."""
    global _SESSION
    if _SESSION is None:
        _SESSION = boto3.session.Session()
    return _SESSION


def _error_code(exc: botocore.exceptions.ClientError) -> str:
    """The S3 error code of a ClientError ("" if none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def _http_status(exc: botocore.exceptions.ClientError) -> int:
    """The HTTP status of a ClientError (0 if unknown)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_transient(exc: BaseException) -> bool:
    """Whether an S3 failure is worth retrying: throttling, 5xx, dropped connections.

    4xx answers (404, 403, 412, ...) are final: retrying cannot change them.
    """
    if isinstance(exc, _TRANSIENT_EXC):
        return True
    if isinstance(exc, botocore.exceptions.ClientError):
        return _error_code(exc) in _RETRY_CODES or _http_status(exc) >= 500
    return False


class S3Store(Store):
    """A prefix in an S3 (or S3-compatible) bucket, through boto3.

    Conditional writes use ``If-None-Match: *`` and ``If-Match: <etag>``; transient
    failures are retried with jittered exponential backoff (tenacity), nothing else is.
    """

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None = None,
        *,
        _client: Any | None = None,
        _options: S3Options | None = None,
    ) -> None:
        """Parse ``s3://bucket/prefix`` and the Lance-style storage options; build the client."""
        parsed = urlparse(uri)
        if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
            raise BadInputError(f"invalid S3 URI {uri!r}: expected s3://bucket/prefix")
        self.root = uri.rstrip("/") if parsed.path.strip("/") else f"{parsed.scheme}://{parsed.netloc}"
        self.bucket = parsed.netloc
        self.prefix = _clean_key(parsed.path, allow_empty=True)
        self._options = _options or S3Options.parse(storage_options)
        self._storage_options = dict(storage_options or {})
        self._client = _client or self._options.make_client()
        #: Backoff between retries: (multiplier, max) seconds for wait_random_exponential.
        self.retry_wait: tuple[float, float] = (0.2, 5.0)

    @property
    def client(self) -> Any:
        """The boto3 client (for callers that need an S3 call we don't wrap)."""
        return self._client

    @property
    def storage_options(self) -> dict[str, str]:
        """The storage options as given, to hand the same table to Lance."""
        return dict(self._storage_options)

    # -- helpers

    def _full(self, key: str) -> str:
        """Bucket key of a store key."""
        k = _clean_key(key)
        return f"{self.prefix}/{k}" if self.prefix else k

    def _full_prefix(self, prefix: str) -> str:
        """Bucket prefix of a store listing prefix."""
        p = _clean_prefix(prefix)
        if not self.prefix:
            return p
        return f"{self.prefix}/{p}" if p else f"{self.prefix}/"

    def _rel(self, full_key: str) -> str:
        """Store key of a bucket key."""
        if not self.prefix:
            return full_key
        return full_key[len(self.prefix) + 1 :]

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """Run one S3 request with retries of transient errors; map final errors to ours."""
        multiplier, max_wait = self.retry_wait

        def _before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "S3 %s %s failed (attempt %d/%d), retrying: %s",
                what,
                self.uri_for(key) if key else self.root,
                state.attempt_number,
                self._options.max_attempts,
                exc,
            )

        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(self._options.max_attempts),
            wait=wait_random_exponential(multiplier=multiplier, max=max_wait),
            reraise=True,
            before_sleep=_before_sleep,
        )
        uri = self.uri_for(key) if key else self.root
        try:
            return retrying(fn)
        except botocore.exceptions.ClientError as exc:
            raise self._map_error(what, uri, exc) from exc
        except _TRANSIENT_EXC as exc:
            raise MemWalError(f"S3 {what} {uri} failed after {self._options.max_attempts} attempts: {exc}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise MemWalError(f"S3 {what} {uri} failed: {exc}") from exc

    def _map_error(self, what: str, uri: str, exc: botocore.exceptions.ClientError) -> MemWalError:
        """Our exception (and so the CLI exit code) for a final S3 error answer."""
        code, status = _error_code(exc), _http_status(exc)
        if code == "NoSuchBucket":
            return BucketNotFoundError(f"bucket not found: s3://{self.bucket} ({what} {uri})")
        if code in _NOT_FOUND_CODES or status == 404:
            return NotFoundError(f"object not found: {uri}")
        if code in _PRECONDITION_CODES or status in (409, 412):
            return PreconditionFailedError(f"conditional write failed ({code}): {uri}")
        if code in _ACCESS_CODES or status == 403:
            return BadInputError(f"S3 {what} {uri}: access denied ({code}); check the credentials")
        if is_transient(exc):
            return MemWalError(f"S3 {what} {uri} failed after {self._options.max_attempts} attempts ({code}): {exc}")
        return MemWalError(f"S3 {what} {uri} failed ({code or status}): {exc}")

    @staticmethod
    def _info(key: str, size: int, etag: str, last_modified: Any) -> ObjectInfo:
        """ObjectInfo from HEAD or ListObjectsV2 fields."""
        mtime = last_modified.timestamp() if hasattr(last_modified, "timestamp") else 0.0
        return ObjectInfo(key=key, size=int(size), etag=str(etag), mtime=float(mtime))

    # -- reads

    def get(self, key: str) -> bytes:
        """Read a whole object (NotFoundError naming the URI if absent)."""
        return self.get_with_etag(key)[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """GET an object; the body read is inside the retry (a dropped stream is retried)."""
        full = self._full(key)

        def op() -> tuple[bytes, str]:
            r = self._client.get_object(Bucket=self.bucket, Key=full)
            return r["Body"].read(), str(r["ETag"])

        return self._call("get", key, op)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Ranged GET (``bytes=a-b``, or ``bytes=-n`` for a negative start) to read trailers."""
        if length < 0:
            raise ValueError("length must be >= 0")
        full = self._full(key)
        if length == 0:
            if self.head(key) is None:
                raise NotFoundError(f"object not found: {self.uri_for(key)}")
            return b""
        rng = f"bytes={start}-{start + length - 1}" if start >= 0 else f"bytes={start}"

        def op() -> bytes:
            try:
                r = self._client.get_object(Bucket=self.bucket, Key=full, Range=rng)
            except botocore.exceptions.ClientError as exc:
                if _error_code(exc) == "InvalidRange" or _http_status(exc) == 416:
                    return b""  # start at or past the end of the object
                raise
            return r["Body"].read()

        data = self._call("get_range", key, op)
        return data[:length]

    def head(self, key: str) -> ObjectInfo | None:
        """HEAD an object; None if it does not exist."""
        k = _clean_key(key)
        full = self._full(k)

        def op() -> ObjectInfo | None:
            try:
                r = self._client.head_object(Bucket=self.bucket, Key=full)
            except botocore.exceptions.ClientError as exc:
                if _http_status(exc) == 404 and _error_code(exc) != "NoSuchBucket":
                    return None
                raise
            return self._info(k, r["ContentLength"], r["ETag"], r.get("LastModified"))

        return self._call("head", k, op)

    # -- writes

    def put(self, key: str, data: bytes) -> str:
        """PUT an object (S3 PUTs are atomic); returns the new ETag."""
        full = self._full(key)
        return self._call(
            "put", key, lambda: str(self._client.put_object(Bucket=self.bucket, Key=full, Body=data)["ETag"])
        )

    def _conditional_put(self, what: str, key: str, data: bytes, **condition: str) -> str:
        """A conditional PUT that tells a lost race from its own earlier attempt having landed.

        If an attempt fails transiently after the server applied it, the retry gets 412.
        In that case the object is read back: if it holds exactly our bytes, our write won.
        """
        full = self._full(key)
        attempts = 0

        def op() -> str:
            nonlocal attempts
            attempts += 1
            r = self._client.put_object(Bucket=self.bucket, Key=full, Body=data, **condition)
            return str(r["ETag"])

        try:
            return self._call(what, key, op)
        except PreconditionFailedError:
            if attempts > 1:
                try:
                    current, etag = self.get_with_etag(key)
                except NotFoundError:
                    current, etag = None, ""
                if current == data:
                    log.info("S3 %s %s: an earlier attempt had succeeded", what, self.uri_for(key))
                    return etag
            raise

    def put_if_absent(self, key: str, data: bytes) -> str:
        """PUT with ``If-None-Match: *``; PreconditionFailedError if the key exists (412/409)."""
        return self._conditional_put("put_if_absent", key, data, IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """PUT with ``If-Match: etag``; PreconditionFailedError if the ETag changed or the key is gone."""
        try:
            return self._conditional_put("put_if_match", key, data, IfMatch=etag)
        except BucketNotFoundError:
            raise
        except NotFoundError as exc:  # S3 answers 404 NoSuchKey when the object is gone
            raise PreconditionFailedError(f"conditional write failed, object is gone: {self.uri_for(key)}") from exc

    # -- listing

    def _list_pages(self, full_prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        """ListObjectsV2 pages, each request retried on its own."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix}
            if delimiter:
                kwargs["Delimiter"] = delimiter
            if token:
                kwargs["ContinuationToken"] = token
            page: dict[str, Any] = self._call("list", "", lambda kw=kwargs: self._client.list_objects_v2(**kw))
            yield page
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                return

    def list(self, prefix: str, *, recursive: bool = True) -> Iterator[ObjectInfo]:
        """ListObjectsV2 under the prefix (``Delimiter='/'`` when not recursive), paginated."""
        full_prefix = self._full_prefix(prefix)
        for page in self._list_pages(full_prefix, None if recursive else "/"):
            for obj in page.get("Contents", []) or []:
                rel = self._rel(obj["Key"])
                if not rel or rel.endswith("/"):
                    continue  # "directory marker" objects made by some tools
                yield self._info(rel, obj["Size"], obj.get("ETag", ""), obj.get("LastModified"))

    def list_dirs(self, prefix: str) -> list[str]:
        """CommonPrefixes under the prefix with ``Delimiter='/'``, as bare names, sorted."""
        full_prefix = self._full_prefix(_dir_prefix(prefix))
        names: list[str] = []
        for page in self._list_pages(full_prefix, "/"):
            for cp in page.get("CommonPrefixes", []) or []:
                name = cp["Prefix"][len(full_prefix) :].rstrip("/")
                if name:
                    names.append(name)
        return sorted(names)

    # -- deletes

    def delete_many(self, keys: Iterable[str]) -> int:
        """DeleteObjects in batches of 1000 (quiet mode); missing keys are not errors."""
        count = 0
        batch: list[str] = []

        def flush() -> None:
            """Send one DeleteObjects request for the pending batch."""
            objs = [{"Key": k} for k in batch]

            def op() -> dict[str, Any]:
                return self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": objs, "Quiet": True})

            r = self._call("delete", "", op)
            errors = [e for e in r.get("Errors", []) or [] if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise MemWalError(
                    f"S3 delete failed for {len(errors)} of {len(objs)} keys in s3://{self.bucket}, "
                    f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
            batch.clear()

        for key in keys:
            batch.append(self._full(key))
            count += 1
            if len(batch) == S3_DELETE_BATCH:
                flush()
        if batch:
            flush()
        return count

    # -- naming

    def uri_for(self, key: str) -> str:
        """``s3://bucket/prefix/key``."""
        k = _clean_key(key, allow_empty=True)
        full = (f"{self.prefix}/{k}" if self.prefix else k) if k else self.prefix
        return f"s3://{self.bucket}/{full}" if full else f"s3://{self.bucket}"

    def child(self, prefix: str) -> S3Store:
        """A store rooted at ``root/prefix`` sharing this store's client."""
        p = _clean_key(prefix, allow_empty=True)
        uri = f"{self.root}/{p}" if p else self.root
        c = S3Store(uri, self._storage_options, _client=self._client, _options=self._options)
        c.retry_wait = self.retry_wait
        return c


# --------------------------------------------------------------------------- factory


def open_store(uri: str, storage_options: dict[str, str] | None = None) -> Store:
    """The store for a table URI: ``s3://`` (with Lance-style options) or a local path.

    Storage options are ignored for local paths.  Other schemes are refused.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise BadInputError(f"invalid table URI {uri!r}")
    uri = uri.strip()
    scheme = urlparse(uri).scheme.lower()
    if scheme in ("s3", "s3a"):
        return S3Store(uri, storage_options)
    if scheme in ("", "file"):
        return LocalStore(uri)
    raise BadInputError(f"unsupported table URI scheme {scheme!r} in {uri!r}: use a local path or s3://")
