"""The steady state: a writer that never stops, and what every reader pays for it (issue 54).

One shard, one writer process kept open for the whole run, writing a generation every
``--interval`` seconds (30 a minute by default: ``--rows`` rows, a third of them updates), and,
every minute, the maintenance under test:

* ``memwal``: ``memwal cycle TABLE`` with its defaults (grace period, version retention, writer
  idle period), as a whole process, while the writer goes on;
* ``cleanup_wal`` (the peer): lance-context's own merger called in the writer process, looped
  until it merges nothing, as lance-context's users run it;
* ``both``: that, then ``memwal cycle`` (two compactors on one table, as a lance-context user who
  adds memwal for GC, catch-up and compaction runs them).

Arms: ``pylance`` (a pylance 14 ``ShardWriter``), ``lance-context`` (0.6.7, Lance 9 inside),
``lance-context-peer`` (its own merger, no memwal), ``lance-context-both``, and ``lancedb`` when
its driver and venv are there. After each minute's maintenance the bench records: the generations the shard manifest
lists (what every list-reading client opens) and the folders and bytes on storage; the live
writer's own read (time, and its rows against the model: a digest, :mod:`tests.clients.digest`);
a new process's read (the same); the same client's read of a *reference* table holding the same
rows with no generation; and the maintenance's wall and CPU seconds.

Goals (issue 54): at most 16 generations listed at every minute and 8 at the median; a new
process's read within 1.5x the reference; the live writer's reads right at every minute and
within 1.5x the reference; storage within what the retention settings allow
(docs/benchmarks/keeping-up.md gives the formula); the maintenance within 10% of one core. JSON and a
chart in ``--out``; ``--minutes`` and ``--arms`` choose the run (``--smoke``: two minutes).
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.clients.drivers import ARMS, CLIENTS, Driver, available
from bench.harness.processes import ROOT, run
from bench.harness.results import Run, figure, log, parser
from tests.clients.digest import MASK, row_hash

MEMWAL = ROOT / ".venv" / "bin" / "memwal"

GOAL_LISTED_MAX, GOAL_LISTED_MEDIAN = 16, 8
GOAL_READ_OVER_REFERENCE = 1.5
GOAL_CORE_SHARE = 0.10


@dataclass
class Model:
    """What was written: each key's value, the digest of every state so far (a reader sees one
    of the states between the start and the end of its read), and the row generator (string
    keys ``k00000001``, or integers where the client's table has an integer key)."""

    row: Callable[[object, int, int], dict[str, Any]]
    int_keys: bool = False
    rows: dict[object, int] = field(default_factory=dict)
    digest: int = 0
    history: list[int] = field(default_factory=lambda: [0])
    fresh: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(54))

    def key(self, n: int) -> object:
        return n if self.int_keys else f"k{n:08d}"

    def next_rows(self, n: int, g: int) -> list[dict[str, Any]]:
        updates = self.rng.sample(list(self.rows), min(n // 3, len(self.rows)))
        keys = updates + [self.key(self.fresh + i) for i in range(n - len(updates))]
        self.fresh += n - len(updates)
        return [self.row(k, g * 100_000 + i, g) for i, k in enumerate(keys)]

    def apply(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            old = self.rows.get(r["id"])
            if old is not None:
                self.digest = (self.digest - row_hash(r["id"], old)) & MASK
            self.rows[r["id"]] = r["v"]
            self.digest = (self.digest + row_hash(r["id"], r["v"])) & MASK
        self.history.append(self.digest)

    def as_rows(self) -> list[dict[str, Any]]:
        return [self.row(k, v, 0) for k, v in self.rows.items()]


class PacedWriter:
    """A writer process that writes a generation of ``rows`` every ``interval`` seconds on a thread
    of its own, each write and its model update one step under ``lock`` (what a reader's result is
    compared with). ``writer`` may be replaced under the lock (a new process: docs/clients.md)."""

    def __init__(self, writer: Driver, model: Model, rows: int, interval: float) -> None:
        self.writer, self.model, self.rows, self.interval = writer, model, rows, interval
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def end(self) -> None:
        """Stop writing (the write under way ends first); the writer stays open."""
        self._stop.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            nxt += self.interval
            batch = self.model.next_rows(self.rows, self.written + 1)
            with self.lock:
                try:
                    self.writer.call("gen", rows=batch)
                except RuntimeError as exc:
                    self.failures.append(f"write: {exc}")
                    return
                self.model.apply(batch)
                self.written += 1
            self._stop.wait(max(0.0, nxt - time.monotonic()))


def _run_peak(argv: list[str]) -> dict[str, Any]:
    """A whole process with its own peak RSS: wall and CPU seconds, peak RSS, exit code."""
    proc = run(argv, peak=True)
    return {"wall_seconds": round(proc.seconds, 2), "cpu_seconds": round(proc.cpu_seconds, 2),
            "peak_rss_mb": round(proc.peak_rss_mb or 0), "rc": proc.rc,
            "error": proc.stderr.strip().splitlines()[-1][:300] if proc.rc and proc.stderr.strip() else None}


def storage(uri: str) -> dict[str, Any]:
    """What the shard manifest lists, and what lies on storage (folders, WAL entries, bytes)."""
    from memwal.table import open_table
    from memwal.table.shards import all_shard_manifests

    listed = sum(len(s.flushed) for s in all_shard_manifests(open_table(uri).store).values())
    folders = wal = size = 0
    mem_wal = Path(uri, "_mem_wal")
    for dirpath, _dirs, files in os.walk(uri):  # a live table: a folder a job removes meanwhile is skipped
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                size += os.stat(os.path.join(dirpath, name)).st_size
    for shard in (mem_wal.iterdir() if mem_wal.exists() else ()):
        if shard.name.startswith("_"):
            continue
        folders += sum(1 for p in shard.iterdir() if "_gen_" in p.name)
        wal += sum(1 for _ in (shard / "wal").iterdir()) if (shard / "wal").exists() else 0
    return {"listed": listed, "folders": folders, "wal_entries": wal, "bytes": size}


def run_arm(arm: str, work: Path, minutes: int, interval: float, rows: int, reopen_every: int = 0,
            base_rows: int = 0, cycle_args: Sequence[str] = ()) -> dict[str, Any]:
    client_name, maintenance = ARMS[arm]
    client = CLIENTS[client_name]
    base = work / arm
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    uri, ref = str(base / "t.lance"), str(base / "reference" / "t.lance")
    model = Model(client.row, int_keys=client_name == "lancedb")
    base = model.next_rows(base_rows, 0) if base_rows else []
    model.apply(base)
    paced = PacedWriter(client.open_writer(uri, rows, base), model, rows, interval)
    failures, written = paced.failures, paced.lock  # a write and its model update, one step for the readers
    paced.start()
    minutes_out = []
    t_start = time.monotonic()
    try:
        for minute in range(1, minutes + 1):
            time.sleep(max(0.0, t_start + 60 * minute - time.monotonic()))
            if failures:
                break
            if reopen_every and minute % reopen_every == 0:
                with written:  # the writer is replaced by a new process (its users' remedy: docs/clients.md)
                    paced.writer.close()
                    paced.writer = client.reopen_writer(uri, rows)
            writer = paced.writer
            maint: dict[str, Any] = {}
            if maintenance in ("cleanup_wal", "both"):
                c0 = time.perf_counter()
                done = writer.call("cleanup_all")
                maint = {"cleanup_wal_wall_seconds": round(time.perf_counter() - c0, 2), "merged": done["merged"]}
            if maintenance in ("memwal", "both"):
                maint.update(_run_peak([str(MEMWAL), "cycle", uri, *cycle_args]))
            record: dict[str, Any] = {"minute": minute, "generations_written": paced.written, "maintenance": maint}
            record.update(storage(uri))
            # the writer's own read, once it flushed after the maintenance: until then a pylance
            # writer reads the listing it loaded at its last flush (the generations a rollup just
            # replaced among them), a window of one generation's interval
            after = paced.written
            while paced.written == after and not failures and paced.alive():
                time.sleep(0.05)
            with written:  # the writer's own read sees exactly what it wrote
                live = writer.call("read")
                right = live["digest"] == model.digest
            record["live"] = {"seconds": round(live["seconds"], 3), "rows": live["rows"], "right": right}
            start = len(model.history) - 1
            new = client.read_new(uri)  # the writer goes on meanwhile: any state it passed through is right
            with written:
                right = new["digest"] in model.history[start:]
            record["new_process"] = {"seconds": round(new["seconds"], 3), "rows": new["rows"], "right": right}
            with written:  # the rows as they are now (the writer goes on meanwhile)
                now_rows = model.as_rows()
            client.reference(ref, now_rows)
            reference = client.read_new(ref)
            record["reference"] = {"seconds": round(reference["seconds"], 3), "rows": reference["rows"]}
            log(f"{arm} minute {minute}: {paced.written} written, {record['listed']} listed, "
                f"{record['folders']} folders, {record['bytes'] / 1e6:.1f} MB; live {record['live']['seconds']}s "
                f"{'ok' if record['live']['right'] else 'WRONG'}, new {record['new_process']['seconds']}s "
                f"{'ok' if record['new_process']['right'] else 'WRONG'}, reference {record['reference']['seconds']}s; "
                f"maintenance {maint.get('wall_seconds', maint.get('cleanup_wal_wall_seconds'))}s wall, "
                f"{maint.get('cpu_seconds', '-')}s CPU")
            minutes_out.append(record)
    finally:
        paced.end()
        paced.writer.close()
    return {"arm": arm, "client": client_name, "maintenance": maintenance, "interval_seconds": interval,
            "writer_reopened_every_minutes": reopen_every or None, "base_rows": base_rows,
            "cycle_args": list(cycle_args),
            "rows_per_generation": rows, "minutes": minutes_out, "failures": failures,
            "goals": goals(minutes_out, maintenance)}


def goals(minutes: list[dict[str, Any]], maintenance: str) -> dict[str, Any]:
    if not minutes:
        return {}
    listed = [m["listed"] for m in minutes]
    new_ratio = [m["new_process"]["seconds"] / max(m["reference"]["seconds"], 1e-3) for m in minutes]
    live_ratio = [m["live"]["seconds"] / max(m["reference"]["seconds"], 1e-3) for m in minutes]
    out: dict[str, Any] = {
        "listed_max": {"value": max(listed), "goal": GOAL_LISTED_MAX, "met": max(listed) <= GOAL_LISTED_MAX},
        "listed_median": {"value": statistics.median(listed), "goal": GOAL_LISTED_MEDIAN,
                          "met": statistics.median(listed) <= GOAL_LISTED_MEDIAN},
        "new_process_over_reference_max": {"value": round(max(new_ratio), 2), "goal": GOAL_READ_OVER_REFERENCE,
                                           "met": max(new_ratio) <= GOAL_READ_OVER_REFERENCE},
        "live_over_reference_max": {"value": round(max(live_ratio), 2), "goal": GOAL_READ_OVER_REFERENCE,
                                    "met": max(live_ratio) <= GOAL_READ_OVER_REFERENCE},
        "every_read_right": {"value": all(m["live"]["right"] and m["new_process"]["right"] for m in minutes),
                             "goal": True, "met": all(m["live"]["right"] and m["new_process"]["right"]
                                                      for m in minutes)},
    }
    if maintenance != "cleanup_wal":
        cpu = [m["maintenance"]["cpu_seconds"] for m in minutes]
        share = statistics.mean(cpu) / 60
        out["maintenance_core_share"] = {"value": round(share, 3), "goal": GOAL_CORE_SHARE,
                                         "met": share <= GOAL_CORE_SHARE}
    return out


def chart(doc: dict[str, Any], path: Path) -> None:
    with figure(path, rows=1, cols=3, size=(16, 4.5)) as (fig, axes):
        for arm, r in doc["arms"].items():
            xs = [m["minute"] for m in r["minutes"]]
            axes[0].plot(xs, [m["listed"] for m in r["minutes"]], marker="o", label=arm)
            axes[1].plot(xs, [m["new_process"]["seconds"] / max(m["reference"]["seconds"], 1e-3) for m in r["minutes"]],
                         marker="o", label=arm)
            axes[2].plot(xs, [m["bytes"] / 1e6 for m in r["minutes"]], marker="o", label=arm)
        axes[0].axhline(GOAL_LISTED_MAX, color="#c33", linestyle="--", linewidth=1)
        axes[1].axhline(GOAL_READ_OVER_REFERENCE, color="#c33", linestyle="--", linewidth=1)
        for ax, title, ylabel in zip(axes, ("generations listed (every reader opens them)",
                                            "a new process's read / the same rows, no generation",
                                            "bytes on storage"), ("generations", "ratio", "MB"), strict=True):
            ax.set_title(title, fontsize=11)
            ax.set_xlabel("minute", fontsize=10)
            ax.set_ylabel(ylabel, fontsize=10)
            ax.legend(fontsize=9)
        fig.suptitle("A writer that never stops: one shard, 30 generations a minute, maintenance every minute")


def main(argv: list[str] | None = None) -> int:
    p = parser("read steady", __doc__, smoke=True)
    p.add_argument("--minutes", type=int, default=30)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between generations")
    p.add_argument("--rows", type=int, default=200, help="rows a generation")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--base-rows", type=int, default=0, help="rows in the base table before the writer starts")
    p.add_argument("--reopen-every", type=int, default=0, metavar="MINUTES",
                   help="replace the writer by a new process every MINUTES (0: never, the default)")
    p.add_argument("--cycle-args", default="", metavar="ARGS",
                   help="options of every memwal cycle, e.g. '--expire-versions 300' (default: its defaults)")
    args = p.parse_args(argv)
    arms = ["pylance"] if args.smoke else [a for a in args.arms.split(",") if a]
    minutes = 2 if args.smoke else args.minutes
    with Run("steady", "a writer that never stops, and what every reader pays for it", out=args.out,
             work=args.work) as bench:
        results = {}
        for arm in arms:
            if not available(arm):
                bench.log(f"{arm}: its client is not installed here, skipped")
                continue
            bench.log(f"{arm}: {minutes} minutes, a generation of {args.rows} rows every {args.interval}s")
            results[arm] = run_arm(arm, bench.work, minutes, args.interval, args.rows, args.reopen_every,
                                   args.base_rows, shlex.split(args.cycle_args))
        bench.doc["arms"] = results
        bench.publish(draw=chart, summary=summary)
        shutil.rmtree(bench.work, ignore_errors=True)  # the tables of a half-hour run: not kept
    return 0


def summary(doc: dict[str, Any]) -> str:
    return "\n".join(f"{arm}: {goal} {v['value']} (goal {v['goal']}): {'met' if v['met'] else 'NOT met'}"
                     for arm, r in doc["arms"].items() for goal, v in r["goals"].items())


if __name__ == "__main__":
    sys.exit(main())
