"""Requests counted by the servers themselves: moto's own request log, Azurite's access log.

Lance's requests (opening a dataset, its cleanup's listing) go around memwal's store layer, so
the benches that count requests on S3 and Azure count them where they land: every request the
server saw, by kind (list, head, get, put, delete, bulk-delete), with the table it named. Used by
the GC bench on object stores, the fleet benches and ``tests/integration/test_requests.py``.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any


def request_kind(method: str, path: str) -> str:
    """A request's kind from its method and query (S3 and Azure spellings)."""
    if "comp=batch" in path or (method == "POST" and "delete" in path):
        return "bulk-delete"
    if "list-type=2" in path or "comp=list" in path:
        return "list"
    return {"HEAD": "head", "GET": "get", "PUT": "put", "DELETE": "delete", "POST": "post"}.get(method, method)


def table_files(pristine: Path) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(pristine)), p.read_bytes()) for p in sorted(pristine.rglob("*")) if p.is_file()]


def bucket_of(kind: str, server: Any) -> str:
    """The bucket (S3) or container (Azure) the server made last: a table's own, just made."""
    return str(server.last_bucket if kind == "s3" else server.last_container)


def upload(kind: str, server: Any, bucket: str, prefix: str, files: list[tuple[str, bytes]]) -> None:
    """Put the table's files under ``prefix`` (straight into moto's state; 32 at once on Azurite)."""
    if kind == "s3":
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        with server._moto.write_lock:
            for key, body in files:
                backend.put_object(bucket, f"{prefix}/{key}", body)
        return
    import obstore

    store = azure_store(server, bucket)

    async def run() -> None:
        gate = asyncio.Semaphore(32)

        async def one(key: str, body: bytes) -> None:
            async with gate:
                await obstore.put_async(store, f"{prefix}/{key}", body)

        await asyncio.gather(*(one(k, b) for k, b in files))

    asyncio.run(run())


def azure_store(server: Any, container: str) -> Any:
    from obstore.store import AzureStore

    from tests.azureserver import ACCOUNT, ACCOUNT_KEY

    return AzureStore(container, config={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY,
                                         "endpoint": server.endpoint}, client_options={"allow_http": True})


def lists_mem_wal(method: str, path: str, table: str) -> bool:
    """Whether a request is a listing of table ``table``'s whole ``_mem_wal/`` (the floor's one
    paged listing, any page): not a listing of a shard's manifests or of the checkpoints under
    it, nor a listing folder by folder (a delimiter), which are fixed costs of a run."""
    if request_kind(method, path) != "list" or "delimiter" in path:
        return False
    query = dict(urllib.parse.parse_qsl(path.split("?", 1)[1])) if "?" in path else {}
    return query.get("prefix") == f"{table}/_mem_wal/"


def per_object(method: str, path: str, table: str) -> bool:
    """Whether a request is of the kind whose number grows with what is deleted: a listing of
    ``_mem_wal/`` (:func:`lists_mem_wal`) or a batched delete. Every other request is a fixed
    cost of the run, whatever it deletes."""
    return request_kind(method, path) == "bulk-delete" or lists_mem_wal(method, path, table)


class RequestCounter:
    """Requests the server saw between two calls of :meth:`take`, by kind (``bucket``: only
    those to that bucket or container, so that another test's table on the same server, or a
    thread an earlier test left running, is not counted)."""

    def __init__(self, kind: str, server: Any, bucket: str | None = None) -> None:
        self.kind, self.server, self.seen, self.bucket = kind, server, 0, bucket

    def _all(self) -> list[tuple[str, str]]:
        every = self._every()
        if self.bucket is None:
            return every
        mine = f"/{self.bucket}/"
        return [(m, p) for m, p in every if mine in p.split("?", 1)[0] + "/"]

    def _every(self) -> list[tuple[str, str]]:
        if self.kind == "s3":
            return list(self.server.requests)
        from tests.azureserver import request_log

        out = []
        for line in request_log(self.server).splitlines():
            if '"' in line:
                method, path, *_ = line.split('"')[1].split(" ")
                out.append((method, path))
        return out

    def take_requests(self) -> list[tuple[str, str]]:
        """The requests (method, path with query) seen since the last take."""
        reqs = self._all()
        new, self.seen = reqs[self.seen:], len(reqs)
        return new

    def take(self) -> Counter[str]:
        return Counter(request_kind(m, p) for m, p in self.take_requests())

    def take_split(self, table: str) -> tuple[Counter[str], int]:
        """:meth:`take`, and how many of those requests were :func:`per_object` for ``table``."""
        reqs = self.take_requests()
        return Counter(request_kind(m, p) for m, p in reqs), sum(per_object(m, p, table) for m, p in reqs)


__all__ = ["RequestCounter", "azure_store", "bucket_of", "lists_mem_wal", "per_object", "request_kind", "table_files",
           "upload"]
