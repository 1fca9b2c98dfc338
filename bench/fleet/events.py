"""Requests per day of an idle fleet: events against polling (issue 48), counted at moto's server.

Usage::

    .venv/bin/python -m bench fleet events [--tables 40] [--fleet 1000] [--out DIR]

``--tables`` idle tables (one drained table written by pylance's ShardWriter, its files put
``--tables`` times under the bucket) and the fleet's state in the same bucket. Measured:

* **polling**: a plan every ``--every`` minutes (the DAG's default schedule): what one warm plan of
  the idle tables costs, from a second machine's view (the shared cache in the bucket read,
  nothing changed), split into a part per table and a shared part (the state's reads and
  writes, the source's listing), counted at the server;
* **events**: the triggerer's long poll of the SQS queue the bucket notifies (the DAG's own
  ``MessageQueueTrigger``, run for ``--cycles`` cycles of ``wait + poll`` seconds against moto's
  SQS: requests per cycle counted at the server), plus the safety-net plan ``--safety-net``
  times a day; an idle fleet has no write, so no event and no event-run.

Both are scaled to ``--fleet`` tables a day (the per-table part times the fleet, the shared part
as measured); the goal is events at most 1% of polling. Writes ``OUT/fleet_events.json`` and
``OUT/fleet_events.png``; asserts nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from bench.harness.requests import table_files, upload
from bench.harness.results import Run, figure, parser
from bench.harness.results import log as _log

GOAL_SHARE = 0.01
DAY = 86_400


def log(msg: str) -> None:
    _log(msg, "fleet-events")


def idle_table(folder: Path) -> Path:
    """One table written by ShardWriter, merged, compacted, collected: nothing owed."""
    import memwal
    from memwal.demo import Workload, create_base_table, write_generations

    path = folder / "idle"
    wl = Workload(base_rows=120, shards=2, generations=2, rows_per_generation=10, seed=5, indexes=False)
    model = create_base_table(str(path), wl)[1]
    write_generations(str(path), wl, model)
    t = memwal.open(str(path))
    assert t.merge().ok and t.compact().ok and t.snapshot().ok
    assert t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).ok
    return path


def polling(server: Any, root: str, opts: dict[str, str], state_uri: str, n: int) -> dict[str, Any]:
    """One warm plan of ``n`` idle tables, on another machine: per table and shared requests."""
    from memwal.fleet.policy import Policy
    from memwal.fleet.shared import plan_shared
    from memwal.fleet.sources import discover
    from memwal.fleet.state import FleetState

    def plan() -> Any:
        state = FleetState(state_uri, opts)
        return plan_shared(lambda known, exclude: discover([root], storage_options=opts, known=known,
                                                           exclude=exclude), Policy(), state=state)

    plan()  # cold: writes the cache
    mark = len(server.requests)
    planned = plan()
    used = server.requests[mark:]
    assert all(t.status == "idle" for t in planned.plan.tables) and len(planned.plan.tables) == n
    tables = [p for _, p in used if "lake/t" in unquote(p)]
    shared = len(used) - len(tables)
    return {"tables": n, "requests": len(used), "per_table": round(len(tables) / n, 3), "shared": shared}


def sqs_cycle(server: Any, cycles: int, wait: int, poll: int) -> dict[str, Any]:
    """The DAG's trigger on an empty queue until it made ``cycles`` polls: the requests the
    server saw over those polls (the trigger's own cycles counted by wrapping its ``poll_sqs``,
    which it calls once a cycle)."""
    import boto3
    from airflow.providers.amazon.aws.triggers.sqs import SqsSensorTrigger
    from memwal.airflow.fleet import Events
    from memwal.airflow.fleet_events import writes_asset

    client = boto3.client("sqs", endpoint_url=server.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    queue = client.create_queue(QueueName="memwal-fleet-bench")["QueueUrl"]
    os.environ["AIRFLOW_CONN_BENCH"] = json.dumps({"conn_type": "aws", "login": "testing", "password": "testing",
                                                   "extra": {"endpoint_url": server.endpoint,
                                                             "region_name": "us-east-1"}})
    (watcher,) = writes_asset(Events(queue=queue, conn_id="bench", region="us-east-1", poll_seconds=poll,
                                     wait_seconds=wait)).watchers
    polls: list[tuple[float, int]] = []  # (when, requests the server had seen) at each poll's start
    original = SqsSensorTrigger.poll_sqs

    async def counted(self: Any, client: Any) -> Any:
        polls.append((time.monotonic(), len(server.requests)))
        return await original(self, client)

    async def watch() -> None:
        task = asyncio.ensure_future(_drain(watcher.trigger))
        while len(polls) <= cycles and not task.done():
            await asyncio.sleep(0.05)
        task.cancel()

    SqsSensorTrigger.poll_sqs = counted  # type: ignore[method-assign]
    try:
        asyncio.run(asyncio.wait_for(watch(), timeout=300))
    finally:
        SqsSensorTrigger.poll_sqs = original  # type: ignore[method-assign]
    (t0, r0), (t1, r1) = polls[0], polls[-1]  # whole cycles between the first poll and the last
    n = len(polls) - 1
    return {"cycles": n, "seconds": round(t1 - t0, 1), "requests": r1 - r0, "per_cycle": round((r1 - r0) / n, 3)}


async def _drain(trigger: Any) -> None:
    async for _ in trigger.run():
        raise AssertionError("an event on an idle fleet")


def main(argv: list[str] | None = None) -> int:
    from tests.s3server import start_s3_server

    p = parser("fleet events", __doc__)
    p.add_argument("--tables", type=int, default=40, help="idle tables measured")
    p.add_argument("--fleet", type=int, default=1000, help="tables the day's figures are scaled to")
    p.add_argument("--every", type=float, default=10.0, help="polling: minutes between plans")
    p.add_argument("--poll", type=int, default=100, help="events: seconds between two long polls (poll_seconds)")
    p.add_argument("--wait", type=int, default=20, help="events: the long poll's wait (wait_seconds)")
    p.add_argument("--cycles", type=int, default=3, help="trigger cycles measured (each --wait + a short pause)")
    p.add_argument("--safety-net", type=float, default=1.0, help="events: full plans a day (the schedule)")
    args = p.parse_args(argv)
    with Run("fleet_events", "requests a day of an idle fleet: events against polling", out=args.out,
             work=args.work, config={k: v for k, v in vars(args).items() if k not in ("out", "work")}) as bench:
        server = start_s3_server()
        try:
            root, opts = server.new_table("lake")
            files = table_files(idle_table(bench.work))
            for i in range(args.tables):
                upload("s3", server, server.last_bucket, f"lake/t{i:04d}", files)
            log(f"{args.tables} idle tables in s3://{server.last_bucket}/lake")
            plan = polling(server, root, opts, f"s3://{server.last_bucket}/_memwal_fleet", args.tables)
            # the trigger's cycles, short (the wait is what the queue holds a request open for, not a count)
            cycle = sqs_cycle(server, args.cycles, 1, 1)
        finally:
            server.stop()
        per_plan = plan["per_table"] * args.fleet + plan["shared"]
        poll_day = DAY / (args.every * 60) * per_plan
        cycles_day = DAY / (args.wait + args.poll)
        events_day = cycles_day * cycle["per_cycle"] + args.safety_net * per_plan
        bench.doc.update(plan=plan, trigger=cycle, per_plan_at_fleet=round(per_plan), polling_per_day=round(poll_day),
                         events_per_day=round(events_day), events_sqs_per_day=round(cycles_day * cycle["per_cycle"]),
                         events_safety_net_per_day=round(args.safety_net * per_plan),
                         share=round(events_day / poll_day, 5), goal_share=GOAL_SHARE,
                         goal_met=events_day / poll_day <= GOAL_SHARE)
        bench.publish(draw=chart, summary=summary)
    return 0


def summary(doc: dict[str, Any]) -> str:
    c = doc["config"]
    return (f"idle fleet of {c['fleet']} tables, requests a day: polling every {c['every']:g} min "
            f"{doc['polling_per_day']:,} ({doc['plan']['per_table']} a table a plan + {doc['plan']['shared']} "
            "shared); "
            f"events {doc['events_per_day']:,} (SQS long polls {doc['events_sqs_per_day']:,}, "
            f"{doc['trigger']['per_cycle']} a cycle of {c['wait']}+{c['poll']} s; safety net "
            f"{doc['events_safety_net_per_day']:,}): {doc['share']:.2%} of polling (goal <= {GOAL_SHARE:.0%})")


def chart(doc: dict[str, Any], path: Path) -> None:
    with figure(path, size=(7, 3.2), dpi=120) as (fig, ax):
        bars = {"polling\nevery 10 min": doc["polling_per_day"], "events: SQS\nlong polls": doc["events_sqs_per_day"],
                "events: daily\nsafety net": doc["events_safety_net_per_day"]}
        ax.bar(list(bars), list(bars.values()), color=["#d64545", "#3b7ddd", "#7a5cc7"])
        ax.set_yscale("log")
        ax.set_ylabel("requests a day")
        ax.set_title(f"idle fleet of {doc['config']['fleet']:,} tables: events {doc['share']:.2%} of polling")
        for i, v in enumerate(bars.values()):
            ax.text(i, v, f"{v:,}", ha="center", va="bottom", fontsize=9)


if __name__ == "__main__":
    sys.exit(main())
