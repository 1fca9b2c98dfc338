"""A real ``airflow api-server`` on loopback, for the tests of the "MemWAL" view inside Airflow's UI."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.browser import stop_group

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    status, _, body = get_with_headers(url)
    return status, body


def get_with_headers(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


@contextlib.contextmanager
def api_server(env: dict[str, str], tmp_path: Path,
               login: tuple[str, str] | None = None) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """An api-server of the Airflow home ``env`` on a free port, yielding its base URL, the MemWAL
    DAG config file it reads (``MEMWAL_CONFIG``) and its environment; the process group is
    stopped after. The simple auth manager makes every user an admin with no login, unless
    ``login`` gives a user and password: then the UI asks for them (a real login, its cookie)."""
    port = free_port()
    config = tmp_path / "memwal.yaml"
    env = {**env, "MEMWAL_CONFIG": str(config), "AIRFLOW__API_AUTH__JWT_SECRET": "memwal-test-jwt-secret-0123456789",
           "AIRFLOW__API__WORKERS": "1"}
    if login is None:
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"
    else:
        passwords = tmp_path / "simple_auth_manager_passwords.json"
        passwords.write_text(json.dumps({login[0]: login[1]}))
        env.update(AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
                   AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{login[0]}:admin",
                   AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords))
    log = open(tmp_path / "api-server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(VENV_BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                if get(f"{base}/api/v2/monitor/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "api-server did not start"
            time.sleep(0.2)
        yield base, config, env
    finally:
        stop_group(proc)
        log.close()
