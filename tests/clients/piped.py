"""A client library in a virtual environment of its own, run as one long-lived process and
driven over a pipe: one JSON command a line in, one JSON answer (``{"ok": value}`` or
``{"error": "..."}``) a line out. How the tests run lance-context and LanceDB, whose Lance
versions never share a process with pylance 14.

Both ends are here: :class:`PipedClient` starts and drives a driver script; :func:`serve` is
the driver's loop. A driver imports it as ``piped`` (its own folder is first on its path), so
this module needs nothing but the standard library."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self


class ClientError(Exception):
    """What the client library raised, as its process reported it."""


class PipedClient:
    """One driver process (``python driver``), stopped by :meth:`close` or the ``with`` block."""

    #: How the client is named in errors, and the make target that installs its venv.
    name = "client"
    make_target = "?"

    def __init__(self, python: Path, driver: Path) -> None:
        if not python.exists():
            raise RuntimeError(f"{python} is missing: run `make {self.make_target}`")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["RUST_LOG"] = "error"
        self.proc = subprocess.Popen([str(python), str(driver)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise ClientError(f"{self.name} process ended (exit {self.proc.wait()}) during {op}")
        answer = json.loads(line)
        if "error" in answer:
            raise ClientError(answer["error"])
        return answer["ok"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(run: Callable[[str, dict[str, Any]], Any]) -> None:
    """The driver's loop: each command line to ``run(op, command)``, its value or its error
    answered on one line; a failure is the answer, never the end of the process."""
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            answer = {"ok": run(cmd["op"], cmd)}
        except Exception as exc:  # noqa: BLE001 - every failure is the answer, the process goes on
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()
