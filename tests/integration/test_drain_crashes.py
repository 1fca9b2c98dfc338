"""A GC run killed at every step of the drain: readers in the window read every row, and a
rerun converges (issue 46).

``memwal gc`` runs as its own process held at a named step (a barrier directory), then gets
SIGKILL. Between the kill and the rerun, lance-context (a new process) and pylance's reader
of the shard manifests read the store; both must show every row, whatever the step. The rerun
must leave the shard manifest listing nothing merged and no merged folder on storage.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import memwal
from tests.clients.context_store import available
from tests.clients.pylance_client import client_view
from tests.helpers import run_cli
from tests.integration.test_clients_lance_context import Client, folders, listed
from tests.interleave import Barrier

pytestmark = pytest.mark.skipif(not available(), reason="lance-context's venv is missing: make lance-context")

VENV_BIN = Path(sys.executable).parent

STEPS = ["gc.before-marker", "gc.before-expiry", "gc.after-expiry", "gc.before-drain", "gc.before-delete",
         "gc.after-delete"]


@pytest.mark.parametrize("kill_at", STEPS)
def test_sigkill_at_every_step_of_a_drain(tmp_path: Path, kill_at: str) -> None:
    client = Client(tmp_path)
    try:
        for _ in range(3):
            client.generation()
        t = memwal.open(client.uri)
        assert t.merge().ok and t.catchup().ok and t.compact(target_rows_per_fragment=100_000).ok
        client.live.close()
        argv = [str(VENV_BIN / "memwal"), "gc", client.uri, "--grace-seconds", "0", "--expire-versions", "0",
                "--writer-idle-seconds", "0"]
        with Barrier(str(tmp_path / "barrier"), kill_at) as barrier:
            env = {**os.environ, "MEMWAL_STEP_BARRIER": barrier.directory}
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                barrier.wait_reached()
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # readers in the window
        assert client.reopened_rows() == client.model
        assert client_view(client.uri) == client_view(client.control_uri)
        rerun = run_cli("gc", client.uri, "--grace-seconds", "0", "--expire-versions", "0",
                        "--writer-idle-seconds", "0")
        assert rerun.rc == 0, rerun.stderr
        assert listed(client.uri) == [] and folders(client.uri) == set()
        assert client.reopened_rows() == client.model
        assert client_view(client.uri) == client_view(client.control_uri)
        assert run_cli("verify", client.uri).rc == 0
    finally:
        client.close()
