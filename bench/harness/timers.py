"""Seconds per named function of one ``memwal`` command, without touching the core.

``python -m bench.harness.timers --set merge --result FILE -- merge TABLE --json`` runs the CLI
in-process with a stopwatch wrapped around each function of the chosen set (``module:qualname``
names; every module-level reference to a function is replaced, so ``from x import f`` callers
are timed too) and writes, per function, the inclusive seconds and the number of calls. A
generator function's time is the time spent inside it (each ``next``), not its consumer's.
Time in worker threads is summed over threads, so a function run on a pool can show more
seconds than the wall clock. A name that no longer resolves (the package layout changed) is
listed under ``missing``, not an error: the profile then simply says less.

cProfile sees the same functions, but its per-call overhead inflates the many small Python
calls of a merge; these timers cost one ``perf_counter`` pair per call of the few functions
named, so the whole run keeps its shape. Native time (Lance's Rust, Arrow) appears inside the
Python function that called it; ``py-spy record --native`` splits it further (by hand).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import io
import json
import sys
import threading
import time
from collections.abc import Callable

#: Functions of the merge path, in the order a run meets them.
MERGE = [
    "memwal.cli:main",
    "memwal.table.handle:open_table",
    "memwal.table.handle:Table.dataset",
    "memwal.table.handle:Table.manifest",
    "memwal.table.manifest:list_versions",
    "memwal.table.manifest:read_table_manifest",
    "memwal.actions.run:run",
    "memwal.merge.plan:plan_merge",
    "memwal.merge.plan:primary_key_of",
    "memwal.merge.plan:_linked_shards",
    "memwal.merge.plan:plan_shard",
    "memwal.merge.plan:attach_operands",
    "memwal.merge.ops:table_merge_ops",
    "memwal.table.shards:read_shard_manifests",
    "memwal.merge.inputs:links_by_generation",
    "memwal.table.generations:generation_damage",
    "memwal.merge.inputs:check_generations",
    "memwal.merge.intents:floors",
    "memwal.merge.intents:write_intent",
    "memwal.merge.intents:finish",
    "memwal.lease.lease:Lease.inspect",
    "memwal.lease.lease:Lease.__enter__",
    "memwal.lease.lease:Lease.acquire_waiting",
    "memwal.lease.lease:Lease.check",
    "memwal.lease.lease:Lease.__exit__",
    "memwal.history.log:begin",
    "memwal.history.log:finish",
    "memwal.merge.execute:run_merge",
    "memwal.merge.execute:execute_merge",
    "memwal.merge.local:local_net_changes",
    "memwal.merge.read:read_generations",
    "memwal.merge.changes:newest_versions",
    "memwal.merge.changes:reducer",
    "memwal.merge.changes:base_rows_for_fold",
    "memwal.merge.changes:fold_changes",
    "memwal.merge.changes:key_mask",
    "memwal.merge.fold:fold",
    "memwal.merge.read:_scan_flushed", "memwal.merge.read:_decoded", "memwal.merge.read:_check_operands",
    "memwal.merge.operands:fetch_operands", "memwal.merge.operands:decode_operands",
    "memwal.merge.operands:check_complete",
    "memwal.merge.operands:wal_keys_by_generation",
    "memwal.merge.take:own_chunks",
    "memwal.merge.execute:commit_net_changes",
    "memwal.merge.guard:guard_progress",
    "memwal.merge.execute:bound_delete_pass",
    "memwal.merge.execute:marked_pass",
    "memwal.inspect.status:table_status",
    "memwal.inspect.status:checkpoint_status",
    "memwal.observe.metrics:record_run",
    "memwal.observe.metrics:record_lag",
    "lance.dataset:MergeInsertBuilder.execute",
    "lance.dataset:MergeInsertBuilder.execute_uncommitted",
    "lance.dataset:LanceDataset.commit",
    "lance:dataset",
]

#: ``memwal status`` and ``memwal gc --dry-run``: what may grow with versions, shards, history.
STATUS_GC = [
    "memwal.cli:main",
    "memwal.table.handle:open_table",
    "memwal.table.handle:Table.manifest",
    "memwal.table.handle:Table.dataset",
    "memwal.table.manifest:list_versions",
    "memwal.table.manifest:read_table_manifest",
    "memwal.table.manifest:decode_table_manifest",
    "memwal.inspect.status:table_status",
    "memwal.inspect.status:shard_status",
    "memwal.inspect.status:first_damaged_generation",
    "memwal.inspect.status:checkpoint_status",
    "memwal.table.listing:list_mem_wal",
    "memwal.table.shards:read_listed_manifests",
    "memwal.table.generations:generation_damage",
    "memwal.checkpoint.ops:list_checkpoints",
    "memwal.checkpoint.ops:live_checkpoints",
    "memwal.observe.metrics:record_lag",
    "memwal.gc.plan:prepare_gc",
    "memwal.gc.plan:plan_gc",
    "memwal.gc.plan:GcPlan.preview",
    "memwal.table.retained:retained_versions",
    "memwal.table.retained:_holders",
    "memwal.gc.gates:verdict_of",
    "memwal.gc.generations:plan_generations",
    "memwal.gc.wal:plan_shard_wal",
    "memwal.gc.orphans:plan_shard_orphans",
    "memwal.gc.orphans:plan_staging_orphans",
    "memwal.gc.orphans:hold_linked",
    "memwal.gc.retention:retention_report",
    "memwal.history.log:expired_history",
    "memwal.history.log:read_runs",
    "memwal.inspect.page:collect",
    "memwal.inspect.page:write_page",
]

#: GC as a whole (plan and execution).
GC_RUN = STATUS_GC + [
    "memwal.gc.run:run_gc",
    "memwal.gc.recheck:recheck",
    "memwal.gc.run:_delete",
    "memwal.gc.delete:delete_prefixes",
    "memwal.gc.delete:_delete_batch",
    "memwal.gc.delete:_delete_trees",
    "memwal.store.local:LocalStore.delete_trees",
    "memwal.store.local_trees:_delete_batch",
    "memwal.gc.delete:delete_keys",
    "memwal.gc.delete:delete_objects",
    "memwal.gc.expiry:VersionExpiry.collect",
    "memwal.checkpoint.handshake:gc_started",
    "memwal.checkpoint.handshake:gc_finished",
    "memwal.store.local:LocalStore.delete_many",
    "memwal.store.local:LocalStore.list_with_links",
    "memwal.lease.lease:Lease.__enter__",
    "memwal.lease.lease:Lease.__exit__",
    "memwal.lease.lease:Lease.check",
]

#: ``memwal merge --engine spark``: the merge path plus the session and the Spark job.
SPARK = MERGE + [
    "memwal.spark.engine.session:start_session",
    "memwal.spark.engine.session:local_context",
    "memwal.spark.engine.session:local_session",
    "memwal.spark.engine.session:default_parallelism",
    "memwal.spark.engine.session:build_context",
    "memwal.spark.engine.session:active_or_local",
    "memwal.spark.engine.jvm_archive:java_options",
    "pyspark.java_gateway:launch_gateway",
    "pyspark.context:SparkContext.__init__",
    "memwal.spark.engine.merge:SparkMergeEngine.from_active_or_local",
    "memwal.spark.engine.merge:SparkMergeEngine.net_changes",
    "memwal.spark.engine.merge:SparkMergeEngine.table_changes",
    "memwal.spark.engine.merge:_assemble",
    "memwal.spark.engine.merge:read_tasks",
    "memwal.merge.execute:commit_path",
    "memwal.merge.applied:applied_data",
    "memwal.merge.driverless:commit_table_changes",
    "memwal.merge.driverless:data_commit",
    "memwal.merge.driverless:marker_commit",
    "memwal.spark.engine.merge:_run",
    "memwal.spark.engine.merge:_staged_upserts",
    "pyspark.context:SparkContext.stop",
]

SETS = {"merge": MERGE, "status": STATUS_GC, "gc": GC_RUN, "spark": SPARK}


def process_age() -> float:
    """Seconds since this process was exec'd (Linux: ``/proc/self/stat`` against ``/proc/uptime``;
    elsewhere 0, i.e. offsets count from when the timers were installed)."""
    import os

    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class Timers:
    """Inclusive seconds and calls per function name (re-entrant calls are counted once), and
    when each was first entered and last left, in seconds since the process started."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.seconds: dict[str, float] = dict.fromkeys(names, 0.0)
        self.calls: dict[str, int] = dict.fromkeys(names, 0)
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.missing: list[str] = []
        self._active = threading.local()
        self._lock = threading.Lock()
        self.origin = time.perf_counter() - process_age()

    def _enter(self, name: str) -> bool:
        key = name.replace(".", "_").replace(":", "__")
        depth = getattr(self._active, key, 0)
        setattr(self._active, key, depth + 1)
        if name not in self.first:
            self.first[name] = time.perf_counter() - self.origin
        return depth == 0

    def _leave(self, name: str, outer: bool, took: float) -> None:
        key = name.replace(".", "_").replace(":", "__")
        setattr(self._active, key, getattr(self._active, key) - 1)
        if outer:
            with self._lock:
                self.seconds[name] += took
                self.last[name] = time.perf_counter() - self.origin

    def wrap(self, name: str, fn: Callable) -> Callable:
        timers = self
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen(*args, **kwargs):
                with timers._lock:
                    timers.calls[name] += 1
                it = fn(*args, **kwargs)
                while True:
                    outer = timers._enter(name)
                    t0 = time.perf_counter()
                    try:
                        item = next(it)
                    except StopIteration:
                        timers._leave(name, outer, time.perf_counter() - t0)
                        return
                    except BaseException:
                        timers._leave(name, outer, time.perf_counter() - t0)
                        raise
                    timers._leave(name, outer, time.perf_counter() - t0)
                    yield item
            return gen

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            outer = timers._enter(name)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timers._leave(name, outer, time.perf_counter() - t0)
                with timers._lock:
                    timers.calls[name] += 1
        return timed

    def install(self) -> Timers:
        for name in self.names:
            mod_name, _, qual = name.partition(":")
            try:
                module = importlib.import_module(mod_name)
            except ImportError:
                self.missing.append(name)
                continue
            owner: object = module
            *path, attr = qual.split(".")
            for part in path:
                owner = getattr(owner, part, None)
            raw = inspect.getattr_static(owner, attr, None) if owner is not None else None
            if raw is None:
                self.missing.append(name)
                continue
            if isinstance(raw, staticmethod):
                setattr(owner, attr, staticmethod(self.wrap(name, raw.__func__)))
            elif isinstance(raw, classmethod):
                setattr(owner, attr, classmethod(self.wrap(name, raw.__func__)))
            elif owner is module:
                wrapped = self.wrap(name, raw)
                for mod in list(sys.modules.values()):  # every `from module import fn` binding
                    d = getattr(mod, "__dict__", None)
                    if d is None:
                        continue
                    for k, v in list(d.items()):
                        if v is raw:
                            setattr(mod, k, wrapped)
            else:
                setattr(owner, attr, self.wrap(name, raw))
        return self

    def report(self) -> dict:
        rows = {n: {"seconds": round(self.seconds[n], 4), "calls": self.calls[n],
                    "first_start": round(self.first.get(n, 0.0), 3), "last_end": round(self.last.get(n, 0.0), 3)}
                for n in self.names if n not in self.missing and self.calls[n]}
        return {"functions": rows, "missing": self.missing}


def preload(names: list[str]) -> None:
    """Import what a command will import, so a name bound by ``from x import f`` exists
    before the timers replace it (lazily imported modules are imported here first): every
    module named, and the CLI's command modules that call them."""
    mods = dict.fromkeys(["memwal.cli", "memwal.cli.commands.status", "memwal.cli.commands.jobs",
                          *(n.split(":")[0] for n in names)])
    for mod in mods:
        with contextlib.suppress(ImportError):
            importlib.import_module(mod)


def run_cli(argv: list[str], names: list[str]) -> dict:
    """``memwal ARGV`` in this process under the timers; its exit code, wall seconds and profile."""
    preload(names)
    timers = Timers(names).install()
    from memwal.cli import main as cli_main  # the wrapped one

    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = cli_main(argv)
    took = time.perf_counter() - t0
    return {"argv": argv, "exit_code": code, "seconds": round(took, 4),
            "cli_started_at": round(t0 - timers.origin, 3), **timers.report(), "stdout_bytes": len(out.getvalue())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.harness.timers", description=__doc__.split("\n\n")[0])
    p.add_argument("--set", choices=sorted(SETS), default="merge")
    p.add_argument("--result", required=True, help="write the JSON document here")
    p.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the memwal arguments")
    args = p.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    doc = run_cli(cli, SETS[args.set])
    from bench.harness.processes import peak_rss_mb

    doc["peak_rss_mb"] = peak_rss_mb()
    with open(args.result, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
