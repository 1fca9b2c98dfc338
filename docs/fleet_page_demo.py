"""Build a demo fleet of 1,000 tables and take the screenshots of its fleet page.

    .venv/bin/python docs/fleet_page_demo.py [--tables 1000] [--keep DIR] [--out docs/fleet-page.png]

The fleet (``bench/data/fleet.py``): tables written by pylance's ShardWriter in five sources,
behind, past a service level, waiting for GC's grace period, idle. A source and a table are
paused (who and why recorded), one table fails (a generation folder moved away), a few tables
are merged between plans so the trends move; then the page of the last plan, read from the
fleet's state folder (``memwal fleet status --state DIR --html``: it plans nothing), is shot in
Debian's headless chromium: ``--out`` (the top of the page) and ``<out>-tables.png`` (all of it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def screenshot(page: str, out: str, width: int = 1400, height: int = 2200) -> None:
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={os.path.abspath(out)}",
                    f"file://{os.path.abspath(page)}"], check=True, capture_output=True, timeout=180)


def fleet(root: Path, tables: int) -> tuple[list[str], str]:
    """The demo fleet, its pauses, a failure and three plans; its sources and state folder."""
    import memwal
    from bench.data.fleet import build_demo_fleet
    from memwal.core import clock as clocks
    from memwal.fleet import control_log as controls
    from memwal.fleet.policy import Policy
    from memwal.fleet.run import run_fleet
    from memwal.fleet.runs import record_results
    from memwal.fleet.shared import plan_shared
    from memwal.fleet.sources import discover
    from memwal.fleet.state import FleetState

    sources = build_demo_fleet(root, tables=tables) if not (root / "tenant-00").exists() else sorted(
        str(p) for p in root.glob("tenant-*"))
    state = FleetState(str(root / "fleet-state"))
    now = clocks.current()()
    controls.pause(state, sources[4], by="ops", reason="tenant 4 is migrating to the new bucket", now=now - 7200)
    controls.pause(state, f"{sources[0]}/backlog-0000", by="alice", reason="a bad partition: looking into it",
                   now=now - 900)
    broken = Path(sources[1], "backlog-0001", "_mem_wal")
    shard = next(p for p in broken.iterdir() if not p.name.startswith("_"))
    gen = next(p for p in shard.iterdir() if "_gen_" in p.name)
    gen.rename(gen.with_name("moved-away"))
    failed = run_fleet([str(broken.parent)], max_rounds=1)  # it fails: the run log keeps why
    record_results(state, failed.results, now=now - 300, retry_after=lambda table: 600.0)

    def plan() -> None:
        plan_shared(lambda known, exclude: discover(sources, known=known, exclude=exclude), Policy(), state=state)

    plan()
    for i in range(0, 60, 20):  # a few tables merged between plans: the trends move
        memwal.open(f"{sources[i % 5]}/backlog-{i:04d}").merge()
    plan()
    plan()
    return sources, state.uri


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--out", default="docs/fleet-page.png")
    p.add_argument("--keep", metavar="DIR", help="build the fleet here and keep it (default: a temporary folder)")
    args = p.parse_args(argv)
    from memwal.cli import main as memwal_main

    with tempfile.TemporaryDirectory(prefix="memwal-fleet-page-") as tmp:
        root = Path(args.keep or tmp)
        _, state = fleet(root, args.tables)
        page = str(root / "fleet.html")
        code = memwal_main(["fleet", "status", "--state", state, "--html", page, "--top", "50"])
        if code not in (0, 1):
            return code
        screenshot(page, args.out)
        screenshot(page, args.out.replace(".png", "-tables.png"), height=9000)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
