"""``make airflow`` stops everything it started (airflow_plugins/standalone.py).

What ``airflow standalone`` leaves behind when stopped, in small: a command whose children
include one in its session, one that left the session (``setsid``), and one that ignores
SIGTERM. Ctrl-C (SIGINT) to the wrapper ends every one of them, by their pids, the last with
SIGKILL after the grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ROOT

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has ended


def wrapped(tmp_path: Path, script: str, grace: int) -> tuple[subprocess.Popen, list[int]]:
    """``sh -c script`` under the wrapper; its children's pids, once the script wrote them
    (each ``echo $! >> pids``, then ``echo ready``: the file is named ``pids`` in ``tmp_path``)."""
    pids = tmp_path / "pids"
    wrapper = subprocess.Popen([sys.executable, "-m", "memwal.airflow.standalone", "--grace", str(grace), "--", "sh",
                                "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (pids.exists() and "ready" in pids.read_text()):
        if time.monotonic() > deadline or wrapper.poll() is not None:
            wrapper.kill()
            raise AssertionError("the command never started")
        time.sleep(0.05)
    return wrapper, [int(x) for x in pids.read_text().split() if x.isdigit()]


def test_ctrl_c_stops_every_process_the_command_started(tmp_path):
    pids = tmp_path / "pids"
    script = (f"sleep 300 & echo $! >> {pids}; setsid sleep 300 & echo $! >> {pids}; "
              f"{sys.executable} -c '{STUBBORN}' & echo $! >> {pids}; echo ready >> {pids}; wait")
    wrapper, started = wrapped(tmp_path, script, grace=2)
    try:
        time.sleep(0.5)  # the stubborn child has set its handler
        assert len(started) == 3 and all(alive(p) for p in started)
        assert os.getsid(started[1]) != os.getsid(started[0])  # one left the command's session
        wrapper.send_signal(signal.SIGINT)
        _, err = wrapper.communicate(timeout=60)
        assert wrapper.returncode == 0, err  # the stop it was asked for is no failure (make said "Error 241")
        deadline = time.monotonic() + 10
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in started if alive(p)] == []
    finally:
        if wrapper.poll() is None:
            wrapper.kill()


def test_ctrl_c_returns_once_everything_ended_not_after_the_grace_period(tmp_path):
    """Children that end on SIGTERM, one of them an orphan the wrapper inherits (a zombie until it
    reaps it): the wrapper returns when they have ended, not when its grace period is over (the
    old loop signalled zombies, found them "alive" and waited out the grace period, twice)."""
    pids = tmp_path / "pids"
    script = (f"(sleep 300 & echo $! >> {pids}) ; sleep 300 & echo $! >> {pids}; echo ready >> {pids}; wait")
    wrapper, started = wrapped(tmp_path, script, grace=600)
    try:
        assert len(started) == 2 and all(alive(p) for p in started)
        wrapper.send_signal(signal.SIGINT)
        _, err = wrapper.communicate(timeout=300)  # far less than one grace period of 600 s
        assert wrapper.returncode == 0, err
        assert "stopped 3 processes" in err and [p for p in started if alive(p)] == []
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
