"""What an obstore failure means for a job: typed errors, transient or final, and a safe message.

obstore raises typed exceptions for what object_store can tell apart (``AlreadyExistsError``,
``PreconditionError``, ``FileNotFoundError``, ``PermissionDeniedError``,
``UnauthenticatedError``) and ``GenericError`` for the rest, whose text carries the HTTP
status. Here, in one place:

- :func:`is_transient`: worth retrying (a 5xx, 408, 429, a dropped connection, a
  timeout); 4xx answers are final. The retrying itself is :func:`memwal.core.retry.after_transient`.
- :func:`to_memwal_error`: the exception (and so the CLI exit code) a final failure becomes:
  missing object or bucket -> ``NotFoundError`` (2), rejected credentials -> ``BadInputError``
  (2), a lost conditional write -> ``PreconditionFailedError``, anything else ``MemWalError`` (1).
- Messages are one line, without the request URL's query string (an Azure SAS token lives
  there), the response body, or any secret value of the store's options.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from memwal.errors import BadInputError, MemWalError, NotFoundError, PreconditionFailedError


class BucketNotFoundError(NotFoundError):
    """The bucket (or container) of a table does not exist."""


_STATUS = re.compile(r"status code: (\d{3})|status: (\d{3})")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_TEXT = ("error sending request", "connection", "timed out", "timeout", "dispatch", "broken pipe",
                   "reset by peer", "incomplete message", "unexpected eof", "body error", "request or response body")
_MISSING_BUCKET = ("nosuchbucket", "containernotfound", "the specified container does not exist",
                   "the specified bucket does not exist")
_CREDENTIALS = ("authenticationfailed", "invalidaccesskeyid", "signaturedoesnotmatch", "accessdenied",
                "expiredtoken", "invalidtoken", "authorizationfailure", "403 forbidden", "401 unauthorized")
_NO_CREDENTIALS = ("error getting credentials", "failed to get credentials", "no credentials", "missing credentials",
                   "credential")


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an obstore error reports, if any."""
    m = _STATUS.search(str(exc))
    return int(m.group(1) or m.group(2)) if m else None


def is_transient(exc: BaseException) -> bool:
    """Whether a failed request is worth sending again (see the module docstring)."""
    if not isinstance(exc, BaseError) or isinstance(
        exc, AlreadyExistsError | PreconditionError | PermissionDeniedError | UnauthenticatedError
    ):
        return False
    status = http_status(exc)
    if status is not None:
        return status in _TRANSIENT_STATUS
    text = str(exc).lower()
    return any(t in text for t in _TRANSIENT_TEXT) and not any(t in text for t in _NO_CREDENTIALS[:4])


def summary(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """One line about an obstore failure: no query string, no response body, no secret value."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"(https?://[^\s?]+)\?\S*", r"\1?...", text)
    text = re.sub(r":\s*<\?xml.*$|:\s*<Error>.*$", "", text)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text[:300]


def to_memwal_error(exc: BaseException, *, what: str, uri: str, kind: str, bucket_uri: str,
                    attempts: int = 1, secrets: Iterable[str] = ()) -> MemWalError:
    """Our exception for a final failure of ``what`` (get, put, list, ...) on ``uri``."""
    text = str(exc).lower()
    status = http_status(exc)
    if isinstance(exc, AlreadyExistsError | PreconditionError):
        return PreconditionFailedError(f"conditional write failed: {uri}")
    if any(m in text for m in _MISSING_BUCKET):
        return BucketNotFoundError(f"bucket not found: {bucket_uri} ({what} {uri})")
    if isinstance(exc, FileNotFoundError) or status == 404:
        return NotFoundError(f"object not found: {uri}")
    if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or status in (401, 403) or any(
        m in text for m in _CREDENTIALS
    ):
        return BadInputError(f"{kind} {what} {uri}: access denied (HTTP {status or 403}); check the credentials")
    if not is_transient(exc) and any(m in text for m in _NO_CREDENTIALS):
        return BadInputError(f"{kind} {what} {uri}: no credentials found ({summary(exc, secrets)})")
    if is_transient(exc):
        return MemWalError(f"{kind} {what} {uri} failed after {attempts} attempts: {summary(exc, secrets)}")
    return MemWalError(f"{kind} {what} {uri} failed: {summary(exc, secrets)}")
