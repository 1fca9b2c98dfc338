"""A fleet follower beside live writers: its CPU a flush against one ``merge_insert``.

Usage::

    .venv/bin/python -m bench fleet follow [--tables 6] [--every 10] [--rows 50] [--minutes 5]
                                      [--workers W] [--work DIR] [--out DIR]

``--tables`` small tables under ``WORK/lake`` (one shard each, an int64 primary key ``id`` with a
BTREE index, an int64 ``v``, a base of :data:`BASE_ROWS` rows), and beside them one writer process
kept open for the whole run: a pylance 14 ``ShardWriter`` per table (``max_memtable_rows=--rows``,
``durable_write=False``), round-robin, a put of ``--rows`` rows (keys drawn from :data:`KEYS`, values
increasing) every ``--every / --tables`` seconds, so that each put flushes a generation and each table
flushes every ``--every`` seconds. One ``memwal fleet run LAKE --follow`` (the venv's console script,
``--workers`` passed only when given) is started once and stopped with SIGTERM at the end.

Measured, every ~10 s: the follower's CPU (user + system, from /proc: Lance's threads included),
its resident memory, the writer's flushes so far (``stats()["memtable_flush_count"]``, summed) and
the generations the shard manifests list (the backlog the follower leaves). Over the run after its
warm-up (the first minute; the first 20% of a run shorter than two minutes): the follower's CPU ms a
flush, its share of a core, its peak RSS (of the samples), the flushes counted. At the end: its exit
code and how long it took to stop after SIGTERM; every table read through ``memwal.open(uri).scan()``
against what the writer put (the writer's model of key -> value, dumped as JSON); and the yardstick
of the goal, one Lance ``merge_insert`` of ``--rows`` rows into a copy of one table taken then
(``lance.dataset(copy).merge_insert("id")...execute(tbl)``, the open timed with it, in a new process:
20 calls after 2 of warm-up, CPU ms, median and quartiles). Before the tables' writer opens and
after the follower stops: the machine's yardstick (``bench.read.follow.reference_cpu_seconds``), so
that figures from machines of different speeds compare.

Goals: the follower's CPU a flush at most :data:`GOAL_OVER_MERGE_INSERT` times one ``merge_insert``
of the same rows (whatever else it does, planning the fleet, probing, listing, GC, is paid for by the
flushes it serves); every read right. ``OUT/fleet_follow.json`` and a chart,
``OUT/fleet_follow.png``; the goals are reported, never asserted: this is a benchmark, not a test.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import processes
from bench.harness.results import Run, figure, log, parser
from bench.harness.stats import ratio
from bench.read.age import PK
from bench.read.follow import cpu_seconds, listed_now, reference_cpu_seconds, rss_mb, sigterm
from bench.read.steady import MEMWAL

GOAL_OVER_MERGE_INSERT = 3.0
#: Keys are drawn from ``range(KEYS)``; the base holds the first :data:`BASE_ROWS` (value 0), so the
#: first puts are half updates, half inserts, and the tables stop growing at :data:`KEYS` rows.
KEYS = 20_000
BASE_ROWS = 10_000
#: Seconds between samples of the follower.
SAMPLE_SECONDS = 10.0
#: ``merge_insert`` calls timed for the yardstick (after two that warm the process).
MERGE_INSERT_CALLS = 20

#: The yardstick of the goal, run as ``python -c`` in a new process (this one holds the harness and
#: memwal): argv ``COPY ROWS CALLS KEYS``; prints the CPU seconds of each timed call, as JSON.
MERGE_INSERT = """
import json, sys, time
import lance, numpy as np, pyarrow as pa
uri, rows, calls, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
schema = lance.dataset(uri).schema
rng = np.random.default_rng(3)
out = []
for i in range(calls + 2):  # the first two warm the process
    k = rng.choice(keys, rows, replace=False).astype(np.int64)
    tbl = pa.table({"id": k, "v": np.full(rows, 1 << 40, dtype=np.int64) + i}, schema=schema)
    t0 = time.process_time()
    lance.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(tbl)
    out.append(time.process_time() - t0)
print(json.dumps(out[2:]))
"""


def build_tables(lake: Path, n: int) -> list[str]:
    """``n`` fresh tables under ``lake`` (as bench/read/age.py writes one: a BTREE on ``id``, one
    shard); their URIs."""
    import lance
    import numpy as np
    import pyarrow as pa

    from bench.data.fleet import table_name

    shutil.rmtree(lake, ignore_errors=True)
    lake.mkdir(parents=True)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata=PK), pa.field("v", pa.int64())])
    uris = []
    for i in range(n):
        uri = str(lake / table_name(i))
        ids = np.arange(BASE_ROWS, dtype=np.int64)
        lance.write_dataset(pa.table({"id": ids, "v": ids * 0}, schema=schema), uri)
        lance.dataset(uri).create_scalar_index("id", "BTREE")
        lance.dataset(uri).initialize_mem_wal(bucket_column="id", num_buckets=1, maintained_indexes=["id_idx"])
        uris.append(uri)
    return uris


def _write_json(path: Path, doc: Any) -> None:
    """``doc`` to ``path`` whole (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def write(config: Path) -> int:
    """The writer process (``python -m bench.fleet.follow --writer CONFIG``): a ``ShardWriter`` per
    table, a put of ``rows`` rows every ``every / len(tables)`` seconds round-robin until the stop
    file appears; its counts after each put, its model of every table (key -> value) at the end.

    One process for every table, as a service writing many tables keeps one: the follower is
    measured beside real writers, not beside the harness."""
    import lance
    import numpy as np
    import pyarrow as pa

    cfg = json.loads(config.read_text())
    uris, rows = list(cfg["tables"]), int(cfg["rows"])
    gap = float(cfg["every"]) / len(uris)
    stop, counts = Path(cfg["stop"]), Path(cfg["counts"])
    datasets = [lance.dataset(u) for u in uris]
    writers = [ds.mem_wal_writer(s, max_memtable_rows=rows, durable_write=False)
               for ds, s in zip(datasets, cfg["shards"], strict=True)]
    rng = np.random.default_rng(int(cfg["seed"]))
    model: list[dict[int, int]] = [{} for _ in uris]
    puts = 0
    nxt = time.monotonic()
    try:
        while not stop.exists():
            i = puts % len(uris)
            keys = rng.choice(KEYS, rows, replace=False).astype(np.int64)
            values = np.arange(puts * rows + 1, (puts + 1) * rows + 1, dtype=np.int64)
            writers[i].put(pa.table({"id": keys, "v": values}, schema=datasets[i].schema))
            model[i].update(zip(keys.tolist(), values.tolist(), strict=True))
            puts += 1
            flushes = sum(int(w.stats()["memtable_flush_count"]) for w in writers)
            _write_json(counts, {"puts": puts, "flushes": flushes})
            nxt += gap
            while not stop.exists() and time.monotonic() < nxt:
                time.sleep(min(0.2, max(0.0, nxt - time.monotonic())))
    finally:
        for w in writers:
            w.close()
    _write_json(Path(cfg["model"]), {u: {str(k): v for k, v in m.items()} for u, m in zip(uris, model, strict=True)})
    return 0


def _counts(path: Path) -> dict[str, int]:
    try:
        doc: dict[str, int] = json.loads(path.read_text())
        return doc
    except (OSError, ValueError):
        return {"puts": 0, "flushes": 0}  # before the writer's first put


def _listed(uris: list[str]) -> int | None:
    """Generations the tables' shard manifests list now (the follower's backlog); None when a
    manifest was written while read (the next sample reads it)."""
    try:
        return sum(listed_now(u) for u in uris)
    except Exception as exc:  # noqa: BLE001 - a sample skipped, not the run
        log(f"listing sample skipped: {exc}", "fleet-follow")
        return None


def window(samples: list[dict[str, Any]], warm: float) -> dict[str, Any]:
    """The follower's figures between the sample at the end of the warm-up and the last."""
    counted = [s for s in samples if s["mark"] >= warm]
    if len(counted) < 2:
        return {}
    a, b = counted[0], counted[-1]
    cpu, wall, flushes = b["cpu_seconds"] - a["cpu_seconds"], b["seconds"] - a["seconds"], b["flushes"] - a["flushes"]
    listed = [s["listed"] for s in counted if s["listed"] is not None]
    return {"from_seconds": a["seconds"], "to_seconds": b["seconds"], "seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 3), "flushes": flushes, "cpu_ms_per_flush": ratio(cpu * 1000, flushes, 2),
            "core_share": ratio(cpu, wall, 4), "peak_rss_mb": max(s["rss_mb"] for s in counted),
            "listed_max": max(listed, default=None)}


def stop_follower(follower: subprocess.Popen[bytes], stdout: Path) -> dict[str, Any]:
    """SIGTERM; how long it took to exit, its code, its CPU over the whole run and its tally."""
    if follower.poll() is not None:
        return {"exit_code": follower.returncode, "stop_seconds": None}
    cpu, took = sigterm(follower)
    doc: dict[str, Any] = {}
    try:
        doc = json.loads(stdout.read_text())
    except (OSError, ValueError):
        pass
    return {"exit_code": follower.returncode, "stop_seconds": took,
            "cpu_seconds_whole_run": round(cpu, 2), "stopped": doc.get("stopped"), "cycles": doc.get("cycles"),
            "runs": doc.get("runs"), "generations_merged": doc.get("generations_merged"),
            "failures": doc.get("failures")}


def reads_right(uris: list[str], model: dict[str, dict[str, int]]) -> dict[str, bool]:
    """Each table's rows through ``memwal.open(uri).scan()`` against its base and what the writer put."""
    import memwal

    out = {}
    for uri in uris:
        want = dict.fromkeys(range(BASE_ROWS), 0)
        want.update({int(k): v for k, v in model.get(uri, {}).items()})
        got = memwal.open(uri).scan(columns=["id", "v"]).to_pydict()
        out[Path(uri).name] = len(got["id"]) == len(want) and dict(zip(got["id"], got["v"], strict=True)) == want
    return out


def merge_insert_ms(copy: str, rows: int) -> dict[str, Any]:
    """CPU ms of one ``merge_insert`` of ``rows`` rows into ``copy``: :data:`MERGE_INSERT_CALLS`
    calls in a new process, their median and quartiles."""
    each = [s * 1000 for s in json.loads(processes.python("-c", MERGE_INSERT, copy, str(rows),
                                                          str(MERGE_INSERT_CALLS), str(KEYS)).check().stdout)]
    q1, q2, q3 = statistics.quantiles(each, n=4)
    return {"calls": len(each), "median_ms": round(statistics.median(each), 2), "q1_ms": round(q1, 2),
            "q3_ms": round(q3, 2), "each_ms": [round(x, 2) for x in each]}


def follow_run(bench: Run, uris: list[str], every: float, rows: int, minutes: float,
               workers: int | None) -> dict[str, Any]:
    """The writer and the follower side by side for ``minutes``, then both stopped (the writer first:
    the counted window ends before either stops); the samples and what they end with."""
    work, logs = bench.work, bench.logs
    stop, counts, model_path = work / "writer.stop", work / "writer.counts.json", work / "writer.model.json"
    for p in (stop, counts, model_path):
        p.unlink(missing_ok=True)
    conf = work / "writer.json"
    conf.write_text(json.dumps({"tables": uris, "shards": [str(uuid.uuid4()) for _ in uris], "rows": rows,
                                "every": every, "seed": 85, "stop": str(stop), "counts": str(counts),
                                "model": str(model_path)}))
    total = minutes * 60
    warm = 60.0 if minutes >= 2 else 0.2 * total
    marks = sorted({*(k * SAMPLE_SECONDS for k in range(int(total // SAMPLE_SECONDS) + 1)), warm, total})
    with open(logs / "fleet-follow-writer.log", "wb") as wlog:  # the child keeps its own handle
        writer = processes.start([sys.executable, "-m", "bench.fleet.follow", "--writer", str(conf)], stdout=wlog,
                                 stderr=subprocess.STDOUT)
    out_path, err_path = logs / "fleet-follow-follower.json", logs / "fleet-follow-follower.log"
    argv = [str(MEMWAL), "fleet", "run", str(Path(uris[0]).parent), "--follow", "--json",
            *(["--workers", str(workers)] if workers else [])]
    with open(out_path, "w") as out, open(err_path, "w") as err:
        follower = subprocess.Popen(argv, stdout=out, stderr=err)
    t0 = time.monotonic()
    samples: list[dict[str, Any]] = []
    failures: list[str] = []
    try:
        for mark in marks:
            time.sleep(max(0.0, t0 + mark - time.monotonic()))
            if follower.poll() is not None:
                failures.append(f"the follower exited with {follower.returncode} at {time.monotonic() - t0:.0f}s")
                break
            if writer.popen.poll() is not None:
                failures.append(f"the writer exited with {writer.popen.returncode} at {time.monotonic() - t0:.0f}s")
                break
            s = {"mark": mark, "seconds": round(time.monotonic() - t0, 2),
                 "cpu_seconds": round(cpu_seconds(follower.pid), 3), "rss_mb": rss_mb(follower.pid),
                 **_counts(counts), "listed": _listed(uris)}
            samples.append(s)
            bench.log(f"{s['seconds']:.0f}s: follower {s['cpu_seconds']}s CPU, {s['rss_mb']} MB; "
                      f"{s['flushes']} flushes, {s['listed']} generations listed")
    finally:
        stop.touch()
        try:
            wrote = writer.wait(timeout=120)
        except subprocess.TimeoutExpired:
            writer.popen.kill()
            wrote = writer.wait()
        stopped = stop_follower(follower, out_path)
    if wrote.rc != 0:
        failures.append(f"the writer exited with {wrote.rc} (see {logs / 'fleet-follow-writer.log'})")
    try:
        model: dict[str, dict[str, int]] = json.loads(model_path.read_text())
    except (OSError, ValueError):
        model = {}
    puts = _counts(counts)["puts"]
    for p in (conf, stop, counts, model_path):
        p.unlink(missing_ok=True)
    return {"warmup_seconds": round(warm, 1), "samples": samples, "failures": failures, "model": model,
            "writer": {"exit_code": wrote.rc, "cpu_seconds": round(wrote.cpu_seconds, 2), "puts": puts},
            "follower": {"argv": argv[1:], **stopped, **window(samples, warm)}}


def goals(doc: dict[str, Any]) -> dict[str, Any]:
    over, right = doc.get("follower_over_merge_insert"), doc["every_read_right"]
    return {"follower_over_merge_insert": {"value": over, "goal": GOAL_OVER_MERGE_INSERT,
                                           "met": over is not None and over <= GOAL_OVER_MERGE_INSERT},
            "every_read_right": {"value": right, "goal": True, "met": right}}


def chart(doc: dict[str, Any], path: Path) -> None:
    """The follower's CPU ms a flush between samples, against the goal; its RSS and the backlog."""
    samples = doc["samples"]
    # the ~10-s intervals: the short ones at the warm-up's end and the run's are a few clock ticks of CPU
    pairs = [(a, b) for a, b in zip(samples, samples[1:], strict=False)
             if b["seconds"] - a["seconds"] >= SAMPLE_SECONDS / 2]
    x = [b["seconds"] / 60 for _, b in pairs]
    ms = [ratio((b["cpu_seconds"] - a["cpu_seconds"]) * 1000, b["flushes"] - a["flushes"], 1) for a, b in pairs]
    with figure(path, rows=1, cols=2, size=(13, 4.5)) as (fig, axes):
        axes[0].plot(x, [float("nan") if m is None else m for m in ms], marker="o", label="follower")
        median = doc.get("merge_insert", {}).get("median_ms")
        if median:
            axes[0].axhline(GOAL_OVER_MERGE_INSERT * median, color="#c33", linestyle="--", linewidth=1,
                            label=f"goal: {GOAL_OVER_MERGE_INSERT:g} x one merge_insert ({median} ms)")
        axes[0].set_ylabel("CPU ms a flush")
        axes[0].set_title("the follower's CPU a flush, between samples", fontsize=11)
        axes[1].plot([s["seconds"] / 60 for s in samples], [s["rss_mb"] for s in samples], marker="o",
                     label="follower RSS (MB)")
        axes[1].plot([s["seconds"] / 60 for s in samples],
                     [float("nan") if s["listed"] is None else s["listed"] for s in samples], marker="s",
                     label="generations listed (all tables)")
        axes[1].set_title("the follower's memory; the generations it leaves listed", fontsize=11)
        for ax in axes:
            ax.axvline(doc["warmup_seconds"] / 60, color="gray", linestyle=":", linewidth=1, label="end of warm-up")
            ax.set_xlabel("minute", fontsize=10)
            ax.legend(fontsize=8)
        c = doc["config"]
        fig.suptitle(f"memwal fleet run --follow beside {c['tables']} tables' live writers, a flush of "
                     f"{c['rows']} rows every {c['every']:g} s a table")


def summary(doc: dict[str, Any]) -> str:
    f, mi = doc["follower"], doc.get("merge_insert", {})
    lines = [f"follower after the warm-up: {f.get('cpu_ms_per_flush')} CPU ms a flush over {f.get('flushes')} "
             f"flushes, {f.get('core_share')} of a core, peak RSS {f.get('peak_rss_mb')} MB; stopped in "
             f"{f.get('stop_seconds')}s with exit code {f.get('exit_code')}",
             f"one merge_insert of {doc['config']['rows']} rows: {mi.get('median_ms')} CPU ms "
             f"({mi.get('q1_ms')}-{mi.get('q3_ms')})"]
    lines += [f"{goal} {v['value']} (goal {v['goal']}): {'met' if v['met'] else 'NOT met'}"
              for goal, v in doc["goals"].items()]
    lines.append(f"the machine's yardstick took {doc['machine_reference_cpu_seconds']} s of CPU (before, after)")
    lines += [f"FAILURE: {x}" for x in doc["failures"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("fleet follow", __doc__)
    p.add_argument("--tables", type=int, default=6, help="tables, each with one shard and its writer (default 6)")
    p.add_argument("--every", type=float, default=10.0, help="seconds between one table's flushes (default 10)")
    p.add_argument("--rows", type=int, default=50, help="rows a flush (default 50)")
    p.add_argument("--minutes", type=float, default=5.0, help="the run (default 5); the first minute is a warm-up, "
                   "not counted (under 2 minutes: its first 20%%)")
    p.add_argument("--workers", type=int, default=None, help="memwal fleet run --workers (default: its own)")
    args = p.parse_args(argv)
    if args.tables < 1 or args.every <= 0 or args.minutes <= 0 or (args.workers is not None and args.workers < 1):
        p.error("--tables and --workers take a positive number, --every and --minutes a positive time")
    if not 1 <= args.rows <= KEYS:
        p.error(f"--rows must be between 1 and {KEYS:,} (a put's keys are distinct)")
    config = {"tables": args.tables, "every": args.every, "rows": args.rows, "minutes": args.minutes,
              "workers": args.workers}
    with Run("fleet_follow", "a fleet follower beside live pylance writers: its CPU a flush against one "
             "merge_insert", out=args.out, work=args.work, config=config) as bench:
        lake = bench.work / "lake"
        bench.log(f"{args.tables} tables, a flush of {args.rows} rows every {args.every:g}s each, "
                  f"{args.minutes:g} minutes")
        uris = build_tables(lake, args.tables)
        reference = [reference_cpu_seconds()]  # before the writer opens
        doc = bench.doc
        doc.update(follow_run(bench, uris, args.every, args.rows, args.minutes, args.workers))
        reference.append(reference_cpu_seconds())  # after the follower stopped
        doc["machine_reference_cpu_seconds"] = reference
        model = doc.pop("model")
        doc["reads_right"] = reads_right(uris, model) if model else {}
        doc["every_read_right"] = bool(doc["reads_right"]) and all(doc["reads_right"].values())
        copy = bench.work / "merge-insert-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(uris[0], copy, symlinks=True)
        doc["merge_insert"] = merge_insert_ms(str(copy), args.rows)
        doc["follower_over_merge_insert"] = ratio(doc["follower"].get("cpu_ms_per_flush"),
                                                  doc["merge_insert"]["median_ms"], 2)
        doc["goals"] = goals(doc)
        bench.publish(draw=chart, summary=summary)
        shutil.rmtree(lake, ignore_errors=True)  # written tables: nothing to reuse
        shutil.rmtree(copy, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--writer"]:
        sys.exit(write(Path(sys.argv[2])))
    sys.exit(main())
