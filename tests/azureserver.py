"""A real Azure Blob Storage endpoint for tests: Azurite on 127.0.0.1, a free port.

Azurite is the npm package ``azurite`` that ``make azurite`` installs under ``.tools/``
(pinned by ``tests/azurite/package-lock.json``; ``make test`` depends on it). One server
per test process, the ``azure_server`` session fixture of ``tests/conftest.py``, in memory,
with its telemetry off.

Usage::

    def test_x(azure_server):
        uri, opts = azure_server.new_table("t")   # az://<fresh container>/t, Lance-style options
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import hashlib
import hmac
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

ROOT = Path(__file__).resolve().parent.parent
AZURITE_BIN = ROOT / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
#: Azurite's well-known development account key (public, in Microsoft's documentation).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_LISTENING = re.compile(r"listens on (http://127\.0\.0\.1:(\d+))")


@dataclass
class AzureServer:
    """A running Azurite blob service and how to reach it."""

    endpoint: str  # http://127.0.0.1:PORT/devstoreaccount1
    _proc: subprocess.Popen = field(repr=False)
    _workdir: str = field(repr=False)
    last_container: str | None = None

    @property
    def storage_options(self) -> dict[str, str]:
        """Lance-style options for this server (DESIGN section 4: what Lance itself takes)."""
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": ACCOUNT_KEY,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",
        }

    def make_container(self, name: str | None = None) -> dict[str, str]:
        """Create a container (a fresh unique one if no name) and return storage options.

        Azurite is one Node process: while a loaded machine (a Spark job just ended, two test
        workers) keeps it busy a call may time out, so the call is tried again, and a container
        that the timed-out call did create (409 on the retry) is the one asked for."""
        name = name or f"test-{uuid.uuid4().hex[:16]}"
        for attempt in Retrying(retry=retry_if_exception_type(TimeoutError), stop=stop_after_attempt(3),
                                reraise=True):
            with attempt:
                try:
                    self._request("PUT", f"/{name}?restype=container", f"/{ACCOUNT}/{name}\nrestype:container")
                except urllib.error.HTTPError as exc:
                    if not (exc.code == 409 and attempt.retry_state.attempt_number > 1):
                        raise
        self.last_container = name
        return dict(self.storage_options)

    def new_table(self, name: str = "table") -> tuple[str, dict[str, str]]:
        """A fresh container and the URI of a table in it: ``(az://container/name, options)``."""
        opts = self.make_container()
        return f"az://{self.last_container}/{name}", opts

    def drop_container(self, name: str) -> None:
        """Delete a container and every blob in it, in one request. Azurite's deletes slow with every
        blob the server holds, in any container (1,200 deletes took 4 s on a fresh server and 77 s
        beside 5,001 blobs left by another test): a test that seeds thousands drops them after."""
        self._request("DELETE", f"/{name}?restype=container", f"/{ACCOUNT}/{name}\nrestype:container")

    def seed_blobs(self, container: str, keys: Iterable[str], body: bytes = b"x", concurrency: int = 48) -> None:
        """Create many small blobs at once (test setup: Azurite takes about 300 puts a second)."""
        import obstore
        from obstore.store import AzureStore

        store = AzureStore(container, config={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY,
                                              "endpoint": self.endpoint}, client_options={"allow_http": True})

        async def run() -> None:
            gate = asyncio.Semaphore(concurrency)

            async def one(key: str) -> None:
                async with gate:
                    await obstore.put_async(store, key, body)

            await asyncio.gather(*(one(k) for k in keys))

        asyncio.run(run())

    def _request(self, method: str, path: str, resource: str) -> int:
        """One REST call signed with the account's SharedKey (container administration only:
        obstore, like object_store, has no call to create a container)."""
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        canonical = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        to_sign = f"{method}\n" + "\n" * 11 + canonical + f"/{ACCOUNT}{resource}"
        digest = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {ACCOUNT}:{base64.b64encode(digest).decode()}"
        headers["Content-Length"] = "0"
        req = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status

    def stop(self) -> None:
        """Stop the server (idempotent) and remove its working directory."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._workdir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child: receive SIGTERM when the test process dies, however it dies (Linux
    ``PR_SET_PDEATHSIG``), so no Azurite outlives a killed test run."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def start_azure_server(timeout: float = 60.0) -> AzureServer:
    """Start Azurite's blob service on 127.0.0.1 with an OS-chosen free port."""
    if not AZURITE_BIN.exists():
        pytest.fail(f"Azurite is not installed ({AZURITE_BIN}): run `make azurite` (make test does)", pytrace=False)
    workdir = tempfile.mkdtemp(prefix="memwal-azurite-")
    log_path = os.path.join(workdir, "azurite.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", "0", "--loose", "--skipApiVersionCheck",
             "--disableTelemetry", "--inMemoryPersistence", "--extentMemoryLimit", "2048"],
            cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = Path(log_path).read_text(errors="replace")
        m = _LISTENING.search(text)
        if m:
            return AzureServer(endpoint=f"{m.group(1)}/{ACCOUNT}", _proc=proc, _workdir=workdir)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"Azurite did not start: {Path(log_path).read_text(errors='replace')[-2000:]}")


def request_log(server: AzureServer) -> str:
    """Azurite's own access log so far (one line per request), once Azurite has written it
    (Node writes it asynchronously: read until two reads agree)."""
    path = Path(server._workdir, "azurite.log")
    text = path.read_text(errors="replace")
    for _ in range(50):
        time.sleep(0.1)
        again = path.read_text(errors="replace")
        if again == text:
            break
        text = again
    return text
