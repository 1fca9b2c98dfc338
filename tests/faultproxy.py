"""A loopback HTTP proxy in front of a real test server: counts requests, injects failures.

The store under test is pointed at the proxy's endpoint instead of the server's (moto,
Azurite). Every request is forwarded unchanged (signatures stay valid: Azure's SharedKey
does not sign the host, and moto checks no SigV4 signature), and the answer comes back
unchanged, except for requests a test asked to fail: those get the status given (a 503
with an S3-style error body) without reaching the server. Used by the object-store tests
(a transient 503 retried) and the request-count benchmark.
"""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlparse

Match = Callable[[str, str], bool]  # (method, path with query) -> whether to fail it

_BODIES = {
    503: b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ServiceUnavailable</Code>"
         b"<Message>injected by the test proxy</Message></Error>",
}


@dataclass
class _Fault:
    match: Match
    status: int
    remaining: int


@dataclass
class FaultProxy:
    """A running proxy: ``endpoint`` replaces the upstream's in the store's options."""

    upstream: str  # http://127.0.0.1:PORT (no path)
    endpoint: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) forwarded or failed
    failed: list[tuple[str, str]] = field(default_factory=list)
    _faults: list[_Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: http.server.ThreadingHTTPServer | None = None

    def fail(self, match: Match, *, status: int = 503, times: int = 1) -> None:
        """Answer the next ``times`` requests that ``match`` with ``status`` (not forwarded)."""
        with self._lock:
            self._faults.append(_Fault(match, status, times))

    def reset(self) -> None:
        """Forget the requests seen and any pending fault."""
        with self._lock:
            self.requests.clear()
            self.failed.clear()
            self._faults.clear()

    def count(self, method: str | None = None, contains: str = "") -> int:
        """Requests seen with this method (any if None) whose path contains ``contains``."""
        with self._lock:
            return sum(1 for m, p in self.requests if (method is None or m == method) and contains in p)

    def _fault_for(self, method: str, path: str) -> int | None:
        with self._lock:
            self.requests.append((method, path))
            for f in self._faults:
                if f.remaining > 0 and f.match(method, path):
                    f.remaining -= 1
                    self.failed.append((method, path))
                    return f.status
        return None


def _handler(proxy: FaultProxy) -> type[http.server.BaseHTTPRequestHandler]:
    target = urlparse(proxy.upstream)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status = proxy._fault_for(self.command, self.path)
            if status is not None:
                payload = _BODIES.get(status, b"")
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                return
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    """A proxy to ``upstream`` (scheme://host:port) on a free loopback port, for a ``with`` block."""
    parsed = urlparse(upstream)
    proxy = FaultProxy(upstream=f"{parsed.scheme}://{parsed.netloc}")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    server.daemon_threads = True
    proxy._server = server
    proxy.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
