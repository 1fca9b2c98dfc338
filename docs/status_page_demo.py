"""Build a demo table with a few runs behind it and take the screenshot of its status page.

    .venv/bin/python docs/status_page_demo.py [--out docs/status-page.png] [--keep DIR]

Twelve shards written by pylance's ShardWriter, then rounds of writes, partial merges (some
shards more than others), index catch-up, GC and a reader checkpoint, so every part of the page
has something to show. The screenshot is Debian's chromium, headless (``make browser``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import memwal
from memwal.checkpoint import create_checkpoint
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def build(uri: str, shards: int = 12) -> memwal.MemWalTable:
    work = Workload(base_rows=4000, shards=shards, generations=3, rows_per_generation=150, seed=7)
    _, model = create_base_table(uri, work)
    write_generations(uri, work, model)
    t = memwal.open(uri)
    ids = shard_ids_for(work)
    for round_ in range(1, 5):
        t.merge(shards=ids[: shards - 3 * round_ + 3] or ids[:1], max_generations=2)
        if round_ % 2:
            t.catchup()
        t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0)
        write_generations(uri, work, model, generations=1, seed_offset=round_)
    t.compact()
    t.snapshot()
    t.merge(shards=ids[:4])            # a few shards fully merged, after the last catch-up: indexes behind
    create_checkpoint(t.table, lifetime_seconds=3600, name="nightly-export")
    return t


def screenshot(page: str, out: str, width: int = 1280, height: int = 2020) -> None:
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={os.path.abspath(out)}",
                    f"file://{os.path.abspath(page)}"], check=True, capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/status-page.png")
    p.add_argument("--keep", metavar="DIR", help="build the table here and keep it (default: a temporary folder)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memwal-page-") as tmp:
        root = args.keep or tmp
        t = build(os.path.join(root, "events"))
        page = os.path.join(root, "status.html")
        t.status(html=page)
        screenshot(page, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
