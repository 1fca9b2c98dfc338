"""Run a command and, when it is stopped, stop everything it started: ``make airflow``'s wrapper.

``airflow standalone`` starts the API server, the scheduler, the DAG processor and the
triggerer, and the scheduler's LocalExecutor starts workers of its own; stopped with Ctrl-C it
left the triggerer and dozens of workers running. Here the command runs in a session of its
own, and this wrapper is its "child subreaper" (orphans of the tree are handed to it, not to
init); on SIGINT or SIGTERM (or when the command ends) every process of that session and every
process descended from this wrapper (found in ``/proc``, so one that left the session is not
missed) gets SIGTERM, then SIGKILL after ``--grace`` seconds. Only those processes: their ids
are collected first, nothing is matched by name.

Usage: ``python -m memwal.airflow.standalone [--grace S] -- COMMAND [ARG ...]``
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def _procs() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process this user can see."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
        out[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return out


def started_by(root: int, session: int) -> set[int]:
    """The processes of ``session`` and the descendants of ``root`` and of this process (its
    orphans come to this process), ``root`` included, this process not."""
    procs = _procs()
    found = {pid for pid, (_, sid) in procs.items() if sid == session} | ({root} if root in procs else set())
    found |= {pid for pid, (ppid, _) in procs.items() if ppid == os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    found.discard(os.getpid())
    return found


def _signal(pids: set[int], sig: int) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            os.kill(pid, sig)
            alive.add(pid)
        except ProcessLookupError:
            pass
    return alive


def stop_all(root: int, session: int, grace: float) -> set[int]:
    """SIGTERM what the command started, SIGKILL what is left after ``grace``; the pids killed."""
    seen: set[int] = set()
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        pids = started_by(root, session)
        seen |= pids
        if not _signal(pids, signal.SIGTERM):
            return seen
        time.sleep(0.2)
    pids = started_by(root, session) | {p for p in seen if Path(f"/proc/{p}").exists()}
    _signal(pids, signal.SIGKILL)
    return seen | pids


def _subreaper() -> None:
    """Become the child subreaper of what we start (Linux ``prctl``; elsewhere: the session only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def run(argv: Sequence[str], grace: float = 20.0) -> int:
    _subreaper()
    proc = subprocess.Popen(list(argv), start_new_session=True)
    session = os.getsid(proc.pid)

    def stop(signum: int, _frame: object) -> None:
        print(f"stopping {argv[0]} and everything it started", file=sys.stderr, flush=True)
        stop_all(proc.pid, session, grace)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = proc.wait()
    stop_all(proc.pid, session, grace)  # what it left behind when it ended on its own
    return code


def main(args: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL (default 20)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    ns = p.parse_args(args)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        p.error("no command given")
    return run(command, ns.grace)


if __name__ == "__main__":
    sys.exit(main())
