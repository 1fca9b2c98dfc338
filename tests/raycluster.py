"""A Ray cluster on 127.0.0.1 from the installed ray: a head (``ray start --head``) and, if asked,
more nodes, each a child in its own process group (its raylet, GCS and workers with it), stopped
by that group's id. Token authentication is on, with a token of its own that travels in the
environment only (``RAY_AUTH_TOKEN``), never on a command line. The tests' ``ray_cluster`` fixture
(tests/conftest.py) and the Ray arm of ``bench spark connect`` start one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.sparkcluster import free_port

START_TIMEOUT = 90.0


@dataclass
class RayCluster:
    """A running cluster: the head's ``address``, the environment a client needs (``env``: its
    token), and its nodes' processes (the head first)."""

    address: str
    env: dict[str, str]
    nodes: list[subprocess.Popen[bytes]]

    def kill_head(self) -> None:
        """The head node lost at once: its process group killed (its GCS, raylet and workers)."""
        os.killpg(self.nodes[0].pid, signal.SIGKILL)


@contextlib.contextmanager
def ray_cluster(folder: Path, *, nodes: int = 1, cpus: int = 1) -> Iterator[RayCluster]:
    """``nodes`` nodes of ``cpus`` CPUs each, logs in ``folder``, stopped after."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    env.pop("RAY_ADDRESS", None)
    address = f"127.0.0.1:{free_port()}"
    ray = str(Path(sys.executable).parent / "ray")
    common = ["--num-cpus", str(cpus), "--node-ip-address", "127.0.0.1", "--block"]
    started: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(nodes):
            where = (["--head", "--port", address.rsplit(":", 1)[1], "--include-dashboard", "false"] if i == 0
                     else ["--address", address])
            with open(folder / f"node-{i}.log", "wb") as log:
                started.append(subprocess.Popen([ray, "start", *where, *common], env=env, start_new_session=True,
                                                stdout=subprocess.DEVNULL, stderr=log))
            _wait_for_nodes(address, env, i + 1)
        yield RayCluster(address, {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}, started)
    finally:
        for node in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
        for node in started:
            try:
                node.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)


def _wait_for_nodes(address: str, env: dict[str, str], n: int) -> None:
    """Until the cluster at ``address`` has ``n`` live nodes (asked from a process of its own)."""
    ask = ("import ray, sys; ray.init(address=sys.argv[1], logging_level=40); "
           "print(sum(1 for node in ray.nodes() if node['Alive']))")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        proc = subprocess.run([sys.executable, "-c", ask, address], env=env, capture_output=True, text=True,
                              timeout=120)
        if proc.returncode == 0 and proc.stdout.strip() == str(n):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray cluster at {address} has no {n} nodes: {proc.stderr[-500:]}")
        time.sleep(1)
