"""Keeping up: a writer that never stops and one long-lived follower on its defaults (issue 62).

Usage::

    .venv/bin/python -m bench read follow [--minutes 30] [--arms pylance,pylance-rotating,lance-context,lancedb]
                                     [--interval 1.7] [--rows 200] [--rotate-seconds 600] [--reads 5]
                                     [--follow-args "..."] [--out DIR]

One shard, one writer process kept open for the whole run writing a generation of ``--rows`` rows
(a third of them updates) every ``--interval`` seconds (35 a minute by default), and beside it
``memwal cycle TABLE --follow`` on its defaults, started once, stopped with SIGTERM at the end.
Arms: ``pylance`` (a pylance 14 ``ShardWriter`` that is never replaced), ``pylance-rotating``
(``memwal.writer.RotatingShardWriter``: replaced every ``--rotate-seconds``), ``lance-context``
(0.6.7) and ``lancedb`` (0.40), each when its client is installed (``make lance-context``,
``make lancedb``). The clients, their writers, readers and reference tables are
bench/clients/drivers.py's and bench/read/steady.py's.

Measured: what the shard manifest lists (what every list-reading client opens), sampled once a
second; the follower's CPU (from /proc, every minute); and every minute the live writer's own read,
a new process's read through the client's reader, ``--reads`` new processes' reads through memwal's
reader (``memwal.open(uri).scan()``), each checked row by row against the model (a digest), and the
same rows read plainly (``lance.dataset(ref).to_table()``) by as many new processes from a
*reference* table holding them with no generation (written just before, from the model then), the
two kinds of read interleaved (memwal, plain, memwal, ...) and their medians compared; the client's reader
against its own read of the reference. Reads are timed after their imports. At the end: how long the follower
took to stop after SIGTERM, its exit code, and whether it released its leases. Before the writer opens
and after the follower stops: the machine's yardstick (``machine_reference_cpu_seconds``, a fixed piece of Lance
work timed in a new process), against which the follower's CPU on machines of different speeds compares.

Goals (issue 62): the listing at 1 Hz, max <= 8 and median <= 3; the follower <= 10% of a core;
memwal's reader <= 3x the plain read at every minute; every read right. JSON and a chart in
``--out``. The goals are reported, never asserted: this is a benchmark, not a test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.clients.drivers import CLIENTS, OURS, PYLANCE_DRIVER, Driver, available
from bench.harness.processes import python
from bench.harness.results import Run, figure, log, parser
from bench.read.steady import MEMWAL, Model, PacedWriter, storage
from memwal.writer import DEFAULT_ROTATE_SECONDS

GOAL_LISTED_MAX, GOAL_LISTED_MEDIAN = 8, 3
GOAL_FOLLOWER_CORE_SHARE = 0.10
GOAL_MEMWAL_OVER_PLAIN = 3.0
#: arm -> (client, seconds between writer replacements: 0, never)
ARMS = {"pylance": ("pylance", 0), "pylance-rotating": ("pylance", -1), "lance-context": ("lance-context", 0),
        "lancedb": ("lancedb", 0)}


#: A fixed piece of the follower's kind of work (Lance writes, merge_insert commits, filtered reads), timed
#: in a new process after its imports: the CPU seconds it takes are the machine's yardstick, so that a
#: follower's CPU share on one machine can be set against another's (the same jobs took 2.2-2.9 times the
#: CPU on one machine as on another of the same kind).
_REFERENCE_WORK = """
import tempfile, time
import lance, numpy as np, pyarrow as pa
rng = np.random.default_rng(0)
with tempfile.TemporaryDirectory() as d:
    t0 = time.process_time()
    ds = lance.write_dataset(pa.table({"id": np.arange(20_000), "v": rng.integers(0, 1 << 30, 20_000)}), d + "/r.lance")
    for i in range(30):
        keys = rng.integers(0, 25_000, 200)
        batch = pa.table({"id": np.unique(keys), "v": np.arange(len(np.unique(keys)))})
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(batch)
        ds = lance.dataset(d + "/r.lance")
        ds.to_table(filter=f"id < {1000 + i}")
    print(time.process_time() - t0)
"""


def reference_cpu_seconds() -> float:
    """CPU seconds of :data:`_REFERENCE_WORK` in a new process, the least of five: Lance's threads make
    a run's CPU bimodal (here 0.43-0.50 s, or 0.85-1.01 s), the least is the work's."""
    return round(min(float(python("-c", _REFERENCE_WORK).check().stdout) for _ in range(5)), 3)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` now (/proc/PID/status), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def versions_now(uri: str) -> dict[str, int]:
    """The table versions on storage (what every manifest read lists) and the bytes of ``_versions/``;
    the run history's records (one a job run) and their bytes."""
    entries = [e for e in os.scandir(Path(uri, "_versions")) if e.name.endswith(".manifest")]
    history = [p for p in Path(uri, "_mem_wal", "_jobs", "history").rglob("*.json")]
    return {"versions": len(entries), "versions_bytes": sum(e.stat().st_size for e in entries),
            "history_records": len(history), "history_bytes": sum(p.stat().st_size for p in history)}


def listed_now(uri: str) -> int:
    """Generations the shard manifests list now (every list reader opens them)."""
    from memwal.store import open_store
    from memwal.table.shards import all_shard_manifests

    return sum(len(s.flushed) for s in all_shard_manifests(open_store(uri)).values())


def read_in_new_process(op: str, uri: str) -> dict[str, Any]:
    """One of the pylance driver's reads (``read_memwal``, ``read_plain``) in a new process."""
    d = Driver(OURS, PYLANCE_DRIVER)
    try:
        return dict(d.call(op, uri=uri))
    finally:
        d.close()


def open_writer(arm: str, uri: str, rows: int, rotate_seconds: float) -> Driver:
    client, rotate = ARMS[arm]
    if rotate == 0:
        return CLIENTS[client].open_writer(uri, rows, [])
    d = Driver(OURS, PYLANCE_DRIVER)
    d.call("create", uri=uri, rows=[])
    d.call("open", uri=uri, rows=rows, rotate_seconds=rotate_seconds)
    return d


class Sampler(threading.Thread):
    """The listing once a second, while the arm runs."""

    def __init__(self, uri: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.stop = uri, threading.Event()
        self.samples: list[int] = []
        self.skipped: list[str] = []  # why each sample not taken (the JSON's ``skipped_samples``)

    def run(self) -> None:
        nxt = time.monotonic()
        while not self.stop.is_set():
            try:
                self.samples.append(listed_now(self.uri))
            except Exception as exc:  # noqa: BLE001 - a manifest written while read: the next second reads it
                self.skipped.append(str(exc)[:300])
                log(f"listing sample skipped: {exc}")
            nxt += 1.0
            self.stop.wait(max(0.0, nxt - time.monotonic()))


def run_arm(arm: str, work: Path, minutes: int, interval: float, rows: int, rotate_seconds: float,
            follow_args: list[str], reads: int = 5) -> dict[str, Any]:
    client = CLIENTS[ARMS[arm][0]]
    base = work / arm
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    uri, ref = str(base / "t.lance"), str(base / "reference" / "t.lance")
    model = Model(client.row, int_keys=client.name == "lancedb")
    reference = [reference_cpu_seconds()]
    writer = open_writer(arm, uri, rows, rotate_seconds)
    out_path, err_path = base / "follower.json", base / "follower.log"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        follower = subprocess.Popen([str(MEMWAL), "cycle", uri, "--follow", "--json", *follow_args], stdout=out,
                                    stderr=err)
    sampler = Sampler(uri)
    sampler.start()
    paced = PacedWriter(writer, model, rows, interval)
    failures, written = paced.failures, paced.lock  # a write and its model update, one step for the readers
    paced.start()
    minutes_out: list[dict[str, Any]] = []
    t_start, cpu_start = time.monotonic(), cpu_seconds(follower.pid)
    cpu_before = cpu_start
    try:
        for minute in range(1, minutes + 1):
            time.sleep(max(0.0, t_start + 60 * minute - time.monotonic()))
            if failures or follower.poll() is not None:
                failures.append(f"follower exited with {follower.returncode}" if follower.poll() is not None else "")
                break
            cpu_now = cpu_seconds(follower.pid)
            record: dict[str, Any] = {"minute": minute, "generations_written": paced.written,
                                      "follower_cpu_seconds": round(cpu_now - cpu_before, 2),
                                      "follower_rss_mb": rss_mb(follower.pid),
                                      "listed_samples": sampler.samples[-60:]}
            cpu_before = cpu_now
            record.update(storage(uri))
            record.update(versions_now(uri))
            with written:
                live = writer.call("read")
                record["live"] = {"seconds": round(live["seconds"], 3), "right": live["digest"] == model.digest}
            with written:
                now_rows = model.as_rows()
            client.reference(ref, now_rows)  # written first: each plain read runs beside a memwal read
            start = len(model.history) - 1
            new = client.read_new(uri)
            mine, plain = [], []
            for _ in range(reads):  # interleaved, so both see the same load on the machine
                mine.append(read_in_new_process("read_memwal", uri))
                plain.append(read_in_new_process("read_plain", ref)["seconds"])
            with written:
                states = model.history[start:]
                record["new_process"] = {"seconds": round(new["seconds"], 3), "right": new["digest"] in states}
                record["memwal"] = {"seconds": round(statistics.median(m["seconds"] for m in mine), 4),
                                    "each": [round(m["seconds"], 4) for m in mine],
                                    "right": all(m["digest"] in states for m in mine)}
            record["reference"] = {"client_seconds": round(client.read_new(ref)["seconds"], 3),
                                   "plain_seconds": round(statistics.median(plain), 4),
                                   "plain_each": [round(p, 4) for p in plain]}
            record["memwal_over_plain"] = round(record["memwal"]["seconds"] / record["reference"]["plain_seconds"], 2)
            ok = {k: "ok" if record[k]["right"] else "WRONG" for k in ("memwal", "new_process", "live")}
            log(f"{arm} minute {minute}: {paced.written} written, listed now {record['listed_samples'][-1:]}, max "
                f"{max(record['listed_samples'], default=0)}; follower {record['follower_cpu_seconds']}s CPU; "
                f"memwal {record['memwal']['seconds']}s = {record['memwal_over_plain']}x plain {ok['memwal']}; "
                f"new {record['new_process']['seconds']}s {ok['new_process']}; live {ok['live']}")
            minutes_out.append(record)
    finally:
        paced.end()
        stopped = stop_follower(follower, uri)
        cpu_total = stopped.pop("cpu_seconds", None)
        sampler.stop.set()
        rotations = writer.call("rotations") if ARMS[arm][1] else []
        writer.close()
    elapsed = time.monotonic() - t_start
    reference.append(reference_cpu_seconds())
    return {"arm": arm, "client": client.name, "interval_seconds": interval, "rows_per_generation": rows,
            "rotate_seconds": rotate_seconds if ARMS[arm][1] else None, "follow_args": follow_args,
            "rotations": {"count": len(rotations), "seconds": [round(r, 3) for r in rotations]},
            "minutes": minutes_out, "listed_samples": sampler.samples, "skipped_samples": sampler.skipped,
            "failures": [f for f in failures if f],
            "follower": {**stopped, "cpu_seconds": cpu_total if cpu_total is None else round(cpu_total - cpu_start, 2),
                         "core_share": None if cpu_total is None else round((cpu_total - cpu_start) / elapsed, 4)},
            # before the writer opened and after the follower stopped
            "machine_reference_cpu_seconds": reference,
            "goals": goals(minutes_out, sampler.samples, cpu_total, cpu_start, elapsed)}


def sigterm(follower: subprocess.Popen[bytes]) -> tuple[float, float]:
    """SIGTERM a running follower and wait for it (killed after a minute): its CPU seconds just
    before, and the seconds it took to exit."""
    cpu = cpu_seconds(follower.pid)
    t0 = time.monotonic()
    follower.send_signal(signal.SIGTERM)
    try:
        follower.wait(timeout=60)
    except subprocess.TimeoutExpired:
        follower.kill()
        follower.wait()
    return cpu, round(time.monotonic() - t0, 2)


def stop_follower(follower: subprocess.Popen[bytes], uri: str) -> dict[str, Any]:
    """SIGTERM; how long it took to exit, its code and what it said; whether its leases were released."""
    from memwal.lease import RELEASED, list_leases
    from memwal.store import open_store

    if follower.poll() is not None:
        return {"exit_code": follower.returncode, "stop_seconds": None}
    cpu, took = sigterm(follower)
    leases = list_leases(open_store(uri))
    doc: dict[str, Any] = {}
    try:
        doc = json.loads(Path(uri).parent.joinpath("follower.json").read_text())
    except (OSError, ValueError):
        pass
    return {"exit_code": follower.returncode, "stop_seconds": took, "cpu_seconds": cpu,
            "leases_released": all(i.state == RELEASED for i in leases), "stopped": doc.get("stopped"),
            "runs": doc.get("runs"), "generations_merged": doc.get("generations_merged")}


def goals(minutes: list[dict[str, Any]], samples: list[int], cpu_total: float | None, cpu_start: float,
          elapsed: float) -> dict[str, Any]:
    if not minutes or not samples:
        return {}
    ratios = [m["memwal_over_plain"] for m in minutes]
    right = all(m["live"]["right"] and m["new_process"]["right"] and m["memwal"]["right"] for m in minutes)
    share = None if cpu_total is None else (cpu_total - cpu_start) / elapsed
    out: dict[str, Any] = {
        "listed_max": {"value": max(samples), "goal": GOAL_LISTED_MAX, "met": max(samples) <= GOAL_LISTED_MAX},
        "listed_median": {"value": statistics.median(samples), "goal": GOAL_LISTED_MEDIAN,
                          "met": statistics.median(samples) <= GOAL_LISTED_MEDIAN},
        "memwal_over_plain_max": {"value": max(ratios), "median": statistics.median(ratios),
                                  "goal": GOAL_MEMWAL_OVER_PLAIN, "met": max(ratios) <= GOAL_MEMWAL_OVER_PLAIN},
        "every_read_right": {"value": right, "goal": True, "met": right},
    }
    if share is not None:
        out["follower_core_share"] = {"value": round(share, 4), "goal": GOAL_FOLLOWER_CORE_SHARE,
                                      "met": share <= GOAL_FOLLOWER_CORE_SHARE}
    return out


def chart(doc: dict[str, Any], path: Path) -> None:
    with figure(path, rows=1, cols=2, size=(14, 4.5)) as (fig, axes):
        for arm, r in doc["arms"].items():
            axes[0].plot([s / 60 for s in range(len(r["listed_samples"]))], r["listed_samples"], linewidth=0.7,
                         label=arm)
            axes[1].plot([m["minute"] for m in r["minutes"]], [m["memwal_over_plain"] for m in r["minutes"]],
                         marker="o", label=arm)
        axes[0].axhline(GOAL_LISTED_MEDIAN, color="#c33", linestyle="--", linewidth=1)
        axes[1].axhline(GOAL_MEMWAL_OVER_PLAIN, color="#c33", linestyle="--", linewidth=1)
        for ax, title, ylabel in zip(axes, ("generations listed, sampled once a second",
                                            "memwal.open(uri).scan() / a plain read of the same rows (new processes)"),
                                     ("generations", "ratio"), strict=True):
            ax.set_title(title, fontsize=11)
            ax.set_xlabel("minute", fontsize=10)
            ax.set_ylabel(ylabel, fontsize=10)
            ax.legend(fontsize=9)
        fig.suptitle("Keeping up: a writer that never stops, memwal cycle --follow on its defaults")


def summary(doc: dict[str, Any]) -> str:
    lines = []
    for arm, r in doc["arms"].items():
        lines += [f"{arm}: {goal} {v['value']} (goal {v['goal']}): {'met' if v['met'] else 'NOT met'}"
                  for goal, v in r["goals"].items()]
        lines.append(f"{arm}: the machine's yardstick took {r.get('machine_reference_cpu_seconds')} s of CPU "
                     "(before, after)")
        lines.append(f"{arm}: follower stopped in {r['follower'].get('stop_seconds')}s with exit code "
                     f"{r['follower'].get('exit_code')}, leases released: {r['follower'].get('leases_released')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("read follow", __doc__)
    p.add_argument("--minutes", type=int, default=30)
    p.add_argument("--interval", type=float, default=1.7, help="seconds between generations (default 1.7: 35 a "
                   "minute)")
    p.add_argument("--rows", type=int, default=200, help="rows a generation")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--rotate-seconds", type=float, default=DEFAULT_ROTATE_SECONDS,
                   help="pylance-rotating: seconds between writer replacements (default "
                        f"{DEFAULT_ROTATE_SECONDS:g}, the writer's own)")
    p.add_argument("--follow-args", default="", help="more options of the follower (default: its defaults)")
    p.add_argument("--reads", type=int, default=5, help="new processes a minute reading through memwal's reader, "
                   "and as many plain reads of the reference, interleaved: their medians are compared (default 5)")
    args = p.parse_args(argv)
    with Run("follow", "a writer that never stops beside memwal cycle --follow", out=args.out,
             work=args.work) as bench:
        results = {}
        for arm in [a for a in args.arms.split(",") if a]:
            if not available({"pylance-rotating": "pylance"}.get(arm, arm)):
                bench.log(f"{arm}: its client is not installed here, skipped")
                continue
            bench.log(f"{arm}: {args.minutes} minutes, a generation of {args.rows} rows every {args.interval}s")
            results[arm] = run_arm(arm, bench.work, args.minutes, args.interval, args.rows, args.rotate_seconds,
                                   args.follow_args.split(), args.reads)
        bench.doc["arms"] = results
        bench.publish(draw=chart, summary=summary)
        shutil.rmtree(bench.work, ignore_errors=True)  # the tables of a half-hour run: not kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
