"""``memwal scan TABLE [--filter EXPR] [--columns a,b] [--limit N] [--source index|manifests] [--json]``.

An operator's look at the current rows: the base table merged with the unmerged
generations by pylance's ``LsmScanner``, the shards listed by the reader helper
(memwal.read), which prunes shards by the filter and falls back to the shard manifests
where the index snapshot is stale.
"""

from __future__ import annotations

import argparse
from typing import Any

from memwal.cli.commands.common import EXIT_OK, Subparsers, emit, open_table_arg, positive_int, table_command
from memwal.errors import BadInputError


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = table_command(sub, "scan", "show the current rows (base table plus unmerged generations)")
    p.add_argument("--filter", metavar="EXPR", help='SQL filter, e.g. "id IN (1, 2) AND value > 0.5"')
    p.add_argument("--columns", metavar="A,B", help="comma-separated columns to show (default: all)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="at most N rows")
    p.add_argument(
        "--source",
        choices=["index", "manifests"],
        default="index",
        help="shard state from the index snapshot (stale shards fall back to manifests) or the manifests",
    )
    p.add_argument("--checkpoint", metavar="ID", help="read the view a checkpoint pinned (memwal checkpoint create)")
    return p


def run(args: argparse.Namespace) -> int:
    from memwal.read import fresh_scan, lsm_scan, open_plan
    from memwal.read.checks import check_columns, reading

    table = open_table_arg(args)
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    if args.columns is not None and not columns:
        raise BadInputError("--columns: no column named")
    given = None
    if args.checkpoint:
        from memwal.checkpoint import checkpoint_or_error, read_plan

        given = read_plan(table, checkpoint_or_error(table, args.checkpoint))
    try:  # bad input is refused before anything is read (exit 2); a failed read is exit 1
        with reading(table):
            plan, ds = open_plan(table, given, source=args.source, filter=args.filter)
            check_columns(ds.schema, columns)
    except BadInputError as exc:
        raise BadInputError(f"--{exc}" if str(exc).startswith(("filter", "columns")) else str(exc)) from exc
    if given is not None:  # a checkpoint's view is pinned: nothing moves under it
        rows = lsm_scan(table, columns=columns, filter=args.filter, limit=args.limit, plan=plan)
    else:  # re-planned when maintenance moved what it listed (memwal.read.fresh_scan)
        plan, rows = fresh_scan(table, columns=columns, filter=args.filter, limit=args.limit, source=args.source,
                                plan=plan)
    if columns:
        rows = rows.select(columns)
    doc: dict[str, Any] = {
        **plan.to_dict(),
        "filter": args.filter,
        "columns": rows.column_names,
        "limit": args.limit,
        "shards_scanned": len(plan.snapshots),
        "num_rows": rows.num_rows,
        "rows": rows.to_pylist(),
    }
    emit(args, doc, lambda: render(doc))
    return EXIT_OK


def _cell(v: Any) -> str:
    if isinstance(v, list):
        return (
            "["
            + ", ".join(f"{x:.3g}" if isinstance(x, float) else str(x) for x in v[:4])
            + (", ...]" if len(v) > 4 else "]")
        )
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def render(doc: dict[str, Any]) -> str:
    pruned = len(doc["pruned"])
    fallbacks = [f for f in doc["fallbacks"] if f["shard_id"]]
    head = (
        f"{doc['table']} version {doc['version']}: {doc['num_rows']} rows; "
        f"{doc['shards_scanned']} shards scanned, {pruned} pruned; source {doc['source']}"
    )
    if fallbacks:
        head += f" ({len(fallbacks)} shards from their manifests: snapshot stale)"
    elif any(f["shard_id"] is None for f in doc["fallbacks"]):
        head += f" ({doc['fallbacks'][0]['reason']}: read the manifests)"
    cols = doc["columns"]
    table = [cols] + [[_cell(r[c]) for c in cols] for r in doc["rows"]]
    widths = [min(40, max(len(row[i]) for row in table)) for i in range(len(cols))]
    lines = [head] + ["  ".join(cell[:40].ljust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(lines)
