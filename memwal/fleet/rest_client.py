"""A bounded client of the Lance Namespace REST protocol, for discovery only.

A namespace server is input like storage is: whoever runs it can answer anything. pylance's
``RestNamespace`` (Rust) has no timeout and reads any answer whole (observed, issue 47: a
1 GiB answer took 4.5 GB; a server that never answers hung the fleet), so discovery speaks
the three calls it needs itself (``ListNamespaces``, ``ListTables``, ``DescribeTable``, the
paths of ``lance_namespace_urllib3_client``) over urllib3 with every answer bounded:

* a request connects within :data:`CONNECT_SECONDS` and is answered whole within
  ``timeout_seconds`` (default :data:`REQUEST_SECONDS`), else it fails;
* an answer over :data:`MAX_RESPONSE_BYTES` is refused as it streams (a larger
  ``Content-Length`` before any of it is read); no retry, no redirect followed;
* a page holding more than the :data:`PAGE_LIMIT` names asked for is refused;
* every value is type-checked; names and locations are capped in length, a table's storage
  options in number and bytes (:data:`MAX_STORAGE_OPTIONS`, :data:`MAX_OPTIONS_BYTES`);
  a description that breaks these is a :class:`TableAnswerError` (that table is skipped).

Properties: ``uri`` (required), ``delimiter`` (default ``$``), ``header.<Name>`` (sent as
HTTP headers, never shown), ``tls.ssl_ca_cert``, ``tls.cert_file``, ``tls.key_file``,
``tls.assert_hostname``, and ``timeout_seconds``. Any other is bad input (discovery takes
``root`` as well, the prefixes locations must lie under: :mod:`memwal.fleet.namespaces`).
Every error names the server's URI (credentials in it hidden).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlparse

from memwal.core.text import clip, one_line
from memwal.errors import BadInputError, MemWalError

CONNECT_SECONDS = 10.0
REQUEST_SECONDS = 20.0
MAX_RESPONSE_BYTES = 8 << 20
#: Names asked for per page (the protocol's ``limit``); a page with more is refused.
PAGE_LIMIT = 1000
MAX_NAME_CHARS = 1024
MAX_LOCATION_CHARS = 4096
#: Storage options of one table's description (vended credentials are a handful), in number and in
#: bytes (keys and values): 256 options of 4 KB on every table took a plan past 2.5 GB (issue 56).
MAX_STORAGE_OPTIONS = 64
MAX_OPTIONS_BYTES = 16 << 10
_TLS = {"tls.ssl_ca_cert": "ca_certs", "tls.cert_file": "cert_file", "tls.key_file": "key_file",
        "tls.assert_hostname": "assert_hostname"}


class NamespaceServerError(MemWalError):
    """The namespace server failed or answered something discovery does not take."""


class TableAnswerError(NamespaceServerError):
    """One table's description is not one discovery takes (that table alone is refused)."""


def shown_uri(uri: str) -> str:
    """The server's URI for messages: a ``user:secret@`` part hidden, one line, clipped."""
    parsed = urlparse(uri)
    if parsed.username is not None or parsed.password is not None:
        uri = parsed._replace(netloc="***@" + parsed.netloc.rsplit("@", 1)[-1]).geturl()
    return one_line(clip(uri, 200))


class RestClient:
    """The bounded client (see the module docstring); ``requests`` counts what it sent."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        import urllib3

        unknown = sorted(k for k in properties if k not in ("uri", "delimiter", "timeout_seconds")
                         and not k.startswith("header.") and k not in _TLS)
        if unknown:
            raise BadInputError(f"namespace:rest: unknown namespace property {unknown[0]!r} (expected uri, delimiter, "
                                "header.*, tls.ssl_ca_cert, tls.cert_file, tls.key_file, tls.assert_hostname, "
                                "timeout_seconds)")
        self.uri = properties["uri"].rstrip("/")
        if urlparse(self.uri).scheme not in ("http", "https"):
            raise BadInputError(f"namespace:rest: uri {shown_uri(self.uri)!r}: expected http:// or https://")
        self.delimiter = properties.get("delimiter", "$")
        try:
            self.seconds = float(properties.get("timeout_seconds", REQUEST_SECONDS))
        except ValueError:
            self.seconds = -1.0
        if not 0 < self.seconds <= 3600:
            raise BadInputError("namespace:rest: timeout_seconds: expected a number of seconds in (0, 3600]")
        self.headers = {k.removeprefix("header."): v for k, v in properties.items() if k.startswith("header.")}
        self.headers.setdefault("Content-Type", "application/json")
        tls: dict[str, Any] = {_TLS[k]: v for k, v in properties.items() if k in _TLS}
        if "assert_hostname" in tls and tls["assert_hostname"].lower() in ("false", "0", "no"):
            tls["assert_hostname"] = False
        self.pool = urllib3.PoolManager(retries=False, **tls)
        self.requests = 0
        self.where = f"namespace:rest {shown_uri(self.uri)}"

    def _id(self, path: list[str]) -> str:
        return quote(self.delimiter.join(path) if path else self.delimiter, safe="")

    def _call(self, method: str, resource: str, query: dict[str, str], body: Any = None) -> Any:
        """One request, bounded (see the module docstring); the decoded JSON answer."""
        import urllib3

        query = {"delimiter": self.delimiter, **query}
        url = f"{self.uri}{resource}?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query.items())
        what = f"{self.where}: {method} {resource}"
        self.requests += 1
        deadline = time.monotonic() + self.seconds
        try:
            resp = self.pool.request(method, url, body=None if body is None else json.dumps(body), headers=self.headers,
                                     preload_content=False, redirect=False,
                                     timeout=urllib3.Timeout(connect=min(CONNECT_SECONDS, self.seconds),
                                                             read=self.seconds))
        except urllib3.exceptions.HTTPError as exc:
            raise NamespaceServerError(f"{what}: {type(exc).__name__}: {one_line(clip(str(exc), 200))}") from None
        try:
            data = self._read(resp, deadline, what)
        finally:
            resp.release_conn()
        if resp.status != 200:
            text = one_line(clip(data.decode("utf-8", "replace"), 200))
            raise NamespaceServerError(f"{what}: HTTP {resp.status}: {text}")
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise NamespaceServerError(f"{what}: the answer is not JSON") from None

    @staticmethod
    def _read(resp: Any, deadline: float, what: str) -> bytes:
        import urllib3

        length = resp.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > MAX_RESPONSE_BYTES:
            raise NamespaceServerError(f"{what}: answer of {int(length):,} bytes, over the {MAX_RESPONSE_BYTES:,} cap")
        buf = bytearray()
        try:
            for chunk in resp.stream(1 << 16):
                buf += chunk
                if len(buf) > MAX_RESPONSE_BYTES:
                    raise NamespaceServerError(f"{what}: answer over the {MAX_RESPONSE_BYTES:,}-byte cap")
                if time.monotonic() > deadline:
                    raise NamespaceServerError(f"{what}: answer not complete within the request's time")
        except urllib3.exceptions.HTTPError as exc:
            raise NamespaceServerError(f"{what}: {type(exc).__name__}: {one_line(clip(str(exc), 200))}") from None
        if time.monotonic() > deadline:
            raise NamespaceServerError(f"{what}: answer not complete within the request's time")
        return bytes(buf)

    def _page(self, resource: str, field: str, token: str | None) -> tuple[list[str], str | None]:
        query = {"limit": str(PAGE_LIMIT), **({"page_token": token} if token else {})}
        doc = self._call("GET", resource, query)
        what = f"{self.where}: GET {resource}"
        names = doc.get(field) if isinstance(doc, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME_CHARS for n in names):
            raise NamespaceServerError(f"{what}: expected {{{field!r}: [names]}}")
        if len(names) > PAGE_LIMIT:
            raise NamespaceServerError(f"{what}: {len(names):,} names on a page that asked for at most {PAGE_LIMIT}")
        nxt = doc.get("page_token")
        if nxt is not None and (not isinstance(nxt, str) or len(nxt) > MAX_LOCATION_CHARS):
            raise NamespaceServerError(f"{what}: page_token is not a string")
        return names, nxt or None

    def list_namespaces(self, path: list[str], token: str | None) -> tuple[list[str], str | None]:
        return self._page(f"/v1/namespace/{self._id(path)}/list", "namespaces", token)

    def list_tables(self, path: list[str], token: str | None) -> tuple[list[str], str | None]:
        return self._page(f"/v1/namespace/{self._id(path)}/table/list", "tables", token)

    def describe(self, path: list[str]) -> tuple[str | None, dict[str, str]]:
        resource = f"/v1/table/{self._id(path)}/describe"
        doc = self._call("POST", resource, {"with_table_uri": "true"}, {"id": path})
        what = f"{self.where}: POST {resource}"
        if not isinstance(doc, dict):
            raise TableAnswerError(f"{what}: expected an object")
        location = doc.get("table_uri") or doc.get("location")
        if location is not None and (not isinstance(location, str) or len(location) > MAX_LOCATION_CHARS):
            raise TableAnswerError(f"{what}: location is not a string of at most {MAX_LOCATION_CHARS} characters")
        options = doc.get("storage_options") or {}
        if not isinstance(options, dict) or len(options) > MAX_STORAGE_OPTIONS or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in options.items()) \
                or sum(len(k) + len(v) for k, v in options.items()) > MAX_OPTIONS_BYTES:
            raise TableAnswerError(f"{what}: storage_options is not a mapping of at most {MAX_STORAGE_OPTIONS} strings "
                                   f"and {MAX_OPTIONS_BYTES >> 10} KiB")
        return location, options


__all__ = ["MAX_OPTIONS_BYTES", "MAX_RESPONSE_BYTES", "MAX_STORAGE_OPTIONS", "PAGE_LIMIT", "REQUEST_SECONDS",
           "NamespaceServerError", "RestClient", "TableAnswerError", "shown_uri"]
