"""``memwal demo-data DIR``: a realistic MemWAL table written through pylance's ShardWriter."""

from __future__ import annotations

import argparse

from memwal.cli.commands.common import EXIT_OK, common_options, positive_int
from memwal.errors import BadInputError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    help_text = "write a demo MemWAL table (bucket sharding, BTREE and vector index) with ShardWriter"
    p = sub.add_parser(
        "demo-data",
        parents=[common_options(json_flag=False)],
        help=help_text,
        description=f"{help_text}: a base table with a primary key, then flushed generations of puts, updates "
        "and deletes per shard written through pylance's own ShardWriter, as an ingest pipeline would. "
        "Try the jobs on it: memwal status DIR, memwal merge DIR, ...",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR", help="where to create the table (must not hold one)")
    p.add_argument("--shards", type=positive_int, default=4, help="shards (writers), bucket-sharded on id")
    p.add_argument("--generations", type=positive_int, default=6, help="flushed generations per shard")
    p.add_argument("--rows-per-generation", type=positive_int, default=200, help="rows put per generation")
    p.add_argument("--base-rows", type=positive_int, default=2000, help="rows of the base table")
    p.add_argument("--seed", type=int, default=0, help="random seed (the same seed writes the same table)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.demo import Workload, make_demo_table
    from memwal.store import open_store

    store = open_store(args.dir, args.storage_options)
    if next(iter(store.list("_versions/", recursive=False)), None) is not None:
        raise BadInputError(f"{args.dir}: a table already exists here; choose an empty location")
    wl = Workload(
        base_rows=args.base_rows,
        shards=args.shards,
        generations=args.generations,
        rows_per_generation=args.rows_per_generation,
        seed=args.seed,
    )
    model = make_demo_table(args.dir, wl, args.storage_options or None)
    print(
        f"wrote {args.dir}: {wl.base_rows} base rows, {wl.shards} shards x {wl.generations} generations; "
        f"{len(model.rows)} live rows"
    )  # the command's result: stdout (logs go to stderr)
    return EXIT_OK
