"""Exceptions with the exit code the CLI maps them to, and the one-line form of any error."""

import os
import re


class MemWalError(Exception):
    """Any failure of a job: exit code 1."""

    exit_code = 1


class BadInputError(MemWalError):
    """Bad usage or bad input (missing table, corrupt manifest, bad option): exit code 2."""

    exit_code = 2


class ReadError(MemWalError):
    """Reading a table failed inside Lance (an unreadable file, a failing object store): exit
    code 1. Bad input to a read (an unparseable filter, an unknown column) is BadInputError."""


class LeaseLostError(MemWalError):
    """The job lost its lease or was fenced: it must stop before its next side effect. Exit code 3."""

    exit_code = 3


class CancelledError(MemWalError):
    """An operator cancelled the job (``memwal fleet cancel``): it stopped at a point where
    nothing was half-done and released its leases. Exit code 3 (stopped by another party)."""

    exit_code = 3


class LeaseHeldError(MemWalError):
    """Another live holder has the lease: the job did not start. Exit code 3."""

    exit_code = 3


class NotFoundError(BadInputError):
    """An object that must exist does not."""


class TooLargeError(BadInputError):
    """An object read from the table's storage is larger than what its kind may hold.

    Whoever can write a table's storage can write run records, checkpoints and leases of any
    size: every such read is capped (``Store.get(key, max_bytes=...)``), so one planted object
    cannot exhaust a job's or a web server's memory. Views skip such an object with a warning.
    """

    def __init__(self, uri: str, size: int, limit: int) -> None:
        super().__init__(f"{uri}: {size:,} bytes, more than the {limit:,} such an object may hold")
        self.uri = uri
        self.size = size
        self.limit = limit


class PreconditionFailedError(MemWalError):
    """A conditional write lost its race (object exists, or ETag changed)."""


class ConflictError(MemWalError):
    """A concurrent writer kept winning a race (a commit or a conditional write): exit code 3.

    Raised after retries (memwal.core.retry); a rerun re-reads and usually succeeds.
    """

    exit_code = 3


class StateMovedError(ConflictError):
    """What a job read moved under it: a concurrent job merged, collected or expired it (a
    generation, a WAL entry, a table version). Not bad input: the job reads again and redoes
    its work (memwal.core.retry); after retries, exit code 3 like any lost race."""


# Rust source locations Lance appends to its messages ("..., /home/x/lance/src/a.rs:12:5").
_RUST_LOCATION = re.compile(r",?\s*(/[\w.-]+)+\.rs:\d+:\d+")
# A URL's query string (``?sv=...&sig=...``): where an Azure SAS token travels.
_URL_QUERY = re.compile(r"(https?://[^\s?]+)\?[^\s]*")
# Error class prefixes Lance and Arrow put in messages ("LanceError(IO): ").
_ERROR_PREFIX = re.compile(r"\b(LanceError|ArrowError|DataFusionError)(\(\w+\))?: ")


def first_line(exc: BaseException, uri: str | None = None) -> str:
    """The first line of an error, for one-line messages: Lance's Rust source locations
    and error class prefixes dropped, and (given the table ``uri``) the leading ``/`` that
    object_store strips from local paths put back, so the message names the real path."""
    text = str(exc).strip()
    text = text.splitlines()[0] if text else "unexpected failure"
    text = _ERROR_PREFIX.sub("", _RUST_LOCATION.sub("", text)).strip()
    text = _URL_QUERY.sub(r"\1?...", text)  # object_store names request URLs: an Azure SAS token is in the query
    if uri and os.path.isabs(local := _local_path(uri)):
        bare = local.strip("/")
        if bare:
            text = re.sub(r"(?<![\w/.-])" + re.escape(bare), "/" + bare, text)
    return text or "unexpected failure"


def _local_path(uri: str) -> str:
    """The file system path of a local table URI ("" for other stores)."""
    if uri.startswith("file://"):
        return uri[len("file://localhost") :] if uri.startswith("file://localhost/") else uri[len("file://") :]
    return "" if "://" in uri else os.path.abspath(uri)


class UnsafePathError(MemWalError):
    """A path that must not be used: outside its shard directory, or crossing a link."""

    def __init__(self, shard_id: str | None, path: str, why: str) -> None:
        where = f"shard {shard_id}: " if shard_id else ""
        super().__init__(f"{where}refusing path {path!r}: {why}")
        self.shard_id = shard_id
        self.path = path


class LinkedPathError(UnsafePathError):
    """A path crosses a symbolic link (or a non-directory) inside the table: refused, never followed.

    The table's tree is data as much as its manifests are: a link planted in it, or swapped
    in after a check, must not redirect a read, a write or a delete to files outside the
    table. ``refused`` lists every key an operation refused (a batch delete goes on with the
    safe keys, then raises this naming all the others). The key names the object (its shard,
    for a caller that needs it, is ``memwal.table.paths.shard_of_key(path)``).
    """

    def __init__(self, key: str, where: str, *, link: bool) -> None:
        why = f"{where} is a symbolic link (never followed)" if link else f"{where} is not a directory"
        super().__init__(None, key, why)
        self.where = where  # full path of the offending component
        self.link = link
        self.refused: list[str] = [key]
