"""Table URIs: which store a URI names, checked once for every command before any I/O.

Lance opens tables on a local path, ``s3://``, ``az://`` (also ``abfss://``) and ``gs://``;
so does every command here. The rules are strict where a lenient reading would open a
different store than Lance does (``s3a://`` is Hadoop's name, ``s3://b//t`` is another
key than ``s3://b/t`` but the same local directory) or silently drop a part (query
strings, fragments).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from memwal.errors import BadInputError

#: The object-store schemes and what each is called in messages.
OBJECT_SCHEMES = {"s3": "S3", "az": "Azure", "abfss": "Azure", "gs": "GCS"}

#: Schemes that mean a URL even when written without ``//`` (``s3:/b/t`` is a typo, not a path).
_URL_SCHEMES = frozenset({"s3", "s3a", "s3n", "file", "gs", "gcs", "az", "abfs", "abfss", "adl", "azure",
                          "hdfs", "http", "https", "memory"})

#: S3 bucket names: 3-63 of lower-case letters, digits, dots and hyphens (plus the
#: upper case and underscores of legacy us-east-1 buckets), starting and ending alphanumeric.
_S3_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]$")
#: Azure container names: 3-63 lower-case letters, digits and single hyphens, alphanumeric at both ends.
_AZ_CONTAINER_RE = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
#: GCS bucket names: 3-63 (222 with dots) lower-case letters, digits, ``-``, ``_`` and ``.``.
_GS_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_HINT = "use a local path, file:///path, s3://bucket/prefix, az://container/prefix, " \
        "abfss://container@account.dfs.core.windows.net/prefix or gs://bucket/prefix"


@dataclass(frozen=True)
class Location:
    """Where an object-store table lives: scheme, bucket (container) and the key prefix."""

    scheme: str  # s3, az, abfss, gs (memory: tests)
    bucket: str  # the bucket or container
    prefix: str  # "" or "a/b": no leading or trailing slash
    authority: str  # the URI's netloc (abfss: container@account.dfs.core.windows.net)

    @property
    def bucket_url(self) -> str:
        """The URL of the bucket itself, as obstore takes it."""
        return f"{self.scheme}://{self.authority}"

    @property
    def root(self) -> str:
        """The table URI, normalised (no trailing slash)."""
        return f"{self.bucket_url}/{self.prefix}" if self.prefix else self.bucket_url

    @property
    def kind(self) -> str:
        """S3, Azure or GCS: for messages."""
        return OBJECT_SCHEMES.get(self.scheme, self.scheme)


def _shown(uri: str) -> str:
    """A URI fit for an error message: a ``user:secret@`` part is hidden."""
    head, sep, rest = uri.partition("://")
    authority = rest.split("/", 1)[0]
    if sep and "@" in authority and ":" in authority.split("@", 1)[0]:
        return f"{head}://***@{rest.split('@', 1)[1]}"
    return uri


def check_table_uri(uri: object) -> str:
    """Validate a table URI before anything is read or written; returns it stripped.

    Accepted: a local path, ``file:///path`` (or ``file://localhost/path``),
    ``s3://bucket[/prefix]``, ``az://container[/prefix]``,
    ``abfss://container@account.dfs.core.windows.net[/prefix]`` and ``gs://bucket[/prefix]``.
    Everything else is refused here, once, for every command: other schemes, an empty or
    malformed bucket, a prefix with empty, ``.`` or ``..`` components, query strings and
    fragments, and credentials written into the URI (never echoed).
    """
    if not isinstance(uri, str) or not uri.strip():
        raise BadInputError(f"invalid table URI {uri!r}: empty")
    uri = uri.strip()
    if "\x00" in uri:
        raise BadInputError(f"invalid table URI {_shown(uri)!r}: contains a NUL byte")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if "://" not in uri and scheme not in _URL_SCHEMES:
        return uri  # a local path (relative paths, and colons in names, are fine)
    if (scheme != "file" and scheme not in OBJECT_SCHEMES) or "://" not in uri:
        raise BadInputError(f"unsupported table URI scheme {scheme!r} in {_shown(uri)!r}: {_HINT}")
    if parsed.password is not None or (parsed.username is not None and scheme != "abfss"):
        raise BadInputError(f"invalid table URI {_shown(uri)!r}: credentials in a URI "
                            "(pass them with --storage-options-file)")
    if parsed.query or parsed.fragment or parsed.params:
        raise BadInputError(f"invalid table URI {uri!r}: query strings and fragments are not allowed")
    if scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise BadInputError(f"invalid table URI {uri!r}: expected file:///absolute/path")
        return uri
    parse_location(uri)
    return uri


def parse_location(uri: str) -> Location:
    """The :class:`Location` of an object-store URI; BadInputError naming what is wrong."""
    parsed = urlparse(uri.strip())
    scheme = parsed.scheme.lower()
    if scheme not in OBJECT_SCHEMES and scheme != "memory":
        raise BadInputError(f"not an object-store URI: {_shown(uri)!r}")
    if not parsed.netloc:
        what = "container" if scheme in ("az", "abfss") else "bucket"
        raise BadInputError(f"invalid table URI {uri!r}: no {what} (expected {scheme}://{what}/prefix)")
    parts = parsed.path.rstrip("/").split("/")[1:]
    if parsed.path.startswith("//") or any(part in ("", ".", "..") for part in parts):
        raise BadInputError(f"invalid table URI {uri!r}: empty, '.' or '..' component in the prefix")
    bucket = parsed.netloc
    if scheme == "s3" and not _S3_BUCKET_RE.match(bucket):
        raise BadInputError(f"invalid table URI {uri!r}: bad bucket name {bucket!r}")
    if scheme == "gs" and not _GS_BUCKET_RE.match(bucket):
        raise BadInputError(f"invalid table URI {uri!r}: bad bucket name {bucket!r}")
    if scheme == "abfss":
        container, _, host = bucket.partition("@")
        if not host or not re.match(r"^[a-z0-9]{3,24}\.(dfs|blob)\.core\.windows\.net$", host):
            raise BadInputError(f"invalid table URI {uri!r}: expected abfss://container@account.dfs.core.windows.net/prefix")
        bucket = container
    if scheme in ("az", "abfss") and not _AZ_CONTAINER_RE.match(bucket):
        raise BadInputError(f"invalid table URI {uri!r}: bad container name {bucket!r}")
    return Location(scheme=scheme, bucket=bucket, prefix="/".join(parts), authority=parsed.netloc)


def is_object_store_uri(uri: str) -> bool:
    """Whether a (checked) table URI names an object store rather than a local directory."""
    return urlparse(uri).scheme.lower() in OBJECT_SCHEMES


def normalise_table_uri(uri: str) -> str:
    """One spelling per table, so that a table named four ways is one table: a local path (or
    ``file:///path``) made absolute with ``.`` and ``..`` resolved by name (links are never
    resolved here: the walks refuse them), an object-store URI as :attr:`Location.root`.
    No I/O; call it on a URI :func:`check_table_uri` accepted."""
    uri = uri.strip()
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme in OBJECT_SCHEMES and "://" in uri:
        return parse_location(uri).root
    if scheme == "file" and "://" in uri:
        uri = unquote(parsed.path)
    return os.path.abspath(uri)
