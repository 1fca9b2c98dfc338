"""A real S3 endpoint for tests: moto's ThreadedMotoServer on 127.0.0.1, a free port.

Usage (the ``s3_server`` session fixture of ``tests/conftest.py``)::

    def test_x(s3_server):
        opts = s3_server.make_bucket()          # a fresh bucket, Lance-style options
        uri = f"s3://{s3_server.last_bucket}/table"

or ``s3_server.new_table("name") -> (uri, storage_options)``.

One server per test process, started by the first test that asks for it and stopped at
the end of the session.

moto applies conditional PUTs (``If-None-Match: *``, ``If-Match``) as a check followed by
a write, with no lock, and its server handles requests on threads, so two racing
conditional PUTs could both pass the check.  Real S3 decides them atomically.  The
server below serialises state-changing requests (PUT/POST/DELETE) so moto gives S3's
answer; reads stay concurrent.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.config
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import s3_backends
from werkzeug.serving import make_server

CREDENTIALS = {
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
    "aws_region": "us-east-1",
}

_WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})


class _SerialisedWrites:
    """WSGI middleware: one state-changing request at a time (S3's atomic conditionals)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []  # (method, path?query): the server's own request log

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        query = environ.get("QUERY_STRING", "")
        self.requests.append((environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "") + (
            "?" + query if query else "")))
        if environ.get("REQUEST_METHOD", "GET") in _WRITE_METHODS:
            with self.lock:
                # Materialise the body inside the lock: moto may do its work while
                # the response is iterated.
                result = self.app(environ, start_response)
                try:
                    return list(result)
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
        return self.app(environ, start_response)


class _MotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose app serialises writes (see the module docstring)."""

    def __init__(self, ip_address: str, port: int) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self.write_lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []

    def _server_entry(self) -> None:
        app = _SerialisedWrites(DomainDispatcherApplication(create_backend_app))
        app.lock = self.write_lock
        app.requests = self.requests
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    def stop(self) -> None:
        super().stop()
        if self._server is not None:
            self._server.server_close()


@dataclass
class S3Server:
    """A running moto S3 server and how to reach it."""

    endpoint: str
    storage_options: dict[str, str]  # Lance-style: endpoint, allow_http, credentials, region
    _moto: _MotoServer = field(repr=False)
    last_bucket: str | None = None
    _stopped: bool = field(default=False, repr=False)
    _client: Any = field(default=None, repr=False)

    def client(self) -> Any:
        """A boto3 S3 client on this server (path-style addressing), made once."""
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["aws_access_key_id"],
            aws_secret_access_key=CREDENTIALS["aws_secret_access_key"],
            region_name=CREDENTIALS["aws_region"],
            config=botocore.config.Config(s3={"addressing_style": "path"}, max_pool_connections=32),
        )

    def make_bucket(self, name: str | None = None) -> dict[str, str]:
        """Create a bucket (a fresh unique one if no name) and return storage options."""
        name = name or f"test-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        self.last_bucket = name
        return dict(self.storage_options)

    def new_table(self, name: str = "table") -> tuple[str, dict[str, str]]:
        """A fresh bucket and the URI of a table in it: ``(s3://bucket/name, options)``."""
        opts = self.make_bucket()
        return f"s3://{self.last_bucket}/{name}", opts

    def seed_objects(self, bucket: str, keys: Iterable[str], body: bytes = b"x") -> None:
        """Create many objects quickly, straight in moto's state (test setup only).

        An HTTP PUT to moto costs about 5 ms; tests that need >1000 objects to cross
        a page or batch boundary use this, then exercise the code under test over HTTP.
        """
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        with self._moto.write_lock:
            for key in keys:
                backend.put_object(bucket, key, body)

    @property
    def requests(self) -> list[tuple[str, str]]:
        """Every request the server received so far: (method, path?query)."""
        return self._moto.requests

    @contextlib.contextmanager
    def authentication(self) -> Iterator[None]:
        """Make moto check credentials (its IAM authentication) inside the block: no access
        key is known to it, so every request is refused as S3 refuses an unknown key."""
        import urllib.request

        def reset(count: str) -> None:
            req = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=count.encode(), method="POST",
                                         headers={"Content-Type": "text/plain"})
            urllib.request.urlopen(req, timeout=30).close()

        reset("0")
        try:
            yield
        finally:
            reset("inf")

    def stop(self) -> None:
        """Shut the server down (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self._moto.stop()


def start_s3_server() -> S3Server:
    """Start a moto S3 server on 127.0.0.1 with an OS-chosen free port."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access log per request
    moto = _MotoServer("127.0.0.1", 0)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    options = {**CREDENTIALS, "aws_endpoint": endpoint, "allow_http": "true"}
    return S3Server(endpoint=endpoint, storage_options=options, _moto=moto)
