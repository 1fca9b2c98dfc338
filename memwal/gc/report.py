"""The human summary of a GC document (a result or a dry run).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from memwal.core.sizes import human_bytes
from memwal.core.waits import judged, passes_lines
from memwal.core.words import counted
from memwal.gc.gates import WAL_GENERATION_UNKNOWN, WAL_NEEDED_FOR_REPLAY, WRITER_LIVE, is_gate, only_grace


def render_gc(doc: Mapping[str, Any]) -> str:
    """The human summary of a GC document (a result or a dry run): what went, per shard as
    generation ranges (a run may collect thousands), then why the rest stays and what would
    free it."""
    verb = "would delete" if doc["dry_run"] else "deleted"
    by_shard: dict[str, list[int]] = defaultdict(list)
    for d in doc["deleted"]:
        by_shard[d["shard_id"]].append(d["generation"])
    numbers = sum(len(set(gens)) for gens in by_shard.values())
    lines = [f"{doc['table']}: {verb} {counted(numbers, 'generation')}{_folders(len(doc['deleted']), numbers)} and "
             f"{counted(doc['wal_entries_deleted'], 'WAL entry', 'WAL entries')}"
             + ("" if doc["dry_run"] else f", {human_bytes(doc['bytes_freed'])} freed")]
    for shard_id, gens in sorted(by_shard.items()):
        lines.append(f"  {verb} shard {shard_id} generations {_ranges(gens)}{_folders(len(gens), len(set(gens)))}")
    drain = "would take" if doc["dry_run"] else "took"
    for d in doc.get("drained", []):
        repaired = f" (of which {_ranges(d['repairs'])} already gone: readers failed on them)" if d["repairs"] else ""
        lines.append(f"  {drain} shard {d['shard_id']} generations {_ranges(d['generations'])} out of its manifest "
                     f"(version {d['manifest_version']}){repaired}")
    roll = "would rewrite" if doc["dry_run"] else "rewrote"
    for r in doc.get("rolled_up", []):
        if r.get("heal"):
            lines.append(f"  {roll} shard {r['shard_id']} generation {r['generation']} with its key index (every list "
                         "reader failed on it: lance#9035)")
    wait = doc.get("wait")
    if wait:  # GC's own account: each combination of gates, when it passes or what frees it
        lines += [f"  blocked: {line}" for line in passes_lines(wait)]
    else:
        gates = Counter(" + ".join(r for r in (b.get("reasons") or [b["reason"]]) if is_gate(r)) or b["reason"]
                        for b in doc["blocked"])
        for reasons, n in sorted(gates.items()):
            lines.append(f"  blocked: {n} x {reasons}")
    for reason, n in sorted(Counter(k["reason"] for k in doc.get("kept_wal_entries", [])).items()):
        why = {WAL_NEEDED_FOR_REPLAY: "the writer replays it after a crash",
               WAL_GENERATION_UNKNOWN: "its header names no generation, and not all it may belong to go"}.get(
                   reason, "it fences out older writers")
        lines.append(f"  kept: {counted(n, 'WAL entry', 'WAL entries')} x {reason} ({why})")
    if wait:
        lines.append("  gates " + judged(wait).strip(" ()"))  # the options each time above depends on
    if doc.get("retention"):
        lines.append(f"  retained versions: {doc['retention']['hint']}")
    if doc.get("time_will_free"):
        waiting = [b for b in doc["blocked"] if only_grace(b.get("reasons", [b["reason"]]))]
        freed = sum(1 for b in waiting if not b.get("then"))
        listed = Counter(g for b in waiting for g in b.get("then") or ())
        if freed:
            lines.append(f"  {counted(freed, 'generation')} {'waits' if freed == 1 else 'wait'} only for the "
                         "reader grace period: a later run frees them")
        if listed:
            stay = ", ".join(f"{g} ({n})" for g, n in sorted(listed.items()))
            n = len(waiting) - freed
            lines.append(f"  {counted(n, 'listed generation')} {'leaves' if n == 1 else 'leave'} the listing after "
                         f"the reader grace period; their folders stay for {stay}")
    live = sum(1 for b in doc["blocked"] if WRITER_LIVE in (b.get("reasons") or [b["reason"]]))
    if live:
        lines.append(f"  {counted(live, 'merged generation')} kept for live writers' views: drained once each writer "
                     "reopens or is quiet for --writer-idle-seconds")
    for o in doc["orphans"]:
        lines.append(f"  orphan {o['kind']} {o['key']} ({o['age_seconds']:.0f}s old)"
                     + ("" if doc.get("orphans_deleted") else ": kept (use --orphans)"))
    return "\n".join(lines)


def _folders(folders: int, numbers: int) -> str:
    """`` (N folders)`` where generations had more than one folder each (a rollup is named for its
    newest generation, beside the folder it replaced; a retried flush leaves another): the count
    stays what the ranges list, and the folders are said beside it."""
    return "" if folders == numbers else f" ({folders:,} folders)"


def _ranges(values: list[int]) -> str:
    """``1-4, 7, 9-10`` for [1, 2, 3, 4, 7, 9, 10]."""
    out: list[str] = []
    vs = sorted(set(values))
    start = prev = vs[0]
    for v in [*vs[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)
