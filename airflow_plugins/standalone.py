"""Run a command and, when it is stopped, stop everything it started: ``make airflow``'s wrapper.

``airflow standalone`` starts the API server, the scheduler, the DAG processor and the
triggerer, and the scheduler's LocalExecutor starts workers of its own; stopped with Ctrl-C it
left the triggerer and dozens of workers running. Here the command runs in a session of its
own, and this wrapper is its "child subreaper" (orphans of the tree are handed to it, not to
init); on SIGINT or SIGTERM (or when the command ends) every process of that session and every
process descended from this wrapper (found in ``/proc``, so one that left the session is not
missed) gets SIGTERM once, then SIGKILL if it still runs after ``--grace`` seconds; the wrapper
returns as soon as none runs (the orphans it inherited are reaped: a zombie is not waited for),
exit code 0 after a stop it was asked for. Only those processes: their ids are collected first,
nothing is matched by name.

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


def _procs() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, state) of every process this user can see."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
        out[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[0])
    return out


def started_by(root: int, session: int) -> set[int]:
    """The live processes of ``session`` and the descendants of ``root`` and of this process (its
    orphans come to this process), ``root`` included, this process not. A process that ended and
    waits to be reaped (a zombie) is not live: signalling it would only look like it still runs."""
    procs = _procs()
    found = {pid for pid, (_, sid, _) in procs.items() if sid == session} | ({root} if root in procs else set())
    found |= {pid for pid, (ppid, _, _) in procs.items() if ppid == os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    found.discard(os.getpid())
    return {pid for pid in found if procs.get(pid, (0, 0, "Z"))[2] != "Z"}


def _reap(keep: int) -> None:
    """Collect every ended child of this process but ``keep`` (the command, whose status
    ``Popen.wait`` reads): the orphans a subreaper inherits stay zombies until it does."""
    for pid, (ppid, _, state) in _procs().items():
        if ppid == os.getpid() and state == "Z" and pid != keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _signal(pids: set[int], sig: int) -> set[int]:
    sent = set()
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent.add(pid)
        except ProcessLookupError:
            pass
    return sent


def stop_all(root: int, session: int, grace: float) -> set[int]:
    """SIGTERM, once, every process the command started (and those started meanwhile), SIGKILL
    what is left after ``grace``; returns as soon as none runs. The pids signalled."""
    seen: set[int] = set()
    deadline = time.monotonic() + grace
    while True:
        _reap(root)
        alive = started_by(root, session)
        if not alive:
            return seen
        if time.monotonic() >= deadline:
            _signal(alive, signal.SIGKILL)
            seen |= alive
            time.sleep(0.1)
            _reap(root)
            return seen
        seen |= _signal(alive - seen, signal.SIGTERM)
        time.sleep(0.1)


def _subreaper() -> None:
    """Become the child subreaper of what we start (Linux ``prctl``; elsewhere: the session only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def run(argv: Sequence[str], grace: float = 20.0) -> int:
    """Run ``argv``; its exit code, or 0 once everything stopped when this process was asked to
    stop (Ctrl-C: the stop asked for is not a failure), 1 if something had to be killed then."""
    _subreaper()
    proc = subprocess.Popen(list(argv), start_new_session=True)
    session = os.getsid(proc.pid)
    asked: list[set[int]] = []

    def stop(signum: int, _frame: object) -> None:
        if asked:
            return  # a second Ctrl-C while stopping: the stop under way goes on
        print(f"stopping {argv[0]} and everything it started", file=sys.stderr, flush=True)
        started = time.monotonic()
        asked.append(stop_all(proc.pid, session, grace))
        print(f"stopped {len(asked[0])} processes in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = proc.wait()
    if asked:
        return 0
    stop_all(proc.pid, session, grace)  # what it left behind when it ended on its own
    return code if code >= 0 else 128 - code  # a command ended by a signal: the shell's convention


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
