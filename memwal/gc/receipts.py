"""GC's receipts collector: the receipts no proof needs any more (:mod:`memwal.history.receipts`).

A receipt is evidence while a generation it names may still be judged: while its folder is on
storage. One for a version the retained history no longer holds is pruned once every generation
it names is gone from storage (the plan's own deletions counted); a ``commit`` receipt (which only
says a commit was memwal's) once its version is gone. Receipts are read at most
:data:`MAX_READS` a run: a backlog is pruned over several runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from memwal.history.receipts import COMMIT, Receipt, ReceiptListing
from memwal.table.listing import MemWalListing
from memwal.table.retained import RetainedVersion

if TYPE_CHECKING:
    from memwal.gc.generations import GenerationsPlan

#: Receipts read at most per run to decide whether they may go.
MAX_READS = 64


def plan_receipt_pruning(read: Callable[[str], Receipt | None], receipts: ReceiptListing,
                         left: Sequence[RetainedVersion], listing: MemWalListing,
                         plan: GenerationsPlan) -> tuple[str, ...]:
    """The receipt keys that may go (see the module docstring); ``read`` reads one (the proof's
    own reader: a receipt it read is not read again)."""
    main = [v.version for v in left if v.branch is None]
    if not main:
        return ()
    oldest = min(main)
    going = {(d.shard_id, d.path) for d in plan.deletions}
    lowest: dict[str, int] = {}
    for sid, shard in listing.shards.items():
        numbers = [g for name, g in shard.generation_dirs().items() if (sid, name) not in going]
        if numbers:
            lowest[sid] = min(numbers)
    out: list[str] = []
    reads = 0
    for version, items in sorted(receipts.by_version.items()):
        if version >= oldest:
            break
        for kind, key in items:
            if kind == COMMIT:
                out.append(key)
                continue
            if reads >= MAX_READS:
                continue
            reads += 1
            r = read(key)
            if r is None or all(sid not in lowest or span[1] < lowest[sid] for sid, span in r.applied.items()):
                out.append(key)
    return tuple(out)


__all__ = ["MAX_READS", "plan_receipt_pruning"]
