"""Progress bars for the job commands on a terminal (rich), as ``memwal backfill`` has.

Only when stderr is a terminal and the command prints no ``--json`` document; never for a dry
run. The display listens to the job's progress events only (:mod:`memwal.observe.progress`):

- merge: the batch, one line per shard (its generations and rows, at most :data:`MAX_LINES`),
  then a bar through the phases a merge goes through: reading the generations, the delete pass,
  the marked commit (every shard of the batch is committed at once, by one marker);
- gc: one bar over the generations and WAL entries to delete, advancing shard by shard (its
  generations, then its WAL entries), naming the shard just done.

Logs keep flowing above the bars (the ``memwal`` log handler writes through the display).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from memwal.core.text import one_line
from memwal.core.words import counted

#: At most this many shard lines are printed for a merge batch (then a count of the others).
MAX_LINES = 20

#: Merge phases by the named step that starts them, and how far along the bar each puts it.
MERGE_PHASES = {
    "before-read": ("reading generations", 0),
    "after-read": ("changes computed", 1),
    "before-delete-commit": ("delete pass", 1),
    "after-delete-pass": ("delete pass committed", 2),
    "before-marked-commit": ("committing with the progress marker", 2),
    "after-upsert-commit": ("committed", 3),
}


def wanted(args: Any) -> bool:
    return sys.stderr.isatty() and not getattr(args, "json", False) and not getattr(args, "dry_run", False)


@contextlib.contextmanager
def job_progress(job: str, args: Any) -> Iterator[None]:
    """Show the job's progress on the terminal for the block (a no-op when not wanted)."""
    if job not in ("merge", "gc") or not wanted(args):
        yield
        return
    from memwal.observe import progress

    display = JobDisplay(job)
    with display, progress.listening(display):
        yield


class JobDisplay:
    """One job's bars (see the module docstring)."""

    def __init__(self, job: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.job = job
        console = Console(file=sys.stderr, highlight=False)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
        self.console = self.progress.console
        self.main: Any = None
        self.base = ""
        self.shard_totals: dict[str, list[int]] = {}  # shard -> [generations, wal entries] planned
        self.deleted = [0, 0]  # generations, WAL entries: what GC said it deleted
        self.shards_done: set[str] = set()
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []

    # -- the display's lifetime: logs written through it while it is live
    def __enter__(self) -> JobDisplay:
        original = sys.stderr
        self.progress.start()  # on a terminal, sys.stderr now writes above the bars
        for handler in logging.getLogger("memwal").handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.__stderr__, original):
                self._handlers.append((handler, handler.setStream(sys.stderr)))
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        for handler, stream in self._handlers:
            handler.setStream(stream)
        if self.main is not None:
            task = self.progress.tasks[self.main]
            if exc_type is None and self.job == "gc":
                self.progress.update(self.main, completed=task.total, description=(
                    f"gc deleted {counted(self.deleted[0], 'generation folder')} and "
                    f"{counted(self.deleted[1], 'WAL entry', 'WAL entries')} in "
                    f"{counted(len(self.shards_done), 'shard')}: done"))
            elif exc_type is None:
                self.progress.update(self.main, completed=task.total, description=f"{self.base}: done")
            else:
                self.progress.update(self.main, description=f"{self.base}: stopped")
        self.progress.stop()

    # -- what the job tells
    def planned(self, job: str, plan: Any) -> None:
        if job != self.job:
            return
        if job == "merge":
            self._merge_planned(plan.to_dict())
        else:
            self._gc_planned(plan)

    def _merge_planned(self, doc: dict[str, Any]) -> None:
        from rich.markup import escape as escape_markup

        shards = doc["shards"]
        gens = sum(len(s["generations"]) for s in shards)
        rows = sum(g["rows"] for s in shards for g in s["generations"])
        for s in shards[:MAX_LINES]:
            n = len(s["generations"])
            shard = escape_markup(one_line(s["shard_id"]))
            self.console.print(f"  shard {shard}: generations {s['from_generation']}..{s['to_generation']} "
                               f"({n} generation{'s' * (n != 1)}, {sum(g['rows'] for g in s['generations']):,} rows)")
        if len(shards) > MAX_LINES:
            self.console.print(f"  ... and {len(shards) - MAX_LINES} more shards")
        self.base = f"merge {gens} generations of {len(shards)} shards ({rows:,} rows)"
        self.main = self.progress.add_task(self.base, total=3)

    def _gc_planned(self, plan: Any) -> None:
        for g in plan.generations:
            self.shard_totals.setdefault(g.shard_id, [0, 0])[0] += 1
        for w in plan.wal_entries:
            self.shard_totals.setdefault(w.shard_id, [0, 0])[1] += 1
        total = sum(a + b for a, b in self.shard_totals.values())
        self.base = "gc: generation folders and WAL entries deleted"
        self.main = self.progress.add_task(self.base, total=total)

    def shard_done(self, job: str, shard_id: str, *, generations: int = 0, wal_entries: int = 0) -> None:
        if job != self.job or self.main is None:
            return
        task = self.progress.tasks[self.main]
        if task.completed + generations + wal_entries > (task.total or 0):
            # GC re-plans after expiring versions and may free more than it first planned
            self.progress.update(self.main, total=task.completed + generations + wal_entries)
        self.deleted[0] += generations
        self.deleted[1] += wal_entries
        self.shards_done.add(shard_id)
        kind = "generations" if generations else "WAL entries"
        self.progress.update(self.main, advance=generations + wal_entries, refresh=True,
                             description=f"{self.base}: shard {shard_id[:8]} {kind}")

    def phase(self, job: str, name: str) -> None:
        if job != self.job or self.main is None:
            return
        if self.job == "merge" and name in MERGE_PHASES:
            phase, done = MERGE_PHASES[name]
            self.progress.update(self.main, completed=done, description=f"{self.base}: {phase}", refresh=True)
        elif self.job == "gc" and name == "after-delete":
            self.progress.update(self.main, completed=self.progress.tasks[self.main].total)
