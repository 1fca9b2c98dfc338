"""The ``s3://`` store: boto3 with conditional writes, retrying transient errors only.

Kept apart from :mod:`memwal.storage` so that jobs on local tables never pay for
importing boto3 (about 0.2 s per command).
"""

from __future__ import annotations

import logging
import threading
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
from memwal.storage import ObjectInfo, Store, _clean_key, _clean_prefix, _dir_prefix

log = logging.getLogger(__name__)

T = TypeVar("T")

#: S3 DeleteObjects accepts at most this many keys per request.
S3_DELETE_BATCH = 1000

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
        except botocore.exceptions.NoCredentialsError as exc:  # bad input: nothing was sent
            raise BadInputError(f"S3 {what} {uri}: no credentials found (set aws_access_key_id and "
                                "aws_secret_access_key, or the AWS environment)") from exc
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
