"""A pylance 14 ``ShardWriter`` driven over a pipe, one JSON command a line in, one JSON answer out.

The writer our users run, in a process of its own that stays open for as long as the caller
wants (the steady-state bench, bench/read/steady.py, keeps one writing for half an hour), the same
protocol as :mod:`tests.clients.lance_context_driver`. Commands:

* ``{"op": "create", "uri": ..., "rows": [...]}``: a table of the bench's schema (``id`` string
  key, ``v`` int64, ``name`` string), unsharded, those rows its base (none by default);
  ``{"op": "open", "uri": ..., "rows": R}``: a writer on its one shard, flushing every ``R`` rows
  (with ``"rotate_seconds": S``: a :class:`memwal.writer.RotatingShardWriter`, replaced every S
  seconds);
* ``{"op": "gen", "rows": [...]}``: put the rows (exactly ``R``) and wait for their flush: one
  generation;
* ``{"op": "read"}``: the writer's own ``lsm_scanner()`` (its base as it opened it, every
  generation its manifest lists, its MemTable); ``{"op": "read_new", "uri": ...}``: a reader
  with nothing open, as a new process reads: the latest base and every generation the shard
  manifests list, through ``LsmScanner.from_snapshots``; ``{"op": "read_memwal", "uri": ...}``:
  memwal's own reader, ``memwal.open(uri).scan()``; ``{"op": "read_plain", "uri": ...}``: a plain
  read of a table, ``lance.dataset(uri).to_table()`` (the last two timed after their imports).
  Each answers the rows, their digest (:mod:`tests.clients.digest`) and the seconds;
* ``{"op": "rotations"}``: the seconds each replacement of a rotating writer took;
* ``{"op": "close"}``.

Answers: ``{"ok": value}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import lance  # noqa: E402
import pyarrow as pa  # noqa: E402

from tests.clients.digest import rows_digest  # noqa: E402
from tests.helpers import wait_flushed  # noqa: E402

PK = {"lance-schema:unenforced-primary-key": "true"}
SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False, metadata=PK), pa.field("v", pa.int64()),
                    pa.field("name", pa.string())])
#: The one shard of the bench's table.
SHARD = str(uuid.UUID(int=1))


def answer(table: pa.Table, seconds: float) -> dict[str, Any]:
    return {"rows": table.num_rows, "seconds": seconds,
            "digest": rows_digest(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))}


def read_new(uri: str) -> dict[str, Any]:
    from lance.mem_wal import LsmScanner

    from memwal.read.plan import plan_read
    from memwal.table import open_table

    t0 = time.perf_counter()
    table = open_table(uri)
    plan = plan_read(table, source="manifests", include_merged=True)
    rows = LsmScanner.from_snapshots(table.dataset(), plan.snapshots).project(["id", "v"]).to_table()
    return answer(rows, time.perf_counter() - t0)


def read_alone(uri: str, *, memwal_reader: bool) -> dict[str, Any]:
    """One read timed after its imports: memwal's reader (its modules load on a first read, so
    they are imported first), or a plain read of the table."""
    if memwal_reader:
        import memwal.api  # noqa: F401 - memwal.open's module, imported before the clock starts
        import memwal.read.scan  # noqa: F401

        t0 = time.perf_counter()
        rows = memwal.open(uri).scan(columns=["id", "v"])
    else:
        t0 = time.perf_counter()
        rows = lance.dataset(uri).to_table(columns=["id", "v"])
    return answer(rows, time.perf_counter() - t0)


def main() -> None:
    writer: Any = None
    flushed = 0
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            value: Any = None
            if op == "create":
                base = pa.Table.from_pylist(cmd.get("rows") or [], schema=SCHEMA)
                lance.write_dataset(base, cmd["uri"]).initialize_mem_wal(unsharded=True)
            elif op == "open" and cmd.get("rotate_seconds"):
                from memwal.writer import RotatingShardWriter

                writer = RotatingShardWriter(cmd["uri"], SHARD, rotate_seconds=cmd["rotate_seconds"],
                                             max_memtable_rows=cmd["rows"], durable_write=False,
                                             stats_log_interval_ms=0)
            elif op == "open":
                writer = lance.dataset(cmd["uri"]).mem_wal_writer(SHARD, max_memtable_rows=cmd["rows"],
                                                                  durable_write=False, stats_log_interval_ms=0)
            elif op == "gen":
                writer.put(pa.Table.from_pylist(cmd["rows"], schema=SCHEMA))
                flushed += 1
                wait_flushed(writer, flushed)
            elif op == "read":
                t0 = time.perf_counter()
                rows = writer.lsm_scanner().to_table()
                value = answer(rows, time.perf_counter() - t0)
            elif op == "read_new":
                value = read_new(cmd["uri"])
            elif op in ("read_memwal", "read_plain"):
                value = read_alone(cmd["uri"], memwal_reader=op == "read_memwal")
            elif op == "rotations":  # a RotatingShardWriter's replacements: seconds each took
                value = list(getattr(writer, "rotation_seconds", []))
            elif op == "close":
                writer.close()
                writer = None
            else:
                raise ValueError(f"unknown op {op!r}")
            out: dict[str, Any] = {"ok": value}
        except Exception as exc:  # noqa: BLE001 - every failure is the answer, the process goes on
            out = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
