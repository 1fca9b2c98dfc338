"""The deterministic interleaving harness: a clock moved by hand, jobs held at named steps.

Races are tested as interleavings, never with free threads and sleeps:

* :class:`ManualClock` is the process's clock (``memwal.core.clock.use``): time moves only when a
  test calls :meth:`ManualClock.advance`, which returns once every heartbeat thread has done
  what the new time asks of it (renewed, or found its lease lost) and sleeps again. Freezing
  the heartbeats that run now (:meth:`ManualClock.frozen`) models a process stopped by
  SIGSTOP: it cannot renew, so its lease expires and can be taken over.
* :class:`Stalled` runs a job in a thread that stops at one named step (``memwal.core.steps``)
  until the test resumes it; :class:`Barrier` does the same for other processes (Spark
  executors) through a barrier directory.
* :func:`running_at` is the single-threaded form: job A runs in the test's thread and,
  the first time it reaches a step, job B runs to completion right there.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

from memwal.core import steps

#: How long a test waits for threads to settle or a job to reach a step before failing.
SETTLE_TIMEOUT = 60.0


class ManualClock:
    """A wall clock that moves only when the test says so (see the module docstring)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now
        self._cond = threading.Condition()
        self._sleeping: dict[threading.Thread, float] = {}
        self._frozen: set[threading.Thread] = set()
        self._closed = False

    def __call__(self) -> float:
        return self.now

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        me = threading.current_thread()
        with self._cond:
            while (self.now < deadline or me in self._frozen) and not stop.is_set() and not self._closed:
                self._sleeping[me] = deadline
                self._cond.notify_all()
                self._cond.wait(0.01)  # also notices ``stop``, which is not our condition
            self._sleeping.pop(me, None)
            self._cond.notify_all()
            return stop.is_set() or self._closed

    def close(self) -> None:
        """End of the test: every thread still sleeping on this clock is told to stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def advance(self, seconds: float) -> None:
        """Move time, then wait until every heartbeat thread sleeps again (or has ended)."""
        with self._cond:
            self.now += seconds
            self._cond.notify_all()
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while busy := self._busy():
                assert time.monotonic() < deadline, f"heartbeats never settled: {busy}"
                self._cond.wait(0.005)

    def _busy(self) -> list[str]:
        out = []
        for t in threading.enumerate():
            if getattr(t, "clock", None) is not self or not t.is_alive() or t in self._frozen:
                continue
            due = self._sleeping.get(t)
            if due is None or due <= self.now:
                out.append(t.name)
        return out

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The heartbeats running now renew nothing for the block (a process under SIGSTOP);
        heartbeats started meanwhile run normally. On exit they wake and see what happened."""
        with self._cond:
            self.advance(0)  # let them settle first
            mine = {t for t in threading.enumerate() if getattr(t, "clock", None) is self}
            self._frozen |= mine
        try:
            yield
        finally:
            with self._cond:
                self._frozen -= mine
                self._cond.notify_all()
            self.advance(0)


@contextlib.contextmanager
def running_at(step: str, job_b: Callable[[], object]) -> Iterator[list[str]]:
    """For the block, job B runs to completion the first time this process reaches ``step``
    (job A then goes on from there). Yields a list that records the step once reached, so
    the test can assert the interleaving really happened."""
    reached: list[str] = []

    def hook(name: str) -> None:
        if name == step and not reached:
            reached.append(name)
            job_b()

    with steps.hooked(hook):
        yield reached


class Stalled:
    """A job in a thread, held at one named step (``memwal.core.steps``) until :meth:`resume`.

    ``job()`` runs the job the way users do (the Action, the API or the CLI); the hook is
    process-wide, and holds only the first thread that reaches the step: the job's own thread,
    or with ``any_thread`` one the job started (a fleet run's table threads).
    """

    def __init__(self, job: Callable[[], object], stall_at: str, *, any_thread: bool = False) -> None:
        self.stall_at = stall_at
        self.any_thread = any_thread
        self.reached = threading.Event()
        self.go = threading.Event()
        self.outcome: object = None
        self.error: BaseException | None = None
        self._held: threading.Thread | None = None
        self._hooks = contextlib.ExitStack()
        self._hooks.enter_context(steps.hooked(self._hook))
        self.thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        self.thread.start()
        if not self.reached.wait(SETTLE_TIMEOUT * 2):
            self._hooks.close()
            raise AssertionError(f"the job never reached step {stall_at}")

    def _hook(self, name: str) -> None:
        me = threading.current_thread()
        if name == self.stall_at and self._held is None and (me is self.thread or self.any_thread):
            self._held = me
            go = self.go
            self.reached.set()
            assert go.wait(300)

    def _run(self, job: Callable[[], object]) -> None:
        try:
            self.outcome = job()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc
        finally:
            self.reached.set()

    def advance_to(self, step: str) -> Stalled:
        """Let the job go on to a later step and hold it there."""
        go = self.go
        self.stall_at, self._held, self.go = step, None, threading.Event()
        self.reached.clear()
        go.set()
        if not self.reached.wait(SETTLE_TIMEOUT * 2) or not self.thread.is_alive():
            raise AssertionError(f"the job never reached step {step} (error: {self.error!r})")
        return self

    def resume(self) -> Stalled:
        self.go.set()
        self.thread.join(300)
        self._hooks.close()
        assert not self.thread.is_alive()
        return self


class Barrier:
    """Hold other processes (Spark tasks, ``spark-submit``) at a named step through a barrier
    directory; the directory travels to them in ``MEMWAL_STEP_BARRIER``."""

    def __init__(self, directory: str, step: str) -> None:
        self.directory, self.step = directory, step
        os.makedirs(directory, exist_ok=True)
        self.hold_path = os.path.join(directory, f"{step}.hold")
        self.reached_path = os.path.join(directory, f"{step}.reached")

    def __enter__(self) -> Barrier:
        open(self.hold_path, "w").close()
        self._env = os.environ.get(steps.BARRIER_ENV)
        os.environ[steps.BARRIER_ENV] = self.directory
        return self

    def wait_reached(self) -> None:
        deadline = time.monotonic() + SETTLE_TIMEOUT * 2
        while not os.path.exists(self.reached_path):
            assert time.monotonic() < deadline, f"no process reached step {self.step}"
            time.sleep(0.01)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.hold_path)

    def __exit__(self, *exc: object) -> None:
        self.release()
        if self._env is None:
            os.environ.pop(steps.BARRIER_ENV, None)
        else:
            os.environ[steps.BARRIER_ENV] = self._env


class ScriptedClock:
    """A clock whose readings a test scripts (``fn()``), for checks that must see time jump
    at an exact reading; it never wakes a heartbeat (one waits on it until stopped)."""

    def __init__(self, fn: Callable[[], float]) -> None:
        self._fn = fn

    def __call__(self) -> float:
        return self._fn()

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        stop.wait()
        return True
